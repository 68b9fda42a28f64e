"""Inductor kernels' op model, index_copy_ / scatter_, split-K reduce kernels, the kernel overhead and the
L2-resident rule: hand-worked values.

Inductor ops below are real ones from the H200 compiled Llama traces (tests/fixtures/ncu/compiled_*).
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tracekit.analysis import bound
from tracekit.analysis.opmodels import inductor_kernel, op_cost, op_costs
from tracekit.model.ceilings import datasheet, l2_bytes

BF, F, L, S = "c10::BFloat16", "float", "long int", "Scalar"
H200 = datasheet("NVIDIA H200")
RMS = ("triton_red_fused__to_copy_add_embedding_mean_mul_pow_rsqrt_0",
       [[1, 1], [128256, 2048], [2048], [1, 1, 2048], [], []], [L, BF, BF, BF, S, S], ["", "", "", "", "1", "2048"])
ROPE_CACHE = ("triton_poi_fused__to_copy__unsafe_view_add_arange_bmm_cat_cos_index_copy_mul_neg_sin_slice_2",
              [[], [1, 512], [32, 1], [1, 8, 136, 64], []], [L, BF, F, BF, S], ["", "", "", "", "512"])


def _cost(op: tuple) -> tuple[float, float, str, str]:
    c = inductor_kernel(op[0], json.dumps(op[1]), json.dumps(op[2]), json.dumps(op[3]))
    assert c is not None
    return c.flops, c.bytes, c.op_class, c.dtype


def test_a_reduction_covers_xnumel_times_r0_numel_of_each_buffer() -> None:
    # xnumel 1 x r0_numel 2048: one token id (8 B), one embedding row of the 128256 x 2048 table (4,096 B),
    # the norm weight (4,096 B), the output row (4,096 B)
    assert _cost(RMS) == (2048, 8 + 3 * 4096, "reduction", "bf16")


def test_a_pointwise_kernel_touches_xnumel_of_a_larger_buffer_it_writes_into() -> None:
    # xnumel 512: the position (0-dim long, 8 B), the new keys (1,024 B), the fp32 frequencies [32, 1]
    # (128 B), 512 elements of the 69,632-element static cache (1,024 B), not the whole cache
    assert _cost(ROPE_CACHE) == (512, 8 + 1024 + 128 + 1024, "elementwise", "bf16")


def test_a_tiled_pointwise_kernel_covers_ynumel_times_xnumel() -> None:
    # a transpose [64, 128] -> [128, 64]: ynumel 64 x xnumel 128 = 8,192 = each buffer's size
    op = ("triton_poi_fused_clone_0", [[64, 128], [128, 64], [], []], [BF, BF, S, S], ["", "", "64", "128"])
    assert _cost(op) == (8192, 2 * 8192 * 2, "elementwise", "bf16")
    # a dynamic-shape symbol (ks0 = 4) before xnumel 512 whose product (2,048) is no buffer's size: xnumel alone
    op = ("triton_poi_fused_add_1", [[512], [512], [], []], [BF, BF, S, S], ["", "", "4", "512"])
    assert _cost(op) == (512, 2 * 1024, "elementwise", "bf16")


def test_inductor_ops_without_counts_or_of_another_kind_have_no_model() -> None:
    assert inductor_kernel(RMS[0], json.dumps(RMS[1]), json.dumps(RMS[2]), None) is None
    assert inductor_kernel("triton_tem_fused_mm_0", json.dumps([[8, 8], [8, 8], []]), json.dumps([BF, BF, S]),
                           json.dumps(["", "", "64"])) is None
    assert inductor_kernel(RMS[0], json.dumps(RMS[1]), json.dumps(RMS[2]), json.dumps(["", "x"])) is None
    assert op_cost(RMS[0], json.dumps(RMS[1]), json.dumps(RMS[2])) is None
    assert op_cost(RMS[0], json.dumps(RMS[1]), json.dumps(RMS[2]), concrete_inputs=json.dumps(RMS[3])) is not None


def test_op_costs_reads_the_concrete_inputs_column_for_inductor_ops_only() -> None:
    cpu = pd.DataFrame({"op_id": [1, 2, 3], "name": [RMS[0], ROPE_CACHE[0], "aten::add"],
                        "input_dims": [json.dumps(RMS[1]), json.dumps(ROPE_CACHE[1]), json.dumps([[4], [4]])],
                        "input_types": [json.dumps(RMS[2]), json.dumps(ROPE_CACHE[2]), json.dumps([F, F])],
                        "concrete_inputs": [json.dumps(RMS[3]), json.dumps(ROPE_CACHE[3]), json.dumps(["", ""])]})
    c = op_costs(cpu).set_index("op_id")
    assert c.loc[1, "bytes"] == 12_296 and c.loc[2, "bytes"] == 2_184 and c.loc[3, "bytes"] == 48
    assert len(op_costs(cpu.drop(columns=["concrete_inputs"]))) == 1  # without the column: aten only


def test_index_copy_and_scatter_move_what_they_write() -> None:
    # index_copy_(cache [64, 8, 136, 128], 2, index [128], new [64, 8, 128, 128]): the index, the new keys
    # read and as many elements of the cache written
    c = op_cost("aten::index_copy_", json.dumps([[64, 8, 136, 128], [], [128], [64, 8, 128, 128]]),
                json.dumps([BF, S, L, BF]))
    assert c is not None and (c.bytes, c.op_class) == (128 * 8 + 2 * 64 * 8 * 128 * 128 * 2, "copy")
    # scatter_(self [1000] fp32, 0, index [10], src [10] fp32): 80 + 40 + 40
    c = op_cost("aten::scatter_", json.dumps([[1000], [], [10], [10]]), json.dumps([F, S, L, F]))
    assert c is not None and c.bytes == 160


def _kernels(rows: list[tuple[int, str, int]], cpu: pd.DataFrame, options: bound.BoundOptions | None = None
             ) -> pd.DataFrame:
    gpu = pd.DataFrame([{"op_id": o, "name": n, "kind": "kernel", "ts_ns": 100_000 * i, "dur_ns": d, "stream": 7,
                         "device": 0} for i, (o, n, d) in enumerate(rows)]).astype({"op_id": "Int64"})
    return bound.kernel_costs(gpu, cpu, H200, options)


def _op(i: int, name: str, dims: list, types: list) -> dict:
    return {"op_id": i, "name": name, "input_dims": json.dumps(dims), "input_types": json.dumps(types),
            "parent_id": None}


def test_a_split_k_reduce_kernel_takes_no_share_of_its_gemms_cost() -> None:
    cpu = pd.DataFrame([_op(1, "aten::mm", [[8, 4096], [4096, 4096]], [BF, BF])])
    k = _kernels([(1, "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT", 12_000), (1, "splitKreduce_kernel", 2_000)], cpu)
    # 2 B x (8*4096 + 4096*4096 + 8*4096) = 33,685,504 B and 2*8*4096*4096 FLOP, all on the GEMM kernel
    assert k["bytes"].tolist() == [33_685_504, 0] and k["flops"].tolist() == [268_435_456, 0]
    assert list(k["kclass"]) == ["gemm", "reduction"] and list(k["model"]) == ["shape", "kernel_class"]
    assert k["bound"].iloc[1] == "latency"  # a 2 us reduction: the size rule


def test_rates_include_the_kernel_overhead() -> None:
    # a GEMV reading 33,685,504 B in 10 us: 3.37 TB/s = 70.2% of the H200's 4.8 TB/s over its duration;
    # over 10 + 1.3 us, 62.1%; over 10 + 3 us, 54.0% (latency)
    cpu = pd.DataFrame([_op(1, "aten::mm", [[8, 4096], [4096, 4096]], [BF, BF])])
    bare = _kernels([(1, "gemv", 10_000)], cpu, bound.BoundOptions(kernel_overhead_ns=0.0))
    assert bare["bw_pct_of_peak"].iloc[0] == pytest.approx(33_685_504 / 10e-6 / 4.8e12 * 100)
    k = _kernels([(1, "gemv", 10_000)], cpu)
    assert k["bw_pct_of_peak"].iloc[0] == pytest.approx(33_685_504 / 11.3e-6 / 4.8e12 * 100)
    assert k["bound"].iloc[0] == "memory"
    slow = _kernels([(1, "gemv", 10_000)], cpu, bound.BoundOptions(kernel_overhead_ns=3000.0))
    assert slow["bw_pct_of_peak"].iloc[0] == pytest.approx(53.98, abs=0.01) and slow["bound"].iloc[0] == "latency"


def test_an_elementwise_kernel_that_fits_in_l2_is_not_bound_by_dram() -> None:
    assert l2_bytes("NVIDIA H200") == 60 * 2**20 and l2_bytes("AMD Instinct MI300X") is None
    small = [[1024, 2048], [1024, 2048]]  # fp32 add: 3 x 8 MiB = 24 MiB, fits in the 60 MiB L2
    big = [[4096, 2048], [4096, 2048]]  # 3 x 32 MiB = 96 MiB: does not
    cpu = pd.DataFrame([_op(1, "aten::add", small, [F, F]), _op(2, "aten::add", big, [F, F])])
    # both at ~90% of the DRAM peak over duration + overhead
    d_small = round(3 * 8 * 2**20 / (0.9 * 4.8e12) * 1e9 - 1300)
    d_big = round(3 * 32 * 2**20 / (0.9 * 4.8e12) * 1e9 - 1300)
    rows = [(1, "vectorized_elementwise_kernel", d_small), (2, "vectorized_elementwise_kernel", d_big)]
    k = _kernels(rows, cpu)
    assert k["bw_pct_of_peak"].tolist() == pytest.approx([90, 90], abs=0.01)
    assert list(k["bound"]) == ["latency", "memory"]
    assert list(_kernels(rows, cpu, bound.BoundOptions(l2_resident=False))["bound"]) == ["memory", "memory"]
    # DRAM serves the footprint's share of the L2: 3 x 15 MiB = 45 MiB of the 60 MiB L2 (0.75) at 90% of
    # the peak over its bytes is 67.5% of it in DRAM (memory, over the 60% line); at 75%, 56.25% (latency)
    cpu = pd.DataFrame([_op(i, "aten::add", [[1920, 2048], [1920, 2048]], [F, F]) for i in (1, 2)])
    rows = [(i, "vectorized_elementwise_kernel", round(45 * 2**20 / (pct * 4.8e12) * 1e9 - 1300))
            for i, pct in ((1, 0.9), (2, 0.75))]
    assert list(_kernels(rows, cpu)["bound"]) == ["memory", "latency"]
    # a GEMM's operands are not subject to the rule
    cpu = pd.DataFrame([_op(1, "aten::mm", [[8, 2048], [2048, 2048]], [BF, BF])])
    g = _kernels([(1, "gemv", 1_500)], cpu)
    assert g["bw_pct_of_peak"].iloc[0] > 60 and g["bound"].iloc[0] == "memory"
