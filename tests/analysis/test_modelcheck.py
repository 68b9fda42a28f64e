from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers import need_module

from tracekit.analysis import energy
from tracekit.analysis.modelcheck import (
    decode_check,
    gpm_bytes_per_s,
    kv_bytes_per_token,
    kv_growth_check,
    shape_from_config,
)
from tracekit.model.ceilings import datasheet
from tracekit.report.charts import roofline_svg

TINYLLAMA = {
    "model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
    "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000, "tie_word_embeddings": False,
    "hidden_act": "silu", "torch_dtype": "bfloat16",
}


def test_tinyllama_kv_bytes_per_token_fp16() -> None:
    assert kv_bytes_per_token(TINYLLAMA, "float16") == 22_528  # the number: 2 × 22 × 4 × 64 × 2


def test_gqa_mqa_mla() -> None:
    mha = {**TINYLLAMA, "num_key_value_heads": 32}
    mqa = {**TINYLLAMA, "num_key_value_heads": 1}
    assert kv_bytes_per_token(mha) == 8 * kv_bytes_per_token(TINYLLAMA)
    assert kv_bytes_per_token(mqa) == 2 * 22 * 1 * 64 * 2
    no_kv = {k: v for k, v in TINYLLAMA.items() if k != "num_key_value_heads"}
    assert kv_bytes_per_token(no_kv) == kv_bytes_per_token(mha)  # absent means MHA
    mla = {**TINYLLAMA, "kv_lora_rank": 512, "qk_rope_head_dim": 64}
    assert kv_bytes_per_token(mla, "bfloat16") == 22 * (512 + 64) * 2
    with pytest.raises(ValueError, match="hidden_size"):
        shape_from_config({"num_attention_heads": 2})


def test_parameter_count_matches_transformers() -> None:
    torch = need_module("torch")
    transformers = need_module("transformers")
    for cfg in (TINYLLAMA, {**TINYLLAMA, "tie_word_embeddings": True, "num_hidden_layers": 2}):
        hf = transformers.LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("model_type", "torch_dtype")})
        with torch.device("meta"):
            model = transformers.LlamaForCausalLM(hf)
        assert shape_from_config(hf.to_dict()).params == sum(p.numel() for p in model.parameters())


def test_decode_bytes_and_flops() -> None:
    s = shape_from_config(TINYLLAMA, "float16")
    emb = 32000 * 2048
    assert s.weight_bytes_per_step() == (s.params - emb) * 2 + 2048 * 2
    assert s.decode_step_bytes(kv_len=100) == s.weight_bytes_per_step() + 101 * 22_528
    assert s.flops_per_token(100) == 2 * (s.params - emb) + 4 * 22 * 32 * 64 * 100
    steps = pd.DataFrame({"kind": ["prefill", "decode", "decode"], "batch": [1, 1, 1], "kv_len": [10, 11, 12],
                          "bytes": [1.0, s.decode_step_bytes(10) * 1.05, s.decode_step_bytes(11)],
                          "flops": [1.0, s.flops_per_token(11), s.flops_per_token(12) / 2]})
    d = decode_check(s, steps)
    assert len(d) == 2
    assert list(d["bytes_ratio"].round(6)) == [1.05, 1.0]
    assert list(d["flops_ratio"].round(6)) == [1.0, 0.5]
    h200 = datasheet("NVIDIA H200")
    assert h200 is not None and gpm_bytes_per_s(50.0, h200.peak_bytes_per_s) == 2.4e12


def test_kv_growth_slope() -> None:
    s = shape_from_config(TINYLLAMA, "float16")
    n = 20
    starts = np.arange(n) * 1000 + 10_000
    steps = pd.DataFrame({"kind": "decode", "batch": 1, "cpu_start_ns": starts})
    # the allocator: +22,528 per token, with a transient spike inside every step (torch.cat's copy)
    ts, total = [], []
    for i, t0 in enumerate(starts):
        base = 5e9 + i * 22_528
        ts += [t0 - 10, t0 + 300, t0 + 600]
        total += [base, base + 3e6, base + 22_528]
    mem = pd.DataFrame({"ts_ns": ts, "total_allocated_bytes": total, "device_type": 1})
    r = kv_growth_check(s, steps, mem)
    assert r["measured_bytes_per_token"] == pytest.approx(22_528, rel=1e-6)
    assert r["ratio"] == pytest.approx(1.0) and r["samples"] == n
    assert np.isnan(kv_growth_check(s, steps, mem.iloc[0:0])["measured_bytes_per_token"])


def test_energy_from_counter_and_from_power() -> None:
    ts = np.arange(0, 11) * 100_000_000  # 0 .. 1 s, every 100 ms
    c = pd.DataFrame({"ts_ns": np.r_[ts, ts], "metric": ["energy"] * 11 + ["power"] * 11,
                      "value": np.r_[1000 + 300 * ts / 1e9, np.full(11, 300.0)]})
    win = np.array([[150_000_000, 650_000_000]])
    assert energy.window_energy_j(c, win)[0] == pytest.approx(150.0)  # 300 W × 0.5 s, from the counter
    only_power = c[c["metric"] == "power"]
    assert energy.window_energy_j(only_power, win)[0] == pytest.approx(150.0)
    assert np.isnan(energy.window_energy_j(only_power, np.array([[0, 2_000_000_000]]))[0])  # no extrapolation
    phases = pd.DataFrame({"request_id": [None], "phase": ["decode"]})
    steps = pd.DataFrame({"step_id": [0, 1], "request_id": 0, "kind": "decode", "tokens": 1,
                          "cpu_start_ns": [100_000_000, 400_000_000], "cpu_end_ns": [200_000_000, 500_000_000]})
    out = energy.phase_energy(phases, steps, c).to_pandas()
    assert out.loc[0, "energy_j"] == pytest.approx(60.0) and out.loc[0, "energy_j_per_token"] == pytest.approx(30.0)
    assert "energy_j" not in phases  # input untouched
    g = pd.DataFrame({"ts_ns": [0, 100, 200], "metric": "dram_bw_util", "value": [10.0, 90.0, 50.0]})
    assert energy.window_mean(g, energy.METRIC_DRAM_BW_UTIL, np.array([[50, 150]])) == pytest.approx(50.0)


def test_roofline_svg() -> None:
    h200 = datasheet("NVIDIA H200")
    assert h200 is not None
    k = pd.DataFrame({"model": "shape", "flops": [2e10, 2e7], "bytes": [4e7, 2e7], "dur_ns": [50_000, 10_000],
                      "phase": ["prefill", "decode"]})
    k["intensity"] = k["flops"] / k["bytes"]
    svg = roofline_svg(k, h200)
    assert svg.startswith("<svg ") and svg.count('<g class="series"') >= 2  # the roofs and the kernels
    assert roofline_svg(k.iloc[0:0], h200).startswith("<svg ")  # empty: just the roofs


def test_energy_counter_updated_slower_than_sampled() -> None:
    # GIVEN the H200's behaviour: the energy counter jumps 13 J every 100 ms (130 W), sampled every 10 ms
    ts = np.arange(0, 1_000_000_001, 10_000_000)
    val = 13.0 * (ts // 100_000_000)
    c = pd.DataFrame({"ts_ns": ts, "metric": "energy", "value": val})
    # WHEN a 29 ms window straddles one jump
    win = np.array([[495_000_000, 524_000_000]])
    # THEN it gets 130 W × 29 ms, not the whole 13 J jump
    assert energy.window_energy_j(c, win)[0] == pytest.approx(130 * 0.029, rel=0.01)
    # and a long window is still the counter's difference
    assert energy.window_energy_j(c, np.array([[100_000_000, 900_000_000]]))[0] == pytest.approx(13.0 * 8)


def test_energy_window_before_the_counters_second_update_uses_power() -> None:
    # the first sample lands 1 ms before an update: the slope to it is not a power
    ts = np.array([0, 1, 10, 20, 100, 101, 200]) * 1_000_000
    val = np.array([0.0, 13.0, 13.0, 13.0, 13.0, 26.0, 26.0])
    c = pd.concat([pd.DataFrame({"ts_ns": ts, "metric": "energy", "value": val}),
                   pd.DataFrame({"ts_ns": ts, "metric": "power", "value": 130.0})])
    assert energy.window_energy_j(c, np.array([[5_000_000, 15_000_000]]))[0] == pytest.approx(1.3)
