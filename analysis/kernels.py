"""Kernel-name classes, for kernels whose launching op has no shape model (or no op at all).

The class says what a kernel is (GEMM/GEMV, attention, elementwise, reduction/norm,
copy, communication), never how much work it did: a kernel classified only by
its name has no FLOPs or bytes. Patterns are checked in order; the first match wins.
"""

from __future__ import annotations

import re
from typing import Any

GEMM = "gemm"
ATTENTION = "attention"
ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
COPY = "copy"
COMMUNICATION = "communication"
OTHER = "other"

CLASSES = (GEMM, ATTENTION, ELEMENTWISE, REDUCTION, COPY, COMMUNICATION, OTHER)

# (class, pattern) in priority order: communication first (NCCL kernels' names
# contain "reduce"), attention before gemm (flash kernels mention gemm tiles).
_RULES: list[tuple[str, re.Pattern[str]]] = [
    (COMMUNICATION, re.compile(r"nccl|all_?reduce|all_?gather|reduce_?scatter|alltoall|sendrecv|cross_device", re.I)),
    (ATTENTION, re.compile(r"flash|fmha|attention|attn|sdpa|mha_|paged|xformers|cudnn.*(mha|sdpa)", re.I)),
    (GEMM, re.compile(r"gemm|gemv|cublas|cutlass|xmma|nvjet|sm\d+_.*(h|s|bf|f)\d*.*_tn|_nt_|_tt_|_nn_|"
                      r"^Kernel2?$|splitK|dot_kernel|matmul|wgmma|hmma|magma", re.I)),
    (COPY, re.compile(r"^Memcpy|^Memset|copy_kernel|CatArray|catArray|direct_copy|fill_kernel|"
                      r"index_select|indexSelect|gather|scatter|embedding|memcpy|memset|transpose", re.I)),
    (REDUCTION, re.compile(r"reduce|norm|\bbn_|batch_?norm|softmax|argmax|topk|sort|cumsum|scan|mean|sum_kernel|welford", re.I)),
    (ELEMENTWISE, re.compile(r"elementwise|vectorized|unrolled|pointwise|triton_poi|activation|silu|gelu|"
                             r"rotary|rope|binary|unary|where|copysign", re.I)),
]


def kernel_class(name: str, kind: str | None = None) -> str:
    """The class of one GPU activity from its name (and kind: memcpy/memset are copies)."""
    if kind in ("memcpy", "memset"):
        return COPY
    if not isinstance(name, str):
        return OTHER
    for cls, pat in _RULES:
        if pat.search(name):
            return cls
    if name.startswith("triton_red"):
        return REDUCTION
    return OTHER


def kernel_classes(names: Any, kinds: Any = None) -> Any:
    """Vectorised ``kernel_class`` over a Series of names (each distinct name matched once)."""
    import pandas as pd

    names = pd.Series(names).astype(str).reset_index(drop=True)
    kinds_s = pd.Series(kinds).astype(str).reset_index(drop=True) if kinds is not None else pd.Series(
        [""] * len(names), dtype=str
    )
    keys = pd.DataFrame({"n": names, "k": kinds_s})
    uniq = keys.drop_duplicates()
    lut = {(n, k): kernel_class(n, k) for n, k in uniq.itertuples(index=False)}
    return pd.Series([lut[(n, k)] for n, k in keys.itertuples(index=False)], dtype=object)
