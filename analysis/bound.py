"""Compute-bound, memory-bound or host-bound: per kernel, then per step and phase.

Three pure functions, each DataFrame in, new DataFrame out (inputs never mutated):

- ``kernel_costs(gpu_activity, cpu_ops, ceiling)``: each GPU activity gets FLOPs and
  bytes from the op that launched it (opmodels), its kernel-name class (kernels),
  and a bound: compute | memory | other | comm | memcpy.
- ``attribute_steps(steps, kernels)``: interval arithmetic on the GPU timeline inside
  each step's window: compute_bound_ns + memory_bound_ns + other_ns + comm_ns +
  memcpy_ns + idle_ns == time_ns exactly (integers).
- ``attribute_phases(step_attr, kernels, ceiling, phases=None)``: the same sums per
  (request, phase) and per (run, phase), plus FLOPs, bytes, achieved rates and % of ceiling.

Method and conventions: docs/roofline.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from tracekit.analysis import kernels as kc
from tracekit.analysis.opmodels import op_costs

from tracekit.ceilings import Ceiling

# Time classes in priority order: where kernels of several streams overlap, the
# instant counts once, for the first class active (TraceLens' order: computation
# before communication before memcpy; compute-bound before memory-bound because a
# compute-bound kernel hides a concurrent memory-bound one, not the reverse).
COMPUTE, MEMORY, OTHER, COMM, MEMCPY, IDLE = "compute", "memory", "other", "comm", "memcpy", "idle"
PRIORITY = (COMPUTE, MEMORY, OTHER, COMM, MEMCPY)
TIME_COLUMNS = {
    COMPUTE: "compute_bound_ns",
    MEMORY: "memory_bound_ns",
    OTHER: "other_ns",
    COMM: "comm_ns",
    MEMCPY: "memcpy_ns",
    IDLE: "idle_ns",
}

MODEL_SHAPE = "shape"  # FLOPs/bytes from the launching op's input shapes
MODEL_CLASS = "kernel_class"  # bound from the kernel's name class only (no FLOPs/bytes)
MODEL_NONE = "none"


@dataclass(frozen=True)
class BoundOptions:
    # Elementwise / reduction / copy kernels without shapes are memory-bound on
    # every GPU in the ceilings table (their intensity is < 2 FLOP/byte, ridges
    # are > 8): classify them so, as "kernel_class"-modelled. False: "other".
    class_fallback_memory: bool = True
    assume_causal: bool = True  # see opmodels: profiler shapes do not carry is_causal
    max_parent_depth: int = 64


def _empty_kernels(gpu_activity: pd.DataFrame) -> pd.DataFrame:
    out = gpu_activity.iloc[0:0].copy()
    for c, dt in [
        ("kclass", object), ("model", object), ("op_name", object), ("flops", float), ("bytes", float),
        ("dtype", object), ("intensity", float), ("ridge", float), ("bound", object),
    ]:
        out[c] = pd.Series(dtype=dt)
    return out


def _modelled_op_for(
    kernel_ops: np.ndarray, parents: Mapping[int, int], modelled: set[int], depth: int
) -> dict[int, int]:
    """kernel op_id -> op_id whose model covers it: itself, else its nearest modelled ancestor.

    An ancestor is used only if none of its descendants that launch kernels is
    modelled itself (else its cost would be counted twice, e.g. the math path of
    SDPA whose bmm and softmax kernels are modelled on their own).
    """
    direct = {int(o) for o in kernel_ops if int(o) in modelled}
    covered: set[int] = set()  # ancestors of directly modelled ops
    for o in direct:
        p = parents.get(o)
        for _ in range(depth):
            if p is None or p in covered:
                break
            covered.add(p)
            p = parents.get(p)
    result: dict[int, int] = {o: o for o in direct}
    for o in {int(x) for x in kernel_ops} - direct:
        p = parents.get(o)
        for _ in range(depth):
            if p is None:
                break
            if p in modelled:
                if p not in covered:
                    result[o] = p
                break
            p = parents.get(p)
    return result


def kernel_costs(
    gpu_activity: pd.DataFrame, cpu_ops: pd.DataFrame, ceiling: Ceiling, options: BoundOptions | None = None
) -> pd.DataFrame:
    """gpu_activity plus kclass, model, op_name, flops, bytes, dtype, intensity, ridge, bound.

    If one op launches several kernels, the op's FLOPs and bytes are split across
    them in proportion to their durations (evenly if all durations are 0).
    """
    opts = options or BoundOptions()
    if gpu_activity is None or len(gpu_activity) == 0:
        return _empty_kernels(gpu_activity if gpu_activity is not None else pd.DataFrame())
    k = gpu_activity.copy().reset_index(drop=True)
    kinds = k["kind"].astype(str) if "kind" in k else pd.Series(["kernel"] * len(k))
    k["kclass"] = kc.kernel_classes(k["name"], kinds).to_numpy()
    k["model"] = MODEL_NONE
    k["op_name"] = None
    k["flops"] = 0.0
    k["bytes"] = 0.0
    k["dtype"] = None
    is_kernel = (kinds == "kernel").to_numpy()

    costs = op_costs(cpu_ops, assume_causal=opts.assume_causal) if cpu_ops is not None else None
    op_ids = (
        pd.to_numeric(k["op_id"], errors="coerce") if "op_id" in k.columns else pd.Series(np.nan, index=k.index)
    )
    if costs is not None and len(costs) and op_ids.notna().any():
        costs = costs.drop_duplicates("op_id").set_index("op_id")
        parents: dict[int, int] = {}
        if "parent_id" in cpu_ops:
            par = cpu_ops[["op_id", "parent_id"]].dropna()
            parents = dict(zip(par["op_id"].astype("int64"), par["parent_id"].astype("int64"), strict=True))
        linked = is_kernel & op_ids.notna().to_numpy()
        kops = op_ids[linked].astype("int64").to_numpy()
        mapping = _modelled_op_for(np.unique(kops), parents, set(costs.index.astype("int64")), opts.max_parent_depth)
        if mapping:
            mop = pd.Series(np.nan, index=k.index)
            mop[linked] = np.array([mapping.get(int(o), np.nan) for o in kops], dtype=float)
            has = mop.notna()
            mo = mop[has].astype("int64")
            dur = k.loc[has, "dur_ns"].astype(float).clip(lower=0)
            tot = dur.groupby(mo.to_numpy()).transform("sum")
            cnt = dur.groupby(mo.to_numpy()).transform("count")
            share = np.where(tot > 0, dur / tot.where(tot > 0, 1.0), 1.0 / cnt)
            c = costs.loc[mo.to_numpy()]
            k.loc[has, "flops"] = c["flops"].to_numpy(dtype=float) * share
            k.loc[has, "bytes"] = c["bytes"].to_numpy(dtype=float) * share
            k.loc[has, "dtype"] = c["dtype"].to_numpy()
            k.loc[has, "op_name"] = c["op_name"].to_numpy()
            k.loc[has, "model"] = MODEL_SHAPE
            k.loc[has, "_tensor"] = c["tensor_core"].to_numpy(dtype=bool)

    tensor = k["_tensor"].fillna(False).astype(bool) if "_tensor" in k else pd.Series(False, index=k.index)
    ridge_vec = ceiling.ridge_point("fp32") or np.nan
    ridges = {d: ceiling.ridge_point(d) for d in {str(x) for x in k["dtype"].dropna().unique()}}
    # A dtype with no tensor rate on this GPU (bf16 on a T4) is compared with the fp16 then fp32 peak.
    tensor_ridge = k["dtype"].map(
        lambda d: ridges.get(str(d)) or ceiling.ridge_point("fp16") or ridge_vec if d is not None else np.nan
    )
    k["ridge"] = np.where(tensor.to_numpy(), tensor_ridge.astype(float), ridge_vec)
    with np.errstate(divide="ignore", invalid="ignore"):
        k["intensity"] = np.where(k["bytes"] > 0, k["flops"] / k["bytes"].where(k["bytes"] > 0, 1.0), np.nan)

    bound = np.full(len(k), OTHER, dtype=object)
    shape = (k["model"] == MODEL_SHAPE).to_numpy()
    bound[shape] = np.where(k.loc[shape, "intensity"].to_numpy() >= k.loc[shape, "ridge"].to_numpy(), COMPUTE, MEMORY)
    if opts.class_fallback_memory:
        fb = ~shape & is_kernel & k["kclass"].isin([kc.ELEMENTWISE, kc.REDUCTION, kc.COPY]).to_numpy()
        bound[fb] = MEMORY
        k.loc[fb, "model"] = MODEL_CLASS
    bound[(k["kclass"] == kc.COMMUNICATION).to_numpy()] = COMM
    memcpy = kinds.isin(["memcpy", "memset"]).to_numpy()
    bound[memcpy] = MEMCPY
    if "bytes" in gpu_activity:
        # memcpy/memset bytes are in the trace: a DtoD copy reads and writes them.
        raw = pd.to_numeric(gpu_activity["bytes"], errors="coerce").fillna(0).to_numpy(dtype=float)
        mk = k["memcpy_kind"].astype(str).to_numpy() if "memcpy_kind" in k else np.array([""] * len(k))
        factor = np.where(np.char.find(mk.astype(str), "DtoD") >= 0, 2.0, 1.0)
        k.loc[memcpy, "bytes"] = (raw * factor)[memcpy]
    k["bound"] = bound
    return k.drop(columns=["_tensor"], errors="ignore")


# --- time attribution --------------------------------------------------------


def step_windows(steps: pd.DataFrame) -> pd.DataFrame:
    """Each step's wall window: [min(cpu, gpu start), max(cpu, gpu end)), clipped to the next step's start.

    Host-bound time is the GPU idle inside these windows, so a window opens when
    the host starts the forward pass, not at its first kernel. Steps run one after
    another on one rank; where a step's GPU tail overlaps the next step's CPU
    start, the overlap belongs to the next step (each instant counts once).
    """
    s = steps.copy()
    start = pd.concat([s.get("cpu_start_ns"), s.get("gpu_start_ns")], axis=1).min(axis=1)
    end = pd.concat([s.get("cpu_end_ns"), s.get("gpu_end_ns")], axis=1).max(axis=1)
    s["start_ns"] = start
    s["end_ns"] = end
    s = s[s["start_ns"].notna() & s["end_ns"].notna()].copy()
    s["start_ns"] = s["start_ns"].astype("int64")
    s["end_ns"] = s["end_ns"].astype("int64")
    if "rank" not in s:
        s["rank"] = 0
    s["rank"] = s["rank"].fillna(0).astype("int64")
    s = s.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)
    nxt = s.groupby("rank")["start_ns"].shift(-1)
    s["end_ns"] = np.where(nxt.notna(), np.minimum(s["end_ns"], nxt.fillna(0).astype("int64")), s["end_ns"])
    s["end_ns"] = np.maximum(s["end_ns"], s["start_ns"])
    s["time_ns"] = s["end_ns"] - s["start_ns"]
    return s


def _sweep(starts: np.ndarray, ends: np.ndarray, cls: np.ndarray, w_start: np.ndarray, w_end: np.ndarray) -> np.ndarray:
    """ns per (window, class) by a sweep over all interval boundaries: shape (n_windows, len(PRIORITY) + 1)."""
    nc = len(PRIORITY)
    out = np.zeros((len(w_start), nc + 1), dtype=np.int64)
    if len(w_start) == 0:
        return out
    keep = ends > starts
    starts, ends, cls = starts[keep], ends[keep], cls[keep]
    t = np.concatenate([starts, ends, w_start, w_end]).astype(np.int64)
    delta = np.zeros((len(t), nc), dtype=np.int64)
    n = len(starts)
    delta[np.arange(n), cls] = 1
    delta[n + np.arange(n), cls] = -1
    order = np.argsort(t, kind="stable")
    t, delta = t[order], delta[order]
    state = np.cumsum(delta, axis=0)
    # the state after all events at the same instant
    last = np.r_[t[1:] != t[:-1], True]
    ut, ustate = t[last], state[last]
    seg_len = np.diff(ut)
    seg_state = ustate[:-1]
    active = seg_state > 0
    top = np.where(active.any(axis=1), active.argmax(axis=1), nc)
    seg_start = ut[:-1]
    w = np.searchsorted(w_start, seg_start, side="right") - 1
    inside = (w >= 0) & (seg_start < w_end[np.clip(w, 0, None)])
    np.add.at(out, (w[inside], top[inside]), seg_len[inside])
    return out


def attribute_steps(steps: pd.DataFrame, kernels: pd.DataFrame) -> pd.DataFrame:
    """Per step: time_ns split into the classes of TIME_COLUMNS (sum exact), busy time, FLOPs and bytes.

    ``kernels`` is ``kernel_costs``' output. FLOPs/bytes of a kernel go to the step
    in its ``step_id`` column when there is one, else to the window its start falls in.
    """
    w = step_windows(steps)
    cols = [*TIME_COLUMNS.values(), "gpu_busy_ns"]
    parts = []
    for rank, ws in w.groupby("rank", sort=True):
        ws = ws.reset_index(drop=True)
        kr = kernels
        if "rank" in kernels and kernels["rank"].notna().any():
            kr = kernels[kernels["rank"].fillna(0).astype("int64") == rank]
        ts = kr["ts_ns"].to_numpy(dtype=np.int64) if len(kr) else np.zeros(0, np.int64)
        te = ts + (kr["dur_ns"].fillna(0).to_numpy(dtype=np.int64) if len(kr) else 0)
        cls_idx = kr["bound"].map({c: i for i, c in enumerate(PRIORITY)}).fillna(PRIORITY.index(OTHER))
        m = _sweep(ts, te, cls_idx.to_numpy(dtype=np.int64), ws["start_ns"].to_numpy(), ws["end_ns"].to_numpy())
        for i, c in enumerate([*PRIORITY, IDLE]):
            ws[TIME_COLUMNS[c]] = m[:, i]
        ws["gpu_busy_ns"] = m[:, : len(PRIORITY)].sum(axis=1)
        # work: by step_id if the timeline pass assigned one, else by start time
        if "step_id" in kr and kr["step_id"].notna().any():
            sid = pd.to_numeric(kr["step_id"], errors="coerce")
        else:
            idx = np.searchsorted(ws["start_ns"].to_numpy(), ts, side="right") - 1
            ok = (idx >= 0) & (ts < ws["end_ns"].to_numpy()[np.clip(idx, 0, None)])
            sid = pd.Series(np.where(ok, ws["step_id"].to_numpy()[np.clip(idx, 0, None)], np.nan), index=kr.index)
        flags = kr.assign(
            _sid=sid.to_numpy(),
            kernels_modelled=(kr["model"] == MODEL_SHAPE).astype("int64"),
            kernels_class_only=(kr["model"] == MODEL_CLASS).astype("int64"),
            kernels_unmodelled=((kr["model"] == MODEL_NONE) & (kr["bound"] == OTHER)).astype("int64"),
        )
        work = (
            flags.dropna(subset=["_sid"])
            .groupby("_sid")[["flops", "bytes", "kernels_modelled", "kernels_class_only", "kernels_unmodelled"]]
            .sum()
        )
        ws = ws.merge(work, left_on="step_id", right_index=True, how="left")
        parts.append(ws)
    out = pd.concat(parts, ignore_index=True) if parts else w.assign(**{c: pd.Series(dtype="int64") for c in cols})
    for c in ["flops", "bytes"]:
        out[c] = out.get(c, pd.Series(np.nan, index=out.index)).fillna(0.0)
    for c in ["kernels_modelled", "kernels_class_only", "kernels_unmodelled"]:
        out[c] = out.get(c, pd.Series(0, index=out.index)).fillna(0).astype("int64")
    return out


def _phase_rows(step_attr: pd.DataFrame) -> pd.DataFrame:
    sa = step_attr.copy()
    sa["phase"] = sa["kind"].astype(str)
    sum_cols = [*TIME_COLUMNS.values(), "gpu_busy_ns", "time_ns", "flops", "bytes",
                "kernels_modelled", "kernels_class_only", "kernels_unmodelled"]
    has_tokens = "tokens" in sa
    if has_tokens:
        sa["tokens"] = pd.to_numeric(sa["tokens"], errors="coerce")
        sum_cols.append("tokens")
    per_req = sa.dropna(subset=["request_id"]).groupby(["rank", "request_id", "phase"], as_index=False)
    req = per_req[sum_cols].sum(min_count=1)
    req["steps"] = per_req.size()["size"].to_numpy()
    run = sa.groupby(["rank", "phase"], as_index=False)
    runs = run[sum_cols].sum(min_count=1)
    runs["steps"] = run.size()["size"].to_numpy()
    runs["request_id"] = pd.NA
    return pd.concat([runs, req], ignore_index=True)


def attribute_phases(
    step_attr: pd.DataFrame,
    kernels: pd.DataFrame,
    ceiling: Ceiling,
    phases: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """phases rows (per run and per request, per phase kind) with the bound columns filled.

    time_ns is the sum of the step windows (``step_windows``); the identity
    compute_bound_ns + memory_bound_ns + other_ns + comm_ns + memcpy_ns + idle_ns == time_ns
    holds exactly. achieved_* are over gpu_busy_ns (the GPU's working time);
    achieved_*_wall over time_ns. % of ceiling is on the busy-time rate, against the
    tensor-core peak of the phase's dominant GEMM dtype and the DRAM bandwidth peak.
    If ``phases`` (the phase-split pass's table) is given, its rows are kept and
    matched on (rank, request_id, phase); its rows that match no step (e.g. "outside")
    keep nulls in the bound columns.
    """
    rows = _phase_rows(step_attr) if len(step_attr) else pd.DataFrame()
    if len(rows):
        dtype = _dominant_dtype_by_phase(step_attr, kernels)
        rows["ceiling_dtype"] = [dtype.get(str(p), "fp16") for p in rows["phase"]]
        peak_f = rows["ceiling_dtype"].map(lambda d: ceiling.flops(d) or ceiling.flops("fp32") or np.nan)
        busy = rows["gpu_busy_ns"].astype(float).where(rows["gpu_busy_ns"] > 0)
        wall = rows["time_ns"].astype(float).where(rows["time_ns"] > 0)
        rows["achieved_tflops"] = rows["flops"] / busy / 1e3
        rows["achieved_tbps"] = rows["bytes"] / busy / 1e3
        rows["achieved_tflops_wall"] = rows["flops"] / wall / 1e3
        rows["achieved_tbps_wall"] = rows["bytes"] / wall / 1e3
        rows["pct_peak_flops"] = 100.0 * rows["achieved_tflops"] * 1e12 / peak_f
        rows["pct_peak_bandwidth"] = 100.0 * rows["achieved_tbps"] * 1e12 / ceiling.peak_bytes_per_s
        rows["ceiling"] = f"{ceiling.gpu} ({ceiling.kind})"
    if phases is None or len(phases) == 0:
        return rows.reset_index(drop=True)
    base = phases.copy()
    if "rank" not in base:
        base["rank"] = 0
    key = ["rank", "request_id", "phase"]
    base["_r"] = base["rank"].fillna(0).astype("int64")
    base["_q"] = pd.to_numeric(base["request_id"], errors="coerce").fillna(-1).astype("int64")
    base["_p"] = base["phase"].astype(str)
    if not len(rows):
        return base.drop(columns=["_r", "_q", "_p"])
    rr = rows.copy()
    rr["_r"] = rr["rank"].fillna(0).astype("int64")
    rr["_q"] = pd.to_numeric(rr["request_id"], errors="coerce").fillna(-1).astype("int64")
    rr["_p"] = rr["phase"].astype(str)
    rr = rr.drop(columns=key)
    ours = [c for c in rr.columns if c not in ("_r", "_q", "_p")]
    merged = base.drop(columns=[c for c in ours if c in base.columns]).merge(rr, on=["_r", "_q", "_p"], how="left")
    return merged.drop(columns=["_r", "_q", "_p"])


def _dominant_dtype_by_phase(step_attr: pd.DataFrame, kernels: pd.DataFrame) -> dict[str, str]:
    """phase kind -> dtype with the most tensor-core FLOPs (GEMM / attention kernels)."""
    if not len(kernels) or "dtype" not in kernels:
        return {}
    k = kernels[(kernels["model"] == MODEL_SHAPE) & kernels["kclass"].isin([kc.GEMM, kc.ATTENTION])]
    if not len(k):
        k = kernels[kernels["model"] == MODEL_SHAPE]
    if not len(k):
        return {}
    if "step_id" in k and k["step_id"].notna().any():
        kind = k["step_id"].map(dict(zip(step_attr["step_id"], step_attr["kind"].astype(str), strict=True)))
    else:
        kind = pd.Series("all", index=k.index)
    agg = k.assign(_kind=kind).groupby(["_kind", "dtype"])["flops"].sum().reset_index()
    best = agg.sort_values("flops").groupby("_kind").tail(1)
    out = dict(zip(best["_kind"].astype(str), best["dtype"].astype(str), strict=True))
    if "all" in out:
        return dict.fromkeys(step_attr["kind"].astype(str).unique(), out["all"])
    return out


def bound_tables(
    gpu_activity: pd.DataFrame,
    cpu_ops: pd.DataFrame,
    steps: pd.DataFrame,
    ceiling: Ceiling,
    phases: pd.DataFrame | None = None,
    options: BoundOptions | None = None,
) -> dict[str, Any]:
    """The whole attribution in one call: {"kernels", "step_bound", "phases"}."""
    kernels = kernel_costs(gpu_activity, cpu_ops, ceiling, options)
    step_attr = attribute_steps(steps, kernels)
    return {
        "kernels": kernels,
        "step_bound": step_attr,
        "phases": attribute_phases(step_attr, kernels, ceiling, phases),
    }
