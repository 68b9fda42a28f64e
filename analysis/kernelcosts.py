"""Each GPU activity's cost and bound class: FLOPs and bytes from the op that launched it, its roof,
its achieved rates and its class, as NumPy arrays made into one frame (``kernel_costs``).

- FLOPs and bytes come from the launching op's model (opmodels), or its nearest modelled ancestor, and
  are split over the op's kernels by duration, per graph replay; the kernel-name class from kernels. A
  grouped GEMM's FLOP rate counts the work its tiles issue (each group padded: ``tilepad``).
- ``roof``: the intensity against the ridge of the ceiling in use. The bound class: compute | memory |
  latency | other | comm | memcpy. Latency: under the line on both peaks of the ceiling in use (Nsight
  Compute's 60% rule: ``latency_threshold`` of a datasheet rate, ``achievable_threshold`` of an
  achievable one), rates taken over the kernel's duration plus its fixed overhead
  (``kernel_overhead_ns``), and an elementwise / reduction / copy kernel whose footprint fits in the
  GPU's L2 cache unless the share of its bytes DRAM serves (its footprint's share of the L2) reaches the
  line; other: no model and no counters. ``over_peak``: a
  modelled rate above every peak (its model over-counts); that rate is no evidence for the class.

Pure: the input frames are never modified. Method and conventions: docs/roofline.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis import kernels as kc
from tracekit.analysis import tilepad
from tracekit.analysis.columns import by_value, combine_codes, map_values, matches, unique
from tracekit.analysis.opmodels import op_costs
from tracekit.analysis.options import BoundOptions
from tracekit.model.ceilings import Ceiling, datasheet, l2_bytes

# The classes (tracekit.analysis.bound orders them for the time split).
COMPUTE, MEMORY, LATENCY, OTHER, COMM, MEMCPY, IDLE = (
    "compute", "memory", "latency", "other", "comm", "memcpy", "idle")
MODEL_SHAPE = "shape"  # FLOPs/bytes from the launching op's input shapes
MODEL_CLASS = "kernel_class"  # bound from the kernel's name class only (no FLOPs/bytes)
MODEL_NONE = "none"
SOURCE_MODEL, SOURCE_NCU = "model", "ncu"  # what decided a kernel's class


def _empty_kernels(gpu_activity: pd.DataFrame) -> pd.DataFrame:
    out = gpu_activity.iloc[0:0].copy()
    for c, dt in [
        ("kclass", object), ("model", object), ("op_name", object), ("flops", float), ("bytes", float),
        ("dtype", object), ("intensity", float), ("ridge", float), ("roof", object),
        ("flops_pct_of_peak", float), ("bw_pct_of_peak", float), ("over_peak", bool), ("bound", object),
        ("source", object),
    ]:
        out[c] = pd.Series(dtype=dt)
    return out


def _modelled_ops(kernel_ops: np.ndarray, par: pd.DataFrame | None, modelled: np.ndarray, depth: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``_modelled_op_for`` over arrays: (kernel op ids that have a modelled op, sorted; that op's id).

    ``par``: cpu_ops' (op_id, parent_id) rows without nulls; ``modelled``: the op ids with a model.
    Parents are followed level by level for every op at once. Where some chain of ancestors is
    longer than ``depth`` the dict version decides (its walk order then matters)."""
    kernel_ops = np.asarray(kernel_ops, dtype=np.int64)
    op = par["op_id"].to_numpy(dtype=np.int64) if par is not None else np.zeros(0, np.int64)
    parent = par["parent_id"].to_numpy(dtype=np.int64) if par is not None else np.zeros(0, np.int64)
    ids = unique(np.concatenate([kernel_ops, op, parent, np.asarray(modelled, dtype=np.int64)]))
    up = np.full(len(ids), -1, dtype=np.int64)
    if len(op):
        # dict(zip(op, parent)): the last row of an op id wins
        last = len(op) - 1 - np.unique(op[::-1], return_index=True)[1]
        up[np.searchsorted(ids, op[last])] = np.searchsorted(ids, parent[last])
    is_modelled = np.zeros(len(ids), dtype=bool)
    is_modelled[np.searchsorted(ids, np.asarray(modelled, dtype=np.int64))] = True
    k = np.searchsorted(ids, kernel_ops)
    direct = k[is_modelled[k]]
    covered = np.zeros(len(ids), dtype=bool)
    front = up[direct]
    front = front[front >= 0]
    for _ in range(depth):
        if not len(front):
            break
        covered[front] = True
        front = up[front]
        front = front[front >= 0]
    else:
        if len(front):  # a chain longer than depth: the walk order decides what is covered
            parents = dict(zip(op.tolist(), parent.tolist(), strict=True))
            m = _modelled_op_for(kernel_ops, parents, set(np.asarray(modelled).tolist()), depth)
            keys = np.array(sorted(m), dtype=np.int64)
            return keys, np.array([m[x] for x in keys.tolist()], dtype=np.int64)
    rest = k[~is_modelled[k]]
    found = np.full(len(rest), -1, dtype=np.int64)
    cur = up[rest]
    open_ = cur >= 0
    for _ in range(depth):
        if not open_.any():
            break
        hit = open_ & is_modelled[np.where(open_, cur, 0)]
        found[hit] = cur[hit]
        open_ &= ~hit
        cur = np.where(open_, up[np.where(open_, cur, 0)], -1)
        open_ &= cur >= 0
    keep = (found >= 0) & ~covered[np.where(found >= 0, found, 0)]
    src = np.concatenate([direct, rest[keep]])
    dst = np.concatenate([direct, found[keep]])
    order = np.argsort(src, kind="stable")
    return ids[src[order]], ids[dst[order]]


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
    gpu_activity: pd.DataFrame, cpu_ops: pd.DataFrame, ceiling: Ceiling | None, options: BoundOptions | None = None,
    peaks: Ceiling | None = None,
) -> pd.DataFrame:
    """gpu_activity plus kclass, model, op_name, flops, bytes, dtype, intensity, ridge, roof,
    flops_pct_of_peak, bw_pct_of_peak, bound, source (model). ``peaks``: what the latency line and the
    % of peak are taken against (tracekit.model.ceilings.Ceilings.peaks; None: the ceiling).

    If one op launches several kernels, the op's FLOPs and bytes are split across
    them in proportion to their durations (evenly if all durations are 0). Without a ceiling,
    modelled kernels keep their FLOPs and bytes but no roof and no class (``other``).
    Every column is computed as a NumPy array; the frame is made once, at the end.
    """
    opts = options or BoundOptions()
    if gpu_activity is None or len(gpu_activity) == 0:
        return _empty_kernels(gpu_activity if gpu_activity is not None else pd.DataFrame())
    g = gpu_activity.reset_index(drop=True)
    n = len(g)
    # the kinds as text, missing ones missing (Series.astype(str)), each distinct text one object
    kinds = by_value(g["kind"], str) if "kind" in g else np.full(n, "kernel", dtype=object)
    col: dict[str, Any] = {
        "kclass": kc.kernel_classes(g["name"], kinds).to_numpy(),
        "model": np.full(n, MODEL_NONE, dtype=object),
        "op_name": np.full(n, None, dtype=object),
        "flops": np.zeros(n),
        "bytes": np.zeros(n),
        "dtype": np.full(n, None, dtype=object),
        "dur_ns": pd.to_numeric(g["dur_ns"], errors="coerce").to_numpy(dtype=float, na_value=np.nan),
        "pad": np.ones(n),  # issued over useful FLOPs: a grouped GEMM's tiles pad each group (tilepad)
    }
    tensor = np.zeros(n, dtype=bool)
    is_kernel = kinds == "kernel"
    _shape_costs(g, cpu_ops, col, tensor, is_kernel, opts)
    if ceiling is None:
        return _without_ceiling(g, col, is_kernel, kinds, opts)
    ridge_vec = ceiling.ridge_point("fp32") or np.nan
    dtypes = col["dtype"]
    ridges = {d: ceiling.ridge_point(d) for d in {str(x) for x in pd.unique(dtypes) if not pd.isna(x)}}
    # A dtype with no tensor rate on this GPU (bf16 on a T4) is compared with the fp16 then fp32 peak.
    tensor_ridge = map_values(
        dtypes, lambda d: ridges.get(str(d)) or ceiling.ridge_point("fp16") or ridge_vec if d is not None else np.nan
    ).astype(float)
    col["ridge"] = np.where(tensor, tensor_ridge, ridge_vec)
    col["intensity"] = _intensity(col)

    shape = col["model"] == MODEL_SHAPE
    roof = np.full(n, None, dtype=object)
    roof[shape] = np.where(col["intensity"][shape] >= col["ridge"][shape], COMPUTE, MEMORY)
    peaks = peaks if peaks is not None else ceiling
    flops_pct, bw_pct = _pct_of_peak(col, tensor, peaks, opts.kernel_overhead_ns)
    col["flops_pct_of_peak"], col["bw_pct_of_peak"] = flops_pct, bw_pct
    l2 = l2_bytes(ceiling.gpu) if opts.l2_resident else None
    resident = shape & np.isin(col["kclass"], [kc.ELEMENTWISE, kc.REDUCTION, kc.COPY]) & (
        col["bytes"] <= l2) if l2 else np.zeros(n, dtype=bool)
    # the share of a resident kernel's bytes that DRAM still serves: its footprint's share of the L2
    dram_share = np.where(resident, col["bytes"] / l2, 1.0) if l2 else np.ones(n)
    over_f, over_b = _over_peak(col, tensor, ceiling, opts.kernel_overhead_ns)
    over_b &= ~resident  # an L2-resident kernel's bytes are served from L2, not rated against DRAM
    over = shape & (over_f | over_b)
    col["over_peak"] = over
    bound = np.full(n, OTHER, dtype=object)
    bound[shape] = roof[shape]
    if opts.latency_threshold is not None:
        f_line, b_line = _lines(col, tensor, peaks, opts)
        below = np.fmax(flops_pct - f_line, bw_pct - b_line) < 0  # NaN (no duration) -> False
        bound[shape & below] = LATENCY
        reach_f, reach_b = flops_pct >= f_line, bw_pct >= b_line
        bound[resident & ~reach_f & ~(bw_pct * dram_share >= b_line)] = LATENCY
        # A rate over the peak is no evidence: its model over-counts. What is left decides: the other
        # rate where it reaches its line, else the rules for a kernel without a model.
        # a padded grouped GEMM's issued FLOPs count the groups its bytes count: bytes over the peak
        # (fewer groups touched than counted) leave its FLOP rate no evidence either
        ok_f, ok_b = reach_f & ~over_f & ~(over_b & (col["pad"] > 1.0)), reach_b & ~over_b
        bound[over] = np.where(ok_f, COMPUTE, np.where(ok_b, MEMORY, OTHER))[over]
        unproven = over & ~ok_f & ~ok_b
    else:  # the roofline alone: the roof under the intensity, whatever the rates (flagged all the same)
        unproven = None
    _finish(g, col, bound, roof, shape, is_kernel, kinds, opts, unproven=unproven)
    return _kernels_frame(g, col, ("ridge", "intensity"))


def _shape_costs(g: pd.DataFrame, cpu_ops: pd.DataFrame | None, col: dict[str, Any], tensor: np.ndarray,
                 is_kernel: np.ndarray, opts: BoundOptions) -> None:
    """FLOPs, bytes, dtype, op name and model (shape) of the kernels a modelled op launched, filled into
    ``col`` and ``tensor`` (tensor-core work) in place: each op's cost split over its kernels by duration,
    per graph replay."""
    if cpu_ops is None:
        return
    costs = op_costs(cpu_ops, assume_causal=opts.assume_causal)
    op_ids = pd.to_numeric(g["op_id"], errors="coerce") if "op_id" in g.columns else None
    if costs is None or not len(costs) or op_ids is None or not op_ids.notna().any():
        return
    costs = costs.drop_duplicates("op_id")
    cost_ids = costs["op_id"].to_numpy().astype(np.int64)
    par = cpu_ops[["op_id", "parent_id"]].dropna() if "parent_id" in cpu_ops else None
    linked = is_kernel & op_ids.notna().to_numpy()
    kops = op_ids[linked].astype("int64").to_numpy()
    src, dst = _modelled_ops(unique(kops), par, cost_ids, opts.max_parent_depth)
    if not len(src):
        return
    mop = np.full(len(g), np.nan)
    at = np.clip(np.searchsorted(src, kops), 0, len(src) - 1)  # src is sorted (unique ids)
    mop[linked] = np.where(src[at] == kops, dst[at].astype(float), np.nan)
    # A split-K GEMM's reduce kernel sums partials the GEMM kernel left in L2 (Nsight Compute:
    # ~0% of DRAM peak): the op's FLOPs and bytes go to the GEMM kernel; it is classed by name.
    splitk = re.compile(kc.SPLITK_REDUCE)
    reduce = (col["kclass"] == kc.REDUCTION) & matches(g["name"], lambda name: splitk.search(name) is not None)
    mop[reduce] = np.nan
    has = ~np.isnan(mop)
    mo = mop[has].astype(np.int64)
    dur = col["dur_ns"][has]
    dur = np.where(np.isnan(dur), 0.0, np.maximum(dur, 0.0))  # no duration: no share
    # Each replay of a CUDA/HIP graph runs its captured ops' kernels once: split per replay.
    group = combine_codes(pd.factorize(mo)[0], pd.factorize(kc.graph_replay(g)[has])[0])
    tot = np.bincount(group, weights=dur)[group]
    cnt = np.bincount(group)[group]
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(tot > 0, dur / np.where(tot > 0, tot, 1.0), 1.0 / cnt)
    order = np.argsort(cost_ids, kind="stable")
    c = order[np.searchsorted(cost_ids, mo, sorter=order)]  # each kernel's row of costs
    col["flops"][has] = costs["flops"].to_numpy(dtype=float)[c] * share
    col["bytes"][has] = costs["bytes"].to_numpy(dtype=float)[c] * share
    col["dtype"][has] = costs["dtype"].to_numpy(dtype=object)[c]
    col["op_name"][has] = costs["op_name"].to_numpy(dtype=object)[c]
    col["model"][has] = MODEL_SHAPE
    tensor[has] = costs["tensor_core"].to_numpy(dtype=bool)[c]
    if "groups" in costs:
        col["pad"][has] = _padding(g["name"].to_numpy(dtype=object)[has], costs["group_rows"].to_numpy()[c],
                                   costs["groups"].to_numpy()[c])


def _padding(names: np.ndarray, rows: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each kernel's issued over useful FLOPs: a grouped GEMM kernel whose name gives its row granule
    pads each group's rows (tilepad); 1 elsewhere. Made once per distinct (name, rows, groups)."""
    out = np.ones(len(names))
    at = np.flatnonzero(np.asarray(groups) > 0)
    memo: dict[tuple[Any, int, int], float] = {}
    for i in at.tolist():
        key = (names[i], int(rows[i]), int(groups[i]))
        if key not in memo:
            memo[key] = tilepad.padding_factor(key[1], key[2], tilepad.granule(key[0]))
        out[i] = memo[key]
    return out


def _intensity(col: Mapping[str, np.ndarray]) -> np.ndarray:
    """FLOPs per byte, NaN where there are no bytes."""
    b = col["bytes"]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b > 0, col["flops"] / np.where(b > 0, b, 1.0), np.nan)


def _kernels_frame(g: pd.DataFrame, col: Mapping[str, Any], order: tuple[str, ...]) -> pd.DataFrame:
    """gpu_activity's columns (``bytes`` replaced where it has one) then kernel_costs' columns, in the
    order kernel_costs has always made them (``order``: the two rate columns' order)."""
    out: dict[str, Any] = {c: g[c] for c in g.columns}
    for name in ("kclass", "model", "op_name", "flops", "bytes", "dtype", *order, "flops_pct_of_peak",
                 "bw_pct_of_peak", "over_peak", "roof", "bound", "source"):
        v = col[name]
        out[name] = pd.Series(v, index=g.index, dtype=object) if name in ("op_name", "dtype") else v
    return pd.DataFrame(out, index=g.index, copy=False)


def _without_ceiling(g: pd.DataFrame, col: dict[str, Any], is_kernel: np.ndarray, kinds: np.ndarray,
                     opts: BoundOptions) -> pd.DataFrame:
    n = len(g)
    col["intensity"] = _intensity(col)
    col["ridge"] = np.full(n, np.nan)
    col["flops_pct_of_peak"], col["bw_pct_of_peak"] = np.full(n, np.nan), np.full(n, np.nan)
    col["over_peak"] = np.zeros(n, dtype=bool)
    shape = col["model"] == MODEL_SHAPE
    _finish(g, col, np.full(n, OTHER, dtype=object), np.full(n, None, dtype=object), shape, is_kernel, kinds, opts)
    return _kernels_frame(g, col, ("intensity", "ridge"))


def _finish(g: pd.DataFrame, col: dict[str, Any], bound: np.ndarray, roof: np.ndarray, shape: np.ndarray,
            is_kernel: np.ndarray, kinds: np.ndarray, opts: BoundOptions, unproven: np.ndarray | None = None) -> None:
    """The classes every path shares: the name-class size rule, communication, memcpy (into ``col``).

    ``unproven``: modelled kernels whose model gave no usable evidence (over the peak): the size rule
    classes them as it classes kernels without a model (their model and roof stay)."""
    kclass = col["kclass"]
    if opts.class_fallback_memory:
        named = is_kernel & np.isin(kclass, [kc.ELEMENTWISE, kc.REDUCTION, kc.COPY])
        fb = ~shape & named
        roof[fb] = MEMORY
        col["model"][fb] = MODEL_CLASS
        if unproven is not None:
            fb = fb | (unproven & named)
        bound[fb] = MEMORY
        if opts.latency_threshold is not None:
            bound[fb & (col["dur_ns"] < opts.short_kernel_ns)] = LATENCY
    bound[kclass == kc.COMMUNICATION] = COMM
    memcpy = np.isin(kinds, ["memcpy", "memset"])
    bound[memcpy] = MEMCPY
    if "bytes" in g:
        # memcpy/memset bytes are in the trace: a DtoD copy reads and writes them.
        raw = pd.to_numeric(g["bytes"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        raw = np.where(np.isnan(raw), 0.0, raw)
        dtod = matches(g["memcpy_kind"], lambda m: "DtoD" in m) if "memcpy_kind" in g else np.zeros(len(g), bool)
        factor = np.where(dtod, 2.0, 1.0)
        col["bytes"][memcpy] = (raw * factor)[memcpy]
    col["roof"] = roof
    col["bound"] = bound
    col["source"] = np.full(len(g), SOURCE_MODEL, dtype=object)


def _rate_keys(col: Mapping[str, np.ndarray], tensor: np.ndarray, peaks: Ceiling) -> np.ndarray:
    """The FLOP rate each kernel is compared with: its dtype's tensor rate (fp16, then fp32, where the GPU
    lacks it) for GEMM and attention kernels, fp32 for the rest."""
    def key(d: Any) -> str:
        if d is None:
            return "fp32"
        return str(d) if peaks.flops(str(d)) else "fp16" if peaks.flops("fp16") else "fp32"

    return np.where(tensor, map_values(col["dtype"], key), "fp32")


def _lines(col: Mapping[str, np.ndarray], tensor: np.ndarray, peaks: Ceiling, opts: BoundOptions
           ) -> tuple[np.ndarray, np.ndarray]:
    """The latency line of each kernel, % of ``peaks``, on FLOPs and on bandwidth: achievable_threshold
    where the rate is an achievable figure, latency_threshold where it is a datasheet one."""
    ds = 100.0 * (opts.latency_threshold or 0.0)
    ach = 100.0 * opts.achievable_threshold
    keys = _rate_keys(col, tensor, peaks)
    achieved = {d for d in set(keys.tolist()) if peaks.is_achieved(str(d))}
    n = len(tensor)
    f_line = np.where(np.isin(keys, list(achieved)), ach, ds) if achieved else np.full(n, ds)
    b_line = np.full(n, ach if peaks.is_achieved("bandwidth") else ds)
    return f_line, b_line


def _over_peak(col: Mapping[str, np.ndarray], tensor: np.ndarray, ceiling: Ceiling, overhead_ns: float
               ) -> tuple[np.ndarray, np.ndarray]:
    """(FLOP rate over the peak, bandwidth over the peak) per kernel: its modelled rate above both the
    ceiling in use and the GPU's datasheet (a rate no kernel can reach: the model over-counts).

    The highest rate a kernel could run at is taken: a GEMM or attention kernel's dtype rate, TF32's
    for fp32 (cuBLAS may run fp32 GEMMs on TF32 tensor cores), and for a dtype the GPU has no rate for
    (block-scaled fp4, say) its fastest rate; the fp32 CUDA-core rate for the rest."""
    ds = datasheet(ceiling.gpu)
    rates = {d: max(ceiling.flops(d) or 0.0, ds.flops(d) or 0.0 if ds is not None else 0.0)
             for d in {*ceiling.peak_flops, *(ds.peak_flops if ds is not None else ())}}
    bw = max(ceiling.peak_bytes_per_s, ds.peak_bytes_per_s if ds is not None else 0.0)
    fastest = max(rates.values(), default=0.0)
    fp32 = rates.get("fp32") or np.nan

    def tensor_peak(d: Any) -> float:
        if d is None:
            return np.nan
        if str(d) == "fp32":
            return max(rates.get("fp32", 0.0), rates.get("tf32", 0.0)) or np.nan
        return rates.get(str(d)) or fastest or np.nan

    peak_f = np.where(tensor, map_values(col["dtype"], tensor_peak).astype(float), fp32)
    dur_ns = col["dur_ns"]
    dur_s = np.where(dur_ns > 0, dur_ns + overhead_ns, np.nan) * 1e-9
    modelled = col["model"] == MODEL_SHAPE
    with np.errstate(divide="ignore", invalid="ignore"):
        f = col["flops"] * col["pad"] / dur_s
        b = col["bytes"] / dur_s
    return modelled & (np.nan_to_num(f) > peak_f), modelled & (np.nan_to_num(b) > bw)


def _pct_of_peak(col: Mapping[str, np.ndarray], tensor: np.ndarray, peaks: Ceiling, overhead_ns: float = 0.0
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Achieved FLOP/s and bytes/s of each kernel (modelled work / (duration + ``overhead_ns``)) as %
    of ``peaks``.

    GEMM and attention kernels against the tensor-core peak of their dtype (fp16, then fp32 where the
    GPU lacks it), the rest against the fp32 CUDA-core peak. NaN without a duration or a model.
    """
    dur_ns = col["dur_ns"]
    dur_s = np.where(dur_ns > 0, dur_ns + overhead_ns, dur_ns) * 1e-9
    fp32 = peaks.flops("fp32") or np.nan
    tensor_peak = map_values(
        col["dtype"], lambda d: (peaks.flops(str(d)) or peaks.flops("fp16") or fp32) if d is not None else np.nan
    ).astype(float)
    peak_f = np.where(tensor, tensor_peak, fp32)
    modelled = col["model"] == MODEL_SHAPE
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = modelled & (dur_s > 0)
        f = np.where(ok, 100.0 * col["flops"] * col["pad"] / dur_s / peak_f, np.nan)
        b = np.where(ok, 100.0 * col["bytes"] / dur_s / peaks.peak_bytes_per_s, np.nan)
    return f, b
