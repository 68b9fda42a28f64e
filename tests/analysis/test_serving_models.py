"""Op models of serving kernels, against values computed by hand from TraceLens's formulas
(TraceLens/PerfModel/perf_model.py and extensions: InferenceAttention, RMSNorm, silu_and_mul,
fused MoE, GroupedGemm) where both tools model the op, and from the op's reads and writes elsewhere."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tracekit.analysis.opmodels import (
    STEP_ATTENTION,
    AttentionHeads,
    attention_heads,
    op_cost,
    op_costs,
    serving_attention,
    serving_attention_ops,
)

B = "c10::BFloat16"


def cost(name: str, dims: list, types: list):
    c = op_cost(name, json.dumps(dims), json.dumps(types))
    assert c is not None, name
    return c


def test_rms_norms() -> None:
    t, h = 32, 4096
    # TraceLens RMSNorm: rows*(2C + 2) + 2*numel FLOPs; numel*bpe in + out + C*bpe weight
    flops = (t * h / h) * (2 * h + 2) + 2 * t * h
    c = cost("_C::rms_norm", [[t, h], [t, h], [h], []], [B, B, B, "double"])
    assert (c.flops, c.bytes, c.op_class) == (flops, 2 * t * h * 2 + 2 * h, "reduction")
    a = cost("aiter::rms_norm", [[t, h], [h], []], [B, B, "double"])
    assert (a.flops, a.bytes) == (flops, 2 * t * h * 2 + 2 * h)
    assert cost("aten::_fused_rms_norm", [[t, h], [], [h], []], [B, "", B, ""]).flops == flops
    # fused add: the residual add (1 FLOP/elem), the residual read and written
    f = cost("_C::fused_add_rms_norm", [[t, h], [t, h], [h], []], [B, B, B, "double"])
    assert (f.flops, f.bytes) == (flops + t * h, 2 * t * h * 2 + 2 * h + 2 * t * h * 2)
    assert cost("sgl_kernel::fused_add_rmsnorm", [[t, h], [t, h], [h], []], [B, B, B, "double"]).bytes == f.bytes


def test_silu_and_mul_and_rotary() -> None:
    t, i = 16, 11008
    # TraceLens: 5 FLOPs per output element; 2*numel(out)*bpe(in) + numel(out)*bpe(out)
    c = cost("_C::silu_and_mul", [[t, i], [t, 2 * i]], [B, B])
    assert (c.flops, c.bytes, c.op_class) == (5 * t * i, 2 * t * i * 2 + t * i * 2, "elementwise")
    assert cost("sgl_kernel::silu_and_mul", [[t, i], [t, 2 * i]], [B, B]).flops == 5 * t * i
    assert cost("_C::gelu_and_mul", [[t, i], [t, 2 * i]], [B, B]).flops == 8 * t * i
    # rotary on q [T, 32*128] and k [T, 8*128]: 3 FLOPs, a read and a write per element, plus positions
    # and the T cache rows of 128
    r = cost("_C::rotary_embedding", [[t], [t, 4096], [t, 1024], [], [4096, 128], []],
             ["long int", B, B, "Scalar", B, "Scalar"])
    n = t * (4096 + 1024)
    assert (r.flops, r.bytes) == (3 * n, 2 * n * 2 + 8 * t + t * 128 * 2)


def test_fused_moe_matches_tracelens() -> None:
    m, k, n, e, top = 64, 4096, 14336, 8, 2
    c = cost("vllm::inplace_fused_experts", [[m, k], [e, 2 * n, k], [e, k, n], [m, top], [m, top]],
             [B, B, B, "float", "int"])
    flops = 2 * m * k * n * top * 2 + 2 * m * k * n * top + m * k * (2 * top - 1)
    e_active = e * (1 - ((e - top) / e) ** m)
    nbytes = m * k * 2 + e_active * n * k * 2 * (2 + 1) + m * k * 2
    assert c.flops == flops and c.bytes == pytest.approx(nbytes) and (c.op_class, c.tensor_core) == ("gemm", True)
    # not gated (w1 has N rows): one up projection
    u = cost("sglang::outplace_fused_experts", [[m, k], [e, n, k], [e, k, n], [m, top], [m, top]],
             [B, B, B, "float", "int"])
    assert u.flops == 2 * m * k * n * top + 2 * m * k * n * top + m * k * (2 * top - 1)
    # grouped GEMM: 2MKN, (MK + GKN)*bpe + MN*bpe
    g = cost("aten::_grouped_mm", [[m, k], [e, k, n], [e]], [B, B, "int"])
    assert (g.flops, g.bytes) == (2 * m * k * n, (m * k + e * k * n) * 2 + m * n * 2)


def test_paged_attention_per_step_matches_tracelens() -> None:
    # the heads from vLLM's unified attention op: q [T, 32, 128], k/v [T, 8, 128]
    h = attention_heads("vllm::unified_attention_with_output",
                        json.dumps([[64, 32, 128], [64, 8, 128], [64, 8, 128], [64, 32, 128], []]),
                        json.dumps([B, B, B, B, "std::string"]))
    assert h == AttentionHeads(32, 8, 128, 128, B, B)
    # a mixed step: 1 prompt chunk of 500 after 1000 cached; 63 decodes at KV 2000 each
    ctx = {"requests": 1, "sq": 500, "sk": 1500, "sqsq": 500 ** 2, "sqsk": 500 * 1500}
    gen = {"requests": 63, "sq": 63, "sk": 63 * 2000, "sqsq": 63, "sqsk": 63 * 2000}
    c = serving_attention(h, ctx, gen)
    assert c is not None
    flops = 32 * (2 * 500 * 1500 - 500 ** 2) * 256 + 32 * 2 * 63 * 2000 * 256
    nbytes = (500 + 63) * (32 * 128 * 2 + 8 * 128 * 2) * 2 + ((1500 - 500) + (63 * 2000 - 63)) * 8 * 256 * 2
    assert (c.flops, c.bytes, c.op_class) == (flops, nbytes, "attention")
    # a phase without its sums (the default vLLM annotation): no value, not a guess
    assert serving_attention(h, {"requests": 1, "sq": 500}, None) is None
    # MLA: one latent entry (kv_lora 512 + rope 64 = 576) per token, shared by the heads
    m = attention_heads("vllm::unified_mla_attention_with_output", json.dumps([[8, 16, 576], [8, 512], [8, 1, 64]]),
                        json.dumps([B, B, B]))
    assert m is not None and m.latent and (m.q_heads, m.kv_heads, m.d_qk, m.d_v) == (16, 1, 576, 512)
    d = serving_attention(m, None, {"requests": 8, "sq": 8, "sk": 8000, "sqsq": 8, "sqsk": 8000})
    assert d is not None and d.flops == 16 * 2 * 8000 * (576 + 512)
    assert d.bytes == 8 * (16 * 576 + 16 * 512 + 576) * 2 + (8000 - 8) * 576 * 2


def test_stand_in_ops_cost_each_steps_attention() -> None:
    # one captured attention op whose kernel is replayed in two steps of different KV lengths
    cpu = pd.DataFrame({"op_id": [7], "name": ["vllm::unified_attention_with_output"], "parent_id": [None],
                        "input_dims": [json.dumps([[8, 32, 128], [8, 8, 128], [8, 8, 128], [8, 32, 128], []])],
                        "input_types": [json.dumps([B, B, B, B, "std::string"])]})
    gpu = pd.DataFrame({"op_id": [7, 7, None], "name": ["kernel_unified_attention_2d"] * 2 + ["other"]})
    stats = [{"generation": {"requests": 8, "sq": 8, "sk": 8 * k, "sqsq": 8, "sqsk": 8 * k}} for k in (100, 900)]
    steps = pd.DataFrame({"step_id": [0, 1], "seq_stats": [json.dumps(s) for s in stats]})
    ks = pd.DataFrame({"row": [0, 1, 2], "step_id": [0, 1, 1]})
    g2, c2 = serving_attention_ops(gpu, cpu, steps, ks)
    assert list(gpu["op_id"].isna()) == [False, False, True] and len(cpu) == 1  # inputs untouched
    assert len(c2) == 3 and set(c2["name"].iloc[1:]) == {STEP_ATTENTION}
    costs = op_costs(c2).set_index("op_id")["flops"]
    f0, f1 = (costs[int(o)] for o in g2["op_id"].iloc[:2])
    assert (f0, f1) == (32 * 2 * 800 * 256, 32 * 2 * 7200 * 256)
    # the stand-ins take the ids after the largest one in cpu_ops, one each
    assert sorted(c2["op_id"].iloc[1:]) == [8, 9] and sorted(g2["op_id"].iloc[:2]) == [8, 9]
    # steps that state no sequences leave the kernels alone
    same, _ = serving_attention_ops(gpu, cpu, steps.assign(seq_stats=None), ks)
    # a step whose seq_stats are missing (NaN) keeps its kernel's op; the other gets its stand-in
    g3, c3 = serving_attention_ops(gpu, cpu, steps.assign(seq_stats=[json.dumps(stats[0]), float("nan")]), ks)
    assert len(c3) == 2 and g3["op_id"].tolist()[:2] == [8, 7]
    assert same["op_id"].tolist()[:2] == [7, 7]
