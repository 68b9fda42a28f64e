"""FLOPs and bytes of one CPU op from its name and input shapes (what torch.profiler records with record_shapes).

The models are first-order, TraceLens-style: a GEMM reads both operands and
writes its output once (perfect cache reuse); attention is a fused kernel that
reads Q, K, V (and a mask) and writes O once; elementwise ops read each tensor
input and write an output of the broadcast shape. Bytes are DRAM traffic in
that ideal; FLOPs count a multiply-add as 2.

Conventions (see docs/roofline.md):
- dtype sizes come from ``input_types`` (c10::Half -> 2, float -> 4, ...); the
  output of an elementwise op has the dtype of its first tensor input (type
  promotion is not modelled).
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# input_types text -> bytes per element
DTYPE_BYTES: dict[str, int] = {
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "float": 4,
    "double": 8,
    "long int": 8,
    "long": 8,
    "int": 4,
    "short int": 2,
    "bool": 1,
    "unsigned char": 1,
    "signed char": 1,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
}
# input_types text -> ceiling dtype key (tracekit.model.ceilings.DTYPES)
DTYPE_KEY: dict[str, str] = {
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "float": "fp32",
    "double": "fp64",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
    "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8",
    "signed char": "int8",
}

# op classes: also used as kernel classes (analysis/kernels.py)
GEMM = "gemm"
ATTENTION = "attention"
ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
COPY = "copy"


@dataclass(frozen=True)
class OpCost:
    flops: float
    bytes: float
    op_class: str
    dtype: str  # ceiling dtype key of the compute (fp16, bf16, fp32, ...)
    tensor_core: bool  # True: compare with the dtype's tensor-core peak; False: the fp32 (vector) peak

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes > 0 else math.inf


@dataclass(frozen=True)
class _Tensor:
    shape: tuple[int, ...]
    itemsize: int
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


def _parse(text: Any) -> list[Any]:
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return []
    if isinstance(text, list):
        return text
    try:
        v = json.loads(text)
    except (TypeError, ValueError):
        return []
    return v if isinstance(v, list) else []


def _is_shape(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, int) for x in v)


def _tensors(dims: list[Any], types: list[Any], list_dtype: str | None = None) -> list[_Tensor | None]:
    """One entry per op input: a tensor (shape + dtype) or None for scalars / absent optionals.

    A TensorList input (cat, stack) is expanded in place into its tensors, all
    with the dtype of the first typed tensor of the op.
    """
    # The profiler records no dtype for a TensorList: the first typed input's, else the caller's guess.
    default = next((t for t in types if isinstance(t, str) and t in DTYPE_BYTES), list_dtype or "float")
    out: list[_Tensor | None] = []
    for i, d in enumerate(dims):
        t = types[i] if i < len(types) and isinstance(types[i], str) else ""
        if _is_shape(d) and t in DTYPE_BYTES and d:
            out.append(_Tensor(tuple(d), DTYPE_BYTES[t], t))
        elif _is_shape(d) and t in DTYPE_BYTES:  # 0-d tensor
            out.append(_Tensor((), DTYPE_BYTES[t], t))
        elif isinstance(d, list) and d and all(_is_shape(x) for x in d) and (t in ("TensorList", "GenericList", "")):
            for x in d:
                out.append(_Tensor(tuple(x), DTYPE_BYTES[default], default))
        else:
            out.append(None)
    return out


def _broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    n = max((len(s) for s in shapes), default=0)
    res = [1] * n
    for s in shapes:
        for i, v in enumerate(reversed(s)):
            j = n - 1 - i
            if v != 1:
                res[j] = v if res[j] == 1 else max(res[j], v)
    return tuple(res)


def _key(t: _Tensor) -> str:
    return DTYPE_KEY.get(t.dtype, "fp32")


# --- GEMMs -----------------------------------------------------------------


def _gemm(m: int, k: int, n: int, batch: int, a: _Tensor, b: _Tensor, extra_bytes: int = 0) -> OpCost:
    flops = 2.0 * batch * m * k * n
    out_bytes = batch * m * n * a.itemsize
    return OpCost(flops, float(a.nbytes + b.nbytes + out_bytes + extra_bytes), GEMM, _key(a), True)


def _mm(ts: list[_Tensor | None], a_i: int = 0) -> OpCost | None:
    a, b = _get(ts, a_i), _get(ts, a_i + 1)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return None
    extra = sum(t.nbytes for i, t in enumerate(ts) if t is not None and i < a_i)  # addmm's bias
    return _gemm(a.shape[0], a.shape[1], b.shape[1], 1, a, b, extra)


def _bmm(ts: list[_Tensor | None], a_i: int = 0) -> OpCost | None:
    a, b = _get(ts, a_i), _get(ts, a_i + 1)
    if a is None or b is None or len(a.shape) != 3 or len(b.shape) != 3:
        return None
    extra = sum(t.nbytes for i, t in enumerate(ts) if t is not None and i < a_i)  # baddbmm's self
    return _gemm(a.shape[1], a.shape[2], b.shape[2], a.shape[0], a, b, extra)


def _linear(ts: list[_Tensor | None]) -> OpCost | None:
    x, w = _get(ts, 0), _get(ts, 1)
    if x is None or w is None or len(w.shape) != 2 or not x.shape:
        return None
    bias = _get(ts, 2)
    m = math.prod(x.shape[:-1]) if len(x.shape) > 1 else 1
    return _gemm(m, x.shape[-1], w.shape[0], 1, x, w, bias.nbytes if bias else 0)


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


def _get(ts: list[_Tensor | None], i: int) -> _Tensor | None:
    return ts[i] if i < len(ts) else None


# --- attention -------------------------------------------------------------


def _attention_pairs(lq: int, lk: int, causal: bool) -> float:
    if not causal or lq <= 1:
        return float(lq * lk)
    # bottom-right aligned causal mask (queries are the last lq positions of lk)
    lq_eff = min(lq, lk)
    return float(lq_eff * lk - lq_eff * (lq_eff - 1) / 2)


def _attention(ts: list[_Tensor | None], layout: str, assume_causal: bool) -> OpCost | None:
    q, k, v = _get(ts, 0), _get(ts, 1), _get(ts, 2)
    if q is None or k is None or v is None or len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4:
        return None
    if layout == "bhld":
        b, h, lq, d = q.shape
        lk, dv = k.shape[2], v.shape[3]
    else:  # "blhd": flash / efficient forward kernels' own layout
        b, lq, h, d = q.shape
        lk, dv = k.shape[1], v.shape[3]
    pairs = _attention_pairs(lq, lk, assume_causal)
    flops = 2.0 * b * h * pairs * (d + dv)  # QK^T and PV
    out_bytes = b * h * lq * dv * q.itemsize
    mask = _get(ts, 3)
    mask_bytes = mask.nbytes if mask is not None else 0
    return OpCost(flops, float(q.nbytes + k.nbytes + v.nbytes + out_bytes + mask_bytes), ATTENTION, _key(q), True)


# --- memory-bound ops --------------------------------------------------------


def _elementwise(flops_per_elem: float, op_class: str = ELEMENTWISE, write: bool = True) -> Callable[..., OpCost | None]:
    def model(ts: list[_Tensor | None]) -> OpCost | None:
        tensors = [t for t in ts if t is not None]
        if not tensors:
            return None
        first = tensors[0]
        out_numel = math.prod(_broadcast([t.shape for t in tensors])) if any(t.shape for t in tensors) else 1
        read = sum(t.nbytes for t in tensors)
        written = out_numel * first.itemsize if write else 0
        return OpCost(flops_per_elem * out_numel, float(read + written), op_class, _key(first), False)

    return model


def _reduction(flops_per_elem: float) -> Callable[..., OpCost | None]:
    def model(ts: list[_Tensor | None]) -> OpCost | None:
        x = _get(ts, 0)
        if x is None:
            return None
        return OpCost(flops_per_elem * x.numel, float(x.nbytes), REDUCTION, _key(x), False)

    return model


def _norm(flops_per_elem: float) -> Callable[..., OpCost | None]:
    """layer_norm / rms_norm: read x and the affine params, write y (same shape as x)."""

    def model(ts: list[_Tensor | None]) -> OpCost | None:
        x = _get(ts, 0)
        if x is None:
            return None
        params = sum(t.nbytes for t in ts[1:] if t is not None)
        return OpCost(flops_per_elem * x.numel, float(2 * x.nbytes + params), REDUCTION, _key(x), False)

    return model


def _softmax(ts: list[_Tensor | None]) -> OpCost | None:
    x = _get(ts, 0)
    if x is None:
        return None
    return OpCost(5.0 * x.numel, float(2 * x.nbytes), REDUCTION, _key(x), False)


def _copy(ts: list[_Tensor | None]) -> OpCost | None:
    tensors = [t for t in ts if t is not None]
    if not tensors:
        return None
    if len(tensors) >= 2:  # copy_(dst, src): write dst, read src (dtypes may differ)
        return OpCost(0.0, float(tensors[0].nbytes + tensors[1].nbytes), COPY, _key(tensors[1]), False)
    x = tensors[0]  # _to_copy / clone / contiguous: read x, write a tensor of its size
    return OpCost(0.0, float(2 * x.nbytes), COPY, _key(x), False)


def _cat(ts: list[_Tensor | None]) -> OpCost | None:
    tensors = [t for t in ts if t is not None]
    if not tensors:
        return None
    return OpCost(0.0, float(2 * sum(t.nbytes for t in tensors)), COPY, _key(tensors[0]), False)


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
    return OpCost(0.0, float(idx.nbytes + 2 * rows * w.shape[1] * w.itemsize), COPY, _key(w), False)


def _index(ts: list[_Tensor | None]) -> OpCost | None:
    """index(self, indices) / index_select(self, dim, index): gather rows of self."""
    x = _get(ts, 0)
    idx = next((t for t in ts[1:] if t is not None), None)
    if x is None:
        return None
    if idx is None or not x.shape:
        return OpCost(0.0, float(2 * x.nbytes), COPY, _key(x), False)
    row = math.prod(x.shape[1:]) if len(x.shape) > 1 else 1
    out = min(idx.numel * row, x.numel)
    return OpCost(0.0, float(idx.nbytes + 2 * out * x.itemsize), COPY, _key(x), False)


_EW_FLOPS: dict[str, float] = {
    # activations cost a few FLOPs per element (silu: neg, exp, add, div, mul)
    "silu": 4, "gelu": 8, "gelu_tanh": 10, "sigmoid": 4, "tanh": 4, "exp": 1, "rsqrt": 1, "sqrt": 1,
    "pow": 1, "add": 1, "sub": 1, "mul": 1, "div": 1, "neg": 1, "relu": 1, "where": 1, "clamp": 1,
    "masked_fill": 1, "reciprocal": 1, "cos": 1, "sin": 1, "eq": 1, "ne": 1, "lt": 1, "gt": 1, "le": 1,
    "ge": 1, "bitwise_and": 1, "bitwise_or": 1, "bitwise_not": 1, "logical_and": 1, "abs": 1, "log": 1,
    "maximum": 1, "minimum": 1, "triu": 0, "tril": 0, "addcmul": 2, "lerp": 2, "fmod": 1, "remainder": 1,
}

_MODELS: dict[str, Callable[..., OpCost | None]] = {
    "mm": _mm,
    "addmm": lambda ts: _mm(ts, 1),
    "_addmm_activation": lambda ts: _mm(ts, 1),
    "bmm": _bmm,
    "baddbmm": lambda ts: _bmm(ts, 1),
    "linear": _linear,
    "matmul": _matmul,
    "_scaled_mm": _mm,
    "softmax": _softmax,
    "_softmax": _softmax,
    "log_softmax": _softmax,
    "_log_softmax": _softmax,
    "_safe_softmax": _softmax,
    "layer_norm": _norm(8),
    "native_layer_norm": _norm(8),
    "rms_norm": _norm(4),
    "_fused_rms_norm": _norm(4),
    "group_norm": _norm(8),
    "native_group_norm": _norm(8),
    "mean": _reduction(1),
    "sum": _reduction(1),
    "amax": _reduction(1),
    "max": _reduction(1),
    "min": _reduction(1),
    "argmax": _reduction(1),
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
    "gather": _index,
}
for _n, _f in _EW_FLOPS.items():
    _MODELS.setdefault(_n, _elementwise(_f))

_ATTN: dict[str, str] = {
    "scaled_dot_product_attention": "bhld",
    "_scaled_dot_product_flash_attention": "bhld",
    "_scaled_dot_product_efficient_attention": "bhld",
    "_scaled_dot_product_cudnn_attention": "bhld",
    "_scaled_dot_product_flash_attention_for_cpu": "bhld",
    "_flash_attention_forward": "blhd",
    "_efficient_attention_forward": "blhd",
    "_efficient_attention": "bhld",
}


def base_name(name: str) -> str:
    """'aten::add_' -> 'add' (in-place and out variants share the model); 'aten::copy_' stays."""
    n = name.split("::", 1)[-1]
    if n in _MODELS or n in _ATTN:
        return n
    if n.endswith("_") and n[:-1] in _MODELS:
        return n[:-1]
    return n


def is_modelled(name: str) -> bool:
    n = base_name(name)
    return name.startswith("aten::") and (n in _MODELS or n in _ATTN)


def op_cost(
    name: str, input_dims: Any, input_types: Any, *, assume_causal: bool = True, list_dtype: str | None = None
) -> OpCost | None:
    """FLOPs and bytes of one op, or None where no model applies (unknown op or shapes missing).

    ``input_dims`` / ``input_types``: the JSON text of the cpu_ops columns (or already parsed lists).
    ``list_dtype``: the input_types text to assume for TensorList inputs (cat, stack), whose
    dtype the profiler does not record; None -> float.
    """
    if not isinstance(name, str) or not name.startswith("aten::"):
        return None
    n = base_name(name)
    ts = _tensors(_parse(input_dims), _parse(input_types), list_dtype)
    try:
        if n in _ATTN:
            return _attention(ts, _ATTN[n], assume_causal)
        model = _MODELS.get(n)
        return model(ts) if model else None
    except (ValueError, TypeError, IndexError, OverflowError):
        return None  # malformed shapes: unmodelled, never a crash


def dominant_dtype(cpu_ops: Any) -> str | None:
    """The most frequent floating dtype among the run's GEMM inputs (else all inputs): the model's dtype."""
    if cpu_ops is None or len(cpu_ops) == 0:
        return None
    names = cpu_ops["name"].astype(str)
    gemm = cpu_ops[names.isin(["aten::linear", "aten::mm", "aten::addmm", "aten::bmm", "aten::matmul"])]
    src = gemm if len(gemm) else cpu_ops
    counts: dict[str, int] = {}
    for text, n in src["input_types"].astype(str).value_counts().items():
        for t in _parse(text):
            if isinstance(t, str) and t in DTYPE_KEY and t != "signed char":
                counts[t] = counts.get(t, 0) + int(n)
    return max(counts, key=lambda k: counts[k]) if counts else None


def op_costs(cpu_ops: Any, *, assume_causal: bool = True, list_dtype: str | None = None) -> Any:
    """Per-op costs of a cpu_ops DataFrame: op_id, op_name, flops, bytes, op_class, dtype, tensor_core.

    Rows without a model are absent. Each distinct (name, input_dims, input_types)
    is modelled once: a decode run repeats the same few hundred shapes thousands of times.
    """
    import pandas as pd

    cols = ["op_id", "op_name", "flops", "bytes", "op_class", "dtype", "tensor_core"]
    if cpu_ops is None or len(cpu_ops) == 0:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    list_dtype = list_dtype or dominant_dtype(cpu_ops)
    df = cpu_ops[["op_id", "name", "input_dims", "input_types"]].copy()
    df["name"] = df["name"].astype(str)
    df = df[df["name"].str.startswith("aten::")]
    keys = df[["name", "input_dims", "input_types"]].astype(str)
    uniq = keys.drop_duplicates()
    rows = []
    for name, dims, types in uniq.itertuples(index=False):
        c = op_cost(name, dims, types, assume_causal=assume_causal, list_dtype=list_dtype)
        if c is not None:
            rows.append((name, dims, types, c.flops, c.bytes, c.op_class, c.dtype, c.tensor_core))
    costs = pd.DataFrame(
        rows, columns=["name", "input_dims", "input_types", "flops", "bytes", "op_class", "dtype", "tensor_core"]
    )
    merged = keys.assign(op_id=df["op_id"].to_numpy()).merge(
        costs, on=["name", "input_dims", "input_types"], how="inner"
    )
    return merged.rename(columns={"name": "op_name"})[cols].reset_index(drop=True)
