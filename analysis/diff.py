"""What changed between two runs, per phase and per kernel class (pure: DataFrames in, DataFrame out).

One long table, one row per (scope, phase, key, metric):

  scope "phase":         key = the phase; metrics time_ns, time_per_step_ns (over the steps the time
                         covers: steps_captured where the phase row has it), steps,
                         compute_bound_ns, memory_bound_ns, latency_bound_ns, idle_ns
                         (and its causes idle_host_ns, idle_wait_ns, idle_before_window_ns,
                         idle_profiler_ns), other_ns.
                         share = metric / the phase's time_ns (time_ns itself:
                         / the run's total time), so a split that moved shows up
                         even when the total did not.
  scope "kernel_class":  key = the kernel class (gemm, attention, elementwise, ...);
                         phase = the phase of the step the kernel ran in, or "all";
                         metric time_ns (kernel time) and kernels (count);
                         share = / the phase's total kernel time.
  scope "bound":         key = the kernel's bound class (compute, memory, latency, other,
                         comm, memcpy) from the bound pass's kernel_bound; phase and
                         metrics as for kernel_class. A class that moved (memory-bound
                         kernels becoming latency-bound at a smaller batch) shows here.

  scope "op_class":      CPU runs (op_class_split): key = the operator class (attention, gemm, norm,
                         elementwise, sampling, framework); metric time_ns (host time);
                         share = / the phase's time.

Columns: a, b, delta = b - a, ratio = b / a (null when a is 0 or either side is
missing), share_a, share_b. A side with no data is null, never 0: "not recorded"
is different from "took no time".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis.kernels import kernel_classes as shared_kernel_classes

PHASE_METRICS = ("time_ns", "time_per_step_ns", "steps", "compute_bound_ns", "memory_bound_ns", "latency_bound_ns",
                 "idle_ns", "idle_host_ns", "idle_wait_ns", "idle_before_window_ns", "idle_profiler_ns",
                 "other_ns")
COLUMNS = ["scope", "phase", "key", "metric", "a", "b", "delta", "ratio", "share_a", "share_b"]



def kernel_classes(names: pd.Series, kinds: pd.Series | None = None) -> pd.Series:
    """The shared kernel classifier's class of each activity (tracekit.analysis.kernels)."""
    return pd.Series(shared_kernel_classes(names, kinds), index=names.index, dtype=object)


def run_phases(phases: pd.DataFrame) -> pd.DataFrame:
    """Whole-run rows per phase (request_id null); summed over requests if there are none."""
    if phases is None or phases.empty or "phase" not in phases:
        return pd.DataFrame(columns=["phase", *PHASE_METRICS])
    df = phases.copy()
    if "request_id" in df and df["request_id"].isna().any():
        df = df[df["request_id"].isna()]
    cols = [c for c in PHASE_METRICS if c in df and c != "time_per_step_ns"]
    out = df.groupby(df["phase"].astype(str), sort=False)[cols].sum(min_count=1).reset_index()
    if "time_ns" in out and "steps" in out:
        # the time covers the steps with kernel capture where the row says so (--trace-steps)
        timed = out["steps"]
        if "steps_captured" in df:
            cap = df.groupby(df["phase"].astype(str), sort=False)["steps_captured"].sum(min_count=1)
            cap = out["phase"].map(cap)
            timed = cap.where(cap.notna() & (cap > 0), out["steps"])
        out["time_per_step_ns"] = out["time_ns"] / timed.replace(0, np.nan)
    return out


def kernel_time(gpu: pd.DataFrame, steps: pd.DataFrame | None) -> pd.DataFrame:
    """Kernel time and count per (phase, class), plus phase "all"."""
    cols = ["phase", "key", "time_ns", "kernels"]
    if gpu is None or gpu.empty or "ts_ns" not in gpu or "dur_ns" not in gpu:
        return pd.DataFrame(columns=cols)
    g = gpu[["ts_ns", "dur_ns"]].copy()
    names = gpu["name"] if "name" in gpu else pd.Series([None] * len(gpu), index=gpu.index)
    g["key"] = kernel_classes(names.astype(object), gpu["kind"].astype(object) if "kind" in gpu else None).to_numpy()
    g["phase"] = _phase_of(g["ts_ns"], steps)
    g = g.dropna(subset=["ts_ns", "dur_ns"])
    per = g.groupby(["phase", "key"]).agg(time_ns=("dur_ns", "sum"), kernels=("dur_ns", "size")).reset_index()
    allp = g.groupby("key").agg(time_ns=("dur_ns", "sum"), kernels=("dur_ns", "size")).reset_index()
    allp.insert(0, "phase", "all")
    return pd.concat([allp, per[per["phase"] != "all"]], ignore_index=True)[cols]


def bound_time(kernel_bound: pd.DataFrame | None) -> pd.DataFrame:
    """Kernel time and count per (phase, bound class), plus phase "all", from the bound pass's kernel_bound."""
    cols = ["phase", "key", "time_ns", "kernels"]
    if kernel_bound is None or kernel_bound.empty or not {"bound", "dur_ns"} <= set(kernel_bound):
        return pd.DataFrame(columns=cols)
    g = pd.DataFrame({"key": kernel_bound["bound"].astype(object),
                      "phase": kernel_bound["phase"].astype(object) if "phase" in kernel_bound else None,
                      "dur_ns": pd.to_numeric(kernel_bound["dur_ns"], errors="coerce")}).dropna(subset=["key", "dur_ns"])
    g["phase"] = g["phase"].where(g["phase"].notna(), "outside").astype(str)
    per = g.groupby(["phase", "key"]).agg(time_ns=("dur_ns", "sum"), kernels=("dur_ns", "size")).reset_index()
    allp = g.groupby("key").agg(time_ns=("dur_ns", "sum"), kernels=("dur_ns", "size")).reset_index()
    allp.insert(0, "phase", "all")
    return pd.concat([allp, per[per["phase"] != "all"]], ignore_index=True)[cols]


def op_class_time(split: pd.DataFrame | None) -> pd.DataFrame:
    """Host time per (phase, operator class) of a CPU run's op_class_split."""
    cols = ["phase", "key", "time_ns"]
    if split is None or split.empty or not {"phase", "op_class", "time_ns"} <= set(split):
        return pd.DataFrame(columns=cols)
    return pd.DataFrame({"phase": split["phase"].astype(str), "key": split["op_class"].astype(str),
                         "time_ns": pd.to_numeric(split["time_ns"], errors="coerce")})[cols]


def _phase_of(ts: pd.Series, steps: pd.DataFrame | None) -> np.ndarray:
    """The phase of the step whose GPU span holds each timestamp ("outside" if none)."""
    out = np.full(len(ts), "outside", dtype=object)
    if steps is None or steps.empty or not {"gpu_start_ns", "gpu_end_ns", "kind"} <= set(steps):
        return out
    s = steps.dropna(subset=["gpu_start_ns", "gpu_end_ns"]).sort_values("gpu_start_ns")
    if s.empty:
        return out
    starts = s["gpu_start_ns"].to_numpy(dtype=np.int64)
    ends = s["gpu_end_ns"].to_numpy(dtype=np.int64)
    kinds = s["kind"].astype(str).to_numpy(dtype=object)
    t = ts.fillna(-1).to_numpy(dtype=np.int64)
    idx = np.searchsorted(starts, t, side="right") - 1
    ok = (idx >= 0) & (t < ends[np.clip(idx, 0, None)])
    out[ok] = kinds[idx[ok]]
    return out


def _rows(scope: str, a: pd.DataFrame, b: pd.DataFrame, keys: list[str], metrics: list[str], share_of: Any) -> list[dict]:
    rows = []
    ia = a.set_index(keys) if not a.empty else pd.DataFrame()
    ib = b.set_index(keys) if not b.empty else pd.DataFrame()
    index = list(dict.fromkeys([*ia.index.tolist(), *ib.index.tolist()]))
    for k in index:
        for m in metrics:
            va = _get(ia, k, m)
            vb = _get(ib, k, m)
            kt = k if isinstance(k, tuple) else (k,)
            rec = dict(zip(keys, kt, strict=True))
            rows.append({
                "scope": scope,
                "phase": rec.get("phase", rec.get("key")),
                "key": rec.get("key", rec.get("phase")),
                "metric": m,
                "a": va,
                "b": vb,
                "delta": vb - va if va is not None and vb is not None else None,
                "ratio": vb / va if va not in (None, 0) and vb is not None else None,
                "share_a": share_of(a, rec, m, va),
                "share_b": share_of(b, rec, m, vb),
            })
    return rows


def _get(df: pd.DataFrame, k: Any, m: str) -> float | None:
    if df.empty or m not in df or k not in df.index:
        return None
    v = df.loc[k, m]
    if isinstance(v, pd.Series):
        v = v.sum(min_count=1)
    return None if pd.isna(v) else float(v)


def _phase_share(df: pd.DataFrame, rec: dict, m: str, v: float | None) -> float | None:
    if v is None or df.empty or m in ("steps", "time_per_step_ns"):
        return None
    if m == "time_ns":
        total = df["time_ns"].sum()
    else:
        total = df.loc[df["phase"] == rec["phase"], "time_ns"].sum()
    return v / total if total else None


def _kernel_share(df: pd.DataFrame, rec: dict, m: str, v: float | None) -> float | None:
    if v is None or df.empty or m != "time_ns":
        return None
    total = df.loc[df["phase"] == rec["phase"], "time_ns"].sum()
    return v / total if total else None


def diff_runs(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Compare two runs given as {table name: DataFrame} (phases, steps, gpu_activity, kernel_bound,
    op_class_split)."""
    pa_, pb_ = run_phases(a.get("phases")), run_phases(b.get("phases"))  # type: ignore[arg-type]
    # a metric neither table has (a run analysed before the latency class) is no row, not two nulls
    metrics = [m for m in PHASE_METRICS
               if any(m in t.columns and t[m].notna().any() for t in (pa_, pb_)) or m == "time_per_step_ns"]
    rows = _rows("phase", pa_, pb_, ["phase"], metrics, _phase_share)
    ka = kernel_time(a.get("gpu_activity"), a.get("steps"))  # type: ignore[arg-type]
    kb = kernel_time(b.get("gpu_activity"), b.get("steps"))  # type: ignore[arg-type]
    rows += _rows("kernel_class", ka, kb, ["phase", "key"], ["time_ns", "kernels"], _kernel_share)
    ba, bb = bound_time(a.get("kernel_bound")), bound_time(b.get("kernel_bound"))
    if len(ba) or len(bb):
        rows += _rows("bound", ba, bb, ["phase", "key"], ["time_ns", "kernels"], _kernel_share)
    oa, ob = op_class_time(a.get("op_class_split")), op_class_time(b.get("op_class_split"))
    if len(oa) or len(ob):
        rows += _rows("op_class", oa, ob, ["phase", "key"], ["time_ns"], _kernel_share)
    out = pd.DataFrame(rows, columns=COLUMNS)
    for c in ("a", "b", "delta", "ratio", "share_a", "share_b"):
        out[c] = pd.to_numeric(out[c], errors="coerce").astype("float64")
    return out
