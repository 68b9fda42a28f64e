"""Compute-, memory- or latency-bound, or idle: per kernel, then per step and phase.

Pure functions, each DataFrame in, new DataFrame out (inputs never mutated):

- ``kernel_costs(gpu_activity, cpu_ops, ceiling)`` (tracekit.analysis.kernelcosts, re-exported here
  with the class names): each GPU activity's FLOPs, bytes, roof, rates and bound class.
- ``apply_counters(kernels, counters)``: Nsight Compute's counters, joined per step
  (tracekit.analysis.counters), decide the class of every kernel they measured (``source`` = ncu).
- ``attribute_steps(steps, kernels)``: interval arithmetic on the GPU timeline inside each step's
  window: compute_bound_ns + memory_bound_ns + latency_bound_ns + other_ns + comm_ns + memcpy_ns +
  idle_ns == time_ns exactly (integers); idle_ns == idle_profiler_ns + idle_host_ns + idle_wait_ns +
  idle_before_window_ns (tracekit.analysis.idle).
- ``attribute_phases(step_attr, kernels, ceiling, phases=None)``: the same sums per (request, phase)
  and per (run, phase), plus FLOPs, bytes, achieved rates and % of ceiling.

Method and conventions: docs/roofline.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis import advice as _advice
from tracekit.analysis import counters as _counters
from tracekit.analysis import idle as _idle
from tracekit.analysis import kernels as kc
from tracekit.analysis.columns import factorize, unique
from tracekit.analysis.intervals import EMPTY, complement, step_windows, union, window_union
from tracekit.analysis.kernelcosts import (
    COMM,
    COMPUTE,
    IDLE,
    LATENCY,
    MEMCPY,
    MEMORY,
    MODEL_CLASS,
    MODEL_NONE,
    MODEL_SHAPE,
    OTHER,
    SOURCE_NCU,
    kernel_costs,
)
from tracekit.analysis.kernelcosts import (
    SOURCE_MODEL as SOURCE_MODEL,  # re-exported: what decided a kernel's class, beside SOURCE_NCU
)
from tracekit.analysis.opmodels import serving_attention_ops
from tracekit.analysis.opmodels_moe import moe_forward_ops
from tracekit.analysis.options import (
    ROOFLINE_ONLY as ROOFLINE_ONLY,  # re-exported: the options live beside the pass
)
from tracekit.analysis.options import BoundOptions
from tracekit.model.ceilings import Ceiling, Ceilings, gpu_name

# Time classes in priority order: where kernels of several streams overlap, the
# instant counts once, for the first class active (TraceLens' order: computation
# before communication before memcpy; compute-bound before memory-bound because a
# compute-bound kernel hides a concurrent memory-bound one, not the reverse; a
# kernel that reaches a roof before one that reaches neither).
PRIORITY = (COMPUTE, MEMORY, LATENCY, OTHER, COMM, MEMCPY)
TIME_COLUMNS = {
    COMPUTE: "compute_bound_ns",
    MEMORY: "memory_bound_ns",
    LATENCY: "latency_bound_ns",
    OTHER: "other_ns",
    COMM: "comm_ns",
    MEMCPY: "memcpy_ns",
    IDLE: "idle_ns",
}
# idle_ns by cause: the profiler's own cost (null without an unprofiled timing pass), the host still
# issuing work, waiting on something else (a sync, a copy, another stream), and queued behind work the
# trace does not show (launched before its window, or by another process).
IDLE_COLUMNS = ("idle_profiler_ns", "idle_host_ns", "idle_wait_ns", "idle_before_window_ns")

ARRAYS = "_kernel_arrays"  # _classes' KernelArrays of kernel_bound, for the outside row (never returned)




def apply_counters(kernels: pd.DataFrame, counters: pd.DataFrame | None,
                   options: BoundOptions | None = None) -> tuple[pd.DataFrame, _counters.JoinReport | None]:
    """kernels with Nsight Compute's counters joined per step; a measured kernel's class is its counter class.

    Communication kernels stay ``comm`` and memcpy/memset ``memcpy`` (counters do not change what
    they are); every other measured kernel becomes compute, memory or latency, ``source`` = ncu.
    Without counters the kernels come back unchanged (and no report).
    """
    if counters is None or len(counters) == 0:
        return kernels, None
    opts = options or BoundOptions()
    k, report = _counters.join(kernels, counters)
    measured = k["ncu_match"].notna().to_numpy()
    cls = _counters.counter_classes(k[measured], opts.counter_threshold_pct) if measured.any() else pd.Series(
        dtype=object)
    keep = k["bound"].isin([COMM, MEMCPY]).to_numpy()
    take = measured.copy()
    take[measured] = cls.notna().to_numpy()
    take &= ~keep
    if take.any():
        k.loc[take, "bound"] = cls[cls.notna()].reindex(k.index[take]).to_numpy()
        k.loc[take, "source"] = SOURCE_NCU
    return k, report


# --- time attribution --------------------------------------------------------


def _sweep(starts: np.ndarray, ends: np.ndarray, cls: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """ns per class inside disjoint sorted ``windows``: shape (len(PRIORITY) + 1,), the last is idle.

    A sweep over every interval boundary: between two consecutive boundaries the
    set of active classes is constant; the segment goes to the first active class
    in PRIORITY, or to idle. Integer arithmetic, so the classes sum exactly to the
    windows' length. One class at a time, highest priority first, over one-dimensional
    arrays (a run of 40k kernels holds a few MB, not a boundaries-by-classes matrix).
    """
    nc = len(PRIORITY)
    out = np.zeros(nc + 1, dtype=np.int64)
    if len(windows) == 0:
        return out
    keep = ends > starts
    starts, ends, cls = starts[keep], ends[keep], cls[keep]
    w_start, w_end = windows[:, 0], windows[:, 1]
    t = np.concatenate([starts, ends, w_start, w_end]).astype(np.int64)
    n, nw = len(starts), 2 * len(windows)
    order = np.argsort(t, kind="stable")
    t = t[order]
    ev_cls = np.concatenate([cls, cls, np.full(nw, -1, dtype=cls.dtype)])[order]
    sign = np.concatenate([np.ones(n, np.int64), np.full(n, -1, np.int64), np.zeros(nw, np.int64)])[order]
    last = np.r_[t[1:] != t[:-1], True]  # the state after every event at one instant
    ut = t[last]
    seg_start, seg_len = ut[:-1], np.diff(ut)
    top = np.full(len(seg_start), nc, dtype=np.int64)
    for c in np.unique(cls).tolist():  # ascending: PRIORITY order
        active = np.cumsum(np.where(ev_cls == c, sign, 0))[last][:-1] > 0
        top[active & (top == nc)] = c
    w = np.searchsorted(w_start, seg_start, side="right") - 1
    inside = (w >= 0) & (seg_start < w_end[np.clip(w, 0, None)])
    np.add.at(out, top[inside], seg_len[inside])
    return out


def with_steps(kernels: pd.DataFrame, steps: pd.DataFrame, kernel_steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """kernels (kernel_costs' output, one row per gpu_activity row, same order) plus step_id.

    From the timeline pass's ``kernel_steps`` (step_id by launch time, matched on
    ``row``) when given; else a kernel belongs to the step window its start falls in.
    """
    k = kernels.copy(deep=False)
    if kernel_steps is not None and len(kernel_steps) and "row" in kernel_steps:
        m = pd.Series(kernel_steps["step_id"].to_numpy(), index=kernel_steps["row"].to_numpy())
        k["step_id"] = pd.to_numeric(pd.Series(np.arange(len(k))).map(m), errors="coerce").to_numpy()
        return k
    if "step_id" in k and k["step_id"].notna().any():
        return k
    w = step_windows(steps).sort_values("start_ns", kind="stable")
    ts = k["ts_ns"].to_numpy(dtype=np.int64) if len(k) else np.zeros(0, np.int64)
    pos = np.searchsorted(w["start_ns"].to_numpy(), ts, side="right") - 1
    ok = (pos >= 0) & (ts < w["end_ns"].to_numpy()[np.clip(pos, 0, None)]) if len(w) else np.zeros(len(k), bool)
    sid = w["step_id"].to_numpy(dtype=float)[np.clip(pos, 0, None)] if len(w) else np.zeros(len(k))
    k["step_id"] = np.where(ok, sid, np.nan)
    return k


def attribute_windows(windows: np.ndarray, kern: pd.DataFrame, syncs: np.ndarray | None = None,
                      context: pd.DataFrame | None = None) -> dict[str, Any]:
    """Time classes, FLOPs, bytes and kernel counts of one group: disjoint sorted windows and its kernels.

    ``context``: every GPU activity of the trace (default: ``kern``), whose busy time says whether a
    device ran visible work while the group's work was queued (idle_before_window_ns).

    idle_ns is split into idle_before_window_ns and idle_wait_ns (tracekit.analysis.idle.before_window_ns
    and wait_ns; they need the kernels' ``issued_ns``) and idle_host_ns; idle_profiler_ns is None here (``with_profiler`` takes its part from the host's).
    """
    arrays = KernelArrays.of(kern)
    return arrays.attribute(windows, np.arange(len(kern)), syncs,
                            KernelArrays.of(context) if context is not None else None)


@dataclass(frozen=True)
class KernelArrays:
    """The columns attribute_windows reads, as NumPy arrays over a kernels frame's rows, so that many
    groups (every step, every phase) are attributed by slicing arrays instead of frames."""

    n: int
    devices: np.ndarray  # device, -1 where null
    ts: np.ndarray
    te: np.ndarray
    cls: np.ndarray  # index into PRIORITY (OTHER for an unknown class)
    issued: Any  # the issued_ns column (None: absent)
    flops: np.ndarray
    bytes: np.ndarray
    model: np.ndarray
    unmodelled: np.ndarray  # model none and bound other
    measured: np.ndarray  # source ncu

    @staticmethod
    def of(kern: pd.DataFrame) -> KernelArrays:
        n = len(kern)
        if not n:
            z = np.zeros(0)
            return KernelArrays(0, z, z.astype(np.int64), z.astype(np.int64), z.astype(np.int64), None, z, z,
                                np.zeros(0, dtype=object), z.astype(bool), z.astype(bool))
        devices = kern["device"].fillna(-1).to_numpy() if "device" in kern else np.zeros(n)
        ts = kern["ts_ns"].to_numpy(dtype=np.int64)
        te = ts + kern["dur_ns"].fillna(0).to_numpy(dtype=np.int64)
        cls = _class_index(kern["bound"])
        model = kern["model"].to_numpy()
        return KernelArrays(
            n, devices, ts, te, cls, kern.get("issued_ns"),
            kern["flops"].to_numpy(dtype=float), kern["bytes"].to_numpy(dtype=float), model,
            ((kern["model"] == MODEL_NONE) & (kern["bound"] == OTHER)).to_numpy(dtype=bool),
            (kern["source"] == SOURCE_NCU).to_numpy(dtype=bool) if "source" in kern else np.zeros(n, dtype=bool),
        )

    def issued_of(self, idx: np.ndarray) -> np.ndarray:
        """``tracekit.analysis.idle.as_issued`` of the rows ``idx`` of issued_ns, as a frame of just those
        rows would give it (a nullable integer column with a null among the rows goes through float64)."""
        col = self.issued
        if col is None:
            return np.full(len(idx), _idle.UNKNOWN, dtype=np.int64)
        lossy, na, exact = self._issued_views()
        if exact is None:
            return _idle.as_issued(col.to_numpy()[idx])
        return lossy[idx] if na[idx].any() else exact[idx]

    def _issued_views(self) -> tuple[Any, Any, Any]:
        cached = self.__dict__.get("_issued_cache")
        if cached is None:
            col = self.issued
            if isinstance(col.dtype, pd.Int64Dtype) or col.dtype == np.int64:
                na = col.isna().to_numpy()
                exact = col.fillna(_idle.UNKNOWN).to_numpy(dtype=np.int64)
                lossy = _idle.as_issued(col.to_numpy()) if na.any() else exact
                cached = (lossy, na, exact)
            else:
                cached = (None, None, None)
            object.__setattr__(self, "_issued_cache", cached)
        return cached

    def busy(self) -> np.ndarray:
        """The busy intervals of every row, on any device (disjoint, sorted), made once: work the trace
        shows anywhere (a device waiting on another device's visible work is not behind unseen work)."""
        cached = self.__dict__.get("_busy_cache")
        if cached is None:
            cached = union(self.ts, self.te)
            object.__setattr__(self, "_busy_cache", cached)
        return cached

    def attribute(self, windows: np.ndarray, idx: np.ndarray, syncs: np.ndarray | None = None,
                  context: KernelArrays | None = None) -> dict[str, Any]:
        """attribute_windows' row for the kernels at rows ``idx`` (in frame order); ``context``: the arrays
        whose device busy time counts as visible work (default: these)."""
        time_ns = int((windows[:, 1] - windows[:, 0]).sum()) if len(windows) else 0
        devices = self.devices[idx] if len(idx) else np.zeros(0)
        devs = unique(devices) if len(idx) else devices
        n_dev = max(len(devs), 1)
        total = np.zeros(len(PRIORITY) + 1, dtype=np.int64)
        syncs = EMPTY if syncs is None else syncs
        wait = before = 0
        for dev in devs if len(idx) else []:
            part = idx[devices == dev]
            ts, te = self.ts[part], self.te[part]
            total += _sweep(ts, te, self.cls[part], windows)
            issued = self.issued_of(part)
            w, b = _idle.waits_ns(windows, ts, te, issued, syncs, (context or self).busy())
            wait, before = wait + w, before + b
        if not len(idx):
            none = np.zeros(0, dtype=np.int64)
            wait = _idle.wait_ns(windows, none, none, none, syncs)
        busy = int(total[: len(PRIORITY)].sum())
        row: dict[str, Any] = {c: int(total[i]) for i, c in enumerate(TIME_COLUMNS[p] for p in PRIORITY)}
        # idle is what the sweep left: the windows (× devices) minus the union of activity in them
        row["idle_ns"] = time_ns * n_dev - busy
        row["idle_profiler_ns"] = None
        waited = int(min(wait, row["idle_ns"]))
        row["idle_before_window_ns"] = int(min(before, waited))
        row["idle_wait_ns"] = waited - row["idle_before_window_ns"]
        row["idle_host_ns"] = row["idle_ns"] - waited
        row["time_ns"] = time_ns
        row["gpu_busy_ns"] = busy
        row["flops"] = _nansum(self.flops[idx]) if len(idx) else 0.0
        row["bytes"] = _nansum(self.bytes[idx]) if len(idx) else 0.0
        model = self.model[idx]
        row["kernels_modelled"] = int((model == MODEL_SHAPE).sum())
        row["kernels_class_only"] = int((model == MODEL_CLASS).sum())
        row["kernels_unmodelled"] = int(self.unmodelled[idx].sum()) if len(idx) else 0
        row["kernels_measured"] = int(self.measured[idx].sum()) if len(idx) else 0
        return row


def _nansum(values: np.ndarray) -> float:
    """``float(pd.Series(values).sum())``: NaN skipped, the same summation."""
    mask = np.isnan(values)
    if mask.any():
        values = values.copy()
        values[mask] = 0.0
    return float(values.sum())


def with_profiler(row: dict[str, Any], profiler_ns: int | None) -> dict[str, Any]:
    """``row`` with the profiler's part moved out of idle_host_ns (None: unknown, left null)."""
    if profiler_ns is None:
        return row
    p = int(min(max(profiler_ns, 0), row["idle_host_ns"]))
    return {**row, "idle_profiler_ns": p, "idle_host_ns": row["idle_host_ns"] - p}


_CLASS_INDEX = {c: i for i, c in enumerate(PRIORITY)}


def _class_index(bound: pd.Series) -> np.ndarray:
    """``bound.map(_CLASS_INDEX).fillna(OTHER's index)`` as int64, looked up once per distinct value."""
    codes, uniq = factorize(bound)
    other = _CLASS_INDEX[OTHER]
    table = np.array([_CLASS_INDEX.get(u, other) for u in uniq] + [other], dtype=np.int64)
    return table[np.where(codes < 0, len(uniq), codes)]


def attribute_steps(steps: pd.DataFrame, kernels: pd.DataFrame, syncs: np.ndarray | None = None,
                    overheads: Mapping[str, tuple[float, float]] | None = None, *,
                    arrays: KernelArrays | None = None) -> pd.DataFrame:
    """Per step: time_ns split into TIME_COLUMNS (they sum to time_ns × devices, exactly), FLOPs, bytes.

    ``kernels``: ``with_steps``' output (a step_id column). Only the step's own
    kernels count, clipped to its window. ``overheads``: tracekit.analysis.idle.overheads' result
    (None: idle_profiler_ns stays null). ``arrays``: ``KernelArrays.of(kernels)`` where the caller has it.
    """
    w = step_windows(steps)
    k = kernels if "step_id" in kernels else with_steps(kernels, steps)
    arrays = arrays if arrays is not None and "step_id" in kernels else KernelArrays.of(k)
    by_step, _ = _rows_by_step(k)
    none = np.zeros(0, dtype=np.int64)
    rows = []
    for r in w.itertuples(index=False):
        win = np.array([[r.start_ns, r.end_ns]], dtype=np.int64)
        row = arrays.attribute(win, by_step.get(r.step_id, none), syncs)
        kind = str(getattr(r, "kind", ""))
        rows.append(with_profiler(row, _idle.profiler_share_ns(kind, row["time_ns"], row["idle_host_ns"], overheads)))
    attr = pd.DataFrame(rows, index=w.index)
    if "idle_profiler_ns" in attr:
        attr["idle_profiler_ns"] = pd.to_numeric(attr["idle_profiler_ns"], errors="coerce").astype("Int64")
    return pd.concat([w.drop(columns=[c for c in attr.columns if c in w.columns]), attr], axis=1)


def attribute_phases(
    steps: pd.DataFrame,
    kernels: pd.DataFrame,
    ceiling: Ceiling | None,
    phases: pd.DataFrame | None = None,
    syncs: np.ndarray | None = None,
    step_attr: pd.DataFrame | None = None,
    *,
    arrays: KernelArrays | None = None,
) -> pd.DataFrame:
    """Bound columns per (request, phase) and per (run, phase) (request_id null).

    time_ns is the union of the phase's step windows (the phases pass's definition);
    the phase's kernels are those of its steps. Then, exactly,
    compute_bound_ns + memory_bound_ns + latency_bound_ns + other_ns + comm_ns + memcpy_ns + idle_ns
    == time_ns × devices (one device: == time_ns), and idle_profiler_ns + idle_host_ns + idle_wait_ns
    + idle_before_window_ns == idle_ns (idle_profiler_ns: the sum of its steps' from ``step_attr``, null if any is null).
    achieved_* are over gpu_busy_ns (the GPU's working time), achieved_*_wall over time_ns; % of
    ceiling is on the busy-time rate, against the tensor-core peak of the phase's
    dominant GEMM dtype and the DRAM bandwidth peak.

    With ``phases`` (the phases pass's table) its rows are kept and matched on
    (request_id, phase); rows that match no step (``outside``) keep nulls in
    the columns this pass adds; the columns it computes replace theirs. ``arrays``:
    ``KernelArrays.of(kernels)`` where the caller has it.
    """
    prof: pd.Series | None = None
    if step_attr is not None and len(step_attr) and "idle_profiler_ns" in step_attr:
        prof = pd.Series(pd.to_numeric(step_attr["idle_profiler_ns"], errors="coerce").to_numpy(dtype=float),
                         index=step_attr["step_id"].to_numpy())
    w = step_windows(steps)
    k = kernels if "step_id" in kernels else with_steps(kernels, steps)
    arrays = arrays if arrays is not None and "step_id" in kernels else KernelArrays.of(k)
    by_step, outside = _rows_by_step(k)
    dominant_of = _dominant_dtype_of(k[[c for c in ("model", "kclass", "dtype", "flops") if c in k]])
    groups: list[tuple[Any, str, pd.DataFrame]] = []
    for phase, g in w.groupby(w["kind"].astype(str), sort=False):
        groups.append((pd.NA, str(phase), g))
        if "request_id" in g:
            for rid, gr in g.dropna(subset=["request_id"]).groupby("request_id", sort=True):
                groups.append((int(rid), str(phase), gr))  # type: ignore[arg-type]
    rows = []
    for rid, phase, g in groups:
        idx = _rows_of_steps(g["step_id"], by_step, outside)
        win = window_union(g)
        row = {"request_id": rid, "phase": phase, "steps": len(g), **arrays.attribute(win, idx, syncs)}
        if prof is not None:
            vals = prof.reindex(g["step_id"].to_numpy())
            row = with_profiler(row, None if vals.isna().any() or not len(vals) else int(vals.sum()))
        if "tokens" in g:
            row["tokens"] = float(pd.to_numeric(g["tokens"], errors="coerce").sum())
        row["ceiling_dtype"] = dominant_of(idx)
        rows.append(row)
    out = pd.DataFrame(rows)
    if len(out):
        out["request_id"] = out["request_id"].astype("Int64")
        out["idle_profiler_ns"] = pd.to_numeric(out["idle_profiler_ns"], errors="coerce").astype("Int64")
        peak_f = out["ceiling_dtype"].map(
            lambda d: (ceiling.flops(d) or ceiling.flops("fp32") or np.nan) if ceiling is not None else np.nan)
        busy = out["gpu_busy_ns"].astype(float).where(out["gpu_busy_ns"] > 0)
        wall = out["time_ns"].astype(float).where(out["time_ns"] > 0)
        out["achieved_tflops"] = out["flops"] / busy / 1e3  # FLOP/ns / 1e3 = TFLOP/s
        out["achieved_tbps"] = out["bytes"] / busy / 1e3
        out["achieved_tflops_wall"] = out["flops"] / wall / 1e3
        out["achieved_tbps_wall"] = out["bytes"] / wall / 1e3
        out["pct_peak_flops"] = 100.0 * out["achieved_tflops"] * 1e12 / peak_f.astype(float)
        peak_b = ceiling.peak_bytes_per_s if ceiling is not None else np.nan
        out["pct_peak_bandwidth"] = 100.0 * out["achieved_tbps"] * 1e12 / peak_b
        out["ceiling"] = f"{ceiling.gpu} ({ceiling.kind})" if ceiling is not None else None
    if phases is None or len(phases) == 0:
        return out
    base = phases.copy()
    if not len(out):
        return base
    key = ["request_id", "phase"]
    base["_q"] = pd.to_numeric(base["request_id"], errors="coerce").fillna(-1).astype("int64")
    base["_p"] = base["phase"].astype(str)
    ours = out.copy()
    ours["_q"] = pd.to_numeric(ours["request_id"], errors="coerce").fillna(-1).astype("int64")
    ours["_p"] = ours["phase"].astype(str)
    ours = ours.drop(columns=[*key, "steps"])
    replaced = [c for c in ours.columns if c in base.columns and c not in ("_q", "_p")]
    merged = base.drop(columns=replaced).merge(ours, on=["_q", "_p"], how="left")
    return merged.drop(columns=["_q", "_p"])


def _rows_by_step(k: pd.DataFrame) -> tuple[dict[Any, np.ndarray], np.ndarray]:
    """({step_id: positions of its kernels, in frame order}, positions of kernels with no step)."""
    if not len(k):
        return {}, np.zeros(0, dtype=np.int64)
    sid = pd.to_numeric(k["step_id"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    none = np.isnan(sid)
    pos = np.flatnonzero(~none)
    order = np.argsort(sid[pos], kind="stable")
    pos, keys = pos[order], sid[pos][order]
    if not len(keys):
        return {}, np.flatnonzero(none)
    cuts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return dict(zip(keys[cuts].tolist(), np.split(pos, cuts[1:]), strict=True)), np.flatnonzero(none)


def _rows_of_steps(step_ids: pd.Series, by_step: dict[Any, np.ndarray], outside: np.ndarray) -> np.ndarray:
    """Positions (frame order) of the kernels whose step_id is one of ``step_ids`` (a null one: the
    kernels with none), as ``kernels[step_id.isin(step_ids)]``."""
    ids = pd.to_numeric(step_ids, errors="coerce")
    parts = [by_step[v] for v in pd.unique(ids.dropna().to_numpy(dtype=float)).tolist() if v in by_step]
    if ids.isna().any():
        parts.append(outside)
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


def _dominant_dtype_of(kern: pd.DataFrame) -> Any:
    """For the rows ``idx`` of ``kern`` (a group's kernels): the dtype with the most tensor-core FLOPs
    (GEMM / attention) among its modelled kernels, else among all its modelled ones; fp16 if none. The
    row tests are made once over all of ``kern``; a group's rows are then picked by position."""
    if "dtype" not in kern:
        return lambda idx: "fp16"
    shaped = (kern["model"] == MODEL_SHAPE) & kern["dtype"].notna()
    tensor = (shaped & kern["kclass"].isin([kc.GEMM, kc.ATTENTION])).to_numpy(dtype=bool)
    shaped_a = shaped.to_numpy(dtype=bool)

    def of(idx: np.ndarray) -> str:
        sel = idx[tensor[idx]]
        if not len(sel):
            sel = idx[shaped_a[idx]]
        if not len(sel):
            return "fp16"
        return str(kern.iloc[sel].groupby("dtype")["flops"].sum().idxmax())

    return of


def bound_tables(
    gpu_activity: pd.DataFrame,
    cpu_ops: pd.DataFrame,
    steps: pd.DataFrame,
    ceiling: Ceiling | None,
    phases: pd.DataFrame | None = None,
    kernel_steps: pd.DataFrame | None = None,
    options: BoundOptions | None = None,
    runtime: pd.DataFrame | None = None,
    counters: pd.DataFrame | None = None,
    manifest: Mapping[str, Any] | None = None,
    peaks: Ceiling | None = None,
) -> dict[str, Any]:
    """The whole attribution in one call: {"kernels", "step_bound", "phases", "counters_report", "arrays"}
    (``arrays``: KernelArrays.of(kernels), for more groups attributed over the same kernels).

    ``runtime`` (the runtime table) gives each kernel's issue time and the host's blocking calls for
    the idle split; ``counters`` (ncu_counters) the measured classes; ``manifest`` (run.json) the
    profiled and unprofiled timings for idle_profiler_ns. Without a ceiling, only kernels the
    counters measured, communication, copies and the name-class size rule are classified; modelled
    kernels stay ``other``.
    """
    # Serving attention (paged / varlen) is costed per step, from the sequences the step states.
    gpu_activity, cpu_ops = serving_attention_ops(gpu_activity, cpu_ops, steps, kernel_steps)
    # vLLM's MoE layer op does not carry its experts' weights: top_k, N and their format come from its calls.
    gpu_activity, cpu_ops = moe_forward_ops(gpu_activity, cpu_ops)
    kernels = with_steps(kernel_costs(gpu_activity, cpu_ops, ceiling, options, peaks), steps, kernel_steps)
    if len(kernels):
        kernels["issued_ns"] = _idle.issued_ns(gpu_activity.reset_index(drop=True), runtime)
    if len(kernels) and len(steps):
        kind = dict(zip(steps["step_id"], steps["kind"].astype(str), strict=True))
        kernels["phase"] = pd.to_numeric(kernels["step_id"], errors="coerce").map(kind)
    kernels, report = apply_counters(kernels, counters, options)
    syncs = _idle.sync_intervals(runtime)
    arrays = KernelArrays.of(kernels)
    step_attr = attribute_steps(steps, kernels, syncs, _idle.overheads(manifest), arrays=arrays)
    return {
        "kernels": kernels,
        "step_bound": step_attr,
        "phases": attribute_phases(steps, kernels, ceiling, phases, syncs, step_attr, arrays=arrays),
        "counters_report": report,
        "arrays": arrays,
    }


# --- the pipeline pass ---------------------------------------------------------


def _has_shapes(cpu_ops: pd.DataFrame) -> bool:
    if cpu_ops is None or not len(cpu_ops) or "input_dims" not in cpu_ops:
        return False
    dims = cpu_ops["input_dims"].dropna().astype(str)
    return bool((~dims.isin(["", "[]", "null"])).any())


def captured_steps(steps: Any) -> Any:
    """Only the steps with kernel capture: a step outside the trace's capture window has no GPU
    timeline, and its window must not count as idle (``steps`` itself where every step has it)."""
    if "captured" in getattr(steps, "columns", ()) and not steps["captured"].all():
        return steps[steps["captured"]].reset_index(drop=True)
    return steps


def bound_pass(
    gpu_activity: Any, cpu_ops: Any, steps: Any, kernel_steps: Any, phases: Any, runtime: Any,
    ncu_counters: Any, *, ceilings: Ceilings, manifest: Mapping[str, Any], span: tuple[int, int] | None,
    options: BoundOptions | None = None,
) -> dict[str, Any]:
    """The bound pass over the captured steps: the phases' bound columns filled, kernel_bound and
    step_bound added, and the run-level ``outside`` row (outside every step window) classed by the same
    sweep. Returns {"phases", "kernel_bound", "step_bound", "warnings"} (those made).

    ``ceilings`` (decided by the caller) rate and class the kernels; Nsight Compute's counters
    (``ncu_counters``), where measured, decide the classes of what they measured. Without a ceiling,
    kernels keep their FLOPs and bytes and the phases their sums and rates, but the compute / memory /
    latency / other split is unknown (null), not zero. ``span``: the trace's [first, last) ns.
    """
    from tracekit.analysis.frames import as_df

    view = captured_steps(steps)
    phases = as_df(phases) if phases is not None else None
    out = _classes(gpu_activity, cpu_ops, view, kernel_steps, phases, runtime, ncu_counters, ceilings, manifest,
                   options)
    if "kernel_bound" in out:
        return _outside_row(phases, as_df(view), out, span)
    out = _outside_row(phases, as_df(view), {**_unclassed(gpu_activity, cpu_ops, view, kernel_steps, phases),
                                             "warnings": out.get("warnings", [])}, span)
    out.pop(ARRAYS, None)
    split = [TIME_COLUMNS[c] for c in (COMPUTE, MEMORY, LATENCY, OTHER)]
    for name in ("phases", "step_bound"):
        frame = out.get(name)
        if frame is not None:
            frame = frame.copy()
            for c in split:
                if c in frame:
                    frame[c] = pd.array([pd.NA] * len(frame), dtype="Int64")
            out[name] = frame
    return out


def _classes(gpu_activity: Any, cpu_ops: Any, steps: Any, kernel_steps: Any, phases: Any, runtime: Any,
             ncu_counters: Any, ceilings: Ceilings, manifest: Mapping[str, Any],
             options: BoundOptions | None) -> dict[str, Any]:
    """The classes where a ceiling or counters decide them ({} for a CPU-only trace; only warnings where
    neither is there)."""
    from tracekit.analysis.frames import as_df

    gpu, cpu, steps = as_df(gpu_activity), as_df(cpu_ops), as_df(steps)
    if gpu.empty:
        return {}  # a CPU-only trace: there is no GPU time to split
    counters = as_df(ncu_counters) if ncu_counters is not None else None
    counters = counters if counters is not None and len(counters) else None
    ceiling = ceilings.ceiling
    warnings: list[str] = []
    if ceiling is None:
        name = gpu_name(manifest)
        line = (f"bound: no ceiling for GPU {name!r}; run `tracekit calibrate` on it "
                "(compute/memory-bound columns left empty)")
        if counters is None:
            return {"warnings": [line]}
        warnings.append(line.replace("left empty", "only from counters"))
    ks = as_df(kernel_steps) if kernel_steps is not None else None
    ph_in = as_df(phases) if phases is not None else None
    rt = as_df(runtime) if runtime is not None else None
    out = bound_tables(gpu, cpu, steps, ceiling, phases=ph_in, kernel_steps=ks, runtime=rt,
                       counters=counters, manifest=manifest, options=options, peaks=ceilings.peaks)
    ph = out["phases"].drop(columns=["tokens"], errors="ignore")
    ph["advice"] = ([_advice.advice(r) if str(r.get("phase")) != "outside" else None for r in ph.to_dict("records")]
                    if len(ph) else pd.Series(dtype=object))
    k = out["kernels"]
    n_other = int((k["bound"] == OTHER).sum())
    if len(k) and n_other:
        warnings.append(f"bound: {n_other} of {len(k)} GPU activities have no model (counted as other_ns)")
    if len(k) and not _has_shapes(cpu):
        warnings.append("bound: the trace has no op shapes (record with record_shapes=True): kernels are classed by "
                        "name only (elementwise, reduction and copy kernels by the size rule) or other; "
                        "`tracekit counters` measures them instead")
    if out["counters_report"] is not None:
        warnings += out["counters_report"].lines()
    if _idle.overheads(manifest) is None:
        warnings.append("bound: no unprofiled timing pass in run.json: idle_profiler_ns left null "
                        "(the profiler's share of the idle time is unknown)")
    return {"phases": ph, "kernel_bound": k, "step_bound": out["step_bound"], "warnings": warnings,
            ARRAYS: out["arrays"]}


def _unclassed(gpu_activity: Any, cpu_ops: Any, steps: Any, kernel_steps: Any, phases: Any) -> dict[str, Any]:
    """Where the GPU has no ceiling: every kernel's FLOPs and bytes, the phases' sums and rates all the
    same; a ceiling only decides the compute/memory classes, so compute_bound_ns, memory_bound_ns and
    other_ns stay null. Nothing if there is no GPU time to split."""
    from tracekit.analysis.frames import as_df

    gpu, cpu, st = as_df(gpu_activity), as_df(cpu_ops), as_df(steps)
    if gpu.empty:
        return {}
    ks = as_df(kernel_steps) if kernel_steps is not None else None
    ph = as_df(phases) if phases is not None else None
    out = bound_tables(gpu, cpu, st, None, phases=ph, kernel_steps=ks)
    return {"phases": out["phases"].drop(columns=["tokens"], errors="ignore"), "kernel_bound": out["kernels"],
            "step_bound": out["step_bound"], ARRAYS: out["arrays"]}


def _outside_row(before: Any, steps: pd.DataFrame, out: dict[str, Any], span: tuple[int, int] | None
                 ) -> dict[str, Any]:
    """The run-level ``outside`` row, which the step attribution cannot match to steps: its time
    classes by the same sweep, over the trace span outside every (captured) step window, with the
    activities outside every step; the other columns from the phases pass (``before``). A trace with
    no steps is all outside: the row covers the whole trace."""
    from tracekit.analysis.frames import as_df

    arrays = out.get(ARRAYS)
    out = {n: v for n, v in out.items() if n != ARRAYS}
    after, kern = out.get("phases"), out.get("kernel_bound")
    if before is None:
        return out
    if after is None or not len(after):  # no steps: the outside row is the whole trace
        after = as_df(before)
    mask = (after["phase"] == "outside").to_numpy()
    b = before[before["phase"] == "outside"]
    if not mask.any() or b.empty:
        return out
    after = after.copy()
    for c in b.columns:
        if c in after.columns and c != "phase":
            after.loc[mask, c] = after.loc[mask, c].where(after.loc[mask, c].notna(), b[c].to_numpy()[0])
    if span is not None and kern is not None:
        w = step_windows(steps) if len(steps) else None
        inside = window_union(w) if w is not None and len(w) else EMPTY
        windows = complement(inside, *span)
        arrays = arrays if arrays is not None and arrays.n == len(kern) else KernelArrays.of(kern)
        none = np.flatnonzero(pd.to_numeric(kern["step_id"], errors="coerce").isna().to_numpy()) if len(kern) else (
            np.zeros(0, dtype=np.int64))
        row = arrays.attribute(windows, none, None, arrays)
        for c in (*TIME_COLUMNS.values(), *IDLE_COLUMNS, "gpu_busy_ns", "time_ns"):
            if c in after.columns or not len(steps):  # no steps: the phases pass made no bound columns
                after.loc[mask, c] = row[c]
    return {**out, "phases": after}
