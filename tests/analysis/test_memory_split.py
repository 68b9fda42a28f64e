"""Where HBM goes: the split, KV bytes per token, capacity and per-phase peaks, by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from tracekit.analysis import memory as am
from tracekit.analysis import modelcheck, quantbytes
from tracekit.model import quant as qm

TINYLLAMA = dict(model_type="llama", vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                 num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4, hidden_act="silu")


def test_kv_formula_is_22528_bytes_for_tinyllama_fp16() -> None:
    assert am.kv_bytes_per_token(TINYLLAMA, "fp16") == 2 * 22 * 4 * 64 * 2 == 22_528
    assert am.kv_bytes_per_token(TINYLLAMA, "fp32") == 45_056


def test_split_adds_up_to_allocated_and_keeps_a_negative_transient() -> None:
    assert am.split(10_000, 6_000, 2_500) == 1_500
    assert 6_000 + 2_500 + am.split(10_000, 6_000, 2_500) == 10_000
    assert am.split(5_000, 6_000, 0) == -1_000  # over-counted weights show, not hidden
    assert am.split(None, 6_000, 0) is None


def _table(alloc_step: int, kv_step: int) -> pd.DataFrame:
    rows = []
    for i, kv_len in enumerate(range(10, 15)):
        kind = "prefill" if i == 0 else "decode"
        kv = kv_len * 2 * kv_step
        alloc = 1_000_000 + kv_len * 2 * alloc_step
        rows.append(dict(step_id=i, request_id=0, kind=kind, batch=2, kv_len=kv_len, allocated_bytes=alloc,
                         peak_allocated_bytes=alloc + (50_000 if i == 0 else 7_000), weights_bytes=900_000,
                         kv_cache_bytes=kv, kv_source="cache-tensors",
                         peak_transient_bytes=alloc + (50_000 if i == 0 else 7_000) - 900_000 - kv))
    return pd.DataFrame(rows)


def test_measured_kv_per_token_per_sequence_from_consecutive_decode_steps() -> None:
    m = am.measured_kv_per_token(_table(alloc_step=2_100, kv_step=2_048))
    assert m == {"cache_tensors": 2_048.0, "allocator": 2_100.0}
    assert am.measured_kv_per_token(_table(1, 1).iloc[:1]) == {"cache_tensors": None, "allocator": None}


def test_peaks_per_phase_name_the_step_and_its_split() -> None:
    p = am.peaks(_table(2_048, 2_048)).set_index("kind")
    assert p.loc["prefill", "step_id"] == 0 and p.loc["decode", "step_id"] == 4
    d = p.loc["decode"]
    assert d["weights_bytes"] + d["kv_cache_bytes"] + d["peak_transient_bytes"] == d["peak_allocated_bytes"]


def test_capacity_counts_kv_tokens_and_whole_requests_of_each_shape() -> None:
    gib = 1 << 30
    cap = am.capacity(141 * gib, 2_200_000_000, 60_000_000, 22_528)
    room = 141 * gib - 2_200_000_000 - 60_000_000
    assert cap.kv_tokens == room // 22_528
    assert cap.requests == {"chat": cap.kv_tokens // 256, "rag": cap.kv_tokens // 1265, "creative": cap.kv_tokens // 525}
    assert am.capacity(10, 20, 0, 22_528).kv_tokens == 0


def test_quantized_weight_bytes_by_hand() -> None:
    assert qm.weight_bytes("none", 5632, 2048) == 5632 * 2048 * 2
    assert qm.weight_bytes("int8", 5632, 2048) == 5632 * 2048 + 5632 * 2
    assert qm.weight_bytes("int4", 5632, 2048) == 5632 * 2048 / 2 + 5632 * 16 * 4
    assert qm.weight_bytes("fp8", 5632, 2048) == 5632 * 2048 + 4
    with pytest.raises(KeyError):
        qm.weight_bytes("int3", 1, 1)


def test_decode_bytes_fp16_equal_the_model_check_and_shrink_with_the_width() -> None:
    shape = modelcheck.shape_from_config(TINYLLAMA, "float16")
    fp16 = quantbytes.decode_bytes(TINYLLAMA, "fp16", "none", kv_len=1000)
    assert fp16.weights_bytes == shape.weight_bytes_per_step(1)
    assert fp16.total_bytes == shape.decode_step_bytes(1000, 1)
    int4 = quantbytes.decode_bytes(TINYLLAMA, "fp16", "int4", kv_len=1000)
    lin = fp16.linear_params
    assert fp16.weights_bytes - int4.weights_bytes == pytest.approx(lin * 2 - (lin / 2 + lin / 128 * 4))
    assert int4.kv_bytes == fp16.kv_bytes == 1001 * 22_528
