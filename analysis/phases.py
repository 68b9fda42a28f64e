"""The phases table: where each request's (and the run's) time went, per phase.

One row per (request, phase) and per (run, phase) (request_id null), phases
prefill / decode / mixed (and draft / verify for speculative decoding), plus a run-level ``outside`` row for GPU activity
launched outside every step. Per row:

- steps: the phase's steps; steps_captured: those the trace has kernels for (a run
  recorded with a kernel-capture window, ``tracekit record --trace-steps``, has
  steps outside it: ``steps.captured`` false). Every time column below is over
  the captured steps only: a step without kernel capture is not GPU idleness.
- time_ns: union of the phase's (captured) step windows, [cpu_start, max(cpu_end, gpu_end)).
- gpu_busy_ns: union of the phase's GPU activities, per device, summed over devices.
- comm_ns / memcpy_ns: unions of the NCCL kernels / memcpy+memset.
- idle_ns: time_ns × devices − gpu_busy_ns: the GPU idle inside a step. Null when the
  trace has no GPU activity at all (a CPU trace says nothing about GPU idleness). The
  bound pass splits it by cause: idle_host_ns, idle_wait_ns, idle_before_window_ns,
  idle_profiler_ns (tracekit.analysis.idle).

compute_bound_ns, memory_bound_ns, other_ns, flops and bytes are left null for
the bound pass (analysis/bound.py) to fill.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis import intervals, timeline

PHASES = ("prefill", "decode", "mixed", "draft", "verify", "denoise", "iteration")
# draft / verify: speculative decoding; denoise: a diffusion step; iteration: a ProfilerStep window
PHASE_COLUMNS = ["request_id", "phase", "steps", "steps_captured", "time_ns", "gpu_busy_ns", "idle_ns", "comm_ns", "memcpy_ns"]


def _windows(steps: pd.DataFrame) -> np.ndarray:
    if steps.empty:
        return np.empty((0, 2), dtype=np.int64)
    s = steps["cpu_start_ns"].astype("int64").to_numpy()
    e = np.maximum(steps["cpu_end_ns"].astype("Float64").to_numpy(dtype="float64", na_value=np.nan),
                   steps["gpu_end_ns"].astype("Float64").to_numpy(dtype="float64", na_value=np.nan))
    e = np.where(np.isnan(e), steps["cpu_end_ns"].astype("float64").to_numpy(), e).astype(np.int64)
    return intervals.union(s, e)


def _captured(steps: pd.DataFrame) -> pd.DataFrame:
    return steps[steps["captured"].astype(bool)] if "captured" in steps and not steps.empty else steps


def _row(rid: object, phase: str, steps: pd.DataFrame, split: dict[str, int], n_dev: int) -> dict[str, object]:
    cap = _captured(steps)
    time_ns = intervals.length(_windows(cap))
    return {
        "request_id": rid,
        "phase": phase,
        "steps": len(steps),
        "steps_captured": len(cap),
        "time_ns": time_ns,
        "gpu_busy_ns": split["busy"] if n_dev else None,
        "idle_ns": max(time_ns * n_dev - split["busy"], 0) if n_dev else None,
        "comm_ns": split["comm"] if n_dev else None,
        "memcpy_ns": split["memcpy"] if n_dev else None,
    }


def phases_pass(steps: pd.DataFrame, kernel_steps: pd.DataFrame, span: tuple[int, int] | None
                ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The phases pass: (phases, gpu_timeline) over the trace's [first, last) ns ``span``."""
    return build(steps, kernel_steps, span), device_timeline(kernel_steps, span)


def build(steps: pd.DataFrame, kernel_steps: pd.DataFrame, span: tuple[int, int] | None = None) -> pd.DataFrame:
    """Phase rows per request and for the run. ``span``: the trace's [first, last) ns."""
    ks = kernel_steps
    n_dev = int(ks["device"].nunique(dropna=False)) if not ks.empty else 0
    rows: list[dict[str, object]] = []
    groups: list[tuple[object, pd.DataFrame]] = []
    if not steps.empty and steps["request_id"].notna().any():
        for r, g in steps[steps["request_id"].notna()].groupby("request_id", sort=True):
            groups.append((int(r), g))  # type: ignore[arg-type]
    groups.append((None, steps))
    acts = timeline.Activities.of(ks) if not ks.empty else None
    by_step = _rows_by_step(ks)
    for rid, st in groups:
        for phase in PHASES:
            sp = st[st["kind"] == phase] if not st.empty else st
            if sp.empty:
                continue
            # the kernels of these steps (ks[ks["step_id"].isin(sp["step_id"])]), by index
            split = (acts.split(_rows_of(sp["step_id"], by_step, ks)) if acts is not None
                     else timeline.device_split(ks))
            rows.append(_row(rid, phase, sp, split, n_dev))
    outside = ks[ks["step_id"].isna()] if not ks.empty else ks
    if span is not None or not outside.empty:
        lo, hi = span if span is not None else (int(outside["ts_ns"].min()),
                                               int((outside["ts_ns"] + outside["dur_ns"]).max()))
        split = timeline.device_split(outside)
        out_time = max(hi - lo - intervals.length(intervals.clip(_windows(_captured(steps)), lo, hi)), 0)
        rows.append({
            "request_id": None, "phase": "outside", "steps": 0, "steps_captured": 0, "time_ns": out_time,
            "gpu_busy_ns": split["busy"] if n_dev else None,
            "idle_ns": max(out_time * n_dev - split["busy"], 0) if n_dev else None,
            "comm_ns": split["comm"] if n_dev else None, "memcpy_ns": split["memcpy"] if n_dev else None,
        })
    df = pd.DataFrame(rows, columns=PHASE_COLUMNS)
    df["request_id"] = df["request_id"].astype("Int64")
    return df


def _rows_by_step(ks: pd.DataFrame) -> dict[float, np.ndarray]:
    """{step_id: positions of its rows in ks, in order}."""
    if ks.empty:
        return {}
    sid = pd.to_numeric(ks["step_id"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    pos = np.flatnonzero(~np.isnan(sid))
    order = np.argsort(sid[pos], kind="stable")
    pos, keys = pos[order], sid[pos][order]
    if not len(keys):
        return {}
    cuts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return dict(zip(keys[cuts].tolist(), np.split(pos, cuts[1:]), strict=True))


def _rows_of(step_ids: pd.Series, by_step: dict[float, np.ndarray], ks: pd.DataFrame) -> np.ndarray:
    ids = pd.to_numeric(step_ids, errors="coerce")
    parts = [by_step[v] for v in pd.unique(ids.dropna().to_numpy(dtype=float)).tolist() if v in by_step]
    if ids.isna().any():  # isin matches a null to the null step ids
        parts.append(np.flatnonzero(ks["step_id"].isna().to_numpy()))
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


def device_timeline(kernel_steps: pd.DataFrame, span: tuple[int, int] | None) -> pd.DataFrame:
    """Per device: span, busy, compute, memcpy, comm and idle ns over the whole trace."""
    rows = []
    if not kernel_steps.empty:
        for dev, part in kernel_steps.groupby("device", dropna=False):
            split = timeline.device_split(part)
            lo, hi = span if span is not None else (int(part["ts_ns"].min()),
                                                   int((part["ts_ns"] + part["dur_ns"]).max()))
            rows.append({"device": dev, "span_ns": hi - lo, "busy_ns": split["busy"], "compute_ns": split["compute"],
                         "memcpy_ns": split["memcpy"], "comm_ns": split["comm"],
                         "idle_ns": max(hi - lo - split["busy"], 0),
                         "activities": len(part), "outside_steps": int(part["step_id"].isna().sum())})
    return pd.DataFrame(rows, columns=["device", "span_ns", "busy_ns", "compute_ns", "memcpy_ns", "comm_ns",
                                       "idle_ns", "activities", "outside_steps"])
