"""Per-op FLOPs and bytes on small shapes, every expected value counted by hand (docs/roofline.md's rules).

Element sizes are the dtypes' physical sizes; FLOPs per element follow the documented convention
(k = 1 for arithmetic, silu 4, gelu 8; serving SiLU-and-mul 5, RMSNorm rows x (2C + 2) + 2 x numel).
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tracekit.analysis.opmodels import (
    STEP_ATTENTION,
    AttentionHeads,
    attention_heads,
    base_name,
    is_modelled,
    op_cost,
    op_costs,
    serving_attention,
)

H, B, F, L, INT = "c10::Half", "c10::BFloat16", "float", "long int", "int"


def cost(name: str, dims: list, types: list, **kw: object):
    c = op_cost(name, json.dumps(dims), json.dumps(types), **kw)  # type: ignore[arg-type]
    assert c is not None, name
    return c


def fb(name: str, dims: list, types: list, **kw: object) -> tuple[float, float]:
    c = cost(name, dims, types, **kw)
    return c.flops, c.bytes


@pytest.mark.parametrize(("dtype", "size", "key"), [
    ("c10::Half", 2, "fp16"), ("c10::BFloat16", 2, "bf16"), ("float", 4, "fp32"), ("double", 8, "fp64"),
    ("long int", 8, "fp32"), ("long", 8, "fp32"), ("int", 4, "fp32"), ("short int", 2, "fp32"), ("bool", 1, "fp32"),
    ("unsigned char", 1, "fp32"), ("signed char", 1, "int8"), ("c10::Float8_e4m3fn", 1, "fp8"),
    ("c10::Float8_e5m2", 1, "fp8"), ("c10::Float8_e4m3fnuz", 1, "fp8"), ("c10::Float8_e5m2fnuz", 1, "fp8"),
    ("c10::complex<float>", 8, "fp32"), ("c10::complex<double>", 16, "fp32"),
])
def test_element_sizes_and_compute_dtypes(dtype: str, size: int, key: str) -> None:
    c = cost("aten::neg", [[10]], [dtype])  # read 10 elements, write 10
    assert (c.flops, c.bytes, c.dtype, c.op_class, c.tensor_core) == (10, 20 * size, key, "elementwise", False)


@pytest.mark.parametrize(("op", "k"), [
    ("silu", 4), ("gelu", 8), ("gelu_tanh", 10), ("sigmoid", 4), ("tanh", 4), ("addcmul", 2), ("lerp", 2),
    ("triu", 0), ("tril", 0), *[(op, 1) for op in (
        "exp", "rsqrt", "sqrt", "pow", "add", "sub", "mul", "div", "neg", "relu", "where", "clamp", "masked_fill",
        "reciprocal", "cos", "sin", "eq", "ne", "lt", "gt", "le", "ge", "bitwise_and", "bitwise_or", "bitwise_not",
        "logical_and", "abs", "log", "maximum", "minimum", "fmod", "remainder")],
])
def test_elementwise_flops_per_element(op: str, k: int) -> None:
    written = 12 if op in ("eq", "ne", "lt", "gt", "le", "ge", "logical_and") else 48  # a comparison writes bool
    assert fb(f"aten::{op}", [[3, 4]], [F]) == (12 * k, 48 + written)
    assert fb(f"aten::{op}_", [[3, 4]], [F]) == (12 * k, 2 * 48)  # the in-place variant writes its self
    assert is_modelled(f"aten::{op}")


def test_elementwise_broadcasting_and_zero_dim_tensors() -> None:
    # [4, 1, 3] * [5, 1] -> [4, 5, 3]: 60 outputs; read 12 + 5 floats, write 60
    assert fb("aten::mul", [[4, 1, 3], [5, 1]], [F, F]) == (60, 4 * (12 + 5 + 60))
    # a 0-d tensor operand is one element; a Scalar is no tensor at all
    assert fb("aten::add", [[4], []], [F, F]) == (4, 4 * (4 + 1 + 4))
    assert fb("aten::add", [[4], []], [F, "Scalar"]) == (4, 4 * (4 + 4))
    assert fb("aten::neg", [[]], [H]) == (1, 2 * 2)
    # the output has the inputs' promoted dtype: half + float -> float output
    assert fb("aten::add", [[8], [8]], [H, F]) == (8, 8 * 2 + 8 * 4 + 8 * 4)
    c = cost("aten::cumsum", [[4, 8], []], [F, ""])
    assert (c.flops, c.bytes, c.op_class) == (32, 2 * 128, "reduction")


def test_reductions_norms_and_softmax() -> None:
    x = [[4, 8], [], [], []]  # 32 floats, 128 bytes; the reduced output is not in the shapes
    for op, k in (("mean", 1), ("sum", 1), ("amax", 1), ("max", 1), ("min", 1), ("argmax", 1), ("norm", 2),
                  ("var", 3)):
        c = cost(f"aten::{op}", x, [F, "", "", ""])
        assert (c.flops, c.bytes, c.op_class, c.tensor_core) == (32 * k, 128, "reduction", False), op
    # layer norm: 8 FLOPs per element; read x and write y, read weight and bias (8 floats each)
    assert fb("aten::layer_norm", [[4, 8], [], [8], [8], []], [F, "", F, F, ""]) == (256, 2 * 128 + 32 + 32)
    # a norm runs on the CUDA cores, also in half precision: judged against the fp32 (vector) peak
    ln = cost("aten::layer_norm", [[4, 8], [], [8], [8], []], [H, "", H, H, ""])
    assert (ln.op_class, ln.dtype, ln.tensor_core) == ("reduction", "fp16", False)
    assert fb("aten::native_group_norm", [[2, 4, 8], [4], [4], [], [], [], []], [F, F, F, "", "", "", ""]) \
        == (8 * 64, 2 * 256 + 16 + 16)
    # RMSNorm: 4 rows of C = 8: 4 x (2 x 8 + 2) + 2 x 32 = 136 FLOPs; read x, write y, read the weight
    assert fb("aten::rms_norm", [[4, 8], [], [8], []], [F, "", F, ""]) == (136, 128 + 128 + 32)
    assert fb("aten::rms_norm", [[4, 8], [], [], []], [F, "", "", ""]) == (136, 256)  # no weight: C from x
    c = cost("aten::_softmax", [[4, 8], [], []], [F, "", ""])
    assert (c.flops, c.bytes, c.op_class) == (5 * 32, 256, "reduction")


def test_copies_fills_gathers() -> None:
    c = cost("aten::copy_", [[4, 8], [4, 8], []], [H, F, ""])  # write 32 halves, read 32 floats
    assert (c.flops, c.bytes, c.op_class, c.dtype) == (0, 64 + 128, "copy", "fp32")
    assert fb("aten::_to_copy", [[4, 8]], [H]) == (0, 2 * 64)
    for name, dims, types in (("aten::_to_copy", [[4, 8]], [H]), ("aten::copy_", [[4], [4]], [H, H]),
                              ("aten::cat", [[[2, 3]]], ["TensorList"]), ("aten::fill_", [[4]], [H]),
                              ("aten::embedding", [[10, 4], [2]], [H, L]), ("aten::index", [[10, 4], [2]], [H, L]),
                              ("aten::gather", [[10, 4]], [H])):
        c = cost(name, dims, types)
        assert (c.op_class, c.tensor_core, c.flops) == ("copy", False, 0.0), name
    assert fb("aten::clone", [[4, 8], []], [F, ""]) == (0, 2 * 128)
    assert fb("aten::cat", [[[2, 3], [4, 3]], []], ["TensorList", "Scalar"], list_dtype=H) == (0, 2 * (6 + 12) * 2)
    assert fb("aten::stack", [[[2, 3], [2, 3]], []], ["TensorList", "Scalar"]) == (0, 2 * 12 * 4)  # float by default
    assert fb("aten::fill_", [[4, 8], []], [F, "Scalar"]) == (0, 128)
    assert fb("aten::zero_", [[4, 8]], [H]) == (0, 64)
    # embedding: 10 indices (8 B each), each gathers a row of 16 halves and writes it
    assert fb("aten::embedding", [[100, 16], [2, 5]], [H, L]) == (0, 80 + 2 * 10 * 16 * 2)
    # index_select(self [100, 16], dim, index [7]): 7 rows of 16 read and written
    assert fb("aten::index_select", [[100, 16], [], [7]], [H, "Scalar", L]) == (0, 56 + 2 * 7 * 16 * 2)
    assert fb("aten::index_select", [[100], [], [7]], [F, "Scalar", L]) == (0, 56 + 2 * 7 * 4)
    # 10 indices into 3 elements: self read once at most, the 10 gathered elements written
    assert fb("aten::index", [[3], [10]], [F, L]) == (0, 80 + (3 + 10) * 4)
    assert fb("aten::gather", [[100, 16]], [H]) == (0, 2 * 3200)  # no index shape: the whole tensor


def test_gemms() -> None:
    g = cost("aten::mm", [[2, 3], [3, 4]], [F, F])
    assert (g.flops, g.bytes, g.op_class, g.dtype, g.tensor_core) == (48, 4 * (6 + 12 + 8), "gemm", "fp32", True)
    assert fb("aten::addmm", [[4], [2, 3], [3, 4], [], []], [F, F, F, "Scalar", "Scalar"]) == (48, 4 * (4 + 6 + 12 + 8))
    # linear: x [2, 5, 3] -> M = 10 rows, K = 3, N = 4; bias 4 halves
    assert fb("aten::linear", [[2, 5, 3], [4, 3], [4]], [H, H, H]) == (2 * 10 * 3 * 4, 2 * (30 + 12 + 40 + 4))
    assert fb("aten::linear", [[3], [4, 3], []], [H, H, ""]) == (24, 2 * (3 + 12 + 4))
    assert fb("aten::bmm", [[2, 3, 4], [2, 4, 5]], [H, H]) == (2 * 2 * 3 * 4 * 5, 2 * (24 + 40 + 30))
    # vector . vector: one output
    assert fb("aten::matmul", [[3], [3]], [F, F]) == (6, 4 * (3 + 3 + 1))
    # [2, 1, 4, 3] @ [5, 3, 6]: batch dims broadcast to [2, 5]
    assert fb("aten::matmul", [[2, 1, 4, 3], [5, 3, 6]], [F, F]) == (2 * 10 * 4 * 3 * 6, 4 * (24 + 90 + 10 * 24))
    # fp8 a and b at 1 B, no scales recorded, the output at 2 B (out_dtype is not in the shapes)
    assert fb("aten::_scaled_mm", [[2, 3], [3, 4]], ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn"]) == (48, 6 + 12 + 2 * 8)
    assert op_cost("aten::bmm", "[[2, 3], [3, 4]]", json.dumps([F, F])) is None  # 2-D into bmm: no model


def test_attention_pairs() -> None:
    q, kv = [1, 2, 8, 4], [1, 2, 4, 4]  # 8 queries over 4 keys, 2 heads of 4
    # causal, bottom-right aligned: only 4 queries fit; 4 x 4 - 4 x 3 / 2 = 10 pairs per head
    c = cost("aten::scaled_dot_product_attention", [q, kv, kv], [F, F, F])
    assert c.flops == 2 * 2 * 10 * (4 + 4)
    assert c.bytes == 4 * (64 + 32 + 32 + 64)  # q, k, v and the output [1, 2, 8, 4]
    full = cost("aten::scaled_dot_product_attention", [q, kv, kv], [F, F, F], assume_causal=False)
    assert full.flops == 2 * 2 * 32 * 8
    # a table of ops is costed the same way, causal unless told otherwise
    ops = pd.DataFrame({"op_id": [3], "name": ["aten::scaled_dot_product_attention"],
                        "input_dims": [json.dumps([q, kv, kv])], "input_types": [json.dumps([F, F, F])]})
    assert op_costs(ops)["flops"].tolist() == [2 * 2 * 10 * (4 + 4)]
    assert op_costs(ops, assume_causal=False)["flops"].tolist() == [2 * 2 * 32 * 8]
    # a value head dim of 6: PV and the output follow it
    v6 = cost("aten::scaled_dot_product_attention", [[1, 2, 4, 4], kv, [1, 2, 4, 6]], [F, F, F])
    assert v6.flops == 2 * 2 * 10 * (4 + 6) and v6.bytes == 4 * (32 + 32 + 48 + 48)
    # a batch of 2 does each sequence's pairs once more
    two = cost("aten::scaled_dot_product_attention", [[2, 2, 8, 4], [2, 2, 4, 4], [2, 2, 4, 4]], [F, F, F])
    assert two.flops == 2 * 2 * 2 * 10 * (4 + 4)
    one = cost("aten::scaled_dot_product_attention", [[1, 2, 1, 4], kv, kv], [H, H, H])
    assert one.flops == 2 * 2 * 4 * 8 and one.dtype == "fp16"


def test_serving_norms_activations_rotary() -> None:
    # RMSNorm of 4 rows of 8 halves: 136 FLOPs; read x (64 B), write out, read the weight (16 B)
    assert fb("_C::rms_norm", [[4, 8], [4, 8], [8], []], [H, H, H, "Scalar"]) == (136, 64 + 64 + 16)
    assert fb("_C::rms_norm", [[4, 8], [4, 8], [8], []], [F, H, H, "Scalar"]) == (136, 64 + 128 + 16)
    assert fb("aiter::rms_norm", [[4, 8], [8], []], [H, H, "Scalar"]) == (136, 64 + 64 + 16)
    # fused add + RMSNorm: one more FLOP per element, the residual read and written
    assert fb("_C::fused_add_rms_norm", [[4, 8], [4, 8], [8], []], [H, H, H, "Scalar"]) == (168, 144 + 128)
    # silu_and_mul(out [4, 8], input [4, 16]): 32 outputs, 5 FLOPs each; read 2 x 32, write 32
    assert fb("_C::silu_and_mul", [[4, 8], [4, 16]], [H, H]) == (160, 2 * 32 * 2 + 32 * 2)
    assert fb("_C::silu_and_mul", [[4, 8], [4, 16]], [F, H]) == (160, 2 * 32 * 2 + 32 * 4)
    assert fb("_C::gelu_and_mul", [[4, 8], [4, 16]], [H, H])[0] == 8 * 32
    assert fb("_C::gelu_tanh_and_mul", [[4, 8], [4, 16]], [H, H])[0] == 10 * 32
    # rotary: query 64 + key 32 elements, 3 FLOPs each, read and written; positions; 4 cache rows of 8
    rot = fb("_C::rotary_embedding", [[4], [4, 16], [4, 8], [], [100, 8], []], [L, H, H, "Scalar", H, "Scalar"])
    assert rot == (3 * 96, 2 * 96 * 2 + 32 + 4 * 8 * 2)
    # M-RoPE: 3 position rows per token, each selecting a cache row; without positions, one per query row
    mrope = fb("_C::rotary_embedding", [[3, 4], [4, 16], [4, 8], [], [100, 8], []], [L, H, H, "Scalar", H, "Scalar"])
    assert mrope == (3 * 96, 2 * 96 * 2 + 96 + 12 * 8 * 2)
    nopos = fb("_C::rotary_embedding", [[], [4, 16], [], [], [100, 8], []], ["Scalar", H, "", "Scalar", H, "Scalar"])
    assert nopos == (3 * 64, 2 * 64 * 2 + 4 * 8 * 2)


def test_fused_moe_and_grouped_gemm() -> None:
    # 4 tokens of 8, 4 experts, top-2, N = 6, gated (w1 holds 2N = 12 rows)
    dims = [[4, 8], [4, 12, 8], [4, 8, 6], [4, 2], [4, 2]]
    types = [H, H, H, F, INT]
    # 2MKN top 2 (gate and up) + 2MKN top (down) + MK(2 top - 1): 1536 + 768 + 96
    # experts hit: 4 (1 - (2/4)^4) = 3.75, each read 6 x 8 x 2 B x 3 matrices; tokens in and out 64 B each
    c = cost("vllm::outplace_fused_experts", dims, types)
    assert (c.flops, c.bytes, c.op_class, c.tensor_core) == (2400, 64 + 3.75 * 6 * 8 * 2 * 3 + 64, "gemm", True)
    plain = cost("sglang::inplace_fused_experts", [[4, 8], [4, 6, 8], [4, 8, 6], [4, 2], [4, 2]], types)
    assert (plain.flops, plain.bytes) == (768 + 768 + 96, 64 + 3.75 * 6 * 8 * 2 * 2 + 64)
    # grouped GEMM: a [6, 8] by 3 groups of [8, 4]: 2 x 6 x 8 x 4; read a and b, write [6, 4]
    assert fb("aten::_grouped_mm", [[6, 8], [3, 8, 4], [3]], [H, H, INT]) == (384, (48 + 96) * 2 + 24 * 2)
    fp8 = "c10::Float8_e4m3fn"
    assert fb("aten::_scaled_grouped_mm", [[6, 8], [3, 8, 4]], [fp8, fp8]) == (384, 48 + 96 + 24 * 2)  # bf16 out


def test_serving_attention_from_the_steps_sums() -> None:
    heads = AttentionHeads(4, 2, 8, 8, H, H)
    ctx = {"sq": 6, "sk": 10, "sqsq": 20, "sqsk": 40, "requests": 2}
    gen = {"sq": 2, "sk": 30, "sqsq": 2, "sqsk": 30, "requests": 2}
    c = serving_attention(heads, ctx, gen)
    assert c is not None
    # 4 heads x (2 x 40 - 20) x 16 + 2 x 4 x 30 x 16
    assert c.flops == 3840 + 3840
    # 8 new tokens' q, k, v, o: 8 x (32 + 32 + 16 + 16) x 2 B; 32 cached positions' k and v: 32 x 2 x 16 x 2 B
    assert c.bytes == 1536 + 2048
    assert (c.op_class, c.dtype, c.tensor_core) == ("attention", "fp16", True)
    gen_only = serving_attention(heads, None, gen)
    assert gen_only is not None and gen_only.flops == 3840 and gen_only.bytes == 2 * 96 * 2 + 28 * 2 * 16 * 2
    mla = serving_attention(AttentionHeads(4, 1, 8, 6, H, H, latent=True), ctx, gen)
    assert mla is not None and mla.flops == 4 * 60 * 14 + 4 * 2 * 30 * 14
    assert mla.bytes == 8 * (32 + 24 + 8) * 2 + 32 * 8 * 2  # one latent entry of 8 per token
    assert serving_attention(heads, {**ctx, "sqsk": None}, gen) is None
    assert serving_attention(heads, {**ctx, "requests": 0}, None) is None
    # a phase that ran no request counts nothing, whatever else its dict holds
    assert serving_attention(heads, {"requests": 0}, gen) == gen_only
    assert serving_attention(heads, ctx, {"requests": 0}) == serving_attention(heads, ctx, None)
    # the same through the stand-in op the step pass creates
    dims = [[4, 2, 8, 8, 0], [6, 10, 20, 40, 2], [2, 30, 2, 30, 2]]
    assert fb(STEP_ATTENTION, dims, [H, H]) == (7680, 3584)


def test_serving_attention_heads_from_shapes() -> None:
    q, k, v = [5, 4, 8], [5, 2, 8], [5, 2, 6]
    # without a value tensor the value head dim is the query's
    assert attention_heads("vllm::unified_attention", json.dumps([q, k]), json.dumps([H, H])) == \
        AttentionHeads(4, 2, 8, 8, H, H)
    assert attention_heads("vllm::unified_attention", json.dumps([q, k, v]), json.dumps([H, H, H])) == \
        AttentionHeads(4, 2, 8, 6, H, H)
    paged = attention_heads("aiter::pa_decode_gluon", json.dumps([q, [9, 16, 2, 8], [9, 16, 2, 8]]),
                            json.dumps([H, B, B]))
    assert paged == AttentionHeads(4, 2, 8, 8, H, B)
    mla = attention_heads("vllm::unified_mla_attention", json.dumps([[5, 4, 12], [5, 10]]), json.dumps([H, H]))
    assert mla == AttentionHeads(4, 1, 12, 10, H, H, latent=True)
    assert attention_heads("aten::mm", json.dumps([q, k]), json.dumps([H, H])) is None
    assert attention_heads("vllm::unified_attention", json.dumps([[5, 32], k]), json.dumps([H, H])) is None


def test_names() -> None:
    assert base_name("aten::add_") == "add" and base_name("aten::copy_") == "copy_"
    assert base_name("aten::frobnicate_") == "frobnicate_"
    assert is_modelled("aten::linear") and is_modelled("_C::rms_norm") and is_modelled(STEP_ATTENTION)
    assert not is_modelled("aten::frobnicate") and not is_modelled("linear")


def test_a_step_attention_with_an_fp8_cache_computes_in_the_query_dtype() -> None:
    # 4 query heads, 2 KV heads, d = 8; two decode sequences of KV length 6: sq 2, sk 12, sqsq 2, sqsk 12.
    # q bf16 (2 B), KV cache fp8 (1 B).
    dims = [[4, 2, 8, 8, 0], [], [2, 12, 2, 12, 2]]
    c = op_cost(STEP_ATTENTION, json.dumps(dims), json.dumps(["c10::BFloat16", "c10::Float8_e4m3fn"]))
    assert c is not None and c.dtype == "bf16" and c.tensor_core
    assert c.flops == 4 * 2 * 12 * (8 + 8)  # 1,536
    # new tokens' q, out, k, v in bf16: 2 x (32 + 32 + 16 + 16) x 2 B = 384; 10 cached tokens' k and v
    # in fp8: 10 x 2 x 16 x 1 B = 320
    assert c.bytes == 384 + 320


def test_an_elementwise_op_writes_its_inputs_promoted_dtype() -> None:
    """The logits mask of a compiled generate: where(bool [V], 0-d float, float [64, V]) writes float rows
    (Nsight Compute read 67 MB for it on an H100; taking the bool condition's dtype modelled 41 MB). A
    comparison writes bool; an op in place writes its self's dtype."""
    v = 128256
    c = op_cost("aten::where", json.dumps([[v], [], [64, v]]), json.dumps(["bool", "float", "float"]))
    assert c is not None and c.bytes == v * 1 + 4 + 64 * v * 4 + 64 * v * 4
    bf, f32 = json.dumps(["c10::BFloat16", "float"]), json.dumps([[10], [10]])
    assert op_cost("aten::add", f32, bf).bytes == 10 * 2 + 10 * 4 + 10 * 4  # bf16 + float -> float
    assert op_cost("aten::add_", f32, bf).bytes == 10 * 2 + 10 * 4 + 10 * 2  # in place: bf16
    assert op_cost("aten::eq", f32, bf).bytes == 10 * 2 + 10 * 4 + 10 * 1  # a comparison: bool
    # a 0-d float tensor does not promote a bf16 tensor (torch's rule for dimensioned operands)
    assert op_cost("aten::mul", json.dumps([[10], []]), bf).bytes == 10 * 2 + 4 + 10 * 2
