"""GPU idle inside a step, split by cause: the profiler's own cost, the host still issuing, waiting.

Pure functions over arrays and DataFrames (no I/O), used by the bound pass:

- ``issued_ns(gpu_activity, runtime)``: per GPU activity, when the host finished issuing it (the end
  of the runtime call with its correlation: cudaLaunchKernel, cudaGraphLaunch, cudaMemcpyAsync ...);
  NaN where the trace does not link it.
- ``sync_intervals(runtime)``: the host's blocking calls (cudaDeviceSynchronize, cudaStreamSynchronize,
  cudaEventSynchronize, synchronous cudaMemcpy), as disjoint [start, end) intervals.
- ``wait_ns(windows, starts, ends, issued, syncs)``: of one device's idle time inside ``windows``, the
  part where the host had already issued the work that ended the gap, or sat in a blocking call: the
  GPU waited on something else (a dependency on another stream, a copy, work outside the trace).
  The rest of the idle time is the host's: it had not issued the next work yet.
- ``before_window_ns(windows, starts, ends, issued, device_busy)``: of that waiting, the part behind
  work the trace does not show (launched before the trace window, or by another process): the GPU
  had the work queued, ran nothing visible, and started it far later than queueing explains.
- ``overheads(manifest)``: the profiler's cost per step kind, from run.json's profiled and unprofiled
  timings (TTFT for a prefill step, TPOT for a decode step); None where there is no unprofiled pass.
- ``profiler_share_ns(kind, time_ns, host_ns, overheads)``: the part of a step's host idle that is the
  profiler's: its extra time per step, spread evenly over the profiled step time, this window's part
  of it, never more than the host idle. None (null), never a silent 0, where it cannot be known.

Invariant: idle_profiler_ns + idle_host_ns + idle_wait_ns + idle_before_window_ns == idle_ns (with a
null profiler part counting 0). Method: docs/roofline.md, "Idle by cause".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis.columns import matches
from tracekit.analysis.intervals import EMPTY, union


def _is_blocking(name: str) -> bool:
    """Runtime / driver calls that block the host until the GPU has finished something."""
    if "Synchronize" in name:
        return True
    # cudaMemcpy / hipMemcpy (synchronous, hipMemcpyWithStream too) block; the *Async ones do not
    # (pageable DtoH aside).
    return name.startswith(("cudaMemcpy", "cuMemcpy", "hipMemcpy")) and "Async" not in name


UNKNOWN = np.iinfo(np.int64).min  # an issue time the trace does not give


def issued_ns(gpu_activity: pd.DataFrame, runtime: pd.DataFrame | None) -> pd.arrays.IntegerArray:
    """Per activity (same order): the end of its launching runtime call, int64 ns (NA: unknown).

    Integers throughout: epoch-scale nanoseconds (~1.8e18) do not survive a float64 round trip.
    """
    n = len(gpu_activity)
    out = pd.array([pd.NA] * n, dtype="Int64")
    if runtime is None or len(runtime) == 0 or "correlation" not in gpu_activity or "correlation" not in runtime:
        return out
    rt = runtime[["correlation", "ts_ns", "dur_ns"]].dropna(subset=["correlation", "ts_ns"])
    if rt.empty:
        return out
    end = pd.to_numeric(rt["ts_ns"]).astype("int64") + pd.to_numeric(rt["dur_ns"]).fillna(0).astype("int64")
    # A graph launch has one correlation for all its kernels: the first call with it issued them all.
    by_corr = pd.Series(end.to_numpy(), index=pd.to_numeric(rt["correlation"]).astype("int64").to_numpy())
    by_corr = by_corr[~by_corr.index.duplicated(keep="first")].astype("Int64")
    corr = pd.to_numeric(gpu_activity["correlation"], errors="coerce")
    ok = corr.notna().to_numpy()
    if ok.any():
        vals = by_corr.reindex(corr[ok].astype("int64").to_numpy())
        out[np.flatnonzero(ok)] = vals.array
    return out


def as_issued(values: object) -> np.ndarray:
    """Issue times (Int64 / int / float with NaN) as int64 with UNKNOWN for missing ones."""
    if isinstance(values, np.ndarray) and values.dtype == np.int64:
        return values  # nothing missing, nothing to convert
    s = pd.Series(values)
    if s.dtype == object or str(s.dtype).startswith("float"):
        s = pd.to_numeric(s, errors="coerce").round().astype("Int64")
    return s.astype("Int64").fillna(UNKNOWN).to_numpy(dtype=np.int64)


def sync_intervals(runtime: pd.DataFrame | None) -> np.ndarray:
    """The host's blocking runtime calls as disjoint sorted [start, end) intervals."""
    if runtime is None or len(runtime) == 0 or "name" not in runtime:
        return EMPTY.copy()
    rt = runtime[matches(runtime["name"], _is_blocking)]
    if rt.empty:
        return EMPTY.copy()
    s = pd.to_numeric(rt["ts_ns"], errors="coerce")
    e = s + pd.to_numeric(rt["dur_ns"], errors="coerce").fillna(0)
    ok = s.notna().to_numpy()
    return union(s[ok].to_numpy(dtype=np.int64), e[ok].to_numpy(dtype=np.int64))


def _overlap(a: np.ndarray, b: np.ndarray, syncs: np.ndarray) -> int:
    """Total length of [a_i, b_i) intersected with the disjoint sorted ``syncs``."""
    if syncs.size == 0 or a.size == 0:
        return 0
    cs = np.concatenate([[0], np.cumsum(syncs[:, 1] - syncs[:, 0])])

    def covered(t: np.ndarray) -> np.ndarray:  # length of syncs before instant t
        i = np.searchsorted(syncs[:, 0], t, side="right")
        prev = np.clip(i - 1, 0, None)
        inside = np.where(i > 0, np.clip(t - syncs[prev, 0], 0, syncs[prev, 1] - syncs[prev, 0]), 0)
        return cs[prev] * (i > 0) + inside

    return int((covered(b) - covered(a)).sum())


# A launch reaches the GPU a little after its runtime call returns: on the H200, eager kernels that
# found the GPU idle started 1.8-2.6 us after cudaLaunchKernel returned (5th-95th percentile of
# 3,707 decode kernels, docs/roofline.md). That much of a gap is still the cost of issuing.
LAUNCH_LATENCY_NS = 5_000


def _gaps(windows: np.ndarray, starts: np.ndarray, ends: np.ndarray, issued: np.ndarray,
          launch_latency_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(ga, gb, split, latest)`` over every window at once: the idle gaps [ga, gb) on one device inside
    the disjoint sorted ``windows`` (window by window, each in time order), where the host's part of
    each ends (``split``: the latest issue time, plus the launch latency, of the activity that ends the
    gap, clipped into it; gb where it is unknown or no activity ends the gap) and that issue time
    (``latest``; UNKNOWN there)."""
    w = np.asarray(windows, dtype=np.int64).reshape(-1, 2)
    busy = union(starts, ends)
    lo, hi = w[:, 0], w[:, 1]
    # gaps = each window minus busy. busy is disjoint and sorted (both ends ascend): the intervals
    # meeting a window are one slice [a, b), found by bisection; a window with m of them has m + 1
    # candidate gaps (before the first, between, after the last), empty ones dropped.
    a = np.searchsorted(busy[:, 1], lo, side="right")
    m = np.maximum(np.maximum(np.searchsorted(busy[:, 0], hi, side="left"), 0) - a, 0)
    win = np.repeat(np.arange(len(w)), m + 1)
    k = np.arange(len(win)) - np.repeat(np.cumsum(m + 1) - (m + 1), m + 1)  # candidate's place in its window
    first, last = k == 0, k == m[win]
    wlo, whi, at = lo[win], hi[win], a[win] + k
    b_end = busy[np.clip(at - 1, 0, max(len(busy) - 1, 0)), 1] if len(busy) else wlo
    b_start = busy[np.clip(at, 0, max(len(busy) - 1, 0)), 0] if len(busy) else whi
    edges_s = np.where(first, wlo, np.clip(b_end, wlo, whi))
    edges_e = np.where(last, whi, np.clip(b_start, wlo, whi))
    keep = edges_e > edges_s
    ga, gb = edges_s[keep].astype(np.int64), edges_e[keep].astype(np.int64)
    split = gb.copy()  # unknown, or no activity at the gap's end: all of it the host's
    latest_of = np.full(gb.size, UNKNOWN, dtype=np.int64)
    if not gb.size:
        return ga, gb, split, latest_of
    ss = np.asarray(starts, dtype=np.int64)
    order = np.argsort(ss, kind="stable")
    ss, iss = ss[order], as_issued(issued)[order]
    padded = np.append(iss, UNKNOWN)  # i1 below may be len(iss)
    # the activity that ends each gap: the latest-issued one starting exactly at its end
    i0 = np.searchsorted(ss, gb, side="left")
    i1 = np.searchsorted(ss, gb, side="right")
    has = np.flatnonzero(i1 > i0)
    if has.size:
        # Per gap, the max issue time and whether any is unknown over iss[i0:i1] (disjoint, sorted
        # ranges: the gaps' ends ascend), by reduceat over the ranges' bounds.
        bounds = np.column_stack([i0[has], i1[has]]).ravel()
        latest = np.maximum.reduceat(padded, bounds)[::2]
        unknown = np.logical_or.reduceat(padded == UNKNOWN, bounds)[::2]
        ok = has[~unknown]
        latest_of[ok] = latest[~unknown]
        split[ok] = np.minimum(np.maximum(latest[~unknown] + launch_latency_ns, ga[ok]), gb[ok])
    return ga, gb, split, latest_of


def wait_ns(windows: np.ndarray, starts: np.ndarray, ends: np.ndarray, issued: np.ndarray,
            syncs: np.ndarray, launch_latency_ns: int = LAUNCH_LATENCY_NS) -> int:
    """Idle ns inside ``windows`` (one device) during which the GPU waited on something other than the host.

    A gap ends where an activity starts (or at the window's end). Until the host finished issuing
    that activity, plus the launch latency, the gap is the host's; after it the work was queued and
    the GPU waited (on another stream, an event, a copy engine, outside work). Time the host spent
    blocked in a synchronising call counts as waiting too. An activity with no known issue time
    leaves its gap to the host. ``before_window_ns`` says how much of this was behind unseen work.
    """
    if len(windows) == 0:
        return 0
    return _waited(_gaps(windows, starts, ends, issued, launch_latency_ns), syncs)


def _waited(gaps: tuple[np.ndarray, ...], syncs: np.ndarray) -> int:
    """wait_ns of the gaps ``_gaps`` found."""
    ga, gb, split, _ = gaps
    syncs = np.asarray(syncs, dtype=np.int64).reshape(-1, 2)
    # queued, not running; and the host blocked in a sync while nothing was queued
    return int((gb - split).sum()) + _overlap(ga, split, syncs)


# A launch that found the device idle and still started this much later than its runtime call
# returned waited on work the trace does not show: far beyond the launch latency (what such launches
# measure on the committed GPU fixtures: docs/measurements/2026-12-07-docstring-figures.md).
UNSEEN_LAG_NS = 100_000


def before_window_ns(windows: np.ndarray, starts: np.ndarray, ends: np.ndarray, issued: np.ndarray,
                     device_busy: np.ndarray | None = None, launch_latency_ns: int = LAUNCH_LATENCY_NS,
                     unseen_lag_ns: int = UNSEEN_LAG_NS) -> int:
    """Of ``wait_ns``' queued time inside ``windows`` (one device), the ns the GPU spent behind work the
    trace does not show: launched before the trace window, or by another process.

    A gap counts when the activity that ends it started more than ``unseen_lag_ns`` after the host
    issued it and no visible work ran between the issue and the start (``device_busy``: the busy
    intervals of every device over the whole trace, disjoint and sorted, so that a wait on another
    device's visible work is not unseen; default: the union of ``starts``/``ends``). A GPU with work queued and nothing visible running was running something
    else. Its queued part [issue + launch latency, start) counts; the part before the issue stays the
    host's (the trace cannot say whether the unseen work ran then too).
    """
    if len(windows) == 0 or len(starts) == 0:
        return 0
    dbusy = union(starts, ends) if device_busy is None else np.asarray(device_busy, dtype=np.int64).reshape(-1, 2)
    return _unseen(_gaps(windows, starts, ends, issued, launch_latency_ns), dbusy, unseen_lag_ns)


def waits_ns(windows: np.ndarray, starts: np.ndarray, ends: np.ndarray, issued: np.ndarray, syncs: np.ndarray,
             device_busy: np.ndarray | None = None) -> tuple[int, int]:
    """(wait_ns, before_window_ns) of one device's activities with the default latencies, their gaps
    found once."""
    if len(windows) == 0:
        return 0, 0
    gaps = _gaps(windows, starts, ends, issued, LAUNCH_LATENCY_NS)
    if len(starts) == 0:
        return _waited(gaps, syncs), 0
    dbusy = union(starts, ends) if device_busy is None else np.asarray(device_busy, dtype=np.int64).reshape(-1, 2)
    return _waited(gaps, syncs), _unseen(gaps, dbusy, UNSEEN_LAG_NS)


def _unseen(gaps: tuple[np.ndarray, ...], dbusy: np.ndarray, unseen_lag_ns: int) -> int:
    """before_window_ns of the gaps ``_gaps`` found; ``dbusy``: the visible busy intervals."""
    _, gb, split, latest = gaps
    known = latest != UNKNOWN
    if not known.any():
        return 0
    # the end of the device's last visible interval that starts before the gap's end
    j = np.searchsorted(dbusy[:, 0], gb, side="left") - 1
    prev_end = np.where(j >= 0, dbusy[np.clip(j, 0, None), 1] if len(dbusy) else UNKNOWN, UNKNOWN)
    unseen = known & (gb - latest > unseen_lag_ns) & (prev_end <= latest)
    return int((gb - split)[unseen].sum())


def _agg(timings: Mapping[str, Any] | None, key: str) -> float | None:
    if not isinstance(timings, Mapping):
        return None
    agg = timings.get("aggregate")
    v = agg.get(key) if isinstance(agg, Mapping) else None
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return f if np.isfinite(f) and f > 0 else None


def overheads(manifest: Mapping[str, Any] | None) -> dict[str, tuple[float, float]] | None:
    """{step kind: (profiler ns per step, profiled step ns)} from run.json, or None without an unprofiled pass.

    prefill: TTFT profiled - TTFT unprofiled (one prefill per request); decode: the same for TPOT.
    A negative difference (the profiled pass was faster) counts as 0.
    """
    t = (manifest or {}).get("timings")
    if not isinstance(t, Mapping) or not isinstance(t.get("unprofiled"), Mapping):
        return None
    prof, bare = t.get("profiled"), t.get("unprofiled")
    out: dict[str, tuple[float, float]] = {}
    for kind, key in (("prefill", "ttft_ns"), ("decode", "tpot_ns")):
        p, u = _agg(prof, key), _agg(bare, key)
        if p is not None and u is not None:
            out[kind] = (max(p - u, 0.0), p)
    return out or None


def profiler_share_ns(kind: str, time_ns: int, host_ns: int,
                      over: Mapping[str, tuple[float, float]] | None) -> int | None:
    """The profiler's part of one step's host idle (see the module doc); None where unknown."""
    if over is None or kind not in over:
        return None
    extra, step = over[kind]
    share = extra * min(time_ns / step, 1.0) if step > 0 else 0.0
    return int(min(max(round(share), 0), max(host_ns, 0)))
