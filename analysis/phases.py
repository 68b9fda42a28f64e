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

from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis import intervals, timeline

PHASES = ("prefill", "decode", "mixed", "draft", "verify", "denoise", "iteration")
# draft / verify: speculative decoding; denoise: a diffusion step; iteration: a ProfilerStep window
PHASE_COLUMNS = ["request_id", "phase", "steps", "steps_captured", "time_ns", "gpu_busy_ns", "idle_ns", "comm_ns", "memcpy_ns"]


def _windows(steps: pd.DataFrame) -> np.ndarray:
    s, e = _row_windows(steps)
    return intervals.union(s, e) if len(s) else np.empty((0, 2), dtype=np.int64)


def _row_windows(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each step's [cpu_start, max(cpu_end, gpu_end)) as two int64 arrays (the union is _windows')."""
    if steps.empty:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    s = steps["cpu_start_ns"].astype("int64").to_numpy()
    e = np.maximum(steps["cpu_end_ns"].astype("Float64").to_numpy(dtype="float64", na_value=np.nan),
                   steps["gpu_end_ns"].astype("Float64").to_numpy(dtype="float64", na_value=np.nan))
    e = np.where(np.isnan(e), steps["cpu_end_ns"].astype("float64").to_numpy(), e).astype(np.int64)
    return s, e


def _captured(steps: pd.DataFrame) -> pd.DataFrame:
    return steps[steps["captured"].astype(bool)] if "captured" in steps and not steps.empty else steps


def _captured_mask(steps: pd.DataFrame) -> np.ndarray:
    """Which rows ``_captured`` keeps."""
    if "captured" in steps and not steps.empty:
        return steps["captured"].astype(bool).to_numpy(dtype=bool)
    return np.ones(len(steps), dtype=bool)


def _row(rid: object, phase: str, steps: int, captured: int, time_ns: int, split: dict[str, int], n_dev: int
         ) -> dict[str, object]:
    return {
        "request_id": rid,
        "phase": phase,
        "steps": steps,
        "steps_captured": captured,
        "time_ns": time_ns,
        "gpu_busy_ns": split["busy"] if n_dev else None,
        "idle_ns": max(time_ns * n_dev - split["busy"], 0) if n_dev else None,
        "comm_ns": split["comm"] if n_dev else None,
        "memcpy_ns": split["memcpy"] if n_dev else None,
    }


def phases_pass(steps: pd.DataFrame, kernel_steps: pd.DataFrame, span: tuple[int, int] | None
                ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The phases pass: (phases, gpu_timeline) over the trace's [first, last) ns ``span``."""
    acts = timeline.Activities.of(kernel_steps) if not kernel_steps.empty else None
    return build(steps, kernel_steps, span, acts=acts), device_timeline(kernel_steps, span, acts=acts)


def build(steps: pd.DataFrame, kernel_steps: pd.DataFrame, span: tuple[int, int] | None = None, *,
          acts: timeline.Activities | None = None) -> pd.DataFrame:
    """Phase rows per request and for the run. ``span``: the trace's [first, last) ns. ``acts``:
    ``timeline.Activities.of(kernel_steps)`` where the caller has it.

    The steps' columns are read once into arrays; each (request, phase) group is a set of row
    positions, its time the union of its captured rows' windows."""
    ks = kernel_steps
    n_dev = int(ks["device"].nunique(dropna=False)) if not ks.empty else 0
    rows: list[dict[str, object]] = []
    n = len(steps)
    groups: list[tuple[object, np.ndarray]] = []
    if n and steps["request_id"].notna().any():
        req = steps["request_id"]
        has = req.notna().to_numpy(dtype=bool)
        for r, pos in _positions_by_value(req[has]):
            groups.append((int(r), np.flatnonzero(has)[pos]))
    groups.append((None, np.arange(n)))
    if acts is None and not ks.empty:
        acts = timeline.Activities.of(ks)
    by_step = _rows_by_step(ks)
    cap = _captured_mask(steps)
    win_s = np.zeros(n, dtype=np.int64)
    win_e = np.zeros(n, dtype=np.int64)
    if cap.any():
        win_s[cap], win_e[cap] = _row_windows(steps[cap] if not cap.all() else steps)
    kinds = steps["kind"].to_numpy(dtype=object) if n else np.empty(0, dtype=object)
    sids = pd.to_numeric(steps["step_id"], errors="coerce").to_numpy(dtype=float, na_value=np.nan) if n \
        else np.empty(0)
    null_steps = np.flatnonzero(ks["step_id"].isna().to_numpy()) if not ks.empty else np.zeros(0, dtype=np.int64)
    for rid, pos in groups:
        kind_of = kinds[pos]
        for phase in PHASES:
            sp = pos[kind_of == phase]
            if not len(sp):
                continue
            # the kernels of these steps (ks[ks["step_id"].isin(sp["step_id"])]), by index
            split = (acts.split(_rows_of(sids[sp], by_step, null_steps)) if acts is not None
                     else timeline.device_split(ks))
            c = sp[cap[sp]]
            time_ns = intervals.length(intervals.union(win_s[c], win_e[c])) if len(c) else 0
            rows.append(_row(rid, phase, len(sp), len(c), time_ns, split, n_dev))
    outside = ks[ks["step_id"].isna()] if not ks.empty else ks
    if span is not None or not outside.empty:
        lo, hi = span if span is not None else (int(outside["ts_ns"].min()),
                                               int((outside["ts_ns"] + outside["dur_ns"]).max()))
        split = acts.split(null_steps) if acts is not None else timeline.device_split(outside)
        c = np.flatnonzero(cap)
        run_windows = intervals.union(win_s[c], win_e[c]) if len(c) else np.empty((0, 2), dtype=np.int64)
        out_time = max(hi - lo - intervals.length(intervals.clip(run_windows, lo, hi)), 0)
        rows.append({
            "request_id": None, "phase": "outside", "steps": 0, "steps_captured": 0, "time_ns": out_time,
            "gpu_busy_ns": split["busy"] if n_dev else None,
            "idle_ns": max(out_time * n_dev - split["busy"], 0) if n_dev else None,
            "comm_ns": split["comm"] if n_dev else None, "memcpy_ns": split["memcpy"] if n_dev else None,
        })
    df = pd.DataFrame(rows, columns=PHASE_COLUMNS)
    df["request_id"] = df["request_id"].astype("Int64")
    return df


def _positions_by_value(values: pd.Series) -> list[tuple[Any, np.ndarray]]:
    """(value, positions of its rows, in order) for each distinct value, values sorted: the groups
    ``groupby(sort=True)`` makes of a column without nulls."""
    codes, uniq = pd.factorize(values.to_numpy(), sort=True)
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.r_[True, codes[order][1:] != codes[order][:-1]])
    return list(zip(uniq.tolist(), np.split(order, cuts[1:]), strict=True)) if len(codes) else []


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


def _rows_of(step_ids: np.ndarray, by_step: dict[float, np.ndarray], null_steps: np.ndarray) -> np.ndarray:
    """Positions of the kernels whose step is one of ``step_ids`` (float, NaN: the kernels with no step,
    ``null_steps``), as ``ks[ks["step_id"].isin(step_ids)]``, in order."""
    known = step_ids[~np.isnan(step_ids)]
    parts = [by_step[v] for v in pd.unique(known).tolist() if v in by_step]
    if len(known) < len(step_ids):  # isin matches a null to the null step ids
        parts.append(null_steps)
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


def device_timeline(kernel_steps: pd.DataFrame, span: tuple[int, int] | None, *,
                    acts: timeline.Activities | None = None) -> pd.DataFrame:
    """Per device: span, busy, compute, memcpy, comm and idle ns over the whole trace. ``acts``:
    ``timeline.Activities.of(kernel_steps)`` where the caller has it."""
    rows = []
    if not kernel_steps.empty:
        acts = acts if acts is not None else timeline.Activities.of(kernel_steps)
        ts = kernel_steps["ts_ns"].to_numpy()
        end = (kernel_steps["ts_ns"] + kernel_steps["dur_ns"]).to_numpy()
        no_step = kernel_steps["step_id"].isna().to_numpy()
        for dev, pos in _positions_by_device(kernel_steps):
            split = acts.split(pos)
            lo, hi = span if span is not None else (int(ts[pos].min()), int(end[pos].max()))
            rows.append({"device": dev, "span_ns": hi - lo, "busy_ns": split["busy"], "compute_ns": split["compute"],
                         "memcpy_ns": split["memcpy"], "comm_ns": split["comm"],
                         "idle_ns": max(hi - lo - split["busy"], 0),
                         "activities": len(pos), "outside_steps": int(no_step[pos].sum())})
    return pd.DataFrame(rows, columns=["device", "span_ns", "busy_ns", "compute_ns", "memcpy_ns", "comm_ns",
                                       "idle_ns", "activities", "outside_steps"])


def _positions_by_device(ks: pd.DataFrame) -> list[tuple[object, np.ndarray]]:
    """(device, positions of its rows) in the order and with the keys of ``groupby("device",
    dropna=False)``: the devices sorted, a null device last."""
    grouped = ks.groupby("device", dropna=False, sort=True)
    codes = grouped.ngroup().to_numpy()
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.r_[True, codes[order][1:] != codes[order][:-1]])
    return list(zip(list(grouped.size().index), np.split(order, cuts[1:]), strict=True))
