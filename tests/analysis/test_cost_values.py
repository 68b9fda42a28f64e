"""The per-request cost split on small inputs, every expected value worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.analysis import cost

# TinyLlama-1.1B: 22 layers, hidden 2048, 32 heads of 64, 4 KV heads, MLP 5632, vocab 32000
TINYLLAMA = {"vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
             "num_attention_heads": 32, "num_key_value_heads": 4}
# round numbers: a weight read of 1000 B, 10 B of KV per position, 100 FLOPs per token, 1 per pair
TOY = cost.CostModel(weight_bytes=1000.0, kv_bytes_per_token=10.0, linear_flops_per_token=100.0,
                     attn_flops_per_pair=1.0)


def test_cost_model_of_tinyllama_from_its_config() -> None:
    m = cost.CostModel.from_config(TINYLLAMA, 1_100_048_384, "float16")
    assert m is not None
    assert m.weight_bytes == 2 * 1_100_048_384
    assert m.kv_bytes_per_token == 22_528  # K and V: 2 x 22 layers x 4 heads x 64 x 2 bytes
    assert m.linear_flops_per_token == 2 * 1_100_048_384
    assert m.attn_flops_per_pair == 4 * 22 * 32 * 64  # QK^T and PV, 2 FLOPs each per element
    fp32 = cost.CostModel.from_config(TINYLLAMA, 1_000, "float32")
    assert fp32 is not None and fp32.weight_bytes == 4_000 and fp32.kv_bytes_per_token == 45_056


def test_cost_model_counts_the_parameters_when_the_manifest_has_none() -> None:
    m = cost.CostModel.from_config(TINYLLAMA, None, "bfloat16")
    assert m is not None
    # per layer: q and o 2 x 2048 x 2048, k and v 2 x 2048 x 256, MLP 3 x 2048 x 5632 = 44,040,192;
    # 22 layers = 968,884,224; embedding and head 2 x 32000 x 2048 = 131,072,000
    assert m.linear_flops_per_token == 2 * 1_099_956_224
    assert m.weight_bytes == 2 * 1_099_956_224
    # no head_dim and no KV heads in the config: hidden / heads = 64, and as many KV heads as heads
    mha = cost.CostModel.from_config({**TINYLLAMA, "num_key_value_heads": None, "intermediate_size": None,
                                      "vocab_size": None}, None, "fp16")
    assert mha is not None
    assert mha.kv_bytes_per_token == 2 * 22 * 32 * 64 * 2
    # MLP 4 x hidden when absent: 2 x 2048 x 2048 x 2 + 3 x 2048 x 8192 = 67,108,864 per layer; no vocab
    assert mha.weight_bytes == 2 * 22 * 67_108_864
    assert cost.CostModel.from_config({"hidden_size": 8}, None, "fp16") is None


def test_weights_by_tokens_flops_and_bytes() -> None:
    # a 3-token prefill (no cache before it) and a decode token with 4 positions cached before it
    w = cost.weights([3, 1], [3, 5], TOY)
    assert w.tokens.tolist() == pytest.approx([3 / 4, 1 / 4])
    # pairs: 3 x 4 / 2 = 6 for the prefill (causal), 1 x 4 + 1 = 5 for the decode
    # FLOPs: 100 x 3 + 6 = 306 and 100 x 1 + 5 = 105
    assert w.flops.tolist() == pytest.approx([306 / 411, 105 / 411])
    # bytes: the weights by tokens (750, 250) plus the KV read (30, 50)
    assert w.bytes.tolist() == pytest.approx([780 / 1080, 300 / 1080])
    # a KV length below the query length counts the query tokens
    assert cost.weights([2], [0], TOY).bytes.tolist() == [1.0]
    assert cost.weights([4, 4], [1, 4], TOY).flops.tolist() == pytest.approx([0.5, 0.5])


def test_split_int_gives_the_remainder_to_the_largest_fractions() -> None:
    # 10 by 1:1:1 -> 3.33 each, one unit left: the first of the equal fractions takes it
    assert cost.split_int(10, np.array([1.0, 1.0, 1.0])).tolist() == [4, 3, 3]
    # 7 by 3:1 -> 5.25 and 1.75: the unit left goes to the larger fraction, the second
    assert cost.split_int(7, np.array([3.0, 1.0])).tolist() == [5, 2]
    # 7 by 1:1:2 -> 1.75, 1.75, 3.5: two units left, to the two .75s
    assert cost.split_int(7, np.array([1.0, 1.0, 2.0])).tolist() == [2, 2, 3]
    assert cost.split_int(9, np.array([2.0, 1.0])).tolist() == [6, 3]
    assert cost.split_int(5, np.array([])).tolist() == []
    assert cost.split_float(1.0, np.array([1.0, 3.0])).tolist() == [0.25, 0.75]
    assert cost.split_float(2.0, np.array([])).tolist() == []


def test_split_step_by_the_rule() -> None:
    step = {"time_ns": 1000, "compute_bound_ns": 411, "memory_bound_ns": 1080, "latency_bound_ns": 8,
            "other_ns": None, "comm_ns": 0, "memcpy_ns": 0, "idle_ns": 100, "flops": 822.0, "bytes": 2160.0,
            "energy_j": 2.0}
    p = cost.split_step(step, [3, 1], [3, 5], TOY)
    assert p["compute_bound_ns"].tolist() == [306, 105]  # by FLOPs
    assert p["memory_bound_ns"].tolist() == [780, 300]  # by bytes
    assert p["latency_bound_ns"].tolist() == [6, 2]  # by tokens
    assert p["idle_ns"].tolist() == [75, 25]
    assert np.isnan(p["other_ns"]).all()  # not measured: null parts
    assert p["gpu_time_ns"].tolist() == [306 + 780 + 6, 105 + 300 + 2]  # busy classes, idle left out
    # each one's share of the classes: (1092 + 75) / 1599 and (407 + 25) / 1599
    assert p["share"].tolist() == pytest.approx([1167 / 1599, 432 / 1599])
    assert p["step_time_ns"].tolist() == [730, 270]  # 729.8 and 270.2
    assert p["flops"].tolist() == pytest.approx([612.0, 210.0])
    assert p["bytes"].tolist() == pytest.approx([1560.0, 600.0])
    assert p["energy_j"].tolist() == pytest.approx([2 * 1167 / 1599, 2 * 432 / 1599])
    # nothing measured but the window: all by tokens
    bare = cost.split_step({"time_ns": 8}, [3, 1], [3, 5], TOY)
    assert bare["step_time_ns"].tolist() == [6, 2]
    assert bare["share"].tolist() == [0.75, 0.25]
    assert np.isnan(bare["gpu_time_ns"]).all() and np.isnan(bare["flops"]).all()
