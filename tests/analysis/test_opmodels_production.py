"""Op models for what production runs: MoE, block-scaled GEMMs, convolutions, attention causality,
in-place ops, KV-cache writes. Every expected value is worked out by hand in the test from the op's
shapes (TraceLens's formulas where both tools model the op: FusedMoE, UnfusedMoE, CONV, SDPA)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tracekit.analysis.kernels import kernel_class
from tracekit.analysis.opmodels import STEP_ATTENTION, op_cost, op_costs, serving_attention_ops, step_stats
from tracekit.analysis.opmodels_moe import MOE_STANDIN, experts_touched, moe_forward_ops, weight_format
from tracekit.analysis.opmodels_serving import canonical_name

B, H, F, F8, U8 = "c10::BFloat16", "c10::Half", "float", "c10::Float8_e4m3fn", "unsigned char"


def cost(name: str, dims: list, types: list, values: list | None = None):
    c = op_cost(name, json.dumps(dims), json.dumps(types),
                concrete_inputs=json.dumps(values) if values is not None else None)
    assert c is not None, name
    return c


# --- MoE ---------------------------------------------------------------------------------------


def test_experts_touched_is_the_uniform_routing_expectation() -> None:
    assert experts_touched(128, 8, 1) == pytest.approx(8.0)  # one token reads its top_k experts
    assert experts_touched(4, 2, 4) == pytest.approx(4 * (1 - (2 / 4) ** 4))  # 3.75
    assert experts_touched(8, 2, 10_000) == pytest.approx(8.0)  # a large batch reads them all
    assert experts_touched(8, 2, 0) == 0.0


def test_fused_experts_reads_only_the_experts_touched() -> None:
    # M=4 tokens, K=8, E=4 experts, N=16 (w1 has 2N=32 rows: gated), top_k=2, bf16
    c = cost("vllm::inplace_fused_experts", [[4, 8], [4, 32, 8], [4, 8, 16], [4, 2], [4, 2]], [B, B, B, F, "int"])
    # up 2*4*8*16*2*2 = 4096, down 2*4*8*16*2 = 2048, weighted sum 4*8*(2*2-1) = 96
    assert c.flops == 6240
    # E_touched = 4*(1 - (2/4)^4) = 3.75; weights 3.75 * 16*8 * 3 (gate, up, down) * 2 B = 2880; x and out 64 + 64
    assert c.bytes == pytest.approx(3008) and (c.op_class, c.tensor_core) == ("gemm", True)
    # aiter's rocm fused MoE has the same first five inputs
    assert cost("vllm::rocm_aiter_fused_moe", [[4, 8], [4, 32, 8], [4, 8, 16], [4, 2], [4, 2]],
                [B, B, B, F, "int"]).flops == 6240


def test_aiter_fmoe_takes_top_k_from_its_scalars_and_fp8_weights() -> None:
    dims = [[4, 8], [4, 8], [4, 32, 8], [4, 8, 16], [], [], [], [], [], []]
    types = [B, F8, F8, F8, "", "", "", "", "Scalar", ""]
    c = cost("aiter::fmoe_fp8_blockscale_g1u1", dims, types, ["", "", "", "", "", "", "", "", "2", ""])
    # same FLOPs as above; bytes: x 4*8*1 = 32, weights 3.75 * 16*8*3 * 1 B = 1440, out 4*8*2 = 64
    assert (c.flops, c.bytes) == (6240, pytest.approx(1536))


def test_aiter_two_stage_moe() -> None:
    # stage 1: XQ [4, 8], WQ [4, 32, 8] (gated, N=16), Y [4, 2, 16]: 2*4*8*16*2*2 = 4096 FLOPs;
    # x 64 B + 3.75 experts * 2*8*16 * 2 B = 1920 + out 4*16*2 = 128 (TraceLens writes M*N)
    up = cost("aiter::ck_moe_stage1", [[4, 8], [4, 32, 8], [4, 2, 16]], [B, B, B])
    assert (up.flops, up.bytes) == (4096, pytest.approx(64 + 1920 + 128))
    # stage 2: inter [4, 2, 16], w2 [4, 8, 16], out [4, 8]: 2*4*16*8*2 = 2048; 4*16*2 + 3.75*16*8*2 + 4*8*2
    down = cost("aiter::ck_moe_stage2", [[4, 2, 16], [4, 8, 16], [4, 8]], [B, B, B])
    assert (down.flops, down.bytes) == (2048, pytest.approx(128 + 960 + 64))


def test_trtllm_fp4_moe_weights_at_half_a_byte_plus_scales() -> None:
    # FlashInfer's trtllm_fp4_block_scale_moe: logits [2, 8], hidden fp4 packed [2, 32] (K=64) with
    # scales [2, 4], gemm1 weights [8, 32, 32] uint8 (2N=32, K/2=32) with scales [8, 32, 4] fp8;
    # scalars num_experts=8, top_k=2, intermediate_size=16
    dims = [[2, 8], [], [2, 32], [2, 4], [8, 32, 32], [8, 32, 4]] + [[]] * 4 + [[8, 64, 8], [8, 64, 1]] + [[]] * 9
    types = [F, "", U8, F8, U8, F8] + [""] * 4 + [U8, F8] + [""] * 9
    values = [""] * 16 + ["8", "2", "", "", "16"]
    c = cost("flashinfer::trtllm_fp4_block_scale_moe", dims, types, values)
    # flops: 2*2*64*16*2*2 + 2*2*64*16*2 + 2*64*3 = 16384 + 8192 + 384
    assert c.flops == 24960
    # bpe_w = (8*32*32 + 8*32*4) / (8*32*64) = 0.5625; bpe_x = (2*32 + 2*4) / (2*64) = 0.5625;
    # E_touched = 8*(1 - (6/8)^2) = 3.5: x 2*64*0.5625 = 72, weights 3.5 * 16*64*3 * 0.5625 = 6048, out 2*64*2
    assert c.bytes == pytest.approx(72 + 6048 + 256) and c.dtype == "fp8"


def test_routing_ops() -> None:
    # triton_kernels' TopK on logits [32, 32] bf16, k=4: the logits read (2048 B), 32*4 values (2 B) and
    # int16 ids written (1024 B... 32*4*(2+2) = 512), the bitmatrix 32 rows x 1 word x 4 B = 128
    t = cost("TopK", [[32, 32], [], [], [], [], [], []], [B, "Scalar", "Scalar", "Scalar", "Scalar", "", ""],
             ["", "4", "True", "1", "True", "", ""])
    assert (t.flops, t.bytes, t.op_class) == (1024, 2048 + 512 + 128, "reduction")
    # SortTokens on [32, 4] bf16 scores and [32, 4] int16 ids: both read (256 + 256), per pair two int32
    # indices (128*8) and the pair's score (128*2) written
    s = cost("SortTokens", [[32, 4], [32, 4], []], [B, "short int", "Scalar"])
    assert s.bytes == 256 + 256 + 1024 + 256
    # vLLM's topk_softmax: weights [32, 4] f32, ids [32, 4] int, token_expert_indices [32, 4] int, logits [32, 32]
    k = cost("_moe_C::topk_softmax", [[32, 4], [32, 4], [32, 4], [32, 32]], [F, "int", "int", B])
    assert (k.flops, k.bytes) == (5 * 1024, 2048 + 3 * 512)


def _vllm_moe_layer(op_id: int, ts: int) -> list[dict]:
    """A vllm::moe_forward op at ``ts`` on thread 1 with what GPT-OSS-20B's (MI300X, padded) calls in it."""
    return [
        {"op_id": op_id, "name": "vllm::moe_forward", "ts_ns": ts, "dur_ns": 1000, "tid": 1, "parent_id": None,
         "input_dims": "[[32,3072],[32,32],[],[]]", "input_types": json.dumps([B, B, "", ""]), "concrete_inputs": None},
        {"op_id": op_id + 1, "name": "TopK", "ts_ns": ts + 10, "dur_ns": 50, "tid": 1, "parent_id": op_id,
         "input_dims": "[[32,32],[],[],[],[],[],[]]", "input_types": json.dumps([B] + ["Scalar"] * 4 + ["", ""]),
         "concrete_inputs": json.dumps(["", "4", "True", "1", "True", "", ""])},
        {"op_id": op_id + 2, "name": "aten::empty", "ts_ns": ts + 100, "dur_ns": 5, "tid": 1, "parent_id": op_id,
         "input_dims": "[[],[],[],[],[],[]]", "input_types": json.dumps(["ScalarList", "Scalar", "", "", "Scalar", ""]),
         "concrete_inputs": json.dumps(["[1, 128, 2944]", "15", "", "", "False", ""])},
        {"op_id": op_id + 3, "name": "aten::empty", "ts_ns": ts + 200, "dur_ns": 5, "tid": 1, "parent_id": op_id,
         "input_dims": "[[],[],[],[],[],[]]", "input_types": json.dumps(["ScalarList", "Scalar", "", "", "Scalar", ""]),
         "concrete_inputs": json.dumps(["[32, 3072]", "15", "", "", "False", ""])},
    ]


def test_vllm_moe_forward_gets_a_stand_in_per_layer() -> None:
    cpu = pd.DataFrame(_vllm_moe_layer(10, 1_000) + _vllm_moe_layer(20, 5_000))
    names = ["_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu", "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1",
             "_finalize_matmul_scatter_bf16"]
    gpu = pd.DataFrame({"name": names * 2, "op_id": pd.array([10] * 3 + [20] * 3, dtype="Int64")})
    g2, c2 = moe_forward_ops(gpu, cpu)
    assert len(c2) == len(cpu) + 2  # one stand-in per layer op
    new = c2[c2["name"] == MOE_STANDIN]
    assert json.loads(new["input_dims"].iloc[0]) == [[32, 3072], [32, 2944, 4, 1]]  # N: the [1, M*k, N] buffer
    assert json.loads(new["input_types"].iloc[0]) == [B, "mxfp4"]
    assert sorted(set(g2["op_id"].astype(int))) == sorted(new["op_id"].astype(int))
    costs = op_costs(c2)
    c = costs[costs["op_name"] == MOE_STANDIN].iloc[0]
    # M=32, K=3072, N=2944, top_k=4, gated: 2*32*3072*2944*4*2 + 2*32*3072*2944*4 + 32*3072*7
    assert c["flops"] == 4_630_511_616 + 2_315_255_808 + 688_128
    # mxfp4 weights: 0.5 B + one 1-byte scale per 32 values; 32 experts, 32 tokens x top-4
    e_t = 32 * (1 - (28 / 32) ** 32)
    assert c["bytes"] == pytest.approx(32 * 3072 * 2 * 2 + e_t * 2944 * 3072 * 3 * (0.5 + 1 / 32))
    # no top_k among its calls: no stand-in, the kernels keep their op
    g3, c3 = moe_forward_ops(gpu, cpu[cpu["name"] != "TopK"])
    assert len(c3) == len(cpu) - 2 and g3["op_id"].tolist() == gpu["op_id"].tolist()


def test_weight_formats_from_kernel_names() -> None:
    assert weight_format(["_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1"]).name == "mxfp4"
    assert weight_format(["bmm_MxE4m3_MxE2m1E2m1_Fp32_t128x8x512u2_s6"]).name == "mxfp4"
    assert weight_format(["bmm_E4m3_E2m1E2m1_Fp32_t128x8x512"]).name == "nvfp4"
    assert weight_format(["fused_moe_kernel_fp8_w8a8"]).name == "fp8"
    assert weight_format(["fused_moe_kernel"]) is None
    assert weight_format(["x_mxfp4"]).bytes_per_element == 0.5 + 1 / 32


# --- block-scaled GEMMs ---------------------------------------------------------------------------


def test_block_scaled_gemms_read_weights_at_their_width_plus_scales() -> None:
    # nvfp4: out [16, 64] bf16, a [16, 64] uint8 = 16x128 fp4, b [64, 64] uint8 = 64x128, scales per 16 values
    c = cost("_C::cutlass_scaled_fp4_mm", [[16, 64], [16, 64], [64, 64], [16, 8], [64, 8], []], [B, U8, U8, F8, F8, F])
    assert c.flops == 2 * 16 * 64 * 128  # K = 128
    assert c.bytes == 1024 + 4096 + 128 + 512 + 4 + 16 * 64 * 2 and c.dtype == "fp4"  # both operands fp4: the fp4 rate
    # fp8 with per-token / per-channel scales: a [16, 128], b [128, 64], scales [16, 1] and [1, 64] f32
    s = cost("_C::cutlass_scaled_mm", [[16, 64], [16, 128], [128, 64], [16, 1], [1, 64], []], [B, F8, F8, F, F, ""])
    assert (s.flops, s.bytes) == (262_144, 2048 + 8192 + 64 + 256 + 2048) and s.dtype == "fp8"
    # aiter's 128x128 block-scaled fp8: XQ [16, 128], WQ [64, 128], x_scale [16, 1], w_scale [1, 1], Y [16, 64]
    a = cost("aiter::gemm_a8w8_blockscale", [[16, 128], [64, 128], [16, 1], [1, 1], [16, 64]], [F8, F8, F, F, B])
    assert (a.flops, a.bytes) == (262_144, 2048 + 8192 + 64 + 4 + 2048)
    # aten::_scaled_mm on packed fp4 (two values per element): K = 2 * 64
    m = cost("aten::_scaled_mm", [[16, 64], [64, 64], [16, 4], [64, 4], [], [], []],
             ["c10::Float4_e2m1fn_x2", "c10::Float4_e2m1fn_x2", "c10::Float8_e8m0fnu", "c10::Float8_e8m0fnu", "", "", ""])
    assert (m.flops, m.bytes) == (2 * 16 * 128 * 64, 1024 + 4096 + 64 + 256 + 16 * 64 * 2) and m.dtype == "fp4"


# --- convolutions ---------------------------------------------------------------------------------


def test_cudnn_convolution_of_a_unet_matches_tracelens() -> None:
    # a real UNet2DModel conv on the H100 (diffusers, batch 2): x [2, 256, 16, 16], w [256, 256, 3, 3],
    # cudnn_convolution(self, weight, padding [1, 1], stride [1, 1], dilation [1, 1], groups 1, ...), fp16
    c = cost("aten::cudnn_convolution", [[2, 256, 16, 16], [256, 256, 3, 3], [], [], [], [], [], [], []],
             [H, H, "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar", "Scalar"],
             ["", "", "[1, 1]", "[1, 1]", "[1, 1]", "1", "False", "False", "True"])
    # out [2, 256, 16, 16] = 131072; flops 2 * 131072 * (256*3*3) = 603,979,776
    assert c.flops == 603_979_776
    # (x 131072 + w 589824 + out 131072) * 2 B
    assert c.bytes == 1_703_936 and (c.op_class, c.tensor_core, c.dtype) == ("gemm", True, "fp16")
    # stride 2 (padding first in cudnn's order): out 32x32 of 64x64
    s = cost("aten::cudnn_convolution", [[2, 128, 64, 64], [128, 128, 3, 3], [], [], [], [], [], [], []],
             [H, H, "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar", "Scalar"],
             ["", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"])
    assert s.flops == 2 * (2 * 128 * 32 * 32) * (128 * 9)
    assert s.bytes == (2 * 128 * 64 * 64 + 128 * 128 * 9 + 2 * 128 * 32 * 32) * 2


def test_conv2d_with_bias_and_groups_and_miopen_order() -> None:
    # depthwise: x [1, 32, 8, 8] fp32, w [32, 1, 3, 3], bias [32], stride 1, padding 0, groups 32 -> out 6x6
    c = cost("aten::conv2d", [[1, 32, 8, 8], [32, 1, 3, 3], [32], [], [], [], []],
             [F, F, F, "ScalarList", "ScalarList", "ScalarList", "Scalar"], ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "32"])
    # out 1*32*6*6 = 1152: 2 * 1152 * 9 + the bias add 1152; (2048 + 288 + 32 + 1152) * 4 B
    assert (c.flops, c.bytes) == (21_888, 14_080)
    # miopen_convolution(self, weight, bias, padding [0, 0], stride [2, 2], ...): out (8 - 3)//2 + 1 = 3
    m = cost("aten::miopen_convolution", [[1, 4, 8, 8], [8, 4, 3, 3], [], [], [], [], [], [], []],
             [B, B, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar"],
             ["", "", "", "[0, 0]", "[2, 2]", "[1, 1]", "1", "False", "False"])
    assert m.flops == 2 * (1 * 8 * 3 * 3) * (4 * 9)
    # conv2d(padding='same'): out keeps 8x8
    same = cost("aten::conv2d", [[1, 4, 8, 8], [8, 4, 3, 3], [], [], [], [], []],
                [F, F, "", "ScalarList", "str", "ScalarList", "Scalar"], ["", "", "", "[1, 1]", "same", "[1, 1]", "1"])
    assert same.flops == 2 * (8 * 64) * 36


def test_transposed_convolution() -> None:
    # conv_transpose2d(x [1, 4, 5, 5], w [4, 2, 3, 3], stride 2, padding 1, output_padding 1, groups 1, dilation 1):
    # out (5-1)*2 - 2*1 + 1*(3-1) + 1 + 1 = 10 -> [1, 2, 10, 10]; flops 2 * numel(x) 100 * (2*3*3)
    c = cost("aten::conv_transpose2d", [[1, 4, 5, 5], [4, 2, 3, 3], [], [], [], [], [], []],
             [F, F, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList"],
             ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1", "[1, 1]"])
    assert (c.flops, c.bytes) == (3600, (100 + 72 + 200) * 4)
    # aten::convolution's transposed flag
    t = cost("aten::convolution", [[1, 4, 5, 5], [4, 2, 3, 3], [], [], [], [], [], [], []],
             [F, F, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
             ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[1, 1]", "1"])
    assert (t.flops, t.bytes) == (3600, 1488)


def test_upsample() -> None:
    # upsample_nearest2d.vec(x [2, 256, 16, 16] fp16, None, scale_factors [2., 2.]): out 2*256*32*32 = 524288
    c = cost("aten::upsample_nearest2d", [[2, 256, 16, 16], [], []], [H, "", "ScalarList"], ["", "", "[2., 2.]"])
    assert (c.flops, c.bytes, c.op_class) == (524_288, (131_072 + 524_288) * 2, "copy")
    b = cost("aten::upsample_bilinear2d", [[1, 3, 4, 4], [], [], []], [F, "ScalarList", "Scalar", ""],
             ["", "[8, 8]", "False", ""])
    assert (b.flops, b.bytes) == (4 * 192, (48 + 192) * 4)


# --- attention causality --------------------------------------------------------------------------


def test_sdpa_causality_comes_from_the_recorded_flag() -> None:
    dims = [[2, 32, 1024, 8]] * 3 + [[]] * 5
    types = [H, H, H, "", "Scalar", "Scalar", "", "Scalar"]
    full = cost("aten::scaled_dot_product_attention", dims, types, ["", "", "", "", "0.", "False", "", "False"])
    # a UNet's attention (is_causal=False): every pair, 2 * B*H * Lq*Lk * (d + dv) = 2*2*32*1024*1024*16
    assert full.flops == 2_147_483_648
    causal = cost("aten::scaled_dot_product_attention", dims, types, ["", "", "", "", "0.", "True", "", "False"])
    # causal: 1024*1024 - 1024*1023/2 = 524,800 pairs
    assert causal.flops == 2 * 2 * 32 * 524_800 * 16
    # no value recorded, or False beside a mask (which may be causal): the decoder default (causal when Lq > 1)
    masked = cost("aten::scaled_dot_product_attention", [[2, 32, 1024, 8]] * 3 + [[2, 1, 1024, 1024]] + [[]] * 4,
                  [H, H, H, "c10::Half", "Scalar", "Scalar", "", "Scalar"], ["", "", "", "", "0.", "False", "", "False"])
    assert masked.flops == causal.flops
    assert op_cost("aten::scaled_dot_product_attention", json.dumps(dims), json.dumps(types)).flops == causal.flops
    # the cuDNN path's flag is its 7th argument (q, k, v, attn_bias, compute_log_sumexp, dropout_p, is_causal)
    cu = cost("aten::_scaled_dot_product_cudnn_attention", [[2, 32, 1024, 8]] * 3 + [[]] * 6,
              [H, H, H, "", "Scalar", "Scalar", "Scalar", "Scalar", ""], ["", "", "", "", "False", "0.", "False", "False", ""])
    assert cu.flops == full.flops
    # flash-attn's own op, [B, L, H, D] layout, causal is its 6th argument
    fa = cost("flash_attn::_flash_attn_forward", [[1, 128, 4, 64]] * 3 + [[]] * 3, [B, B, B, "Scalar", "Scalar", "Scalar"],
              ["", "", "", "0.0", "0.125", "False"])
    assert fa.flops == 2 * 1 * 4 * 128 * 128 * 128
    # efficient attention's custom_mask_type 0: no mask
    ea = cost("aten::_efficient_attention_forward", [[1, 128, 4, 64]] * 3 + [[]] * 7, [B, B, B] + ["Scalar"] * 7,
              ["", "", "", "", "", "", "", "", "0.", "0"])
    assert ea.flops == fa.flops


def test_sage_attention_counts_every_pair() -> None:
    # aiter SageAttention (xDiT Flux): q, k int8 [1, 24, 768, 128], v fp8, out bf16; launched as 'sage_fwd_1'
    dims = [[1, 24, 768, 128]] * 3 + [[1, 24, 3], [1, 24, 6], [1, 24, 128], [1, 24, 768, 128]]
    c = cost("sage_fwd_1", dims, ["signed char", "signed char", F8, F, F, F, B])
    assert c.flops == 2 * 24 * 768 * 768 * 256 and c.op_class == "attention"
    # every tensor once: q, k, v at 1 B, the scales (72 + 144 + 3072 floats), out at 2 B
    n = 24 * 768 * 128
    assert c.bytes == 3 * n + (72 + 144 + 3072) * 4 + 2 * n


# --- in-place ops -----------------------------------------------------------------------------------


def test_in_place_ops_read_and_write_the_same_tensor() -> None:
    n = 1024 * 1024
    # add_(self, other): self and other read, self written: 3 * n * 2 B
    assert cost("aten::add_", [[1024, 1024], [1024, 1024], []], [H, H, "Scalar"]).bytes == 3 * n * 2
    # mul_(self, 2.0): self read and written
    assert cost("aten::mul_", [[1024, 1024], []], [H, "Scalar"]).bytes == 2 * n * 2
    # a broadcast operand is read once: add_(self [1024, 1024], bias [1024])
    assert cost("aten::add_", [[1024, 1024], [1024], []], [H, H, "Scalar"]).bytes == (2 * n + 1024) * 2
    # copy_(dst fp16, src fp32): dst written, src read
    assert cost("aten::copy_", [[1024, 1024], [1024, 1024], []], [H, F, "Scalar"]).bytes == n * 2 + n * 4
    # clamp_ / silu_ / masked_fill_ : read + write
    assert cost("aten::clamp_", [[1024, 1024], [], []], [H, "Scalar", "Scalar"]).bytes == 2 * n * 2
    assert cost("aten::silu_", [[1024, 1024]], [H]).bytes == 2 * n * 2
    # index_put_(self [2048], indices, values [2048]): values read, as many elements written
    assert cost("aten::_index_put_impl_", [[2048], [], [2048], [], []], [F, "", F, "", ""]).bytes == 2048 * 4 * 2
    # random fills write only
    assert cost("aten::normal_", [[1024, 1024], [], [], []], [H, "", "", ""]).bytes == n * 2


# --- serving: KV-cache writes, norms, names, fp8 KV ------------------------------------------------


def test_kv_cache_writes_count_the_new_tokens_only() -> None:
    # vLLM reshape_and_cache_flash: key/value [32, 8, 64] bf16 into caches of 224304 blocks; slots [32]
    c = cost("_C_cache_ops::reshape_and_cache_flash",
             [[32, 8, 64], [32, 8, 64], [224304, 32, 8, 64], [224304, 32, 8, 64], [32], [], [], []],
             [B, B, B, B, "long int", "", F, F])
    assert (c.bytes, c.op_class) == (4 * 32 * 8 * 64 * 2 + 32 * 8, "copy")  # K, V read and written, slots
    # an fp8 cache (uint8) is written at 1 B
    f = cost("_C_cache_ops::reshape_and_cache_flash", [[32, 8, 64], [32, 8, 64], [10, 32, 8, 64], [10, 32, 8, 64], [32]],
             [B, B, U8, U8, "long int"])
    assert f.bytes == 2 * 16384 * 2 + 2 * 16384 + 256
    s = cost("sglang::store_cache", [[32, 1024], [32, 1024], [835874, 1024], [835874, 1024], [32], [], []],
             [B, B, B, B, "long int", "Scalar", "Scalar"])
    assert s.bytes == 4 * 32 * 1024 * 2 + 256


def test_aiter_add_rmsnorm() -> None:
    # out, input, residual_in, residual_out [32, 2880] bf16, weight [2880]
    c = cost("aiter::rmsnorm2d_fwd_with_add_ck", [[32, 2880]] * 4 + [[2880], [], []], [B] * 5 + ["Scalar", "Scalar"])
    # rows*(2C + 2) + 2*numel (TraceLens RMSNorm) + numel (the add)
    assert c.flops == 32 * (2 * 2880 + 2) + 2 * 92_160 + 92_160
    assert c.bytes == 4 * 92_160 * 2 + 2880 * 2
    assert cost("aiter::add_rmsnorm", [[32, 2880]] * 4 + [[2880], []], [B] * 5 + ["Scalar"]).flops == c.flops


def test_sglang_profiler_names_and_aiter_rmsnorm() -> None:
    assert canonical_name("sglang_profiler::attention_paged_attention_ragged_100") == \
        "sglang_profiler::attention_paged_attention_ragged"
    assert canonical_name("aten::mm") == "aten::mm" and canonical_name("sage_fwd_12") == "sage_fwd"
    # aiter::rmsnorm(out, input, weight, eps) as SGLang calls it
    c = cost("aiter::rmsnorm", [[32, 4096], [32, 4096], [4096], []], [B, B, B, "Scalar"])
    assert c.flops == 32 * (2 * 4096 + 2) + 2 * 32 * 4096


def _steps() -> pd.DataFrame:
    detailed = {"context": {"requests": 0, "sq": 0, "sk": 0, "sqsq": 0, "sqsk": 0},
                "generation": {"requests": 32, "sq": 32, "sk": 32785, "sqsq": 32, "sqsk": 32785}}
    return pd.DataFrame({"step_id": [0, 1], "kind": ["decode", "decode"], "batch": [32, 32],
                         "cpu_start_ns": [100, 200], "cpu_end_ns": [200, 900],
                         "seq_stats": [json.dumps(detailed), json.dumps({"generation": {"requests": 32, "sq": 32}})]})


def test_a_step_without_kv_sums_takes_its_enclosing_annotations() -> None:
    st = step_stats(_steps())
    assert st[1] == st[0] and st[0]["generation"]["sk"] == 32785
    # not adjacent (a gap between them): no borrowing
    gap = _steps().assign(cpu_start_ns=[100, 300])
    assert 1 not in step_stats(gap)


def test_sglang_paged_attention_per_step_and_fp8_kv_from_kernel_names() -> None:
    # SGLang's aiter paged attention, Qwen3-8B decode at batch 32: (out, workspace, q [32, 32, 128],
    # k_cache [835874, 1, 8, 128], v_cache, ...)
    dims = [[32, 32, 128], [10905190400], [32, 32, 128], [835874, 1, 8, 128], [835874, 1, 8, 128], [33]]
    cpu = pd.DataFrame({"op_id": [5], "name": ["sglang_profiler::attention_paged_attention_ragged_100"],
                        "input_dims": [json.dumps(dims)], "input_types": [json.dumps([B, U8, B, B, B, "int"])],
                        "parent_id": [None], "ts_ns": [250], "dur_ns": [10]})
    ks = pd.DataFrame({"row": [0], "step_id": [1]})
    for kernel, kv_b in (("paged_attention_ll4mi_QKV_mfma16_kernel<0, bf16, bf16, (vllm::Fp8KVCacheDataType)0>", 2),
                         ("paged_attention_ll4mi_QKV_mfma16_kernel<0, bf16, uchar, (vllm::Fp8KVCacheDataType)1>", 1)):
        gpu = pd.DataFrame({"name": [kernel], "op_id": pd.array([5], dtype="Int64")})
        _, c2 = serving_attention_ops(gpu, cpu, _steps(), ks)
        costs = op_costs(c2)
        a = costs[costs["op_name"] == STEP_ATTENTION].iloc[0]
        # 2 * Hq * Σ(sq*sk) * (d_qk + d_v) = 2 * 32 * 32785 * 256
        assert a["flops"] == 537_149_440
        # new tokens: 32 * (32*128*2 + 8*128*2) * 2 B; cached: (32785 - 32) * 8 * 256 * kv bytes
        assert a["bytes"] == 32 * (32 * 256 + 8 * 256) * 2 + 32_753 * 8 * 256 * kv_b


def test_attention_kernels_of_a_backend_op_under_the_attention_op() -> None:
    # vLLM's unified attention (op 5) calls a backend op (op 6) that launches TRT-LLM-gen's fmhaSm100a kernel
    # with an fp8 KV cache, and the KV-cache write (op 7) that launches a copy: the attention kernel joins
    # op 5's per-step stand-in (its KV at 1 B: QkvE4m3), the copy keeps its op
    cpu = pd.DataFrame({"op_id": [5, 6, 7], "name": ["vllm::unified_attention_with_output", "backend::decode",
                                                      "_C_cache_ops::reshape_and_cache_flash"],
                        "input_dims": [json.dumps([[32, 32, 128], [32, 8, 128], [32, 8, 128]]), "[]", "[]"],
                        "input_types": [json.dumps([B, B, B]), "[]", "[]"], "parent_id": [None, 5, 5],
                        "ts_ns": [250, 251, 252], "dur_ns": [10, 5, 2]})
    gpu = pd.DataFrame({"name": ["fmhaSm100aKernel_QkvE4m3OBfloat16H128PagedKvCausalP32VarSeqQ8Kv128StaticSwapsAbForGen",
                                 "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char>"],
                        "op_id": pd.array([6, 7], dtype="Int64")})
    g2, c2 = serving_attention_ops(gpu, cpu, _steps(), pd.DataFrame({"row": [0, 1], "step_id": [1, 1]}))
    standin = c2.loc[c2["name"] == STEP_ATTENTION]
    assert g2["op_id"].tolist() == [int(standin["op_id"].iloc[0]), 7]
    assert json.loads(standin["input_types"].iloc[0]) == [B, "c10::Float8_e4m3fn"]


# --- kernel classes -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "cls"), [
    ("bmm_MxE4m3_MxE2m1E2m1_Fp32_t128x8x512u2_s6_et128x8_m128x8x32_cga1x1x1_16dp256b_rM_TN_transOut_sm100f", "gemm"),
    ("void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<__nv_bfloat16, true> >", "reduction"),
    ("void moe::dev::routing::routingRenormalize::routingIndicesBlockKernel<>", "reduction"),
    ("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP32VarSeqQ8Kv128PersistentSwapsAbForGen", "attention"),
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu", "gemm"),
    ("_finalize_matmul_scatter_bf16", "reduction"),
    ("_combined_routing_compute", "reduction"),
    ("_sum_bitmatrix_rows", "reduction"),
    ("sage_fwd", "attention"),
    ("Im2d2Col_v2", "copy"),
    ("SubTensorOpWithScalar1d", "elementwise"),
    ("void at::native::(anonymous namespace)::upsample_nearest2d_out_frame<c10::Half>", "elementwise"),
])
def test_production_kernel_classes(name: str, cls: str) -> None:
    assert kernel_class(name) == cls
