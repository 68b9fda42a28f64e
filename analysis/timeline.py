"""The GPU timeline: activities by category, launch times, and their assignment to step windows.

The GPU activity of a run is split per device into compute kernels, memcpy/memset, communication
(NCCL) and idle, by the interval arithmetic of ``intervals`` (busy time is a union, so overlapping
kernels on two streams count once); every activity is assigned to exactly one step, or to none
("outside", a null step_id).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis.activities import Activities
from tracekit.analysis.columns import by_value, matches

CATEGORIES = ("compute", "memcpy", "memset", "comm")


def categorise(gpu: pd.DataFrame) -> pd.Series:
    """compute | memcpy | memset | comm, per GPU activity.

    NCCL kernels are communication whatever their kind: they occupy the SMs but
    their time is the collective's, not the model's arithmetic.
    """
    if gpu.empty:
        return pd.Series([], dtype=object, index=gpu.index)
    kind = by_value(gpu["kind"], str.lower)
    cat = np.where(kind == "memcpy", "memcpy", np.where(kind == "memset", "memset", "compute"))
    cat = np.where(matches(gpu["name"], lambda n: "nccl" in n.lower()), "comm", cat)
    return pd.Series(cat, index=gpu.index, dtype=object)


def launch_times(gpu: pd.DataFrame, runtime: pd.DataFrame, cpu_ops: pd.DataFrame) -> pd.Series:
    """Host time at which each GPU activity was launched.

    The runtime call with the same correlation id is the best witness (it is
    the launch itself, cudaGraphLaunch included); failing that, the start of the
    launching CPU op (op_id). Null where neither is known.
    """
    out = pd.Series(pd.NA, index=gpu.index, dtype="Int64")
    if gpu.empty:
        return out
    if not runtime.empty and "correlation" in gpu:
        hit = gpu["correlation"].map(first_by_key(runtime, "correlation", "ts_ns"))
        out = out.fillna(hit.astype("Int64"))
    if not cpu_ops.empty and "op_id" in gpu:
        hit = gpu["op_id"].map(first_by_key(cpu_ops, "op_id", "ts_ns"))
        out = out.fillna(hit.astype("Int64"))
    return out


def first_by_key(df: pd.DataFrame, key: str, value: str) -> pd.Series:
    """``value`` indexed by ``key``: the first row of each key, rows without a key left out (as
    ``df.dropna(subset=[key]).drop_duplicates(key)``, on the two columns only)."""
    k = df[key]
    ok = k.notna().to_numpy()
    keys = k[ok].to_numpy() if not ok.all() else k.to_numpy()
    vals = df[value].to_numpy()[ok] if not ok.all() else df[value].to_numpy()
    first = ~pd.Index(keys).duplicated(keep="first")
    return pd.Series(vals[first], index=keys[first])


def assign_to_windows(times: pd.Series, starts: np.ndarray, ends: np.ndarray, ids: np.ndarray) -> pd.Series:
    """The id of the [start, end) window holding each time; null if none.

    Windows must not overlap (steps never do once detected); sorted here.
    """
    out = pd.Series(pd.NA, index=times.index, dtype="Int64")
    if len(starts) == 0 or times.empty:
        return out
    order = np.argsort(starts, kind="stable")
    s, e, i = starts[order], ends[order], ids[order]
    t = times.to_numpy(dtype="float64", na_value=np.nan)
    valid = ~np.isnan(t)
    pos = np.searchsorted(s, t[valid], side="right") - 1
    ok = pos >= 0
    inside = np.zeros(valid.sum(), dtype=bool)
    inside[ok] = t[valid][ok] < e[pos[ok]]
    vals = np.full(valid.sum(), -1, dtype=np.int64)
    vals[inside] = i[pos[inside]]
    res = pd.array(np.where(inside, vals, 0), dtype="Int64")
    res[~inside] = pd.NA
    out.iloc[np.flatnonzero(valid)] = res
    return out


def busy_by_group(gpu: pd.DataFrame, key: str) -> pd.DataFrame:
    """Per (key, device): busy union, first start, last end of the activities.

    One row per key (sorted): gpu_busy_ns sums the union of each device's activities; all in one
    pass over the activities sorted by (key, device, start), no loop over groups."""
    cols = [key, "gpu_start_ns", "gpu_end_ns", "gpu_busy_ns"]
    g = gpu.dropna(subset=[key])
    if g.empty:
        return pd.DataFrame(columns=cols)
    keys, kcode = np.unique(g[key].to_numpy(), return_inverse=True)
    kcode = kcode.ravel()
    dev = g["device"].to_numpy() if "device" in g else np.zeros(len(g))
    dcode, _ = pd.factorize(dev, use_na_sentinel=False)  # a null device is a group of its own
    ts = g["ts_ns"].to_numpy(dtype=np.int64)
    end = ts + g["dur_ns"].to_numpy(dtype=np.int64)
    grp = kcode.astype(np.int64) * (int(dcode.max()) + 1) + dcode
    order = np.lexsort((ts, grp))
    gs, s0, e0, ks = grp[order], ts[order], end[order], kcode[order]
    # Each group shifted above the ones before it, so one running max never crosses groups.
    lo = min(int(s0.min()), int(e0.min()))
    span = max(int(s0.max()), int(e0.max())) - lo + 1
    _, gidx = np.unique(gs, return_inverse=True)
    off = gidx.ravel().astype(np.int64) * span
    s1, e1 = s0 - lo + off, e0 - lo + off
    run = np.maximum.accumulate(e1)
    prev = np.r_[np.iinfo(np.int64).min, run[:-1]]
    covered = np.maximum(run - np.maximum(s1, prev), 0)  # what each interval adds to its group's union
    busy = np.zeros(len(keys), dtype=np.int64)
    np.add.at(busy, ks, covered)
    first = np.full(len(keys), np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(len(keys), np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, kcode, ts)
    np.maximum.at(last, kcode, end)
    return pd.DataFrame({key: keys, "gpu_start_ns": first, "gpu_end_ns": last, "gpu_busy_ns": busy}, columns=cols)


def device_split(gpu: pd.DataFrame, windows: np.ndarray | None = None) -> dict[str, int]:
    """busy / compute / memcpy (memcpy+memset) / comm nanoseconds, summed over devices.

    Each category is a union per device; ``busy`` is the union of all of them
    (so compute + memcpy + comm can exceed busy where they overlap). With
    ``windows`` (disjoint intervals) everything is cut to them first.
    """
    if gpu.empty:
        return {"busy": 0, "compute": 0, "memcpy": 0, "comm": 0}
    acts = Activities.of(gpu)
    return acts.split(np.arange(len(gpu)), windows)
