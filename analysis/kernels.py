"""Kernel-name classes, for kernels whose launching op has no shape model (or no op at all).

The class says what a kernel is (GEMM/GEMV, attention, elementwise, reduction/norm,
copy, communication), never how much work it did: a kernel classified only by
its name has no FLOPs or bytes. Patterns are checked in order; the first match wins.
The families covered (NVIDIA cuBLAS/nvjet/CUTLASS, AMD hipBLASLt/Tensile/rocBLAS/CK/aiter,
Triton and Inductor, FlashAttention/FlashInfer/vLLM paged and unified attention, MLA,
fused MoE, NCCL/RCCL, the ROCm runtime's copy kernels) are listed in docs/roofline.md.
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
# cuBLAS' split-K GEMMs end with a kernel that sums the partial products (a reduction, not a GEMM)
SPLITK_REDUCE = r"splitKreduce|splitK_reduce|reduce_splitK"

# (class, pattern) in priority order, first match wins (docs/roofline.md, "Kernel-name classes").
# Families a class stands for: gemm also takes fused-MoE grouped GEMMs and convolutions (tensor-core
# work); reduction takes norms and sampling (top-k, sort); copy takes KV-cache writes and the ROCm
# runtime's blit kernels. Order matters:
# - communication first: NCCL/RCCL kernels' names contain "Reduce", aiter's allreduce_rmsnorm "norm";
# - Inductor's kernels by their prefix next: their fused-op names mention "embedding", "copy", "bmm";
# - FlashInfer's norm/activation/sampling kernels before attention (they live in flashinfer::);
# - copies and KV-cache writes before attention (reshape_and_cache_flash is a write, not attention);
# - attention before gemm (FA3 is cutlass::device_kernel<flash::...>; cuDNN SDPA names say "gemm");
# - MoE routing (top-k gating, align, sum) before the MoE GEMMs, and those before plain gemm.
_RULES: list[tuple[str, re.Pattern[str]]] = [
    (COMMUNICATION, re.compile(
        r"^nccl|ncclDevKernel_|ncclKernel_|nccl[A-Z]\w*Kernel|rccl|cross_device_reduce|custom_?all_?reduce|"
        r"all_?reduce|all_?gather|reduce_?scatter|alltoall|all2all|sendrecv|allreduce_fusion|deep_ep::|"
        r"internode::|intranode::|mscclpp|userbuffers|quickreduce|qr_all_reduce", re.I)),
    # torch.compile (Inductor): triton_{poi,red,per,tem,for}_fused_<ops>_<n>
    (ATTENTION, re.compile(r"^triton_tem_fused_\w*(flex_attention|sdpa)", re.I)),
    (GEMM, re.compile(r"^triton_tem_", re.I)),
    (REDUCTION, re.compile(r"^triton_(red|per)_", re.I)),
    (ELEMENTWISE, re.compile(r"^triton_(poi|for)_", re.I)),
    (REDUCTION, re.compile(r"flashinfer::(norm|sampling)|TopKTopP|RadixTopK", re.I)),
    (ELEMENTWISE, re.compile(r"flashinfer::activation", re.I)),
    # MoE routing and the weighted sum of the experts' outputs (TRT-LLM-gen's moe::dev, triton_kernels')
    (REDUCTION, re.compile(r"moe::dev::(finalize|routing)|_finalize_matmul|_combined_routing_compute|"
                           r"_sum_bitmatrix|bitmatrix", re.I)),
    (COPY, re.compile(
        r"^Memcpy|^Memset|__amd_rocclr_(copy|fill)|copy_kernel|CatArray|catArray|direct_copy|fill_kernel|"
        r"FillFunctor|index_select|indexSelect|gather_kernel|scatter|(?<!rotary_)embedding|transpose|"
        r"nchwToNhwc|nhwcToNchw|memcpy|memset|"
        r"reshape_and_cache|concat_and_cache|store_kvcache|AppendPagedKVCache|set_kv_buffer|copy_blocks|"
        r"swap_blocks|im2col|Im[23]d2Col|col2im", re.I)),
    (ATTENTION, re.compile(
        r"flash_fwd|flash_bwd|FlashAttn|flash::|pytorch_flash::|fmha|mha_|mqa_|gqa_|"
        r"Batch(Prefill|Decode)With\w*KVCache|Single(Prefill|Decode)With|MergeStates|BatchMLA|"
        r"paged_?attention|unified_attention|reduce_segments|attn_fwd|attn_bwd|sdpa|xformers|"
        r"mla_(dec|pfl|a8|a16)|flash_?mla|Mla(Kernel|Attention)|_mla_|::mla|"
        r"_fwd_(grouped_)?kernel_stage[12]|_fwd_kernel\b|xqa|attention|attn|^sage_fwd", re.I)),
    (REDUCTION, re.compile(SPLITK_REDUCE, re.I)),
    (REDUCTION, re.compile(r"topk_?gating|topkGating|grouped_topk|topk_?softmax|moe_sum|moe_align|"
                           r"moe_sorting", re.I)),
    (GEMM, re.compile(r"fused_moe|fmoe|ck_moe|MoeGemm|moe_gemm|_grouped_mm|grouped_?gemm|cktile2stages|"
                      r"^bmm_", re.I)),  # ^bmm_: TRT-LLM-gen's batched (expert) GEMMs, bmm_<A>_<B>_<acc>_t...
    (GEMM, re.compile(r"convolution|conv\dd|_conv_|conv_(fwd|bwd)|naive_conv|winograd|implicit_?gemm|igemm_|"
                      r"scudnn|wgrad|dgrad|MIOpen", re.I)),
    (GEMM, re.compile(
        r"^Cijk_|^Custom_Cijk_|rocblas_\w*(gemm|gemv)|hipblaslt|^nvjet|xmma_gemm|gemm|gemv|cutlass|cublas|"
        r"ampere_|volta_|turing_|sm\d{2,3}_xmma|^(void )?sm\d{2,3}_|Kernel2|splitK|wvSplitK|LLGemm|marlin|"
        r"machete|matmul|_mm_kernel|dot_kernel|GemmKernel|flatmm|bpreshuffle|a8w8|a4w4|a16w16|afp4wfp4|wgmma|"
        r"hmma|magma|s16816|s1688", re.I)),
    (GEMM, re.compile(r"C[a-z]{3}_A[a-z]{3}_B[a-z]{3}_")),  # Tensile's index-letter names (case-sensitive)
    (REDUCTION, re.compile(r"rms_?norm|layer_?norm|RowwiseMoments|GammaBeta|batch_?norm|group_?norm|\bbn_|"
                           r"welford|reduce|softmax|mean|sum_kernel|amax|norm|argmax|topk|top_k|sort|radix|"
                           r"cumsum|scan|sampling", re.I)),
    (ELEMENTWISE, re.compile(r"elementwise|vectorized|unrolled|pointwise|act_and_mul|silu|gelu|activation|"
                             r"rotary|rope|binary|unary|where|copysign|quant|multi_tensor_apply|upsample|"
                             r"TensorOpWith", re.I)),
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
    return OTHER


def kernel_classes(names: Any, kinds: Any = None) -> Any:
    """Vectorised ``kernel_class`` over a Series of names (each distinct name matched once)."""
    import numpy as np
    import pandas as pd

    names_a = pd.Series(names).to_numpy(dtype=object)
    if not len(names_a):
        return pd.Series([], dtype=object)
    kinds_a = pd.Series(kinds).to_numpy(dtype=object) if kinds is not None else np.full(len(names_a), "", dtype=object)
    # as kernel_class over Series.astype(str): a missing value stays missing (not a str), others str()
    from tracekit.analysis.columns import factorize

    n_code, n_uniq = factorize(names_a)
    k_code, k_uniq = factorize(kinds_a)
    n_text = [str(u) for u in n_uniq] + [None]  # code -1: missing
    k_text = [str(u) for u in k_uniq] + [None]
    n_code = np.where(n_code < 0, len(n_uniq), n_code).astype(np.int64)
    k_code = np.where(k_code < 0, len(k_uniq), k_code).astype(np.int64)
    width = len(k_text)
    pair, inverse = np.unique(n_code * width + k_code, return_inverse=True)
    cls = np.array([kernel_class(n_text[p // width], k_text[p % width]) for p in pair.tolist()], dtype=object)
    return pd.Series(cls[inverse.ravel()], dtype=object)


def graph_replay(gpu: Any) -> Any:
    """Per GPU activity, the replay it belongs to: its graph launch's correlation where a CUDA/HIP graph
    launched it (``launch_name``), else -1. An op captured into a graph launches its kernels once per
    replay, so its cost is per (op, replay), not spread over every replay."""
    import numpy as np

    if len(gpu) == 0 or "launch_name" not in gpu or "correlation" not in gpu:
        return np.full(len(gpu), -1, dtype=np.int64)
    from tracekit.analysis.columns import matches

    graph = matches(gpu["launch_name"], lambda n: "graphlaunch" in n.lower())
    corr = gpu["correlation"].astype("float64").fillna(-1).to_numpy().astype(np.int64)
    return np.where(graph, corr, -1)
