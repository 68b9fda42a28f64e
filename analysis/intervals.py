"""Interval arithmetic on [start, end) nanosecond intervals, as int64 numpy arrays.

One implementation of union, complement, clipping and length for every pass: busy time is a union
(overlapping kernels on two streams count once), idle is a complement, and nothing is counted twice.
``step_windows`` turns a steps table into the windows the time-attribution passes use.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit.analysis import arrays

EMPTY = np.empty((0, 2), dtype=np.int64)


def union(starts: Any, ends: Any) -> np.ndarray:
    """The union of [start, end) intervals as a sorted (n, 2) int64 array of disjoint, non-empty intervals."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return EMPTY.copy()
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # A new merged interval starts wherever a start lies beyond every end before it.
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    out_s = s[idx]
    out_e = run_end[np.r_[idx[1:] - 1, s.size - 1]]
    return np.stack([out_s, out_e], axis=1)


def complement(intervals: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """[lo, hi) minus disjoint sorted intervals, as disjoint sorted non-empty intervals."""
    out, cur = [], lo
    for s, e in intervals:
        if s > cur:
            out.append((cur, min(int(s), hi)))
        cur = max(cur, int(e))
    if cur < hi:
        out.append((cur, hi))
    return np.array([(a, b) for a, b in out if b > a], dtype=np.int64).reshape(-1, 2)


def length(intervals: np.ndarray) -> int:
    """Total length of disjoint intervals."""
    if intervals.size == 0:
        return 0
    return int((intervals[:, 1] - intervals[:, 0]).sum())


def clip(intervals: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Disjoint intervals cut to [lo, hi)."""
    if intervals.size == 0 or hi <= lo:
        return EMPTY.copy()
    s = np.maximum(intervals[:, 0], lo)
    e = np.minimum(intervals[:, 1], hi)
    keep = e > s
    return np.stack([s[keep], e[keep]], axis=1)


def step_windows(steps: Any) -> Any:
    """steps plus start_ns / end_ns / time_ns: the window [cpu_start, max(cpu_end, gpu_end)) of each step.

    Host-bound time is GPU idle inside these windows, so a window opens when the host starts the
    forward pass, not at its first kernel. Steps without a start or an end are dropped. ``steps``: a
    pandas frame; so is the result (pandas is imported here, not with the module).
    """
    import pandas as pd

    s = steps.copy()
    cpu_s = pd.to_numeric(s["cpu_start_ns"], errors="coerce") if "cpu_start_ns" in s else None
    gpu_s = pd.to_numeric(s["gpu_start_ns"], errors="coerce") if "gpu_start_ns" in s else None
    start = cpu_s if cpu_s is not None else gpu_s
    if start is None:
        raise ValueError("steps need cpu_start_ns or gpu_start_ns")
    if gpu_s is not None:
        start = start.fillna(gpu_s)
    ends = [pd.to_numeric(s[c], errors="coerce") for c in ("cpu_end_ns", "gpu_end_ns") if c in s]
    end = pd.concat(ends, axis=1).max(axis=1)
    s["start_ns"] = start
    s["end_ns"] = end
    s = s[s["start_ns"].notna() & s["end_ns"].notna()].copy()
    s["start_ns"] = s["start_ns"].astype("int64")
    s["end_ns"] = np.maximum(s["end_ns"].astype("int64"), s["start_ns"])
    s["time_ns"] = s["end_ns"] - s["start_ns"]
    return s.reset_index(drop=True)


def window_arrays(steps: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``step_windows`` without a frame: (the kept rows' positions, start_ns, end_ns) of a steps table
    (Arrow or pandas). Integer columns are read exactly; where a float column takes part, the window
    is worked out in float64 and truncated, as pandas does."""
    n = arrays.rows(steps)
    has = [c for c in ("cpu_start_ns", "gpu_start_ns", "cpu_end_ns", "gpu_end_ns") if arrays.has(steps, c)]
    starts = [c for c in ("cpu_start_ns", "gpu_start_ns") if c in has]
    if not starts:
        raise ValueError("steps need cpu_start_ns or gpu_start_ns")
    ends = [c for c in ("cpu_end_ns", "gpu_end_ns") if c in has]
    if not n or not ends:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if all(arrays.is_integer(steps, c) for c in has):
        cols = {c: arrays.ints_or_null(steps, c) for c in has}
        start, ok = cols[starts[0]]
        if len(starts) > 1:
            other, other_ok = cols[starts[1]]
            start, ok = np.where(ok, start, other), ok | other_ok
        end, end_ok = cols[ends[0]]
        for c in ends[1:]:
            v, v_ok = cols[c]
            end = np.where(end_ok & v_ok, np.maximum(end, v), np.where(end_ok, end, v))
            end_ok = end_ok | v_ok
    else:
        fl = {c: arrays.floats(steps, c) for c in has}
        fs = fl[starts[0]] if len(starts) == 1 else np.where(np.isnan(fl[starts[0]]), fl[starts[1]], fl[starts[0]])
        with np.errstate(invalid="ignore"):
            fe = np.fmax.reduce([fl[c] for c in ends]) if len(ends) > 1 else fl[ends[0]]
        ok, end_ok = ~np.isnan(fs), ~np.isnan(fe)
        start, end = np.where(ok, fs, 0).astype(np.int64), np.where(end_ok, fe, 0).astype(np.int64)
    rows = np.flatnonzero(ok & end_ok)
    return rows, start[rows], np.maximum(end[rows], start[rows])


def window_union(windows: Any) -> np.ndarray:
    """The union of step_windows' [start_ns, end_ns) rows."""
    return union(windows["start_ns"].to_numpy(), windows["end_ns"].to_numpy())
