"""Nsight Compute counters against the trace's kernels: the per-step join and the counter class.

Pure (DataFrames in, DataFrames out). The counters table is ``ncu_counters`` (tracekit.model.schema):
one row per kernel Nsight Compute profiled, with the step it ran in (from tracekit's NVTX step
range) and its position in the step's launch order.

- ``counter_class(...)``: Nsight Compute's Speed Of Light rule, reduced to tracekit's classes: a
  kernel under ``threshold`` % of peak on both memory and compute throughput is latency-bound,
  else it is bound by the higher of the two.
- ``join(kernels, counters)``: within each step, the trace's kernels in launch order against the
  counters in profiling order. A step joins only if both sequences have the same length and the same
  kernel at every position (name equal after whitespace normalisation, else the same function base
  name); a step that differs is refused, never shifted. Returns the kernels with the counter columns
  (null where unmatched) and a ``JoinReport``.

Method: docs/roofline.md, "Measured counters".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis.options import SOL_THRESHOLD_PCT

# kernel_bound columns the join fills (null where a kernel has no counters)
COUNTER_COLUMNS = ("ncu_dur_ns", "dram_bytes", "dram_pct", "sm_pct", "memory_pct", "tensor_pct", "ncu_flops",
                   "waves")


def counter_class(dram_pct: Any, sm_pct: Any = None, memory_pct: Any = None, tensor_pct: Any = None,
                  threshold: float = SOL_THRESHOLD_PCT) -> str | None:
    """compute | memory | latency from one kernel's throughputs (% of peak); None if it has none.

    Memory throughput is ``memory_pct`` (gpu__compute_memory_throughput: max of L1, L2, DRAM) where
    collected, else ``dram_pct``. Compute throughput is the larger of ``sm_pct`` (sm__throughput) and
    ``tensor_pct`` (tensor pipe active): the one-pass metric set has only the tensor pipe.
    """
    def num(v: Any) -> float:
        try:
            f = float(v)
        except (TypeError, ValueError):
            return float("nan")
        return f

    mem = num(memory_pct)
    if not np.isfinite(mem):
        mem = num(dram_pct)
    comp_vals = [x for x in (num(sm_pct), num(tensor_pct)) if np.isfinite(x)]
    comp = max(comp_vals) if comp_vals else float("nan")
    if not np.isfinite(mem) and not np.isfinite(comp):
        return None
    m, c = (mem if np.isfinite(mem) else 0.0), (comp if np.isfinite(comp) else 0.0)
    if max(m, c) < threshold:
        return "latency"
    return "compute" if c > m else "memory"


def counter_classes(counters: pd.DataFrame, threshold: float = SOL_THRESHOLD_PCT) -> pd.Series:
    """``counter_class`` of every row of a counters table (columns as in ``COUNTER_COLUMNS``)."""
    cols = [counters[c] if c in counters else pd.Series(np.nan, index=counters.index)
            for c in ("dram_pct", "sm_pct", "memory_pct", "tensor_pct")]
    out: list[str | None] = [counter_class(d, s, m, t, threshold=threshold)
                             for d, s, m, t in zip(*cols, strict=True)]
    return pd.Series(out, index=counters.index, dtype=object)


_WS = re.compile(r"\s+")


def base_name(name: Any) -> str:
    """A kernel's function name without return type, namespaces, template arguments or parameters."""
    s = _WS.sub(" ", str(name)).strip().replace("(anonymous namespace)", "anonymous").replace("<unnamed>", "anonymous")
    if s.startswith("void "):
        s = s[5:]
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):  # the first '<' or '(' at template depth 0 ends the qualified name
        if ch in "<(" and depth == 0:
            cut = i
            break
    return s[:cut].split("::")[-1].strip()


def _dims(v: Any) -> tuple[int, ...] | None:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return None
    if isinstance(v, str):  # "[64, 1, 1]" where a table stored the list as text
        v = re.findall(r"\d+", v)
    try:
        d = tuple(int(x) for x in v)
    except (TypeError, ValueError):
        return None
    return d or None


def same_kernel(a: Any, b: Any, launch_a: tuple[Any, Any] = (None, None),
                launch_b: tuple[Any, Any] = (None, None)) -> str | None:
    """"exact" if the names are equal (whitespace aside); "base" if only their function names are and
    their (grid, block) agree where both are known (a name Nsight Compute spelled its own way);
    else None."""
    na, nb = _WS.sub("", str(a)), _WS.sub("", str(b))
    if na == nb:
        return "exact"
    if not base_name(a) or base_name(a) != base_name(b):
        return None
    for x, y in zip(launch_a, launch_b, strict=True):
        dx, dy = _dims(x), _dims(y)
        if dx is not None and dy is not None and dx != dy:
            return None
    return "base"


@dataclass(frozen=True)
class JoinReport:
    """What the join matched: per step, joined or refused (with the reason)."""

    kernels_counted: int = 0
    kernels_matched: int = 0
    exact_names: int = 0
    steps_joined: tuple[int, ...] = ()
    refused: tuple[tuple[int, str], ...] = ()
    not_in_trace: tuple[int, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def lines(self) -> list[str]:
        out = [f"counters: {self.kernels_matched} of {self.kernels_counted} profiled kernels matched to the trace "
               f"({len(self.steps_joined)} step(s) joined, {len(self.refused)} refused)"]
        if self.kernels_matched and self.exact_names < self.kernels_matched:
            out.append(f"counters: {self.kernels_matched - self.exact_names} matched by function name only "
                       "(their full names differ)")
        out += [f"counters: step {s} not joined: {why}" for s, why in self.refused]
        if self.not_in_trace:
            shown = ", ".join(str(s) for s in self.not_in_trace[:10])
            out.append(f"counters: step(s) {shown}{' ...' if len(self.not_in_trace) > 10 else ''} "
                       "have counters but no kernels in the trace")
        return out + list(self.notes)

    def to_dict(self) -> dict[str, Any]:
        return {"kernels_counted": self.kernels_counted, "kernels_matched": self.kernels_matched,
                "exact_names": self.exact_names, "steps_joined": list(self.steps_joined),
                "refused": [{"step_id": s, "reason": r} for s, r in self.refused],
                "not_in_trace": list(self.not_in_trace)}


def launch_order(kernels: pd.DataFrame) -> pd.DataFrame:
    """The trace's kernels (kind kernel, with a step) in launch order within each step.

    Nsight Compute serialises launches, so its order is the API order: sort by when the host issued
    each kernel (``issued_ns``) where known, then by GPU start (graph kernels share one launch).
    """
    k = kernels
    if "kind" in k:
        k = k[k["kind"].astype(str) == "kernel"]
    k = k[pd.to_numeric(k["step_id"], errors="coerce").notna()] if "step_id" in k else k.iloc[0:0]
    ts = pd.to_numeric(k["ts_ns"], errors="coerce").astype("Int64")
    # int64 throughout: epoch-scale ns lose ~256 ns in a float64
    issued = k["issued_ns"].astype("Int64") if "issued_ns" in k else pd.Series(pd.NA, index=k.index, dtype="Int64")
    key = pd.DataFrame({"s": pd.to_numeric(k["step_id"]).astype("int64"), "i": issued.fillna(ts), "t": ts},
                       index=k.index)
    return k.loc[key.sort_values(["s", "i", "t"], kind="stable").index]


def join(kernels: pd.DataFrame, counters: pd.DataFrame) -> tuple[pd.DataFrame, JoinReport]:
    """kernels (kernel_costs + step_id, any order) with COUNTER_COLUMNS and ``ncu_match`` filled per step."""
    out = kernels.copy()
    for c in COUNTER_COLUMNS:
        out[c] = np.nan
    out["ncu_match"] = None
    if counters is None or len(counters) == 0 or len(out) == 0:
        return out, JoinReport(kernels_counted=0 if counters is None else len(counters))
    cnt = counters.copy()
    cnt["_sid"] = pd.to_numeric(cnt["step_id"], errors="coerce")
    notes: list[str] = []
    no_step = int(cnt["_sid"].isna().sum())
    if no_step:
        notes.append(f"counters: {no_step} profiled kernel(s) ran outside every tracekit step range (not joined)")
    cnt = cnt[cnt["_sid"].notna()]
    order_col = "ordinal" if "ordinal" in cnt else None
    cnt = cnt.sort_values(["_sid", order_col] if order_col else ["_sid"], kind="stable")
    trace = launch_order(out)
    by_step = {int(s): g for s, g in trace.groupby(pd.to_numeric(trace["step_id"]).astype("int64"))} if len(trace) else {}
    joined, refused, missing = [], [], []
    matched = exact = 0
    for sid, g in cnt.groupby(cnt["_sid"].astype("int64"), sort=True):
        sid = int(sid)
        tk = by_step.get(sid)
        if tk is None:
            missing.append(sid)
            continue
        if len(tk) != len(g):
            refused.append((sid, f"{len(g)} kernels profiled, {len(tk)} in the trace"))
            continue
        def launches(df: pd.DataFrame) -> list[tuple[Any, Any]]:
            return list(zip(df["grid"] if "grid" in df else [None] * len(df),
                            df["block"] if "block" in df else [None] * len(df), strict=True))

        kinds = [same_kernel(a, b, la, lb) for a, b, la, lb in
                 zip(tk["name"], g["name"], launches(tk), launches(g), strict=True)]
        bad = [i for i, m in enumerate(kinds) if m is None]
        if bad:
            i = bad[0]
            refused.append((sid, f"kernel {i} differs: trace {base_name(tk['name'].iloc[i])!r}, "
                                 f"counters {base_name(g['name'].iloc[i])!r} ({len(bad)} position(s) differ)"))
            continue
        for c in COUNTER_COLUMNS:
            if c in g:
                out.loc[tk.index, c] = pd.to_numeric(g[c], errors="coerce").to_numpy(dtype=float)
        out.loc[tk.index, "ncu_match"] = kinds
        joined.append(sid)
        matched += len(g)
        exact += sum(1 for m in kinds if m == "exact")
    report = JoinReport(kernels_counted=len(counters), kernels_matched=matched, exact_names=exact,
                        steps_joined=tuple(joined), refused=tuple(refused), not_in_trace=tuple(missing),
                        notes=tuple(notes))
    return out, report
