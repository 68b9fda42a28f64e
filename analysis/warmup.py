"""Warm-up requests: kept, but left out of the run's phase totals; first-use outliers flagged.

A script's first ``generate()`` usually pays for things the others do not: CUDA context and cuBLAS
handle creation, kernel selection and autotuning, the caching allocator's first allocations,
compilation. Counted in the run's phase totals it inflates prefill and decode; it is a warm-up.

Which requests are warm-ups (``warmup_ids``): those the recorder marked (run.json
``warmup_requests``, from ``rec.warmup()`` / ``tracekit.warmup()``) and, when asked
(``tracekit analyze --warmup-requests N``), the first N requests by start time. A warm-up keeps its
requests row and its own per-request phase rows; the run-level rows (request_id null) become the
run's totals minus the warm-ups' rows (``rebase``), which is exact because a request's step windows
never overlap another's. The ``outside`` row is untouched (time outside every step is not a request's).

First-use rule (``first_use_flags``; a warning, never an exclusion nobody asked for): the first
request that is not a warm-up is flagged when at least one other request completed, its TTFT is at
least ``FIRST_USE_FACTOR`` (3) times the median TTFT of the others, and its prompt is not longer than
twice their median prompt (a longer prompt explains a longer prefill).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.analysis import arrays

FIRST_USE_FACTOR = 3.0

# Columns that add up over disjoint step windows (the rest are ratios, recomputed, or labels).
_SUMS = ("steps", "steps_captured", "time_ns", "gpu_busy_ns", "compute_bound_ns", "memory_bound_ns", "idle_ns",
         "other_ns", "comm_ns", "memcpy_ns", "flops", "bytes", "energy_j", "kernels_modelled",
         "kernels_class_only", "kernels_unmodelled")


def _num(table: Any, col: str, rows: np.ndarray | None = None) -> np.ndarray:
    """Column ``col`` as float64 (NaN where missing; all NaN where the table lacks it), at ``rows``."""
    n = arrays.rows(table)
    v = arrays.floats(table, col) if arrays.has(table, col) else np.full(n, np.nan)
    return v if rows is None else v[rows]


def _sum(values: np.ndarray) -> float:
    """The sum with missing values as 0."""
    return float(np.where(np.isnan(values), 0.0, values).sum())


def _f(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):  # None, text
        return np.nan


def _ratio(num: float, den: float) -> float:
    return num / den if den and np.isfinite(den) and den > 0 and np.isfinite(num) else np.nan


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def _by_start(requests: Any, rows: np.ndarray) -> np.ndarray:
    """``rows`` (positions of requests with an id) ordered by start time, then request id, then
    position; a request without a start last."""
    rid = _num(requests, "request_id", rows)
    if not arrays.has(requests, "start_ns"):
        return rows[np.argsort(rid, kind="stable")]
    return rows[np.lexsort((rid, _num(requests, "start_ns", rows)))]


def first_requests(requests: Any, n: int) -> list[int]:
    """The ids of the first ``n`` requests by start time (request id breaks ties and stands in for it)."""
    if n <= 0 or not arrays.rows(requests) or not arrays.has(requests, "request_id"):
        return []
    rows = np.flatnonzero(~np.isnan(_num(requests, "request_id")))
    return [int(i) for i in _num(requests, "request_id", _by_start(requests, rows)[:n])]


def warmup_ids(requests: Any, marked: Iterable[int] = (), first_n: int | None = None) -> list[int]:
    """Marked ids that the requests table holds, plus the first ``first_n`` requests; sorted."""
    have: set[int] = set()
    if arrays.rows(requests) and arrays.has(requests, "request_id"):
        rid = _num(requests, "request_id")
        have = {int(i) for i in rid[~np.isnan(rid)]}
    ids = {int(i) for i in marked if int(i) in have}
    ids.update(first_requests(requests, first_n or 0))
    return sorted(ids)


def rebase(phases: Any, remove: Iterable[int] = (), add: Iterable[int] = ()) -> Any:
    """``phases`` with each run-level phase row minus the rows of requests ``remove`` and plus those of
    ``add`` (per-request rows unchanged), as an Arrow table of the same columns and types. Rates and
    shares are recomputed from the new sums; a run row left with no step is dropped. ``phases``: an
    Arrow table or a pandas frame, returned as it is where there is nothing to change."""
    remove, add = {int(i) for i in remove}, {int(i) for i in add}
    if not arrays.rows(phases) or not (remove or add) or not arrays.has(phases, "request_id"):
        return phases
    table = arrays.table(phases)
    cols = table.to_pydict()
    rid = _num(table, "request_id")
    phase = np.array([str(p) for p in cols["phase"]], dtype=object)
    keep = np.ones(table.num_rows, dtype=bool)
    changed: set[str] = set()
    for idx in np.flatnonzero(np.isnan(rid)).tolist():
        if phase[idx] == "outside":
            continue
        same = np.flatnonzero((phase == phase[idx]) & ~np.isnan(rid))
        minus = same[np.isin(rid[same], list(remove))]
        plus = same[np.isin(rid[same], list(add))]
        if not len(minus) and not len(plus):
            continue
        row = _rebased_row(table, {c: v[idx] for c, v in cols.items()}, same, minus, plus)
        for c, v in row.items():
            cols[c][idx] = v
        changed.update(row)
        if "steps" in cols and _f(row.get("steps", cols["steps"][idx])) <= 0:
            keep[idx] = False
    out = table
    for c in changed:
        i = out.schema.get_field_index(c)
        out = out.set_column(i, out.schema.field(i), _column(cols[c], out.schema.field(i).type))
    return out.filter(arrays.column(keep, pa.bool_())) if not keep.all() else out


def _column(values: list[Any], typ: pa.DataType) -> pa.Array:
    """A rebased numeric column of type ``typ``: NaN as null (a frame's missing float), whole floats
    in an integer column as integers (ValueError for any other)."""
    if pa.types.is_integer(typ):
        def whole(v: Any) -> Any:
            if isinstance(v, float) and not v.is_integer():
                raise ValueError(f"{v} in an integer column")
            return int(v)
        return pc.cast(arrays.ints_column([None if _missing(v) else whole(v) for v in values]), typ)
    if pa.types.is_floating(typ):
        return pc.cast(arrays.floats_column([None if _missing(v) else v for v in values]), typ)
    raise ValueError(f"a rebased column of type {typ}")


def _rebased_row(table: pa.Table, old: dict[str, Any], same: np.ndarray, minus: np.ndarray, plus: np.ndarray
                 ) -> dict[str, Any]:
    """The new values of one run-level row (``old``): its sums less ``minus``' rows and plus ``plus``',
    its rates and shares recomputed; ``same``: the per-request rows of its phase."""
    names = set(table.column_names)
    new: dict[str, Any] = {}

    def now(c: str) -> Any:
        return new.get(c, old.get(c))

    tokens = _ratio(_f(old.get("energy_j")), _f(old.get("energy_j_per_token")))
    tok_delta = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        for sign, part in ((-1.0, minus), (1.0, plus)):
            per = _num(table, "energy_j", part) / _num(table, "energy_j_per_token", part)
            tok_delta += sign * _sum(np.where(np.isinf(per), np.nan, per))
    for c in _SUMS:
        if c not in names or _missing(old[c]):
            continue
        new[c] = _f(old[c]) - _sum(_num(table, c, minus)) + _sum(_num(table, c, plus))
    time_ns = _f(now("time_ns")) if "time_ns" in names else np.nan
    if "gpm_dram_bw_util_pct" in names and not _missing(old.get("gpm_dram_bw_util_pct")):
        weighted = _f(old["gpm_dram_bw_util_pct"]) * _f(old["time_ns"])
        for sign, part in ((-1.0, minus), (1.0, plus)):
            weighted += sign * _sum(_num(table, "gpm_dram_bw_util_pct", part) * _num(table, "time_ns", part))
        util = _ratio(weighted, time_ns)
        per_pct = _ratio(_f(old.get("gpm_dram_tbps")), _f(old["gpm_dram_bw_util_pct"]))
        new["gpm_dram_bw_util_pct"] = util
        if "gpm_dram_tbps" in names:
            new["gpm_dram_tbps"] = util * per_pct
    busy = _f(now("gpu_busy_ns")) if "gpu_busy_ns" in names else np.nan
    for col, work, den in (("achieved_tflops", "flops", busy), ("achieved_tbps", "bytes", busy),
                           ("achieved_tflops_wall", "flops", time_ns), ("achieved_tbps_wall", "bytes", time_ns)):
        if col in names and work in names and not _missing(old.get(col)):
            new[col] = _ratio(_f(now(work)), den) / 1e3  # FLOP/ns / 1e3 = TFLOP/s
    for pct, rate in (("pct_peak_flops", "achieved_tflops"), ("pct_peak_bandwidth", "achieved_tbps")):
        if pct in names and not _missing(old.get(pct)) and not _missing(old.get(rate)):
            new_rate = _f(now(rate))
            # % of peak per unit of rate = 100 / the peak the bound pass used, from any row that shows it
            with np.errstate(divide="ignore", invalid="ignore"):
                ratios = _num(table, pct, same) / _num(table, rate, same)
            ratios = ratios[np.isfinite(ratios)]
            per_rate = _ratio(_f(old[pct]), _f(old[rate]))
            if not np.isfinite(per_rate) and len(ratios):
                per_rate = float(ratios[0])
            new[pct] = 0.0 if new_rate == 0 else new_rate * per_rate
    if "energy_j_per_token" in names and np.isfinite(tokens):
        new["energy_j_per_token"] = _ratio(_f(now("energy_j")), tokens + tok_delta)
    return new


def first_use_flags(requests: Any, warmups: Iterable[int] = ()) -> list[dict[str, Any]]:
    """The first non-warm-up request when it looks like first-use cost (the module's rule), as
    [{"request_id", "ttft_ns", "others_ttft_ns"}]; empty otherwise."""
    if not arrays.rows(requests) or not (arrays.has(requests, "request_id") and arrays.has(requests, "ttft_ns")):
        return []
    warm = {int(i) for i in warmups}
    rid, ttft = _num(requests, "request_id"), _num(requests, "ttft_ns")
    rows = np.flatnonzero(~np.isnan(rid) & ~np.isin(rid, list(warm)) & ~np.isnan(ttft))
    order = _by_start(requests, rows)
    if len(order) < 2:
        return []
    first_id = rid[order[0]]
    first = rows[rid[rows] == first_id][0]
    others = rows[rid[rows] != first_id]
    med = _median(ttft[others])
    if not med > 0 or float(ttft[first]) < FIRST_USE_FACTOR * med:
        return []
    if arrays.has(requests, "input_tokens"):
        tokens = _num(requests, "input_tokens")
        tok, med_tok = tokens[first], _median(tokens[others])
        if np.isfinite(tok) and np.isfinite(med_tok) and med_tok > 0 and tok > 2 * med_tok:
            return []
    return [{"request_id": int(first_id), "ttft_ns": float(ttft[first]), "others_ttft_ns": med}]


def _median(values: np.ndarray) -> float:
    """The median of the values present; NaN where none is."""
    present = values[~np.isnan(values)]
    return float(np.median(present)) if len(present) else np.nan


def flag_text(flag: Mapping[str, Any]) -> str:
    return (f"request {flag['request_id']} looks like a warm-up (first-use cost): TTFT "
            f"{flag['ttft_ns'] / 1e6:,.1f} ms against a median of {flag['others_ttft_ns'] / 1e6:,.1f} ms for the "
            f"others; it is in the phase totals: leave it out with --warmup-requests 1 (or mark it in the "
            f"script with tracekit.warmup())")


def warmup_pass(requests: Any, phases: Any, *, manifest: Mapping[str, Any], warmup_first: int | None
                ) -> dict[str, Any]:
    """The warm-up pass, after the phase passes: {"phases": run-level phase rows without the warm-ups,
    an Arrow table (absent where none is left out), "warmup": {"requests": [ids left out], "first_n":
    N or None, "flagged": [ids]}, "warnings"}. Left out: the first ``warmup_first`` requests and those
    run.json marks. ``requests``, ``phases``: Arrow tables or pandas frames."""
    marked = (manifest.get("warmup_requests") or []) if isinstance(manifest, Mapping) else []
    first_n = warmup_first
    ids = warmup_ids(requests, marked, first_n if isinstance(first_n, int) else None)
    flags = first_use_flags(requests, ids)
    out: dict[str, Any] = {"warmup": {"requests": ids, "first_n": first_n, "flagged": [f["request_id"] for f in flags]},
                           "warnings": [flag_text(f) for f in flags]}
    if ids and arrays.rows(phases):
        out["phases"] = rebase(phases, remove=ids)
    return out
