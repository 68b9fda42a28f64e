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
import pandas as pd

FIRST_USE_FACTOR = 3.0

# Columns that add up over disjoint step windows (the rest are ratios, recomputed, or labels).
_SUMS = ("steps", "steps_captured", "time_ns", "gpu_busy_ns", "compute_bound_ns", "memory_bound_ns", "idle_ns",
         "other_ns", "comm_ns", "memcpy_ns", "flops", "bytes", "energy_j", "kernels_modelled",
         "kernels_class_only", "kernels_unmodelled")


def _frame(t: Any) -> pd.DataFrame:
    if t is None:
        return pd.DataFrame()
    return t if isinstance(t, pd.DataFrame) else t.to_pandas()


def first_requests(requests: pd.DataFrame, n: int) -> list[int]:
    """The ids of the first ``n`` requests by start time (request id breaks ties and stands in for it)."""
    if n <= 0 or requests.empty or "request_id" not in requests:
        return []
    r = requests.dropna(subset=["request_id"])
    keys = ["start_ns", "request_id"] if "start_ns" in r else ["request_id"]
    order = r.assign(start_ns=pd.to_numeric(r["start_ns"], errors="coerce")) if "start_ns" in r else r
    return [int(i) for i in order.sort_values(keys, na_position="last")["request_id"].head(n)]


def warmup_ids(requests: pd.DataFrame, marked: Iterable[int] = (), first_n: int | None = None) -> list[int]:
    """Marked ids that the requests table holds, plus the first ``first_n`` requests; sorted."""
    have = set(pd.to_numeric(requests["request_id"], errors="coerce").dropna().astype(int)) \
        if not requests.empty and "request_id" in requests else set()
    ids = {int(i) for i in marked if int(i) in have}
    ids.update(first_requests(requests, first_n or 0))
    return sorted(ids)


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(df[col], errors="coerce").astype("float64") if col in df else pd.Series(np.nan, df.index)


def _f(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):  # pd.NA, None, text
        return np.nan


def _ratio(num: float, den: float) -> float:
    return num / den if den and np.isfinite(den) and den > 0 and np.isfinite(num) else np.nan


def rebase(phases: pd.DataFrame, remove: Iterable[int] = (), add: Iterable[int] = ()) -> pd.DataFrame:
    """``phases`` with each run-level phase row minus the rows of requests ``remove`` and plus those of
    ``add`` (per-request rows unchanged). Rates and shares are recomputed from the new sums; a run row
    left with no step is dropped. Inputs are not modified."""
    remove, add = {int(i) for i in remove}, {int(i) for i in add}
    if phases.empty or not (remove or add) or "request_id" not in phases:
        return phases
    out = phases.copy()
    rid = pd.to_numeric(out["request_id"], errors="coerce")
    drop = []
    for idx in out.index[rid.isna()]:
        phase = out.at[idx, "phase"]
        if str(phase) == "outside":
            continue
        same = out[(out["phase"].astype(str) == str(phase)) & rid.notna()]
        minus, plus = same[rid[same.index].isin(remove)], same[rid[same.index].isin(add)]
        if minus.empty and plus.empty:
            continue
        old = out.loc[idx].copy()
        tokens = _ratio(_f(old.get("energy_j")), _f(old.get("energy_j_per_token")))
        tok_delta = 0.0
        for sign, part in ((-1.0, minus), (1.0, plus)):
            per = (_num(part, "energy_j") / _num(part, "energy_j_per_token")).replace([np.inf, -np.inf], np.nan)
            tok_delta += sign * float(per.fillna(0).sum())
        for c in _SUMS:
            if c not in out or pd.isna(old[c]):
                continue
            new = _f(old[c]) - float(_num(minus, c).fillna(0).sum()) + float(_num(plus, c).fillna(0).sum())
            out.at[idx, c] = new
        time_ns = _f(out.at[idx, "time_ns"]) if "time_ns" in out else np.nan
        if "gpm_dram_bw_util_pct" in out and pd.notna(old.get("gpm_dram_bw_util_pct")):
            weighted = _f(old["gpm_dram_bw_util_pct"]) * _f(old["time_ns"])
            for sign, part in ((-1.0, minus), (1.0, plus)):
                weighted += sign * float((_num(part, "gpm_dram_bw_util_pct") * _num(part, "time_ns")).fillna(0).sum())
            util = _ratio(weighted, time_ns)
            per_pct = _ratio(_f(old.get("gpm_dram_tbps")), _f(old["gpm_dram_bw_util_pct"]))
            out.at[idx, "gpm_dram_bw_util_pct"] = util
            if "gpm_dram_tbps" in out:
                out.at[idx, "gpm_dram_tbps"] = util * per_pct
        busy = _f(out.at[idx, "gpu_busy_ns"]) if "gpu_busy_ns" in out else np.nan
        for col, work, den in (("achieved_tflops", "flops", busy), ("achieved_tbps", "bytes", busy),
                               ("achieved_tflops_wall", "flops", time_ns), ("achieved_tbps_wall", "bytes", time_ns)):
            if col in out and work in out and pd.notna(old.get(col)):
                out.at[idx, col] = _ratio(_f(out.at[idx, work]), den) / 1e3  # FLOP/ns / 1e3 = TFLOP/s
        for pct, rate in (("pct_peak_flops", "achieved_tflops"), ("pct_peak_bandwidth", "achieved_tbps")):
            if pct in out and pd.notna(old.get(pct)) and pd.notna(old.get(rate)):
                new_rate = _f(out.at[idx, rate])
                # % of peak per unit of rate = 100 / the peak the bound pass used, from any row that shows it
                ratios = (_num(same, pct) / _num(same, rate)).replace([np.inf, -np.inf], np.nan).dropna()
                per_rate = _ratio(_f(old[pct]), _f(old[rate]))
                if not np.isfinite(per_rate) and len(ratios):
                    per_rate = float(ratios.iloc[0])
                out.at[idx, pct] = 0.0 if new_rate == 0 else new_rate * per_rate
        if "energy_j_per_token" in out and np.isfinite(tokens):
            out.at[idx, "energy_j_per_token"] = _ratio(_f(out.at[idx, "energy_j"]), tokens + tok_delta)
        if "steps" in out and _f(out.at[idx, "steps"]) <= 0:
            drop.append(idx)
    return out.drop(index=drop).reset_index(drop=True)


def first_use_flags(requests: pd.DataFrame, warmups: Iterable[int] = ()) -> list[dict[str, Any]]:
    """The first non-warm-up request when it looks like first-use cost (the module's rule), as
    [{"request_id", "ttft_ns", "others_ttft_ns"}]; empty otherwise."""
    if requests.empty or not {"request_id", "ttft_ns"} <= set(requests.columns):
        return []
    warm = {int(i) for i in warmups}
    r = requests.dropna(subset=["request_id"]).copy()
    r["_rid"] = pd.to_numeric(r["request_id"], errors="coerce")
    r = r[~r["_rid"].isin(warm)]
    r["_ttft"] = pd.to_numeric(r["ttft_ns"], errors="coerce")
    r = r.dropna(subset=["_ttft"])
    order = first_requests(r.drop(columns=["_rid", "_ttft"]), len(r))
    if len(order) < 2:
        return []
    first = r[r["_rid"] == order[0]].iloc[0]
    others = r[r["_rid"] != order[0]]
    med = float(others["_ttft"].median())
    if not med > 0 or float(first["_ttft"]) < FIRST_USE_FACTOR * med:
        return []
    if "input_tokens" in r:
        tok, med_tok = _f(first.get("input_tokens")), _f(pd.to_numeric(others["input_tokens"], errors="coerce").median())
        if np.isfinite(tok) and np.isfinite(med_tok) and med_tok > 0 and tok > 2 * med_tok:
            return []
    return [{"request_id": int(order[0]), "ttft_ns": float(first["_ttft"]), "others_ttft_ns": med}]


def flag_text(flag: Mapping[str, Any]) -> str:
    return (f"request {flag['request_id']} looks like a warm-up (first-use cost): TTFT "
            f"{flag['ttft_ns'] / 1e6:,.1f} ms against a median of {flag['others_ttft_ns'] / 1e6:,.1f} ms for the "
            f"others; it is in the phase totals: leave it out with --warmup-requests 1 (or mark it in the "
            f"script with tracekit.warmup())")


def warmup_pass(requests: Any, phases: Any, *, manifest: Mapping[str, Any], warmup_first: int | None
                ) -> dict[str, Any]:
    """The warm-up pass, after the phase passes: {"phases": run-level phase rows without the warm-ups
    (absent where none is left out), "warmup": {"requests": [ids left out], "first_n": N or None,
    "flagged": [ids]}, "warnings"}. Left out: the first ``warmup_first`` requests and those run.json
    marks."""
    requests, phases = _frame(requests), _frame(phases)
    marked = (manifest.get("warmup_requests") or []) if isinstance(manifest, Mapping) else []
    first_n = warmup_first
    ids = warmup_ids(requests, marked, first_n if isinstance(first_n, int) else None)
    flags = first_use_flags(requests, ids)
    out: dict[str, Any] = {"warmup": {"requests": ids, "first_n": first_n, "flagged": [f["request_id"] for f in flags]},
                           "warnings": [flag_text(f) for f in flags]}
    if ids and not phases.empty:
        out["phases"] = rebase(phases, remove=ids)
    return out
