"""Numbers that were once wrong without any test noticing: each expected value is worked out by hand."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tracekit.analysis import bound, steps
from tracekit.analysis.opmodels import op_cost
from tracekit.model.ceilings import Ceiling


def test_sdpa_bytes_include_the_attention_mask() -> None:
    # q, k, v: [batch 1, heads 32, len 128, dim 64] fp16; an additive fp16 mask [1, 1, 128, 128]
    qkv = [1, 32, 128, 64]
    dims = [qkv, qkv, qkv, [1, 1, 128, 128]]
    types = ["c10::Half"] * 4
    with_mask = op_cost("aten::scaled_dot_product_attention", json.dumps(dims), json.dumps(types))
    no_mask = op_cost("aten::scaled_dot_product_attention", json.dumps(dims[:3]), json.dumps(types[:3]))
    assert with_mask is not None and no_mask is not None
    tensor = 1 * 32 * 128 * 64 * 2  # bytes of q (= k = v = out)
    assert no_mask.bytes == 4 * tensor  # read q, k, v; write out
    assert with_mask.bytes == 4 * tensor + 128 * 128 * 2  # and read the mask once


def _chain(kinds_q: list[tuple[str, int]], attn_kv: list[int | None]) -> list[dict]:
    rows = [{"kind": k, "q_len": q, "kv_len": kv} for (k, q), kv in zip(kinds_q, attn_kv, strict=True)]
    steps._fill_kv(rows)
    return rows


def test_kv_length_grows_from_the_prompt_when_the_cache_is_static() -> None:
    # A static cache reports its full size (4096) to attention every step: the KV length is counted
    # instead: 100 prompt tokens, then one more per decode step.
    rows = _chain([("prefill", 100), ("decode", 1), ("decode", 1)], [4096, 4096, 4096])
    assert [r["kv_len"] for r in rows] == [100, 101, 102]


def test_kv_length_of_a_window_that_starts_mid_decode_with_a_static_cache() -> None:
    # A trace window that opens on decode steps has no prefill to count from: the first step's
    # attention length is the only witness, and each later step adds its query tokens to it.
    rows = _chain([("decode", 1), ("decode", 1), ("decode", 1)], [4096, 4096, 4096])
    assert [r["kv_len"] for r in rows] == [4096, 4097, 4098]


def test_kv_length_follows_attention_when_the_cache_grows() -> None:
    # A dynamic cache: attention's key length grows by each step's query tokens; it is taken as is.
    rows = _chain([("decode", 1), ("decode", 1)], [57, 58])
    assert [r["kv_len"] for r in rows] == [57, 58]
    rows = _chain([("prefill", 56), ("decode", 1)], [56, 57])
    assert [r["kv_len"] for r in rows] == [56, 57]


# A GPU built for the test: bf16 tensor cores 200 TFLOP/s, fp16 400 TFLOP/s, fp32 (CUDA cores) 20 TFLOP/s,
# 2 TB/s. Ridges, by hand: bf16 200e12 / 2e12 = 100 FLOP/byte, fp16 200, fp32 10.
RIDGE_GPU = Ceiling(gpu="ridge-test", peak_flops={"bf16": 2e14, "fp16": 4e14, "fp32": 2e13},
                    peak_bytes_per_s=2e12, source="test")
BF16 = "c10::BFloat16"


def _mm(op_id: int, m: int, k: int, n: int) -> dict:
    return {"op_id": op_id, "name": "aten::mm", "input_dims": json.dumps([[m, k], [k, n]]),
            "input_types": json.dumps([BF16, BF16]), "parent_id": None}


def test_a_bf16_gemm_is_judged_against_the_tensor_core_ridge_of_its_dtype() -> None:
    cpu = pd.DataFrame([_mm(1, 64, 1024, 1024), _mm(2, 256, 1024, 1024)])
    gpu = pd.DataFrame({"ts_ns": [0, 10_000], "dur_ns": [1_500, 3_000], "name": ["sm90_gemm_bf16"] * 2,
                        "op_id": [1, 2], "kind": ["kernel"] * 2, "stream": [7, 7], "device": [0, 0]})
    k = bound.kernel_costs(gpu, cpu, RIDGE_GPU, bound.BoundOptions(kernel_overhead_ns=0.0))  # rates over dur alone
    # GEMM 1: 2*64*1024*1024 = 134,217,728 FLOP; 2 B x (64*1024 + 1024*1024 + 64*1024) = 2,359,296 B
    # -> 56.9 FLOP/byte: under the bf16 ridge (100), so memory; over the fp32 ridge (10), where it would be compute.
    # GEMM 2: 536,870,912 FLOP; 2 B x (256*1024 + 1024*1024 + 256*1024) = 3,145,728 B -> 170.7 FLOP/byte:
    # over the bf16 ridge (100), so compute; under the fp16 one (200), where it would be memory.
    assert k["flops"].tolist() == [134_217_728, 536_870_912]
    assert k["bytes"].tolist() == [2_359_296, 3_145_728]
    assert k["ridge"].tolist() == pytest.approx([100, 100])
    assert list(k["roof"]) == ["memory", "compute"]
    # GEMM 1 moves 2,359,296 B in 1.5 us = 1.573 TB/s, 78.6% of 2 TB/s: over the 60% line, memory-bound.
    # GEMM 2 runs 536,870,912 FLOP in 3 us = 179 TFLOP/s, 89.5% of the bf16 200: compute-bound.
    assert k["bw_pct_of_peak"].tolist() == pytest.approx([78.6432, 52.4288])
    assert k["flops_pct_of_peak"].tolist() == pytest.approx([44.7392, 89.4785], abs=1e-4)
    assert list(k["bound"]) == ["memory", "compute"]


def _stream_kernels() -> pd.DataFrame:
    # (stream, start, end, class): each pair of neighbouring classes overlaps once, 50 ns, on two streams,
    # the winner sometimes first, sometimes second, once nested.
    rows = [
        (1, 0, 100, "memory"), (2, 50, 150, "compute"),  # compute over memory on [50, 100)
        (1, 200, 300, "memory"), (2, 250, 350, "latency"),  # memory over latency on [250, 300)
        (1, 400, 500, "other"), (2, 450, 550, "latency"),  # latency over other on [450, 500)
        (1, 600, 700, "other"), (2, 650, 750, "comm"),  # other over comm on [650, 700)
        (1, 800, 950, "memcpy"), (2, 850, 900, "comm"),  # comm over memcpy on [850, 900), inside the copy
    ]
    k = pd.DataFrame(rows, columns=["stream", "ts_ns", "end", "bound"])
    k["dur_ns"] = k.pop("end") - k["ts_ns"]
    k["device"], k["flops"], k["bytes"], k["model"], k["source"] = 0, 0.0, 0.0, "none", "model"
    return k


def test_overlapping_streams_count_each_instant_once_for_the_higher_class() -> None:
    # The order by hand: compute > memory > latency > other > comm > memcpy. Each 50 ns overlap goes
    # to the higher class; the rest of each kernel to its own.
    st = pd.DataFrame({"step_id": [0], "request_id": [0], "kind": ["prefill"], "cpu_start_ns": [0],
                       "cpu_end_ns": [1000]})
    row = bound.attribute_steps(st, _stream_kernels()).iloc[0]
    assert row["compute_bound_ns"] == 100  # [50, 150)
    assert row["memory_bound_ns"] == 50 + 100  # [0, 50) and [200, 300)
    assert row["latency_bound_ns"] == 50 + 100  # [300, 350) and [450, 550)
    assert row["other_ns"] == 50 + 100  # [400, 450) and [600, 700)
    assert row["comm_ns"] == 50 + 50  # [700, 750) and [850, 900)
    assert row["memcpy_ns"] == 50 + 50  # [800, 850) and [900, 950)
    assert row["idle_ns"] == 5 * 50  # [150, 200), [350, 400), [550, 600), [750, 800), [950, 1000)
    assert row["gpu_busy_ns"] == 750
