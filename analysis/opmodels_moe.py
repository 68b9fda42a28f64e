"""Mixture-of-experts op models: fused / two-stage expert GEMMs, routing, and the per-layer stand-in.

One rule for every MoE kernel family (vLLM / SGLang Triton fused_moe, triton_kernels' matmul_ogs,
aiter's fused and two-stage MoE, TRT-LLM-gen batched GEMMs under FlashInfer): with M tokens of
hidden size K, E experts of intermediate size N (gated: w1 holds gate and up, 2N rows), top_k
experts per token (TraceLens's FusedMoE model):

- flops = 2·M·K·N·top_k·(2 if gated) [up] + 2·M·K·N·top_k [down] + M·K·(2·top_k − 1) [weighted sum];
- bytes = M·K·bpe_in + E_touched·N·K·(g + 1)·bpe_w + M·K·bpe_out, where the weights are read once
  per expert some token was routed to. The trace does not record the routing, so E_touched is its
  expectation under uniform routing, E·(1 − ((E − top_k)/E)^M): a decode step of 1 token reads
  top_k experts, a large batch all E. bpe_w is the weights' real width plus their scales
  (``WEIGHT_FORMATS``).

vLLM runs every MoE layer as one ``vllm::moe_forward(hidden [M, K], router_logits [M, E], layer)``
op whose expert weights are not among its inputs; ``moe_forward_ops`` reads top_k and N from the
ops it calls and the weights' format from its kernels' names, and hands op_costs a stand-in op
(``MOE_STANDIN``) with those numbers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracekit.analysis.optensor import (
    COPY,
    DTYPE_BYTES,
    DTYPE_KEY,
    GEMM,
    REDUCTION,
    OpCost,
    Tensor,
    dtype_key,
    get,
    is_shape,
    parse,
)


@dataclass(frozen=True)
class WeightFormat:
    """Bytes per weight element: the value's width plus its share of the block scales."""

    name: str
    value_bytes: float
    scale_bytes: float  # per element: one scale of scale_width bytes per block of block elements
    compute: str  # the ceiling dtype the tensor cores run it at (tracekit.model.ceilings.DTYPES)

    @property
    def bytes_per_element(self) -> float:
        return self.value_bytes + self.scale_bytes


# OCP microscaling: one 1-byte E8M0 scale per 32 values; NVFP4: one 1-byte E4M3 scale per 16.
WEIGHT_FORMATS: dict[str, WeightFormat] = {
    "mxfp4": WeightFormat("mxfp4", 0.5, 1 / 32, "fp8"),
    "nvfp4": WeightFormat("nvfp4", 0.5, 1 / 16, "fp4"),  # NVFP4 recipes quantize activations to fp4 too
    "mxfp8": WeightFormat("mxfp8", 1.0, 1 / 32, "fp8"),
    "fp8": WeightFormat("fp8", 1.0, 0.0, "fp8"),
    "int4": WeightFormat("int4", 0.5, 0.0, "fp16"),
}
# Kernel-name spellings of a weight format, checked in order (a name may state the activations'
# format too: TRT-LLM-gen's bmm_MxE4m3_MxE2m1 is mxfp8 activations x mxfp4 weights).
_FORMAT_NAMES: list[tuple[str, re.Pattern[str]]] = [
    ("mxfp4", re.compile(r"mxfp4|MxE2m1|mxf4", re.I)),
    ("nvfp4", re.compile(r"nvfp4|E2m1|fp4", re.I)),
    ("mxfp8", re.compile(r"mxfp8|MxE4m3", re.I)),
    ("fp8", re.compile(r"fp8|e4m3|a8w8|w8a8", re.I)),
    ("int4", re.compile(r"int4|w4a16|a16w4|marlin", re.I)),
]


def weight_format(kernel_names: list[str]) -> WeightFormat | None:
    """The weights' format a MoE layer's kernel names state (the first GEMM-like name that states one)."""
    for fmt, pat in _FORMAT_NAMES:
        if any(pat.search(n) for n in kernel_names):
            return WEIGHT_FORMATS[fmt]
    return None


def experts_touched(experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct experts that ``tokens`` tokens, each routed to ``top_k`` of ``experts`` uniformly, hit."""
    if experts <= 0 or top_k <= 0 or tokens <= 0:
        return 0.0
    return experts * (1.0 - ((experts - min(top_k, experts)) / experts) ** tokens)


def moe_cost(m: int, k: int, n: int, experts: int, top_k: int, gated: bool, bpe_in: float, bpe_w: float,
             bpe_out: float, dtype: str) -> OpCost:
    """The module rule: one whole MoE layer (up, activation, down, weighted sum)."""
    g = 2 if gated else 1
    flops = 2.0 * m * k * n * top_k * g + 2.0 * m * k * n * top_k + m * k * (2 * top_k - 1)
    nbytes = m * k * bpe_in + experts_touched(experts, top_k, m) * n * k * (g + 1) * bpe_w + m * k * bpe_out
    return OpCost(flops, float(nbytes), GEMM, dtype, True)


def moe_stage_cost(m: int, k: int, n: int, experts: int, top_k: int, gated: bool, up: bool, bpe_in: float,
                   bpe_w: float, bpe_out: float, dtype: str) -> OpCost:
    """One stage of a two-stage MoE (TraceLens's UnfusedMoE_Up / _Down): up reads [M, K] and the touched
    experts' (g)·N·K weights and writes [M·top_k, N]; down reads [M·top_k, N] and N·K weights, writes [M, K]."""
    e_act = experts_touched(experts, top_k, m)
    if up:
        g = 2 if gated else 1
        return OpCost(2.0 * m * k * n * top_k * g, float(m * k * bpe_in + e_act * g * k * n * bpe_w + m * n * bpe_out),
                      GEMM, dtype, True)
    return OpCost(2.0 * m * n * k * top_k, float(m * n * bpe_in + e_act * n * k * bpe_w + m * k * bpe_out), GEMM,
                  dtype, True)


def _w_bytes(w: Tensor, logical_k: int) -> float:
    """Bytes per logical weight element of a stored weight [E, rows, K_stored]: packed int4/fp4 weights
    store two values per byte (K_stored = K/2)."""
    stored_k = w.shape[-1]
    return w.itemsize * stored_k / logical_k if logical_k else float(w.itemsize)


def fused_experts(ts: list[Tensor | None]) -> OpCost | None:
    """vLLM / SGLang fused_experts(hidden [M, K], w1 [E, (2)N, K], w2 [E, K, N], topk_weights [M, top_k],
    topk_ids [M, top_k], ...) and vllm::rocm_aiter_fused_moe (same first five): the module rule, gated
    when w1 has twice w2's N rows. Packed weights (int4 / fp4 in uint8, K stored halved) are read at
    their stored size."""
    x, w1, w2 = get(ts, 0), get(ts, 1), get(ts, 2)
    ids = next((t for t in (get(ts, 4), get(ts, 3)) if t is not None and len(t.shape) == 2), None)
    if x is None or w1 is None or w2 is None or ids is None or len(w1.shape) != 3 or len(w2.shape) != 3:
        return None
    if len(x.shape) != 2:
        return None
    m, k = x.shape
    e, n = w2.shape[0], w2.shape[2] * max(1, k // max(1, w1.shape[2]))  # stored N halved when packed
    gated = w1.shape[1] == 2 * n
    return moe_cost(m, k, n, e, ids.shape[1], gated, x.itemsize, _w_bytes(w1, k), x.itemsize, dtype_key(x))


def aiter_fmoe(ts: list[Tensor | None], values: list[Any]) -> OpCost | None:
    """aiter::fmoe_fp8_blockscale_g1u1(out [M, K], input [M, K], w1 [E, 2N, K], w2 [E, K, N], ...,
    topk at concrete input 8) and aiter::fmoe_g1u1 / fmoe_int8_g1u1_a16 (same first four; topk from
    the topk_weights [M, top_k] input 5): the module rule, input at its width, output at out's."""
    out, x, w1, w2 = get(ts, 0), get(ts, 1), get(ts, 2), get(ts, 3)
    if out is None or x is None or w1 is None or w2 is None or len(w1.shape) != 3 or len(w2.shape) != 3:
        return None
    top_k = _int(values, 8)
    if top_k is None:
        tw = get(ts, 5)
        top_k = tw.shape[1] if tw is not None and len(tw.shape) == 2 else None
    if top_k is None or len(x.shape) != 2:
        return None
    m, k = x.shape
    e, n = w2.shape[0], w2.shape[2] * max(1, k // max(1, w1.shape[2]))
    gated = w1.shape[1] == 2 * n
    return moe_cost(m, k, n, e, top_k, gated, x.itemsize, _w_bytes(w1, k), out.itemsize, dtype_key(x))


def aiter_stage1(ts: list[Tensor | None]) -> OpCost | None:
    """aiter::moe_cktile2stages_gemm1_ck / ck_moe_stage1(XQ [M, K], WQ [E, (2)N, K(/2)], Y [M, top_k, N], ...):
    TraceLens's aiter unfused up."""
    x, w, y = get(ts, 0), get(ts, 1), get(ts, 2)
    if x is None or w is None or y is None or len(x.shape) != 2 or len(w.shape) != 3 or len(y.shape) != 3:
        return None
    m, k = x.shape
    _, top_k, n = y.shape
    return moe_stage_cost(m, k, n, w.shape[0], top_k, w.shape[1] == 2 * n, True, x.itemsize, _w_bytes(w, k),
                          y.itemsize, dtype_key(x))


def aiter_stage2(ts: list[Tensor | None]) -> OpCost | None:
    """aiter::moe_cktile2stages_gemm2_ck / ck_moe_stage2(inter [M, top_k, N], w2 [E, K, N(/2)], out [M, K], ...):
    the down stage."""
    a, w, out = get(ts, 0), get(ts, 1), get(ts, 2)
    if a is None or w is None or out is None or len(a.shape) != 3 or len(w.shape) != 3 or len(out.shape) != 2:
        return None
    m, top_k, n = a.shape
    k = out.shape[1]
    return moe_stage_cost(m, k, n, w.shape[0], top_k, False, False, a.itemsize, _w_bytes(w, n), out.itemsize,
                          dtype_key(a))


def trtllm_block_scale_moe(fp4: bool) -> Callable[..., OpCost | None]:
    """FlashInfer's TRT-LLM-gen MoE, trtllm_fp4_block_scale_moe / trtllm_fp8_block_scale_moe(routing_logits
    [M, E], routing_bias, hidden_states [M, K] (fp4: [M, K/2] packed), hidden_states_scale, gemm1_weights
    [E, 2N, K] (fp4: K/2), gemm1_weights_scale, ..., num_experts, top_k, ..., intermediate_size, ...): the
    module rule. top_k is the int that follows num_experts (= E) among the scalars; N the one that is half
    gemm1's rows. Weights and activations are read at their stored width plus their scale tensors
    (bpe = (values + scales) bytes / logical elements)."""

    def model(ts: list[Tensor | None], values: list[Any]) -> OpCost | None:
        logits, x, x_scale, w1, w1_scale = get(ts, 0), get(ts, 2), get(ts, 3), get(ts, 4), get(ts, 5)
        if logits is None or x is None or w1 is None or len(logits.shape) != 2 or len(w1.shape) != 3:
            return None
        m, e = logits.shape
        ints = [_int(values, i) for i in range(len(values))]
        at = next((i for i, v in enumerate(ints) if v == e), None)
        top_k = next((v for v in ints[at + 1:] if v is not None), None) if at is not None else None
        if not top_k:
            return None
        n = next((v for v in ints if v is not None and 2 * v == w1.shape[1]), w1.shape[1] // 2)
        k = w1.shape[2] * (2 if fp4 else 1)
        bpe_w = (w1.nbytes + (w1_scale.nbytes if w1_scale is not None else 0)) / (e * 2 * n * k)
        bpe_x = (x.nbytes + (x_scale.nbytes if x_scale is not None else 0)) / (m * k)
        return moe_cost(m, k, n, e, top_k, True, bpe_x, bpe_w, 2, "fp8")

    return model


def topk_routing(ts: list[Tensor | None], values: list[Any]) -> OpCost | None:
    """triton_kernels' TopK(logits [M, E], k, ...): the logits read, k values and int16 expert ids per
    token written (and the [M, E/32] routing bitmatrix)."""
    x = get(ts, 0)
    k = _int(values, 1)
    if x is None or len(x.shape) != 2 or k is None:
        return None
    m, e = x.shape
    return OpCost(float(m * e), float(x.nbytes + m * k * (x.itemsize + 2) + m * ((e + 31) // 32) * 4), REDUCTION,
                  dtype_key(x), False)


def sort_tokens(ts: list[Tensor | None]) -> OpCost | None:
    """triton_kernels' SortTokens(expt_scal [M, k], expt_indx [M, k], n_expts): the routed pairs read
    and, per pair, its gather and scatter index (int32) written, plus the per-expert histogram."""
    s, i = get(ts, 0), get(ts, 1)
    if s is None or i is None:
        return None
    pairs = i.numel
    return OpCost(float(pairs), float(s.nbytes + i.nbytes + pairs * 8 + pairs * s.itemsize), REDUCTION, dtype_key(s),
                  False)


def moe_topk_softmax(ts: list[Tensor | None]) -> OpCost | None:
    """_moe_C::topk_softmax(topk_weights [M, k] f32, topk_ids [M, k], token_expert_indices [M, k],
    gating_output [M, E]): the logits read, the three [M, k] outputs written; softmax's ~5 FLOPs per logit."""
    w, ids, tei, g = get(ts, 0), get(ts, 1), get(ts, 2), get(ts, 3)
    if w is None or g is None:
        return None
    out = w.nbytes + (ids.nbytes if ids else 0) + (tei.nbytes if tei else 0)
    return OpCost(5.0 * g.numel, float(g.nbytes + out), REDUCTION, dtype_key(g), False)


def moe_align(ts: list[Tensor | None]) -> OpCost | None:
    """_moe_C::moe_align_block_size / sgl_kernel::moe_align_block_size(topk_ids [M, k], num_experts,
    block_size, sorted_token_ids, experts_ids, num_tokens_post_pad, ...): the ids read, the padded
    sorted ids and the block experts written."""
    ids = get(ts, 0)
    outs = [t for t in ts[1:] if t is not None]
    if ids is None:
        return None
    return OpCost(float(ids.numel), float(ids.nbytes + sum(t.nbytes for t in outs)), REDUCTION, dtype_key(ids), False)


def moe_sum(ts: list[Tensor | None]) -> OpCost | None:
    """_moe_C::moe_sum(input [M, k, K], output [M, K]): the k expert outputs of each token summed."""
    x, out = get(ts, 0), get(ts, 1)
    if x is None or out is None:
        return None
    return OpCost(float(x.numel), float(x.nbytes + out.nbytes), REDUCTION, dtype_key(x), False)


def buffers_once(ts: list[Tensor | None]) -> OpCost | None:
    """A permute / unpermute of routed tokens (vLLM's _moe_C::moe_permute, moe_unpermute, shuffle_rows): each
    tensor argument read or written once (input rows and their routed copies, the index maps)."""
    tensors = [t for t in ts if t is not None]
    if not tensors:
        return None
    return OpCost(0.0, float(sum(t.nbytes for t in tensors)), COPY, dtype_key(tensors[0]), False)


# the stand-in moe_forward_ops makes: dims [[M, K], [E, N, top_k, gated]], types [x dtype, weight format]
MOE_STANDIN = "tracekit::moe_layer"


def moe_standin(dims: list[Any], types: list[Any]) -> OpCost | None:
    try:
        (m, k), (e, n, top_k, gated) = dims[0], dims[1]
        x_dtype, w_fmt = str(types[0]), str(types[1])
    except (TypeError, ValueError, IndexError):
        return None
    bpe_x = DTYPE_BYTES.get(x_dtype, 2)
    fmt = WEIGHT_FORMATS.get(w_fmt)
    bpe_w = fmt.bytes_per_element if fmt else DTYPE_BYTES.get(w_fmt, bpe_x)
    dtype = DTYPE_KEY.get(x_dtype, "bf16")
    return moe_cost(int(m), int(k), int(n), int(e), int(top_k), bool(gated), bpe_x, bpe_w, bpe_x, dtype)


# op name -> model(tensors); names whose model needs the scalars' values are in MODELS_WITH_VALUES
MODELS: dict[str, Callable[..., OpCost | None]] = {
    "vllm::inplace_fused_experts": fused_experts,
    "vllm::outplace_fused_experts": fused_experts,
    "sglang::inplace_fused_experts": fused_experts,
    "sglang::outplace_fused_experts": fused_experts,
    "vllm::rocm_aiter_fused_moe": fused_experts,
    "aiter::moe_cktile2stages_gemm1_ck": aiter_stage1,
    "aiter::ck_moe_stage1": aiter_stage1,
    "aiter::moe_cktile2stages_gemm2_ck": aiter_stage2,
    "aiter::ck_moe_stage2": aiter_stage2,
    "SortTokens": sort_tokens,
    "_moe_C::topk_softmax": moe_topk_softmax,
    "_moe_C::moe_align_block_size": moe_align,
    "sgl_kernel::moe_align_block_size": moe_align,
    "_moe_C::moe_sum": moe_sum,
    "_moe_C::moe_permute": buffers_once,
    "_moe_C::moe_unpermute": buffers_once,
    "_moe_C::shuffle_rows": buffers_once,
}
MODELS_WITH_VALUES: dict[str, Callable[..., OpCost | None]] = {
    "aiter::fmoe_fp8_blockscale_g1u1": aiter_fmoe,
    "aiter::fmoe_g1u1": aiter_fmoe,
    "aiter::fmoe_int8_g1u1_a16": aiter_fmoe,
    "TopK": topk_routing,
    "flashinfer::trtllm_fp4_block_scale_moe": trtllm_block_scale_moe(True),
    "flashinfer::trtllm_fp8_block_scale_moe": trtllm_block_scale_moe(False),
}


def _int(values: list[Any], i: int) -> int | None:
    if i >= len(values):
        return None
    try:
        return int(str(values[i]))
    except ValueError:
        return None


# --- the vLLM MoE layer ---------------------------------------------------------------------

MOE_LAYER_OPS = ("vllm::moe_forward", "vllm::moe_forward_shared")
_ALLOC = ("aten::empty", "aten::empty_strided", "aten::zeros", "aten::new_empty")


@dataclass(frozen=True)
class MoeLayer:
    """What a MoE layer op's own shapes and the ops it calls say."""

    tokens: int
    hidden: int
    experts: int
    top_k: int
    inter: int
    x_dtype: str


def moe_layer(dims: Any, types: Any, calls: list[tuple[str, Any, Any]]) -> MoeLayer | None:
    """A vllm::moe_forward(hidden [M, K], router_logits [M, E], ...) layer from its inputs and ``calls``:
    (name, input_dims, concrete_inputs) of the ops it runs, in order. top_k: a TopK op's k (triton_kernels),
    aten::topk's k, or a [M, k] output of _moe_C::topk_softmax; N: the narrowest width other than K of a
    buffer it allocates with M·top_k rows ([M·k, X], [1, M·k, X] or [M, k, X]), else K (TraceLens's
    assumption: intermediate = hidden). None without top_k."""
    d, t = parse(dims), parse(types)
    if len(d) < 2 or not is_shape(d[0]) or not is_shape(d[1]) or len(d[0]) != 2 or len(d[1]) != 2:
        return None
    m, k = d[0]
    e = d[1][1]
    top_k = None
    for name, cd, cv in calls:
        vals = parse(cv)
        if name in ("TopK", "aten::topk"):
            top_k = _int(vals, 1)
        elif name == "_moe_C::topk_softmax":
            sd = parse(cd)
            top_k = sd[0][1] if sd and is_shape(sd[0]) and len(sd[0]) == 2 else None
        if top_k:
            break
    if not top_k or m <= 0 or k <= 0:
        return None
    widths = []
    for name, _cd, cv in calls:
        if name not in _ALLOC:
            continue
        vals = parse(cv)
        size = parse(vals[0]) if vals and isinstance(vals[0], str) else []
        if not is_shape(size) or len(size) < 2:
            continue
        rows, width = size[:-1], size[-1]
        lead = [x for x in rows if x != 1]
        if (lead == [m * top_k] or lead == [m, top_k]) and width != k and width > 0:
            widths.append(width)
    return MoeLayer(m, k, e, top_k, min(widths) if widths else k, str(t[0]) if t else "c10::BFloat16")


def moe_forward_ops(gpu: Any, cpu_ops: Any) -> tuple[Any, Any]:
    """(gpu_activity, cpu_ops) where the kernels each MoE layer op (``MOE_LAYER_OPS``) launches itself
    launch a stand-in op (``MOE_STANDIN``) carrying the layer's numbers (``moe_layer``; the ops it
    calls are those of its thread inside its time span) and the weights' format its kernels' names
    state (``weight_format``; else the activations' dtype). Inputs untouched; unchanged where nothing applies.
    """
    import numpy as np
    import pandas as pd

    if gpu is None or cpu_ops is None or not len(gpu) or not len(cpu_ops) or "op_id" not in gpu:
        return gpu, cpu_ops
    names = cpu_ops["name"].astype(str)
    layer = names.isin(MOE_LAYER_OPS).to_numpy()
    if not layer.any():
        return gpu, cpu_ops
    wanted = names.isin(("TopK", "aten::topk", "_moe_C::topk_softmax", *_ALLOC)).to_numpy()
    ts = pd.to_numeric(cpu_ops["ts_ns"], errors="coerce").to_numpy(dtype="float64")
    tid = cpu_ops["tid"].astype(str).to_numpy() if "tid" in cpu_ops else np.full(len(cpu_ops), "")
    conc = cpu_ops["concrete_inputs"].to_numpy(dtype=object) if "concrete_inputs" in cpu_ops else \
        np.full(len(cpu_ops), None, dtype=object)
    cand = np.flatnonzero(wanted)
    order = cand[np.argsort(ts[cand], kind="stable")]
    cts = ts[order]
    ops = pd.to_numeric(gpu["op_id"], errors="coerce")
    kernel_names = gpu["name"].astype(str).to_numpy()
    op_arr = ops.to_numpy(dtype="float64", na_value=np.nan)
    next_id = int(pd.to_numeric(cpu_ops["op_id"], errors="coerce").max()) + 1
    new_col = op_arr.copy()
    rows = []
    made: dict[tuple[int, str], int] = {}
    dur = pd.to_numeric(cpu_ops["dur_ns"], errors="coerce").fillna(0).to_numpy(dtype="float64")
    launched = pd.Series(np.arange(len(op_arr))).groupby(op_arr).indices  # op id -> its kernels' rows
    for i in np.flatnonzero(layer):
        oid = cpu_ops["op_id"].iat[i]
        mine = launched.get(float(oid))
        if mine is None or not np.isfinite(ts[i]):
            continue
        lo, hi = np.searchsorted(cts, ts[i], "left"), np.searchsorted(cts, ts[i] + dur[i], "right")
        calls = [(names.iat[j], cpu_ops["input_dims"].iat[j], conc[j]) for j in order[lo:hi] if tid[j] == tid[i]]
        info = moe_layer(cpu_ops["input_dims"].iat[i], cpu_ops["input_types"].iat[i], calls)
        if info is None:
            continue
        fmt = weight_format(sorted(set(kernel_names[mine])))
        key = (int(oid), fmt.name if fmt else info.x_dtype)
        if key not in made:  # one stand-in per layer op: a graph replay runs each layer's kernels once
            made[key] = next_id
            rows.append({"op_id": next_id, "name": MOE_STANDIN, "parent_id": None, "ts_ns": None, "dur_ns": 0,
                         "input_dims": json.dumps([[info.tokens, info.hidden],
                                                   [info.experts, info.inter, info.top_k, 1]]),
                         "input_types": json.dumps([info.x_dtype, key[1]])})
            next_id += 1
        new_col[mine] = made[key]
    if not rows:
        return gpu, cpu_ops
    gpu = gpu.copy()
    gpu["op_id"] = pd.array([None if x != x else int(x) for x in new_col], dtype="Int64")
    cpu = pd.concat([cpu_ops, pd.DataFrame(rows).astype({"op_id": "int64"})], ignore_index=True)
    return gpu, cpu
