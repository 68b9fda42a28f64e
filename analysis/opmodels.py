"""FLOPs and bytes of one CPU op from its name and input shapes (what torch.profiler records with record_shapes).

The models are first-order, TraceLens-style: a GEMM reads both operands and
writes its output once (perfect cache reuse); attention is a fused kernel that
reads Q, K, V (and a mask) and writes O once; elementwise ops read each tensor
input and write an output of the broadcast shape. Bytes are DRAM traffic in
that ideal; FLOPs count a multiply-add as 2.

Conventions (see docs/roofline.md):
- dtype sizes come from ``input_types`` (c10::Half -> 2, float -> 4, ...); an
  elementwise op writes its inputs' promoted dtype (``optensor.promoted``), a
  comparison writes bool, an op in place (``add_``) its first input's dtype.
- Attention is causal when the query length is > 1 (decoder LLMs: either
  ``is_causal`` or a causal mask); then only the pairs a causal mask keeps are
  counted: Lq*Lk - Lq*(Lq-1)/2 (exactly half plus the diagonal when Lq == Lk).
  Profiler shapes do not carry the value of ``is_causal``; pass
  ``assume_causal=False`` for encoders.
- Reductions' output size is not in the shapes (the dim is a scalar); it is
  ignored (outputs of norms are modelled, since they equal the input's shape).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from tracekit.analysis import opmodels_conv, opmodels_moe, opmodels_quant, opmodels_serving
from tracekit.analysis.opmodels_attention import (
    SERVING_ATTENTION,
    STEP_ATTENTION,
    AttentionHeads,
    attention_heads,
    serving_attention,
    serving_attention_ops,
    step_attention_cost,
    step_stats,
)
from tracekit.analysis.optensor import (
    ATTENTION,
    COPY,
    DTYPE_BYTES,
    DTYPE_KEY,
    ELEMENTWISE,
    GEMM,
    MAX_NUMEL,
    REDUCTION,
    OpCost,
    is_shape,
)
from tracekit.analysis.optensor import Tensor as _Tensor
from tracekit.analysis.optensor import broadcast as _broadcast
from tracekit.analysis.optensor import dtype_key as _key
from tracekit.analysis.optensor import get as _get
from tracekit.analysis.optensor import parse as _parse
from tracekit.analysis.optensor import promoted as _promoted
from tracekit.analysis.optensor import tensors as _tensors

__all__ = ["ATTENTION", "COPY", "DTYPE_BYTES", "DTYPE_KEY", "ELEMENTWISE", "GEMM", "MAX_NUMEL", "REDUCTION",
           "SERVING_ATTENTION", "STEP_ATTENTION", "AttentionHeads", "OpCost", "attention_heads", "is_shape",
           "serving_attention", "serving_attention_ops", "step_stats"]


# --- GEMMs -----------------------------------------------------------------


def _gemm(m: int, k: int, n: int, batch: int, a: _Tensor, b: _Tensor, extra_bytes: int = 0) -> OpCost:
    flops = 2.0 * batch * m * k * n
    out_bytes = batch * m * n * a.itemsize
    return OpCost(flops, float(a.read_bytes + b.read_bytes + out_bytes + extra_bytes), GEMM, _key(a), True)


def _mm(ts: list[_Tensor | None], a_i: int = 0) -> OpCost | None:
    a, b = _get(ts, a_i), _get(ts, a_i + 1)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return None
    extra = sum(t.read_bytes for i, t in enumerate(ts) if t is not None and i < a_i)  # addmm's bias
    return _gemm(a.shape[0], a.shape[1], b.shape[1], 1, a, b, extra)


def _bmm(ts: list[_Tensor | None], a_i: int = 0) -> OpCost | None:
    a, b = _get(ts, a_i), _get(ts, a_i + 1)
    if a is None or b is None or len(a.shape) != 3 or len(b.shape) != 3:
        return None
    extra = sum(t.read_bytes for i, t in enumerate(ts) if t is not None and i < a_i)  # baddbmm's self
    return _gemm(a.shape[1], a.shape[2], b.shape[2], a.shape[0], a, b, extra)


def _linear(ts: list[_Tensor | None]) -> OpCost | None:
    x, w = _get(ts, 0), _get(ts, 1)
    if x is None or w is None or len(w.shape) != 2 or not x.shape:
        return None
    bias = _get(ts, 2)
    m = math.prod(x.shape[:-1]) if len(x.shape) > 1 else 1
    return _gemm(m, x.shape[-1], w.shape[0], 1, x, w, bias.read_bytes if bias else 0)


def _matmul(ts: list[_Tensor | None]) -> OpCost | None:
    a, b = _get(ts, 0), _get(ts, 1)
    if a is None or b is None or not a.shape or not b.shape:
        return None
    sa, sb = a.shape, b.shape
    if len(sa) == 1:
        sa = (1, *sa)
    if len(sb) == 1:
        sb = (*sb, 1)
    if len(sb) == 2:  # (..., M, K) @ (K, N): batch folds into M
        m = math.prod(sa[:-1])
        return _gemm(m, sa[-1], sb[-1], 1, a, b)
    batch = math.prod(_broadcast([sa[:-2], sb[:-2]]))
    return _gemm(sa[-2], sa[-1], sb[-1], batch, a, b)



# --- attention -------------------------------------------------------------


def _attention_pairs(lq: int, lk: int, causal: bool) -> float:
    if not causal or lq <= 1:
        return float(lq * lk)
    # bottom-right aligned causal mask (queries are the last lq positions of lk)
    lq_eff = min(lq, lk)
    return float(lq_eff * lk - lq_eff * (lq_eff - 1) / 2)


def _attention(ts: list[_Tensor | None], layout: str, assume_causal: bool, causal: bool | None = None
               ) -> OpCost | None:
    """``causal``: the op's own flag where recorded; else ``assume_causal`` (counted as causal when Lq > 1).
    A False flag beside a mask (input 3) says nothing: the mask may be causal (Transformers passes its
    causal mask with is_causal=False), so the default holds there too."""
    q, k, v = _get(ts, 0), _get(ts, 1), _get(ts, 2)
    if causal is False and _get(ts, 3) is not None:
        causal = None
    if q is None or k is None or v is None or len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4:
        return None
    if layout == "bhld":
        b, h, lq, d = q.shape
        lk, dv = k.shape[2], v.shape[3]
    else:  # "blhd": flash / efficient forward kernels' own layout
        b, lq, h, d = q.shape
        lk, dv = k.shape[1], v.shape[3]
    pairs = _attention_pairs(lq, lk, assume_causal if causal is None else causal)
    flops = 2.0 * b * h * pairs * (d + dv)  # QK^T and PV
    out_bytes = b * h * lq * dv * q.itemsize
    mask = _get(ts, 3)
    mask_bytes = mask.read_bytes if mask is not None else 0
    read = q.read_bytes + k.read_bytes + v.read_bytes
    return OpCost(flops, float(read + out_bytes + mask_bytes), ATTENTION, _key(q), True)


# --- memory-bound ops --------------------------------------------------------


def _elementwise(flops_per_elem: float, op_class: str = ELEMENTWISE, write: bool = True,
                 out: str = "promoted") -> Callable[..., OpCost | None]:
    """An elementwise op: reads each input, writes the broadcast shape in the dtype ``out`` names: "promoted"
    (the inputs' promoted dtype: where(bool, x, float) writes float), "first" (an in-place op writes its
    self) or "bool" (a comparison)."""
    def model(ts: list[_Tensor | None]) -> OpCost | None:
        tensors = [t for t in ts if t is not None]
        if not tensors:
            return None
        first = tensors[0]
        result = _promoted(tensors)
        out_numel = math.prod(_broadcast([t.shape for t in tensors])) if any(t.shape for t in tensors) else 1
        read = sum(t.read_bytes for t in tensors)
        itemsize = first.itemsize if out == "first" else 1 if out == "bool" else result.itemsize
        written = out_numel * itemsize if write else 0
        return OpCost(flops_per_elem * out_numel, float(read + written), op_class, _key(result), False)

    return model


def _reduction(flops_per_elem: float) -> Callable[..., OpCost | None]:
    def model(ts: list[_Tensor | None]) -> OpCost | None:
        x = _get(ts, 0)
        if x is None:
            return None
        return OpCost(flops_per_elem * x.numel, float(x.read_bytes), REDUCTION, _key(x), False)

    return model


def _norm(flops_per_elem: float) -> Callable[..., OpCost | None]:
    """layer_norm / rms_norm: read x and the affine params, write y (same shape as x)."""

    def model(ts: list[_Tensor | None]) -> OpCost | None:
        x = _get(ts, 0)
        if x is None:
            return None
        params = sum(t.read_bytes for t in ts[1:] if t is not None)
        return OpCost(flops_per_elem * x.numel, float(x.read_bytes + x.nbytes + params), REDUCTION, _key(x), False)

    return model


def _rms_norm_aten(ts: list[_Tensor | None]) -> OpCost | None:
    """aten::rms_norm / _fused_rms_norm(x, normalized_shape, weight, eps): TraceLens's RMSNorm model,
    flops = rows*(2C + 2) + 2*numel (affine), bytes = read x, write y, read the weight."""
    x, w = _get(ts, 0), _get(ts, 2)
    if x is None or not x.shape:
        return None
    c = w.numel if w is not None else x.shape[-1]
    return _rms(x, c, w, x.itemsize)


def _rms(x: _Tensor, c: int, w: _Tensor | None, out_itemsize: int, extra_flops: float = 0.0,
         extra_bytes: float = 0.0) -> OpCost:
    rows = x.numel / c if c else 0
    flops = rows * (2 * c + 2) + 2 * x.numel + extra_flops
    nbytes = x.read_bytes + x.numel * out_itemsize + (w.read_bytes if w is not None else 0) + extra_bytes
    return OpCost(float(flops), float(nbytes), REDUCTION, _key(x), False)


def _softmax(ts: list[_Tensor | None]) -> OpCost | None:
    x = _get(ts, 0)
    if x is None:
        return None
    return OpCost(5.0 * x.numel, float(x.read_bytes + x.nbytes), REDUCTION, _key(x), False)


def _copy(ts: list[_Tensor | None]) -> OpCost | None:
    tensors = [t for t in ts if t is not None]
    if not tensors:
        return None
    if len(tensors) >= 2:  # copy_(dst, src): write dst, read src (dtypes may differ)
        return OpCost(0.0, float(tensors[0].nbytes + tensors[1].read_bytes), COPY, _key(tensors[1]), False)
    x = tensors[0]  # _to_copy / clone / contiguous: read x, write a tensor of its size
    return OpCost(0.0, float(x.read_bytes + x.nbytes), COPY, _key(x), False)


def _cat(ts: list[_Tensor | None]) -> OpCost | None:
    tensors = [t for t in ts if t is not None]
    if not tensors:
        return None
    return OpCost(0.0, float(sum(t.read_bytes + t.nbytes for t in tensors)), COPY, _key(tensors[0]), False)


def _fill(ts: list[_Tensor | None]) -> OpCost | None:
    x = _get(ts, 0)
    if x is None:
        return None
    return OpCost(0.0, float(x.nbytes), COPY, _key(x), False)


def _embedding(ts: list[_Tensor | None]) -> OpCost | None:
    w, idx = _get(ts, 0), _get(ts, 1)
    if w is None or idx is None or len(w.shape) != 2:
        return None
    rows = idx.numel
    return OpCost(0.0, float(idx.read_bytes + 2 * rows * w.shape[1] * w.itemsize), COPY, _key(w), False)


def _index(ts: list[_Tensor | None]) -> OpCost | None:
    """index(self, indices) / index_select(self, dim, index): gather rows of self."""
    x = _get(ts, 0)
    idx = next((t for t in ts[1:] if t is not None), None)
    if x is None:
        return None
    if idx is None or not x.shape:
        return OpCost(0.0, float(x.read_bytes + x.nbytes), COPY, _key(x), False)
    row = math.prod(x.shape[1:]) if len(x.shape) > 1 else 1
    out = idx.numel * row  # repeated indices gather a row again: the output can outgrow self
    return OpCost(0.0, float(idx.read_bytes + (min(out, x.numel) + out) * x.itemsize), COPY, _key(x), False)


def _gather(ts: list[_Tensor | None]) -> OpCost | None:
    """gather(self, dim, index): one element of self per element of index (out has index's shape);
    without the index's shape, the whole of self read and written (as for index)."""
    x = _get(ts, 0)
    idx = next((t for t in ts[1:] if t is not None), None)
    if x is None:
        return None
    if idx is None:
        return OpCost(0.0, float(x.read_bytes + x.nbytes), COPY, _key(x), False)
    return OpCost(0.0, float(idx.read_bytes + 2 * min(idx.numel, x.numel) * x.itemsize), COPY, _key(x), False)


def _sort(ts: list[_Tensor | None]) -> OpCost | None:
    """sort / argsort(self, ...): self read, its values and int64 indices written (argsort: the indices)."""
    x = _get(ts, 0)
    if x is None:
        return None
    return OpCost(0.0, float(x.read_bytes + x.nbytes + x.numel * 8), REDUCTION, _key(x), False)


def _topk(ts: list[_Tensor | None]) -> OpCost | None:
    """topk(self, k, dim, ...): self read; the k values and indices per row written are left out (k
    is a scalar the op models do not see, and few next to a row: router logits, sampling)."""
    x = _get(ts, 0)
    if x is None:
        return None
    return OpCost(0.0, float(x.read_bytes), REDUCTION, _key(x), False)


def _histc(ts: list[_Tensor | None]) -> OpCost | None:
    """histc / bincount(self, ...): self read once (the bins are few)."""
    x = _get(ts, 0)
    if x is None:
        return None
    return OpCost(float(x.numel), float(x.read_bytes), REDUCTION, _key(x), False)


def _index_copy(ts: list[_Tensor | None]) -> OpCost | None:
    """index_copy_ / index_add_(self, dim, index, source): source read, as many elements of self written
    (the rest of self untouched), the index read."""
    x, idx, src = _get(ts, 0), _get(ts, 2), _get(ts, 3)
    if x is None or src is None:
        return None
    return OpCost(0.0, float((idx.read_bytes if idx else 0) + src.read_bytes + src.numel * x.itemsize), COPY, _key(x),
                  False)


def _scatter(ts: list[_Tensor | None]) -> OpCost | None:
    """scatter_ / scatter_add_(self, dim, index, src): one element of src read and of self written per
    element of index."""
    x, idx = _get(ts, 0), _get(ts, 2)
    if x is None or idx is None:
        return None
    src = _get(ts, 3)
    n = min(idx.numel, x.numel)
    return OpCost(0.0, float(idx.read_bytes + n * x.itemsize + (n * src.itemsize if src else 0)), COPY, _key(x), False)


def _index_put(ts: list[_Tensor | None]) -> OpCost | None:
    """index_put_ / _index_put_impl_(self, indices, values, accumulate): values read and as many elements
    of self written (an accumulate's read of them is not counted: the flag's value is not kept); the
    indices (a TensorList the profiler records as []) are left out."""
    x = _get(ts, 0)
    vals = next((t for t in reversed(ts[1:]) if t is not None), None)
    if x is None or vals is None:
        return None
    n = min(vals.numel, x.numel)
    return OpCost(0.0, float(vals.read_bytes + n * x.itemsize), COPY, _key(x), False)


# --- Inductor's Triton kernels ------------------------------------------------------------------
#
# torch.compile's generated kernels run under a profiler op named after the kernel
# (triton_poi_fused_<ops>_<n>, triton_red_..., triton_per_...), whose inputs are the kernel's
# arguments: its buffers (inputs, outputs and buffers mutated in place, whole, e.g. a static KV
# cache) and then its scalars, the last of them the element counts (xnumel; r0_numel, ... for
# reductions; ynumel before xnumel for a tiled pointwise kernel), whose values are the op's
# concrete inputs. A kernel touches at most its element count of each buffer.

INDUCTOR_KINDS = {"poi": ELEMENTWISE, "red": REDUCTION, "per": REDUCTION}


def inductor_kernel(name: str, input_dims: Any, input_types: Any, concrete_inputs: Any) -> OpCost | None:
    """FLOPs and bytes of an Inductor pointwise / reduction kernel's op, or None (no element counts,
    another kind of kernel, e.g. a template GEMM).

    The elements the kernel covers are the product of its trailing scalars: the longest run of
    trailing scalars whose product is some buffer's element count (a tiled pointwise kernel's
    ynumel x xnumel, a reduction's xnumel x r0_numel), else the last one (pointwise) or last two
    (reduction). bytes = sum over buffers of min(buffer elements, elements) x itemsize (each buffer
    read or written once, a larger one only where the kernel indexes it); flops = elements.
    """
    parts = name.split("_", 2)
    if len(parts) < 3 or parts[0] != "triton" or parts[1] not in INDUCTOR_KINDS:
        return None
    dims, types, values = _parse(input_dims), _parse(input_types), _parse(concrete_inputs)
    if not values or len(values) != len(types):
        return None
    buffers: list[_Tensor] = []
    scalars: list[int] = []
    for d, t, v in zip(dims if len(dims) == len(types) else [None] * len(types), types, values, strict=True):
        if t == "Scalar":
            try:
                scalars.append(int(str(v)))
            except ValueError:
                scalars = []  # a non-integer scalar: the counts are the integers after it
            continue
        if is_shape(d) and t in DTYPE_BYTES:
            buffers.append(_Tensor(tuple(d), DTYPE_BYTES[t], t))
    if not buffers or not scalars or min(scalars) < 0:
        return None
    sizes = {b.numel for b in buffers}
    n = scalars[-1] if parts[1] == "poi" else math.prod(scalars[-2:])
    for k in range(len(scalars), 0, -1):
        if math.prod(scalars[-k:]) in sizes:
            n = math.prod(scalars[-k:])
            break
    nbytes = sum(min(b.numel, n) * b.itemsize for b in buffers)
    first = next((b for b in buffers if b.dtype in DTYPE_KEY), buffers[0])
    return OpCost(float(n), float(nbytes), INDUCTOR_KINDS[parts[1]], _key(first), False)


# --- quantized GEMMs (torchao's int8 / int4 / fp8 paths) --------------------------------------
#
# Each reads its packed weight at its own width plus the scales (and zeros) it needs, and writes
# its output once: the bytes decode streams per token at the quantized width (tracekit.model.quant).
# Output dtypes the profiler's shapes do not carry (a ScalarType argument) are taken as 2 B
# (fp16 / bf16: what torchao asks for).


def _scaled_mm(ts: list[_Tensor | None]) -> OpCost | None:
    """aten::_scaled_mm(a [M, K] fp8, b [K, N] fp8, scale_a, scale_b, bias, scale_result, out_dtype, ...):
    a and b at 1 B, the scales and bias as recorded, the output at 2 B."""
    a, b = _get(ts, 0), _get(ts, 1)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return None
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    if a.dtype == "c10::Float4_e2m1fn_x2":  # packed fp4: two values per element, K is twice the stored
        k *= 2
    extra = sum(t.nbytes for t in ts[2:6] if t is not None)
    return OpCost(2.0 * m * k * n, float(a.nbytes + b.nbytes + extra + m * n * 2), GEMM, _key(a), True)


def _int_mm(ts: list[_Tensor | None]) -> OpCost | None:
    """aten::_int_mm(a [M, K] int8, b [K, N] int8) -> int32 [M, N]: MK + KN + 4MN bytes."""
    a, b = _get(ts, 0), _get(ts, 1)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return None
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    return OpCost(2.0 * m * k * n, float(a.nbytes + b.nbytes + 4 * m * n), GEMM, "int8", True)


def _int4pack_mm(n_from_scales: bool) -> Callable[..., OpCost | None]:
    """aten::_weight_int4pack_mm(A [M, K], B packed int4, group_size, scale_and_zeros [K/g, N, 2]) (CUDA
    tinygemm: B int32 [N/8, K/(16t), 32, t/2]) and _weight_int4pack_mm_for_cpu (B uint8 [N, K/2]):
    A, the packed weight (K*N/2 B), the bf16 scales and zeros, and the [M, N] output at A's width."""

    def model(ts: list[_Tensor | None]) -> OpCost | None:
        a, w, sz = _get(ts, 0), _get(ts, 1), _get(ts, 3)
        if a is None or w is None or len(a.shape) != 2 or not w.shape:
            return None
        m, k = a.shape
        if n_from_scales:
            if sz is None or len(sz.shape) != 3:
                return None
            n = sz.shape[1]
        else:
            n = w.shape[0]
        extra = sz.nbytes if sz is not None else 0
        return OpCost(2.0 * m * k * n, float(a.nbytes + w.nbytes + extra + m * n * a.itemsize), GEMM, _key(a), True)

    return model


def _int8pack_mm(ts: list[_Tensor | None]) -> OpCost | None:
    """aten::_weight_int8pack_mm(A [M, K], B int8 [N, K], scales [N]): A, B at 1 B, the scales, the output."""
    a, w, sc = _get(ts, 0), _get(ts, 1), _get(ts, 2)
    if a is None or w is None or len(a.shape) != 2 or len(w.shape) != 2:
        return None
    m, k, n = a.shape[0], a.shape[1], w.shape[0]
    extra = sc.nbytes if sc is not None else 0
    return OpCost(2.0 * m * k * n, float(a.nbytes + w.nbytes + extra + m * n * a.itemsize), GEMM, _key(a), True)


_EW_FLOPS: dict[str, float] = {
    # activations cost a few FLOPs per element (silu: neg, exp, add, div, mul)
    "silu": 4, "gelu": 8, "gelu_tanh": 10, "sigmoid": 4, "tanh": 4, "exp": 1, "rsqrt": 1, "sqrt": 1,
    "pow": 1, "add": 1, "sub": 1, "mul": 1, "div": 1, "neg": 1, "relu": 1, "where": 1, "clamp": 1,
    "masked_fill": 1, "reciprocal": 1, "cos": 1, "sin": 1, "eq": 1, "ne": 1, "lt": 1, "gt": 1, "le": 1,
    "ge": 1, "bitwise_and": 1, "bitwise_or": 1, "bitwise_not": 1, "logical_and": 1, "abs": 1, "log": 1,
    "maximum": 1, "minimum": 1, "clamp_min": 1, "clamp_max": 1, "floor_divide": 1,
    "triu": 0, "tril": 0, "addcmul": 2, "lerp": 2, "fmod": 1, "remainder": 1,
}

_MODELS: dict[str, Callable[..., OpCost | None]] = {
    "mm": _mm,
    "addmm": lambda ts: _mm(ts, 1),
    "_addmm_activation": lambda ts: _mm(ts, 1),
    "bmm": _bmm,
    "baddbmm": lambda ts: _bmm(ts, 1),
    "linear": _linear,
    "matmul": _matmul,
    "_scaled_mm": _scaled_mm,
    "_int_mm": _int_mm,
    "_weight_int4pack_mm": _int4pack_mm(True),
    "_weight_int4pack_mm_for_cpu": _int4pack_mm(False),
    "_weight_int8pack_mm": _int8pack_mm,
    "softmax": _softmax,
    "_softmax": _softmax,
    "log_softmax": _softmax,
    "_log_softmax": _softmax,
    "_safe_softmax": _softmax,
    "layer_norm": _norm(8),
    "native_layer_norm": _norm(8),
    "rms_norm": _rms_norm_aten,
    "_fused_rms_norm": _rms_norm_aten,
    "group_norm": _norm(8),
    "native_group_norm": _norm(8),
    "mean": _reduction(1),
    "sum": _reduction(1),
    "amax": _reduction(1),
    "max": _reduction(1),
    "min": _reduction(1),
    "argmax": _reduction(1),
    "any": _reduction(1),
    "all": _reduction(1),
    "norm": _reduction(2),
    "var": _reduction(3),
    "cumsum": _elementwise(1, REDUCTION),
    "copy_": _copy,
    "_to_copy": _copy,
    "to": _copy,
    "clone": _copy,
    "contiguous": _copy,
    "cat": _cat,
    "stack": _cat,
    "fill_": _fill,
    "zero_": _fill,
    "embedding": _embedding,
    "index": _index,
    "index_select": _index,
    "gather": _gather,
    "sort": _sort,
    "argsort": _sort,
    "topk": _topk,
    "histc": _histc,
    "bincount": _histc,
    "index_copy": _index_copy,
    "index_add": _index_copy,
    "scatter": _scatter,
    "scatter_add": _scatter,
    "index_put": _index_put,
    "_index_put_impl": _index_put,
    "normal": _fill,
    "uniform": _fill,
    "exponential": _fill,
    "bernoulli": _fill,
}
# comparisons write bool; every elementwise op in place writes its self's dtype
_COMPARISONS = frozenset({"eq", "ne", "lt", "gt", "le", "ge", "logical_and"})
for _n, _f in _EW_FLOPS.items():
    _MODELS.setdefault(_n, _elementwise(_f, out="bool" if _n in _COMPARISONS else "promoted"))
_IN_PLACE: dict[str, Callable[..., OpCost | None]] = {_n: _elementwise(_f, out="first") for _n, _f in _EW_FLOPS.items()}

# name -> (layout, the position of its causal flag among the arguments, or None)
_ATTN: dict[str, tuple[str, int | None]] = {
    "scaled_dot_product_attention": ("bhld", 5),  # (q, k, v, attn_mask, dropout_p, is_causal, ...)
    "_scaled_dot_product_flash_attention": ("bhld", 4),  # (q, k, v, dropout_p, is_causal, ...)
    "_scaled_dot_product_efficient_attention": ("bhld", 6),  # (q, k, v, attn_bias, lse, dropout_p, is_causal)
    "_scaled_dot_product_cudnn_attention": ("bhld", 6),
    "_scaled_dot_product_flash_attention_for_cpu": ("bhld", 4),
    "_flash_attention_forward": ("blhd", 8),  # (q, k, v, cum_q, cum_k, max_q, max_k, dropout_p, is_causal)
    "_efficient_attention_forward": ("blhd", 9),  # custom_mask_type: 0 none, 1 / 2 causal
    "_efficient_attention": ("bhld", None),
}
# attention ops outside aten, modelled from their shapes: flash-attn's own op, SageAttention's Triton
# forward (launched under its kernel's name by Inductor; non-causal unless told: diffusion)
_ATTN_OTHER: dict[str, tuple[str, int | None]] = {
    "flash_attn::_flash_attn_forward": ("blhd", 5),  # (q, k, v, dropout_p, softmax_scale, causal, ...)
}


def causal_flag(values: list[Any], at: int | None) -> bool | None:
    """The causal flag an attention op recorded (Concrete Inputs): 'True' / 'False', or a mask type
    (0: none); None where the trace has no value there."""
    if at is None or at >= len(values):
        return None
    v = str(values[at]).strip()
    if v in ("True", "true"):
        return True
    if v in ("False", "false"):
        return False
    try:
        return int(v) != 0
    except ValueError:
        return None


# --- serving kernels (vLLM, SGLang, aiter custom ops) ---------------------------------------
#
# The ops engines call instead of aten's, by their registered names. Where TraceLens models the same
# op, its formula is used exactly (docs/roofline.md, "Serving kernels"): SiLU-mul, aiter RMSNorm,
# fused MoE, grouped GEMM, paged/varlen attention.


def _rms_out_in_w(ts: list[_Tensor | None]) -> OpCost | None:
    """vLLM _C::rms_norm(out, input, weight, eps), sgl_kernel::rmsnorm(out, input, weight, ...)."""
    x, w = _get(ts, 1), _get(ts, 2)
    if x is None or w is None or not x.shape:
        return None
    out = _get(ts, 0)
    return _rms(x, w.numel, w, out.itemsize if out is not None else x.itemsize)


def _rms_in_w(ts: list[_Tensor | None]) -> OpCost | None:
    """aiter::rms_norm(input, weight, eps) and aiter's rmsnorm2d (TraceLens: C = weight's size)."""
    x, w = _get(ts, 0), _get(ts, 1)
    if x is None or w is None or not x.shape:
        return None
    return _rms(x, w.numel, w, x.itemsize)


def _fused_add_rms(ts: list[_Tensor | None]) -> OpCost | None:
    """_C::fused_add_rms_norm(input, residual, weight, eps) (sgl_kernel::fused_add_rmsnorm): residual +=
    input, input = RMSNorm(residual): the norm, plus the add (1 FLOP/elem) and the residual read and written."""
    x, r, w = _get(ts, 0), _get(ts, 1), _get(ts, 2)
    if x is None or r is None or w is None or not x.shape:
        return None
    return _rms(x, w.numel, w, x.itemsize, extra_flops=x.numel, extra_bytes=2 * r.nbytes)


def _act_and_mul(flops_per_elem: float) -> Callable[..., OpCost | None]:
    """silu_and_mul(out [T, I], input [T, 2I]) and the gelu variants: TraceLens's model,
    flops = k * numel(out), bytes = 2 * numel(out) * bpe(input) + numel(out) * bpe(out)."""

    def model(ts: list[_Tensor | None]) -> OpCost | None:
        out, x = _get(ts, 0), _get(ts, 1)
        if out is None or x is None:
            return None
        n = out.numel
        return OpCost(flops_per_elem * n, float(2 * n * x.itemsize + n * out.itemsize), ELEMENTWISE, _key(x), False)

    return model


def _rotary(ts: list[_Tensor | None]) -> OpCost | None:
    """_C::rotary_embedding(positions [T], query [T, Hq*D], key [T, Hkv*D], head_size, cos_sin_cache, is_neox):
    query and key rotated in place (3 FLOPs and a read and a write per element, TraceLens's RoPE
    model), plus the positions and the cache rows they select."""
    pos, q, k, cache = _get(ts, 0), _get(ts, 1), _get(ts, 2), _get(ts, 4)
    if q is None:
        return None
    n = q.numel + (k.numel if k is not None else 0)
    rows = pos.numel if pos is not None else (q.shape[0] if q.shape else 1)
    cache_bytes = rows * cache.shape[-1] * cache.itemsize if cache is not None and cache.shape else 0
    return OpCost(3.0 * n, float(2 * n * q.itemsize + (pos.nbytes if pos is not None else 0) + cache_bytes),
                  ELEMENTWISE, _key(q), False)


def _grouped_mm(ts: list[_Tensor | None]) -> OpCost | None:
    """aten::_grouped_mm(mat_a [M, K], mat_b [G, K, N], offs [G], ...): TraceLens's grouped GEMM,
    flops = 2MKN, bytes = (MK + GKN) * bpe_in + MN * bpe_out, with G at most M: each row belongs to one
    group, and a group without rows reads no weights (a decode step's few tokens hit few experts). The
    offsets are not recorded, so every group that can have rows is counted."""
    a, b = _get(ts, 0), _get(ts, 1)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 3:
        return None
    m, k = a.shape
    gsz, n = min(b.shape[0], m), b.shape[2]
    out_size = 2 if a.itemsize == 1 else a.itemsize
    return OpCost(2.0 * m * k * n, float((m * k + gsz * k * n) * a.itemsize + m * n * out_size), GEMM, _key(a), True,
                  (m, b.shape[0]))


_SERVING: dict[str, Callable[..., OpCost | None]] = {
    "_C::rms_norm": _rms_out_in_w,
    "sgl_kernel::rmsnorm": _rms_out_in_w,
    "_C::fused_add_rms_norm": _fused_add_rms,
    "sgl_kernel::fused_add_rmsnorm": _fused_add_rms,
    "aiter::rms_norm": _rms_in_w,
    "aiter::rmsnorm2d_fwd": _rms_in_w,
    "_C::silu_and_mul": _act_and_mul(5),
    "sgl_kernel::silu_and_mul": _act_and_mul(5),
    "aiter::silu_and_mul": _act_and_mul(5),
    "_C::gelu_and_mul": _act_and_mul(8),
    "sgl_kernel::gelu_and_mul": _act_and_mul(8),
    "_C::gelu_tanh_and_mul": _act_and_mul(10),
    "sgl_kernel::gelu_tanh_and_mul": _act_and_mul(10),
    "_C::rotary_embedding": _rotary,
    "aiter::rmsnorm": _rms_out_in_w,
    "aiter::_groupnorm_run": _norm(8),  # (x, num_groups, weight, bias, eps)
    "sgl_kernel::rotary_embedding": _rotary,
    "aten::_grouped_mm": _grouped_mm,
    "aten::_scaled_grouped_mm": _grouped_mm,
}
_SERVING.update(opmodels_moe.MODELS)
_SERVING.update(opmodels_serving.MODELS)
_SERVING.update(opmodels_quant.MODELS)
# ops whose model reads the scalars' values (Concrete Inputs): their values are part of the op's key
_WITH_VALUES: dict[str, Callable[..., OpCost | None]] = {**opmodels_moe.MODELS_WITH_VALUES,
                                                         **opmodels_conv.MODELS_WITH_VALUES}

def base_name(name: str) -> str:
    """'aten::add_' -> 'add' (in-place and out variants share the model); 'aten::copy_' stays."""
    n = name.split("::", 1)[-1]
    if n in _MODELS or n in _ATTN:
        return n
    if n.endswith("_") and n[:-1] in _MODELS:
        return n[:-1]
    return n


def uses_values(name: str) -> bool:
    """Whether an op's model reads its scalars' values (Concrete Inputs), which then key its cost."""
    if not isinstance(name, str):
        return False
    if name.startswith("triton_"):
        return True
    name = opmodels_serving.canonical_name(name)
    return name in _WITH_VALUES or name in _ATTN_OTHER or (name.startswith("aten::") and base_name(name) in _ATTN)


def is_modelled(name: str) -> bool:
    name = opmodels_serving.canonical_name(name)
    if name in _SERVING or name in _WITH_VALUES or name in _ATTN_OTHER or name in (STEP_ATTENTION,
                                                                                  opmodels_moe.MOE_STANDIN):
        return True
    if name.startswith("triton_"):
        return name.split("_", 2)[1] in INDUCTOR_KINDS
    n = base_name(name)
    return name.startswith("aten::") and (n in _MODELS or n in _ATTN)


def op_cost(
    name: str, input_dims: Any, input_types: Any, *, assume_causal: bool = True, list_dtype: str | None = None,
    concrete_inputs: Any = None, input_strides: Any = None,
) -> OpCost | None:
    """FLOPs and bytes of one op, or None where no model applies (unknown op or shapes missing).

    ``input_dims`` / ``input_types``: the JSON text of the cpu_ops columns (or already parsed lists).
    ``list_dtype``: the input_types text to assume for TensorList inputs (cat, stack), whose
    dtype the profiler does not record; None -> float. ``concrete_inputs``: the scalars' values
    (JSON text), which Inductor's kernels need (``inductor_kernel``). ``input_strides``: the inputs'
    strides (JSON text, cpu_ops' column; null where dense): an expanded input is read once per
    distinct element (``_Tensor.read_bytes``).
    """
    if not isinstance(name, str):
        return None
    if name.startswith("triton_"):
        return inductor_kernel(name, input_dims, input_types, concrete_inputs)
    if name == STEP_ATTENTION:
        return step_attention_cost(_parse(input_dims), _parse(input_types))
    if name == opmodels_moe.MOE_STANDIN:
        return opmodels_moe.moe_standin(_parse(input_dims), _parse(input_types))
    name = opmodels_serving.canonical_name(name)
    strides = _parse(input_strides) or None
    if name in _WITH_VALUES or name in _ATTN_OTHER:
        ts = _tensors(_parse(input_dims), _parse(input_types), list_dtype, strides)
        values = _parse(concrete_inputs)
        try:
            if name in _ATTN_OTHER:
                layout, at = _ATTN_OTHER[name]
                return _attention(ts, layout, assume_causal, causal_flag(values, at))
            return _WITH_VALUES[name](ts, values)
        except (ValueError, TypeError, IndexError, OverflowError, ZeroDivisionError):
            return None
    if name in _SERVING:
        try:
            return _SERVING[name](_tensors(_parse(input_dims), _parse(input_types), list_dtype, strides))
        except (ValueError, TypeError, IndexError, OverflowError, ZeroDivisionError):
            return None
    if not name.startswith("aten::"):
        return None
    n = base_name(name)
    ts = _tensors(_parse(input_dims), _parse(input_types), list_dtype, strides)
    try:
        if n in _ATTN:
            layout, at = _ATTN[n]
            return _attention(ts, layout, assume_causal, causal_flag(_parse(concrete_inputs), at))
        in_place = name.split("::", 1)[-1] == n + "_"  # base_name took the trailing underscore off
        model = (_IN_PLACE.get(n) if in_place else None) or _MODELS.get(n)
        return model(ts) if model else None
    except (ValueError, TypeError, IndexError, OverflowError):
        return None  # malformed shapes: unmodelled, never a crash


def dominant_dtype(cpu_ops: Any) -> str | None:
    """The most frequent floating dtype among the run's GEMM inputs (else all inputs): the model's dtype."""
    if cpu_ops is None or len(cpu_ops) == 0:
        return None
    from tracekit.analysis.columns import is_in

    gemm = cpu_ops[is_in(cpu_ops["name"], ["aten::linear", "aten::mm", "aten::addmm", "aten::bmm", "aten::matmul"])]
    src = gemm if len(gemm) else cpu_ops
    counts: dict[str, int] = {}
    for text, n in src["input_types"].astype(str).value_counts().items():
        for t in _parse(text):
            if isinstance(t, str) and t in DTYPE_KEY and t != "signed char":
                counts[t] = counts.get(t, 0) + int(n)
    return max(counts, key=lambda k: counts[k]) if counts else None


INDEX_OPS = ("aten::index",)


def with_index_shapes(cpu_ops: Any) -> Any:
    """cpu_ops with the index shape of each ``aten::index`` whose indices the profiler did not record.

    The indices are a TensorList, which the trace writes as ``[]``, so the op's output is unknown and
    its whole input would stand for it (a gather of 8 experts' weights out of 128 counted 16x over).
    The op's TensorIterator restrides its input to the gathered shape with an ``aten::as_strided``
    child, whose concrete size is recorded: where its trailing dims are the input's past the first,
    its leading dims are the index's. Other rows, and traces without the children, are unchanged.
    """
    import numpy as np
    import pandas as pd

    from tracekit.analysis.columns import is_in

    if cpu_ops is None or not len(cpu_ops) or not {"parent_id", "concrete_inputs", "input_dims"} <= set(cpu_ops):
        return cpu_ops
    index = is_in(cpu_ops["name"], INDEX_OPS)
    if not index.any():
        return cpu_ops
    ix = cpu_ops.loc[index, ["op_id", "input_dims", "input_types"]]
    ch = cpu_ops.loc[is_in(cpu_ops["name"], ("aten::as_strided",)), ["parent_id", "input_dims", "concrete_inputs"]]
    ch = ch[pd.to_numeric(ch["parent_id"], errors="coerce").isin(pd.to_numeric(ix["op_id"], errors="coerce"))]
    if ch.empty:
        return cpu_ops
    first = {p: (d, c) for p, d, c in zip(ch["parent_id"].to_numpy()[::-1], ch["input_dims"].to_numpy()[::-1],
                                         ch["concrete_inputs"].to_numpy()[::-1], strict=True)}
    dims = cpu_ops["input_dims"].to_numpy(dtype=object).copy()
    types = cpu_ops["input_types"].to_numpy(dtype=object).copy()
    done: dict[tuple[Any, ...], tuple[str, str] | None] = {}
    changed = False
    for pos, op, d, t in zip(np.flatnonzero(index), ix["op_id"], ix["input_dims"], ix["input_types"], strict=True):
        child = first.get(op)
        if child is None:
            continue
        key = (d, t, *child)
        if key not in done:
            done[key] = _index_shape(d, t, *child)
        shaped = done[key]
        if shaped is not None:
            dims[pos], types[pos] = shaped
            changed = True
    if not changed:
        return cpu_ops
    out = cpu_ops.copy(deep=False)
    out["input_dims"] = pd.Series(dims, index=cpu_ops.index, dtype=object)
    out["input_types"] = pd.Series(types, index=cpu_ops.index, dtype=object)
    return out


def _index_shape(dims: Any, types: Any, child_dims: Any, child_concrete: Any) -> tuple[str, str] | None:
    """(input_dims, input_types) of an aten::index with its index shape, from its as_strided child."""
    d, t, cd, cc = _parse(dims), _parse(types), _parse(child_dims), _parse(child_concrete)
    if len(d) < 2 or d[1] != [] or not is_shape(d[0]) or len(d[0]) < 1 or not cd or cd[0] != d[0] or len(cc) < 2:
        return None
    size = _parse(cc[1])
    rest = d[0][1:]
    if not is_shape(size) or len(size) < len(rest) or (rest and size[len(size) - len(rest):] != rest):
        return None
    lead = size[:len(size) - len(rest)]
    if not lead:
        return None
    return json.dumps([d[0], lead, *d[2:]]), json.dumps([t[0] if t else "", "long int", *t[2:]])


_COST_COLS = ["flops", "bytes", "op_class", "dtype", "tensor_core", "group_rows", "groups"]


def op_costs(cpu_ops: Any, *, assume_causal: bool = True, list_dtype: str | None = None) -> Any:
    """Per-op costs of a cpu_ops DataFrame: op_id, op_name, flops, bytes, op_class, dtype, tensor_core,
    group_rows and groups (a grouped GEMM's rows and groups, else 0).

    Rows without a model are absent. Each distinct (name, input_dims, input_types, input_strides) is
    modelled once: a decode run repeats the same few hundred shapes thousands of times.
    """
    import pandas as pd

    cols = ["op_id", "op_name", "flops", "bytes", "op_class", "dtype", "tensor_core", "group_rows", "groups"]
    if cpu_ops is None or len(cpu_ops) == 0:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    list_dtype = list_dtype or dominant_dtype(cpu_ops)
    cpu_ops = with_index_shapes(cpu_ops)
    fast = _op_costs_by_code(cpu_ops, cols, assume_causal, list_dtype)
    if fast is not None:
        return fast
    df = cpu_ops[["op_id", "name", "input_dims", "input_types"]].copy()
    df["concrete_inputs"] = cpu_ops.get("concrete_inputs")
    df["input_strides"] = cpu_ops.get("input_strides")
    df["name"] = df["name"].astype(str)
    triton = df["name"].map(uses_values).astype(bool)
    df = df[df["name"].str.startswith("aten::") | df["name"].map(is_modelled).astype(bool) | triton]
    # the scalars' values matter only to Inductor's kernels: elsewhere they would split the cache
    df.loc[~triton[df.index], "concrete_inputs"] = None
    key_cols = ["name", "input_dims", "input_types", "concrete_inputs", "input_strides"]
    keys = df[key_cols].astype(str)
    uniq = keys.drop_duplicates()
    rows = []
    for name, dims, types, concrete, strides in uniq.itertuples(index=False):
        c = op_cost(name, dims, types, assume_causal=assume_causal, list_dtype=list_dtype, concrete_inputs=concrete,
                    input_strides=strides)
        if c is not None:
            rows.append((name, dims, types, concrete, strides, c.flops, c.bytes, c.op_class, c.dtype, c.tensor_core,
                         *(c.groups or (0, 0))))
    costs = pd.DataFrame(rows, columns=[*key_cols, *_COST_COLS])
    costs[key_cols] = costs[key_cols].astype(str)  # an empty frame's columns are float
    merged = keys.assign(op_id=df["op_id"].to_numpy()).merge(costs, on=key_cols, how="inner")
    return merged.rename(columns={"name": "op_name"})[cols].reset_index(drop=True)


def _op_costs_by_code(cpu_ops: Any, cols: list[str], assume_causal: bool, list_dtype: str | None) -> Any:
    """op_costs' frame, from each column's distinct values (``text_codes``) instead of its text per row
    and a merge: the same rows in the same order (the merge kept the ops' order), the same values and
    dtypes (the cost columns are taken from one frame of the distinct costs). None where no op is
    modelled (op_costs builds the empty frame)."""
    import numpy as np
    import pandas as pd

    from tracekit.analysis.columns import combine_codes, text_codes

    n_code, n_text = text_codes(cpu_ops["name"])
    triton = np.array([uses_values(t) for t in n_text], dtype=bool)  # the ops whose scalars' values matter
    wanted = triton | np.array([isinstance(t, str) and (t.startswith("aten::") or is_modelled(t)) for t in n_text],
                               dtype=bool)
    rows = np.flatnonzero(wanted[n_code]) if len(n_code) else np.zeros(0, dtype=np.int64)
    if not len(rows):
        return None
    # Most ops are modelled: a column is coded whole and its codes taken at the rows (no copy of its
    # strings); where few are, the rows' values alone. Only which rows share a code matters below.
    whole = 2 * len(rows) >= len(n_code)

    def coded(col: str) -> tuple[Any, list[Any]]:
        if not whole:
            return text_codes(cpu_ops[col].iloc[rows])
        codes, texts = text_codes(cpu_ops[col])
        return codes[rows], texts

    d_code, d_text = coded("input_dims")
    t_code, t_text = coded("input_types")
    # the scalars' values matter only to Inductor's kernels (code -1 elsewhere: one key per shape)
    c_code, c_text = (coded("concrete_inputs") if "concrete_inputs" in cpu_ops
                      else (np.full(len(rows), -1, dtype=np.int64), []))
    c_code = np.where(triton[n_code[rows]], c_code, -1)
    s_code, s_text = (coded("input_strides") if "input_strides" in cpu_ops
                      else (np.full(len(rows), -1, dtype=np.int64), []))
    key = combine_codes(n_code[rows], d_code, t_code, c_code, s_code)
    first = np.empty(int(key.max()) + 1, dtype=np.int64)
    first[key[::-1]] = np.arange(len(key) - 1, -1, -1)
    found: dict[tuple[Any, ...], int] = {}  # distinct texts -> its row in ``costs``
    costs_rows: list[tuple[Any, ...]] = []
    of_key = np.full(len(first), -1, dtype=np.int64)
    for k, r in enumerate(first.tolist()):
        texts = (n_text[n_code[rows[r]]], d_text[d_code[r]], t_text[t_code[r]],
                 c_text[c_code[r]] if c_code[r] >= 0 else None, s_text[s_code[r]] if s_code[r] >= 0 else None)
        at = found.get(texts)
        if at is None:
            c = op_cost(*texts[:3], assume_causal=assume_causal, list_dtype=list_dtype, concrete_inputs=texts[3],
                        input_strides=texts[4])
            at = found[texts] = -1 if c is None else len(costs_rows)
            if c is not None:
                costs_rows.append((c.flops, c.bytes, c.op_class, c.dtype, c.tensor_core, *(c.groups or (0, 0))))
        of_key[k] = at
    if not costs_rows:
        return None
    costs = pd.DataFrame(costs_rows, columns=_COST_COLS)
    at = of_key[key]
    keep = at >= 0
    sel, at = rows[keep], at[keep]
    names = np.array(n_text, dtype=object)
    op_id = cpu_ops["op_id"].iloc[rows].to_numpy()[keep]  # the dtype the ops the name test kept give
    out = pd.DataFrame({"op_id": op_id, "op_name": names[n_code[sel]]})
    for col in costs.columns:
        out[col] = costs[col].take(at).reset_index(drop=True)
    return out[cols]
