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
import pyarrow as pa

from tracekit.analysis import arrays, intervals
from tracekit.analysis.activities import Activities

PHASES = ("prefill", "decode", "mixed", "draft", "verify", "denoise", "iteration")
# draft / verify: speculative decoding; denoise: a diffusion step; iteration: a ProfilerStep window
PHASE_COLUMNS = ["request_id", "phase", "steps", "steps_captured", "time_ns", "gpu_busy_ns", "idle_ns", "comm_ns", "memcpy_ns"]
TIMELINE_COLUMNS = ["device", "span_ns", "busy_ns", "compute_ns", "memcpy_ns", "comm_ns", "idle_ns", "activities",
                    "outside_steps"]


def _row_windows(steps: Any, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each of ``rows``' step window [cpu_start, max(cpu_end, gpu_end)) as two int64 arrays."""
    s = arrays.ints(steps, "cpu_start_ns")[rows]
    cpu_end = arrays.floats(steps, "cpu_end_ns")[rows]
    e = np.maximum(cpu_end, arrays.floats(steps, "gpu_end_ns")[rows])
    return s, np.where(np.isnan(e), cpu_end, e).astype(np.int64)


def _captured_mask(steps: Any) -> np.ndarray:
    """The steps the trace has kernels for (all where the table has no ``captured`` column)."""
    if arrays.has(steps, "captured") and arrays.rows(steps):
        return arrays.flags(steps, "captured")
    return np.ones(arrays.rows(steps), dtype=bool)


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


def _table(rows: list[dict[str, object]], columns: list[str], text: tuple[str, ...] = ()) -> pa.Table:
    """Rows as an Arrow table of int64 columns (``text``: string columns), nulls where None."""
    return arrays.from_columns({c: arrays.texts([r[c] for r in rows]) if c in text
                                else arrays.ints_column([r[c] for r in rows]) for c in columns})


def phases_pass(steps: Any, kernel_steps: Any, span: tuple[int, int] | None) -> tuple[pa.Table, pa.Table]:
    """The phases pass: (phases, gpu_timeline) over the trace's [first, last) ns ``span``, as Arrow
    tables (``steps`` and ``kernel_steps``: Arrow tables or pandas frames)."""
    acts = Activities.of(kernel_steps) if arrays.rows(kernel_steps) else None
    return build(steps, kernel_steps, span, acts=acts), device_timeline(kernel_steps, span, acts=acts)


def build(steps: Any, kernel_steps: Any, span: tuple[int, int] | None = None, *,
          acts: Activities | None = None) -> pa.Table:
    """Phase rows per request and for the run (PHASE_COLUMNS; request_id null for the run's rows).
    ``span``: the trace's [first, last) ns. ``acts``: ``Activities.of(kernel_steps)`` where the caller
    has it.

    The steps' columns are read once into arrays; each (request, phase) group is a set of row
    positions, its time the union of its captured rows' windows."""
    ks = kernel_steps
    n_ks = arrays.rows(ks)
    n_dev = len(np.unique(_nan_last(arrays.floats(ks, "device")))) if n_ks else 0
    rows: list[dict[str, object]] = []
    n = arrays.rows(steps)
    groups: list[tuple[object, np.ndarray]] = []
    if n:
        req = arrays.floats(steps, "request_id")
        has = ~np.isnan(req)
        for r, pos in _positions_by_value(req[has]):
            groups.append((int(r), np.flatnonzero(has)[pos]))
    groups.append((None, np.arange(n)))
    if acts is None and n_ks:
        acts = Activities.of(ks)
    ks_sid = arrays.floats(ks, "step_id") if n_ks else np.empty(0)
    by_step = _rows_by_step(ks_sid)
    cap = _captured_mask(steps)
    win_s = np.zeros(n, dtype=np.int64)
    win_e = np.zeros(n, dtype=np.int64)
    if cap.any():
        win_s[cap], win_e[cap] = _row_windows(steps, np.flatnonzero(cap))
    kinds = arrays.objects(steps, "kind") if n else np.empty(0, dtype=object)
    sids = arrays.floats(steps, "step_id") if n else np.empty(0)
    null_steps = np.flatnonzero(np.isnan(ks_sid))
    empty = {"busy": 0, "compute": 0, "memcpy": 0, "comm": 0}
    for rid, pos in groups:
        kind_of = kinds[pos]
        for phase in PHASES:
            sp = pos[kind_of == phase]
            if not len(sp):
                continue
            split = acts.split(_rows_of(sids[sp], by_step, null_steps)) if acts is not None else empty
            c = sp[cap[sp]]
            time_ns = intervals.length(intervals.union(win_s[c], win_e[c])) if len(c) else 0
            rows.append(_row(rid, phase, len(sp), len(c), time_ns, split, n_dev))
    if span is not None or len(null_steps):
        if span is not None:
            lo, hi = span
        else:
            ts = arrays.ints(ks, "ts_ns")[null_steps]
            lo, hi = int(ts.min()), int((ts + arrays.ints(ks, "dur_ns")[null_steps]).max())
        split = acts.split(null_steps) if acts is not None else empty
        c = np.flatnonzero(cap)
        run_windows = intervals.union(win_s[c], win_e[c]) if len(c) else np.empty((0, 2), dtype=np.int64)
        out_time = max(hi - lo - intervals.length(intervals.clip(run_windows, lo, hi)), 0)
        rows.append(_row(None, "outside", 0, 0, out_time, split, n_dev))
    return _table(rows, PHASE_COLUMNS, text=("phase",))


def _nan_last(values: np.ndarray) -> np.ndarray:
    """``values`` with NaN as +inf (one value of its own, sorted last)."""
    return np.where(np.isnan(values), np.inf, values)


def _positions_by_value(values: np.ndarray) -> list[tuple[Any, np.ndarray]]:
    """(value, positions of its rows, in order) for each distinct value, values sorted."""
    if not len(values):
        return []
    uniq, codes = np.unique(values, return_inverse=True)
    codes = codes.reshape(-1)
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.r_[True, codes[order][1:] != codes[order][:-1]])
    return list(zip(uniq.tolist(), np.split(order, cuts[1:]), strict=True))


def _rows_by_step(sid: np.ndarray) -> dict[float, np.ndarray]:
    """{step_id: positions of its rows, in order} of the kernels' step ids (float, NaN: no step)."""
    pos = np.flatnonzero(~np.isnan(sid))
    order = np.argsort(sid[pos], kind="stable")
    pos, keys = pos[order], sid[pos][order]
    if not len(keys):
        return {}
    cuts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return dict(zip(keys[cuts].tolist(), np.split(pos, cuts[1:]), strict=True))


def _rows_of(step_ids: np.ndarray, by_step: dict[float, np.ndarray], null_steps: np.ndarray) -> np.ndarray:
    """Positions of the kernels whose step is one of ``step_ids`` (float, NaN: the kernels with no step,
    ``null_steps``), in order."""
    known = step_ids[~np.isnan(step_ids)]
    parts = [by_step[v] for v in np.unique(known).tolist() if v in by_step]
    if len(known) < len(step_ids):  # a step without an id matches the kernels without one
        parts.append(null_steps)
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


def device_timeline(kernel_steps: Any, span: tuple[int, int] | None, *, acts: Activities | None = None
                    ) -> pa.Table:
    """Per device (TIMELINE_COLUMNS, devices sorted, a missing device last): span, busy, compute,
    memcpy, comm and idle ns over the whole trace. ``acts``: ``Activities.of(kernel_steps)`` where the
    caller has it."""
    rows: list[dict[str, object]] = []
    if arrays.rows(kernel_steps):
        acts = acts if acts is not None else Activities.of(kernel_steps)
        ts, end = acts.ts, acts.end
        no_step = np.isnan(arrays.floats(kernel_steps, "step_id"))
        dev = _nan_last(arrays.floats(kernel_steps, "device"))
        for d, pos in _positions_by_value(dev):
            split = acts.split(pos)
            lo, hi = span if span is not None else (int(ts[pos].min()), int(end[pos].max()))
            rows.append({"device": None if np.isinf(d) else int(d), "span_ns": hi - lo, "busy_ns": split["busy"],
                         "compute_ns": split["compute"], "memcpy_ns": split["memcpy"], "comm_ns": split["comm"],
                         "idle_ns": max(hi - lo - split["busy"], 0),
                         "activities": len(pos), "outside_steps": int(no_step[pos].sum())})
    return _table(rows, TIMELINE_COLUMNS)
