"""The shapes an op model reads: dtype tables, one op input as a tensor, the cost an op model returns.

Shared by every op-model module (tracekit.analysis.opmodels and its families). ``tensors`` turns a
cpu_ops row's input_dims / input_types (JSON text or lists) into one entry per op input: a ``Tensor``
(shape, itemsize, dtype text, strides where kept) or None for scalars and absent optionals.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
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
    "c10::Float8_e8m0fnu": 1,
    "c10::Float4_e2m1fn_x2": 1,  # two fp4 values per element
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
    "c10::Float4_e2m1fn_x2": "fp4",  # a GPU without an fp4 rate runs it at its fp8 rate (Ceiling.flops)
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
    groups: tuple[int, int] | None = None  # a grouped GEMM's (rows, groups): its kernels' tiles pad each group

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes > 0 else math.inf


@dataclass(frozen=True)
class Tensor:
    shape: tuple[int, ...]
    itemsize: int
    dtype: str
    strides: tuple[int, ...] | None = None  # the trace's Input Strides, where it kept them (an expanded view)

    @property
    def numel(self) -> int:
        return math.prod(self.shape) if self.shape else 1

    @property
    def nbytes(self) -> int:
        """The logical size: what writing a tensor of this shape moves."""
        return self.numel * self.itemsize

    @property
    def read_bytes(self) -> int:
        """What reading this input moves: its distinct elements. An expanded view (stride 0) repeats
        the same elements, and an overlapping one (a window) spans fewer than its numel; else nbytes."""
        st = self.strides
        if st is None or len(st) != len(self.shape) or not self.shape or min(self.shape) <= 0:
            return self.nbytes
        distinct = math.prod(n for n, x in zip(self.shape, st, strict=True) if x != 0)
        span = 1 + sum((n - 1) * abs(x) for n, x in zip(self.shape, st, strict=True))
        return min(distinct, span, self.numel) * self.itemsize


def parse(text: Any) -> list[Any]:
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return []
    if isinstance(text, list):
        return text
    try:
        v = json.loads(text)
    except (TypeError, ValueError, RecursionError):  # nested past the recursion limit: no tensor's dims
        return []
    return v if isinstance(v, list) else []


MAX_NUMEL = 2**48  # more elements than any tensor holds (256 TiB at a byte each): such dims are no shape


def is_shape(v: Any) -> bool:
    """Dims a tensor can have: ints >= 0 (not bools) whose product is at most ``MAX_NUMEL``."""
    return (isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v)
            and math.prod(v) <= MAX_NUMEL)


def tensors(dims: list[Any], types: list[Any], list_dtype: str | None = None,
             strides: list[Any] | None = None) -> list[Tensor | None]:
    """One entry per op input: a tensor (shape + dtype) or None for scalars / absent optionals.

    A TensorList input (cat, stack) is expanded in place into its tensors, all
    with the dtype of the first typed tensor of the op. ``strides``: the op's Input Strides (a list per
    input, as dims), where the trace has them: a tensor's strides are kept where they fit its shape.
    """
    # The profiler records no dtype for a TensorList: the first typed input's, else the caller's guess.
    default = next((t for t in types if isinstance(t, str) and t in DTYPE_BYTES), list_dtype or "float")
    out: list[Tensor | None] = []
    for i, d in enumerate(dims):
        t = types[i] if i < len(types) and isinstance(types[i], str) else ""
        if is_shape(d) and t in DTYPE_BYTES and d:
            st = strides[i] if strides is not None and i < len(strides) else None
            kept = tuple(st) if isinstance(st, list) and len(st) == len(d) and all(
                isinstance(x, int) and not isinstance(x, bool) for x in st) else None
            out.append(Tensor(tuple(d), DTYPE_BYTES[t], t, kept))
        elif is_shape(d) and t in DTYPE_BYTES:  # 0-d tensor
            out.append(Tensor((), DTYPE_BYTES[t], t))
        elif isinstance(d, list) and d and all(is_shape(x) for x in d) and (t in ("TensorList", "GenericList", "")):
            for x in d:
                out.append(Tensor(tuple(x), DTYPE_BYTES[default], default))
        else:
            out.append(None)
    return out


def broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    n = max((len(s) for s in shapes), default=0)
    res = [1] * n
    for s in shapes:
        for i, v in enumerate(reversed(s)):
            j = n - 1 - i
            if v != 1:
                res[j] = v if res[j] == 1 else max(res[j], v)
    return tuple(res)


_COMPLEX = ("c10::complex<float>", "c10::complex<double>")
_INTEGRAL = ("long int", "long", "int", "short int", "unsigned char", "signed char")


def _category(t: Tensor) -> int:
    return 0 if t.dtype == "bool" else 1 if t.dtype in _INTEGRAL else 3 if t.dtype in _COMPLEX else 2


def promoted(ts: Sequence[Tensor]) -> Tensor:
    """The input whose dtype an elementwise op's result takes (torch's promotion, first order): the highest
    category (bool < integer < floating < complex), then the widest; tensors with dims decide over 0-d ones
    of the same category, as in torch (a 0-d float tensor times a bf16 tensor is bf16). ``ts`` not empty."""
    dimmed = [t for t in ts if t.shape]
    top = max(_category(t) for t in ts)
    pool = [t for t in dimmed if _category(t) == top] or [t for t in ts if _category(t) == top]
    return max(pool, key=lambda t: t.itemsize)


def dtype_key(t: Tensor) -> str:
    return DTYPE_KEY.get(t.dtype, "fp32")


def get(ts: list[Tensor | None], i: int) -> Tensor | None:
    return ts[i] if i < len(ts) else None
