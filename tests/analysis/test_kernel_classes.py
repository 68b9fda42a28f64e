"""Kernel-name classes of the families engines run (names from vLLM/SGLang/aiter source, Inductor's
naming, cuBLAS/hipBLASLt, and TraceLens's MI300X fixtures), and the corpus's ROCm GEMM."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.analysis.kernels import kernel_class, kernel_classes

NAMES = {
    # AMD hipBLASLt / Tensile, rocBLAS skinny GEMMs
    "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_ISA90a_WG64_4_1": "gemm",
    "Custom_Cijk_Ailk_Bljk_BBS_BH_MT128x128x64_MI16x16x1_ISA942": "gemm",
    "wvSplitK_hf_sml_": "gemm",
    # NVIDIA cuBLAS nvjet, CUTLASS (sm90/sm100), cuBLASLt split-K
    "nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_TNT": "gemm",
    "nvjet_tst_128x192_64x5_2x1_v_bz_coopA_NNT": "gemm",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_tn_align1>(cutlass_80_simt_sgemm_128x32_8x5_tn_align1::Params)": "gemm",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas": "gemm",
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<sm100_bf16_gemm>>": "gemm",
    "void cublasLt::splitKreduce_kernel<32, 16, int, float, __half, float, __half, false>": "reduction",
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn": "gemm",
    "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu": "gemm",
    # torch.compile (Inductor): the prefix decides, not the fused ops' names
    "triton_poi_fused__to_copy_expand_unsqueeze_1": "elementwise",
    "triton_poi_fused__scaled_dot_product_cudnn_attention__to_copy__unsafe_view_add_bmm_cat_clone_cos_exp": "elementwise",
    "triton_red_fused__to_copy_add_embedding_mean_mul_pow_rsqrt_0": "reduction",
    "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0": "reduction",
    "triton_tem_fused_mm_0": "gemm",
    "triton_tem_fused_flex_attention_0": "attention",
    # attention: FlashAttention 2/3, FlashInfer, vLLM paged and unified, cuDNN SDPA, MLA, SGLang decode
    "flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false>>": "attention",
    "void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>>": "attention",
    "cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<>>>": "attention",
    "void flashinfer::BatchPrefillWithPagedKVCacheKernel<>": "attention",
    "void flashinfer::BatchDecodeWithPagedKVCacheKernel<>": "attention",
    "void vllm::paged_attention_v2_kernel<>": "attention",
    "kernel_unified_attention_2d": "attention",
    "kernel_unified_attention_3d": "attention",
    "reduce_segments": "attention",
    "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x64_4x1x1_cga1x1x1_kernel0_0": "attention",
    "_ZN5aiter33paged_attention_ll4mi_QKV_mfma16_kernelI": "attention",
    "_ZN5aiter41mla_dec_stage1_bf16_a16w16_subQ16_mqa16E": "attention",
    "_fwd_kernel_stage1": "attention",
    # FlashInfer's non-attention kernels
    "void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>": "reduction",
    "void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &silu>": "elementwise",
    "void flashinfer::sampling::TopKTopPSamplingFromProbKernel<>": "reduction",
    # KV-cache writes are copies, not attention
    "void flashinfer::AppendPagedKVCacheKernel<>": "copy",
    "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>": "copy",
    # fused MoE: routing is a reduction, the expert GEMMs are GEMMs
    "fused_moe_kernel": "gemm",
    "fmoe_fp8_blockscale_g1u1_subGU_256": "gemm",
    "void vllm::moe::topkGatingSoftmax<8, 128>": "reduction",
    "void vllm::moe::moe_align_block_size_kernel<int>": "reduction",
    "topksoftmax_4x256x8_bf16": "reduction",
    # norms, rotary, activations (vLLM, aiter/CK)
    "void vllm::rms_norm_kernel<c10::BFloat16, 8>": "reduction",
    "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdI": "reduction",
    "void aiter::add_rmsnorm_quant_kernel<>": "reduction",
    "void vllm::rotary_embedding_kernel<c10::BFloat16, true>": "elementwise",
    "void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, true>": "elementwise",
    # NCCL / RCCL and custom all-reduce
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "communication",
    "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)": "communication",
    "ncclKernel_AllReduce_RING_LL_Sum_half(ncclWorkElem)": "communication",
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>": "communication",
    "allreduce_rmsnorm_N8192": "communication",
    # the ROCm runtime's blit kernels
    "__amd_rocclr_copyBuffer": "copy",
    "__amd_rocclr_fillBufferAligned": "copy",
}


@pytest.mark.parametrize(("name", "cls"), NAMES.items())
def test_engine_kernel_families(name: str, cls: str) -> None:
    assert kernel_class(name) == cls


def test_vectorised_classes_agree() -> None:
    names = list(NAMES)
    assert list(kernel_classes(names)) == [NAMES[n] for n in names]


def test_the_rocm_corpus_gemm_is_a_gemm(corpus_dir: Path) -> None:
    from tracekit.ingest import read_trace_tables

    path = corpus_dir / "hta" / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    if not path.is_file():
        pytest.skip("corpus trace absent")
    gpu = read_trace_tables(path)["gpu_activity"].to_pandas()
    cij = gpu[gpu["name"].astype(str).str.startswith("Cijk_")]
    assert len(cij) and set(kernel_classes(cij["name"])) == {"gemm"}
