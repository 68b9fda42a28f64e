"""Model-shape arithmetic on small configs, every expected value counted by hand from the layer shapes."""

from __future__ import annotations

import pytest

from tracekit.analysis.modelcheck import shape_from_config

# hidden 64, 4 query heads and 2 KV heads of 16, MLP 128, 2 layers, vocab 100
SMALL = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "tie_word_embeddings": False,
    "hidden_act": "silu",
}


def test_parameters_of_a_small_llama_with_and_without_attention_bias() -> None:
    # per layer: q 64x64, k 32x64, v 32x64, o 64x64 = 12,288; gated MLP 3 x 64 x 128 = 24,576; two
    # norms 128 -> 36,992. Two layers 73,984, embedding and head 2 x 6,400, final norm 64 -> 86,848.
    assert shape_from_config(SMALL).params == 86_848
    # attention_bias (Llama): q, k, v and o each get a bias: 64 + 32 + 32 + 64 = 192 per layer more
    # (transformers' LlamaForCausalLM of this config has 87,232 parameters)
    assert shape_from_config({**SMALL, "attention_bias": True}).params == 87_232


def test_parameters_of_a_small_mixture_of_experts() -> None:
    # 4 experts of a gated MLP: 4 x 3 x 64 x 128 = 98,304 per layer, and the router [4 experts, 64]: 256
    # -> 12,288 + 98,304 + 256 + 128 = 110,976 per layer; 2 layers, embedding, head and final norm 12,864
    # (transformers' MixtralForCausalLM of this config has 234,816 parameters)
    moe = {**SMALL, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}
    assert shape_from_config(moe).params == 234_816
    # a non-gated MLP (GELU): 2 matrices
    gelu = {**SMALL, "model_type": "toy", "hidden_act": "gelu"}
    assert shape_from_config(gelu).params == 86_848 - 64 * 128 * 2
    # tied embeddings: no separate head
    assert shape_from_config({**SMALL, "tie_word_embeddings": True}).params == 86_848 - 6_400


def test_decode_bytes_flops_and_kv_of_the_small_llama() -> None:
    import pandas as pd

    from tracekit.analysis.modelcheck import decode_check, gpm_bytes_per_s, kv_growth_check

    s = shape_from_config(SMALL)  # fp16 when the config names no dtype
    assert s.kv_bytes_per_token == 2 * 2 * 2 * 16 * 2  # K and V x 2 layers x 2 KV heads x 16 x 2 B
    # every weight but the input table (6,400), plus the batch's rows of it (64 halves each)
    assert s.weight_bytes_per_step() == (86_848 - 6_400) * 2 + 64 * 2
    assert s.weight_bytes_per_step(batch=3) == (86_848 - 6_400) * 2 + 3 * 64 * 2
    assert s.decode_step_bytes(kv_len=10, batch=2) == (86_848 - 6_400) * 2 + 2 * 64 * 2 + 2 * 11 * 256
    assert s.flops_per_token(10) == 2 * (86_848 - 6_400) + 4 * 2 * 4 * 16 * 10
    tied = shape_from_config({**SMALL, "tie_word_embeddings": True})
    assert tied.weight_bytes_per_step(batch=5) == 80_448 * 2  # the shared table is read whole anyway
    assert tied.flops_per_token(0) == 2 * 80_448
    assert shape_from_config({**SMALL, "torch_dtype": "torch.float32"}).kv_bytes_per_token == 512
    assert shape_from_config(SMALL, "bfloat16").dtype_bytes == 2
    assert shape_from_config({"text_config": SMALL}).params == 86_848
    mla = shape_from_config({**SMALL, "kv_lora_rank": 512, "qk_rope_head_dim": 64})
    assert mla.kv_bytes_per_token == 2 * (512 + 64) * 2
    assert gpm_bytes_per_s(50, 4e12) == 2e12

    sb = pd.DataFrame({"kind": ["prefill", "decode", "decode", "decode"], "batch": [2, 2, 2, None],
                       "kv_len": [10, 11, None, 1], "bytes": [1.0, 166_784 / 2, 1.0, 1.0],
                       "flops": [1.0, 2 * (160_896 + 4 * 2 * 4 * 16 * 11), 1.0, 1.0]})
    d = decode_check(s, sb)
    assert len(d) == 3
    # no batch stated: one sequence; kv_len 1: nothing cached before the step
    assert d["model_bytes"].iloc[2] == (86_848 - 6_400) * 2 + 64 * 2 + 1 * 256
    # kv_len 11 after the step: 10 positions read, batch 2
    assert d["model_bytes"].iloc[0] == (86_848 - 6_400) * 2 + 2 * 64 * 2 + 2 * 11 * 256
    assert d["bytes_ratio"].iloc[0] == 0.5 and d["flops_ratio"].iloc[0] == 1.0
    assert d["model_flops"].isna().iloc[1]
    one = decode_check(s, sb.drop(columns=["batch"]))  # no batch column: one sequence per step
    assert one["model_bytes"].iloc[0] == (86_848 - 6_400) * 2 + 64 * 2 + 11 * 256

    steps = pd.DataFrame({"kind": ["prefill", "decode", "decode", "decode", "decode"], "batch": 1,
                          "cpu_start_ns": [0, 100, 200, 300, 400]})
    mem = pd.DataFrame({"ts_ns": [50, 150, 250, 350, 60, 160], "total_allocated_bytes": [1000, 1256, 1512, 1768, 9, 99],
                        "device_type": [1, 1, 1, 1, 0, 0]})
    g = kv_growth_check(s, steps, mem)
    # before each decode step: 1000, 1256, 1512, 1768 bytes after 0, 1, 2, 3 tokens: 256 per token
    assert g["measured_bytes_per_token"] == pytest.approx(256) and g["ratio"] == pytest.approx(1.0)
    assert g["samples"] == 4 and g["formula_bytes_per_token"] == 256
    # at batch 2 each step adds two tokens: 128 bytes per token
    assert kv_growth_check(s, steps.assign(batch=2), mem)["measured_bytes_per_token"] == pytest.approx(128)
    few = kv_growth_check(s, steps.iloc[:3], mem)
    assert few["samples"] == 0 and few["measured_bytes_per_token"] != few["measured_bytes_per_token"]
