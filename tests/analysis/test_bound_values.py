"""The bound pass on a toy GPU with round peaks; every FLOP, byte, share and class worked out by hand.

The toy GPU: 100 TFLOP/s fp16 (tensor cores), 10 TFLOP/s fp32, 1 TB/s -> ridges 100 and 10 FLOP/byte.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tracekit.analysis import bound
from tracekit.model.ceilings import Ceiling

TOY = Ceiling(gpu="toy", peak_flops={"fp16": 1e14, "fp32": 1e13}, peak_bytes_per_s=1e12, source="test")
H, F = "c10::Half", "float"


def _op(op_id: int, name: str, dims: list, types: list, parent: int | None = None) -> dict:
    return {"op_id": op_id, "name": name, "input_dims": json.dumps(dims), "input_types": json.dumps(types),
            "parent_id": parent}


CPU = pd.DataFrame([
    _op(0, "aten::mm", [[100, 200], [200, 300]], [H, H]),  # 12e6 FLOP, 2 x (20k + 60k + 30k) = 220 kB
    _op(1, "aten::mm", [[1000, 1000], [1000, 1000]], [H, H]),  # 2e9 FLOP, 6 MB
    _op(2, "aten::add", [[1000], [1000]], [F, F]),  # 1000 FLOP, 12 kB
    _op(3, "aten::mm", [[100, 200], [200, 300]], [H, H]),  # as op 0, over two kernels
    _op(4, "aten::linear", [[1, 10, 64], [64, 64], []], [H, H, ""]),  # 81,920 FLOP, 2 x (640 + 4096 + 640) B
    _op(5, "aten::t", [[64, 64]], [H], parent=4),  # no model: its kernel is its parent's
])
# (op_id, name, kind, ts, dur)
GPU_ROWS = [
    (0, "sm90_gemm", "kernel", 0, 250),
    (1, "sm90_gemm", "kernel", 1_000, 25_000),
    (2, "vectorized_elementwise_kernel", "kernel", 30_000, 100),
    (3, "sm90_gemm", "kernel", 40_000, 100),
    (3, "sm90_gemm", "kernel", 40_200, 300),
    (5, "sm90_gemm", "kernel", 50_000, 1_000),
    (None, "vectorized_elementwise_kernel", "kernel", 60_000, 5_000),
    (None, "vectorized_elementwise_kernel", "kernel", 70_000, 30_000),
    (None, "ncclDevKernel_AllReduce_Sum", "kernel", 110_000, 1_000),
    (None, "Memcpy DtoD (Device -> Device)", "memcpy", 120_000, 100),
    (None, "Memcpy HtoD (Pageable -> Device)", "memcpy", 121_000, 100),
    (None, "sm90_xmma_gemm_unknown", "kernel", 122_000, 1_000),
]


def _gpu() -> pd.DataFrame:
    g = pd.DataFrame(GPU_ROWS, columns=["op_id", "name", "kind", "ts_ns", "dur_ns"]).astype({"op_id": "Int64"})
    g["device"], g["stream"] = 0, 7
    g["bytes"] = [None] * 9 + [4096, 1000, None]
    g["memcpy_kind"] = [None] * 9 + ["DtoD", "HtoD", None]
    return g


# The hand-worked rates below are over the kernels' durations alone (no per-kernel overhead).
EXACT = bound.BoundOptions(kernel_overhead_ns=0.0)


def test_kernel_costs_roofs_classes_and_rates() -> None:
    gpu = _gpu()
    k = bound.kernel_costs(gpu, CPU, TOY, EXACT)
    assert list(k["bound"]) == ["memory", "compute", "latency", "latency", "latency", "latency", "latency", "memory",
                                "comm", "memcpy", "memcpy", "other"]
    assert [None if pd.isna(r) else r for r in k["roof"]] == ["memory", "compute", "memory", "memory", "memory",
                                                              "memory", "memory", "memory", None, None, None, None]
    assert list(k["model"]) == ["shape"] * 6 + ["kernel_class"] * 2 + ["none"] * 4
    assert list(k["op_name"][:6]) == ["aten::mm", "aten::mm", "aten::add", "aten::mm", "aten::mm", "aten::linear"]
    # op 3's cost split by its kernels' durations, 1:3
    assert k["flops"].tolist()[:6] == pytest.approx([12e6, 2e9, 1000, 3e6, 9e6, 81_920])
    assert k["bytes"].tolist()[:6] == pytest.approx([220_000, 6e6, 12_000, 55_000, 165_000, 10_752])
    assert k["bytes"].tolist()[9:11] == [8192, 1000]  # a device-to-device copy reads and writes its bytes
    # GEMMs against the fp16 ridge (100), the add against the fp32 one (10)
    assert k["ridge"].tolist()[:3] == pytest.approx([100, 100, 10])
    assert k["intensity"].tolist()[:3] == pytest.approx([12e6 / 220_000, 2e9 / 6e6, 1000 / 12_000])
    # 12e6 FLOP in 250 ns = 48 TFLOP/s = 48% of 100; 220 kB in 250 ns = 0.88 TB/s = 88%
    assert k["flops_pct_of_peak"].tolist()[:4] == pytest.approx([48, 80, 0.1, 30])
    assert k["bw_pct_of_peak"].tolist()[:4] == pytest.approx([88, 24, 12, 55])
    assert k["flops_pct_of_peak"][6:].isna().all()
    assert (k["source"] == "model").all()
    pd.testing.assert_frame_equal(gpu, _gpu())  # input untouched


def test_options_and_no_ceiling() -> None:
    gpu = _gpu()
    roof_only = bound.kernel_costs(gpu, CPU, TOY, bound.ROOFLINE_ONLY)
    assert list(roof_only["bound"][:8]) == ["memory", "compute"] + ["memory"] * 6
    strict = bound.kernel_costs(gpu, CPU, TOY, bound.BoundOptions(latency_threshold=0.9, kernel_overhead_ns=0.0))
    assert list(strict["bound"][:2]) == ["latency", "latency"]  # 88% and 80%: under 90% of both peaks
    loose = bound.kernel_costs(gpu, CPU, TOY, bound.BoundOptions(latency_threshold=0.5, kernel_overhead_ns=0.0))
    assert list(loose["bound"][:5]) == ["memory", "compute", "latency", "memory", "memory"]  # 55% of bandwidth
    no_fb = bound.kernel_costs(gpu, CPU, TOY, bound.BoundOptions(class_fallback_memory=False))
    assert list(no_fb["bound"][6:8]) == ["other", "other"] and list(no_fb["model"][6:8]) == ["none", "none"]
    short = bound.kernel_costs(gpu, CPU, TOY, bound.BoundOptions(short_kernel_ns=40_000))
    assert list(short["bound"][6:8]) == ["latency", "latency"]
    none = bound.kernel_costs(gpu, CPU, None)
    assert list(none["bound"]) == ["other"] * 6 + ["latency", "memory", "comm", "memcpy", "memcpy", "other"]
    assert none["flops"].tolist()[:6] == pytest.approx([12e6, 2e9, 1000, 3e6, 9e6, 81_920])
    assert none["ridge"].isna().all() and none["flops_pct_of_peak"].isna().all()
    assert none["intensity"].tolist()[0] == pytest.approx(12e6 / 220_000)
    assert len(bound.kernel_costs(gpu.iloc[:0], CPU, TOY)) == 0


def _steps() -> pd.DataFrame:
    return pd.DataFrame({"step_id": [0, 1, 2], "request_id": [0, 0, 1], "kind": ["prefill", "decode", "decode"],
                         "cpu_start_ns": [0, 1000, 2000], "cpu_end_ns": [1000, 1500, 2500], "tokens": [8, 1, 1]})


def _kernels() -> pd.DataFrame:
    # (ts, dur, bound, flops, bytes, model, kclass, dtype)
    rows = [(100, 300, "compute", 3e6, 1e4, "shape", "gemm", "fp16"),
            (300, 300, "memory", 0.0, 3e5, "shape", "elementwise", "fp32"),  # [300, 400) goes to compute
            (1100, 100, "latency", 0.0, 0.0, "shape", "elementwise", "fp32"),
            (1150, 150, "comm", 0.0, 0.0, "none", "communication", None),  # [1150, 1200) goes to latency
            (2100, 100, "other", 0.0, 0.0, "none", "gemm", None),
            (2300, 50, "memcpy", 0.0, 0.0, "none", "copy", None)]
    k = pd.DataFrame(rows, columns=["ts_ns", "dur_ns", "bound", "flops", "bytes", "model", "kclass", "dtype"])
    k["device"] = 0
    return k


def test_attribute_steps_and_phases() -> None:
    cols = ["compute_bound_ns", "memory_bound_ns", "latency_bound_ns", "other_ns", "comm_ns", "memcpy_ns", "idle_ns"]
    st = bound.attribute_steps(_steps(), _kernels()).set_index("step_id")
    assert st.loc[0, cols].tolist() == [300, 200, 0, 0, 0, 0, 500]
    assert st.loc[1, cols].tolist() == [0, 0, 100, 0, 100, 0, 300]
    assert st.loc[2, cols].tolist() == [0, 0, 0, 100, 0, 50, 350]
    assert st["time_ns"].tolist() == [1000, 500, 500] and st["gpu_busy_ns"].tolist() == [500, 200, 150]

    ph = bound.attribute_phases(_steps(), _kernels(), TOY)
    rows = {(None if pd.isna(r["request_id"]) else int(r["request_id"]), r["phase"]): r for r in ph.to_dict("records")}
    assert sorted(rows, key=str) == sorted([(None, "prefill"), (0, "prefill"), (None, "decode"), (0, "decode"),
                                            (1, "decode")], key=str)
    pre, dec = rows[(None, "prefill")], rows[(None, "decode")]
    assert [pre[c] for c in cols] == [300, 200, 0, 0, 0, 0, 500]
    assert [dec[c] for c in cols] == [0, 0, 100, 100, 100, 50, 650]
    assert (pre["steps"], dec["steps"], pre["time_ns"], dec["time_ns"]) == (1, 2, 1000, 1000)
    assert (pre["tokens"], dec["tokens"]) == (8, 2)
    assert [rows[(0, "decode")][c] for c in cols] == [0, 0, 100, 0, 100, 0, 300]
    assert (pre["kernels_modelled"], dec["kernels_modelled"], dec["kernels_unmodelled"]) == (2, 1, 1)
    # 3e6 FLOP and 310 kB over 500 ns busy: 6 TFLOP/s (6% of the fp16 peak), 0.62 TB/s (62%)
    assert (pre["flops"], pre["bytes"], pre["ceiling_dtype"]) == (3e6, 3.1e5, "fp16")
    assert pre["achieved_tflops"] == pytest.approx(6) and pre["achieved_tbps"] == pytest.approx(0.62)
    assert pre["achieved_tflops_wall"] == pytest.approx(3) and pre["achieved_tbps_wall"] == pytest.approx(0.31)
    assert pre["pct_peak_flops"] == pytest.approx(6) and pre["pct_peak_bandwidth"] == pytest.approx(62)
    assert dec["ceiling_dtype"] == "fp32" and dec["pct_peak_flops"] == 0  # the only modelled kernel is fp32
    assert pre["ceiling"] == "toy (datasheet)"
    # with the phases table: its rows kept, the computed columns replaced, outside left null
    phases = pd.DataFrame({"request_id": pd.array([None, None, None], dtype="Int64"),
                           "phase": ["prefill", "decode", "outside"], "time_ns": [1, 2, 3], "mine": ["a", "b", "c"]})
    merged = bound.attribute_phases(_steps(), _kernels(), TOY, phases)
    assert list(merged["mine"]) == ["a", "b", "c"] and len(merged) == 3
    assert merged["time_ns"].tolist()[:2] == [1000, 1000] and np.isnan(merged["time_ns"].tolist()[2])
    assert merged["idle_ns"].tolist()[:2] == [500, 650]


def test_with_profiler_and_gpu_name() -> None:
    row = {"idle_host_ns": 300, "idle_profiler_ns": None}
    assert bound.with_profiler(row, 100) == {"idle_host_ns": 200, "idle_profiler_ns": 100}
    assert bound.with_profiler(row, 500) == {"idle_host_ns": 0, "idle_profiler_ns": 300}  # never above host time
    assert bound.with_profiler(row, -5) == {"idle_host_ns": 300, "idle_profiler_ns": 0}
    assert bound.with_profiler(row, None) is row
    assert bound.gpu_name({"environment": {"gpu": "NVIDIA H200"}}) == "NVIDIA H200"
    meta = {"deviceProperties": [{"name": "NVIDIA A100"}]}
    assert bound.gpu_name({"trace_meta": meta}) == "NVIDIA A100"
    assert bound.gpu_name({"trace_meta": {"rank0": meta}}) == "NVIDIA A100"
    assert bound.gpu_name({}) is None and bound.gpu_name({"trace_meta": {"x": {}}}) is None


def test_attention_is_causal_unless_told_otherwise() -> None:
    # q, k, v [1, 2 heads, 8, 4] fp16: causal 8 x 8 - 8 x 7 / 2 = 36 pairs per head, else 64
    cpu = pd.DataFrame([_op(0, "aten::scaled_dot_product_attention", [[1, 2, 8, 4]] * 3, [H] * 3)])
    gpu = pd.DataFrame({"op_id": [0], "name": ["flash_fwd_kernel"], "kind": ["kernel"], "ts_ns": [0],
                        "dur_ns": [1000], "device": [0], "stream": [7]})
    assert bound.kernel_costs(gpu, cpu, TOY)["flops"].iloc[0] == 2 * 2 * 36 * 8
    full = bound.kernel_costs(gpu, cpu, TOY, bound.BoundOptions(assume_causal=False))
    assert full["flops"].iloc[0] == 2 * 2 * 64 * 8


def test_kernels_take_their_step_from_the_launch_not_the_start() -> None:
    steps = pd.DataFrame({"step_id": [0, 1], "kind": ["prefill", "decode"], "cpu_start_ns": [0, 1000],
                          "cpu_end_ns": [1000, 2000]})
    k = pd.DataFrame({"ts_ns": [900, 1200, 5000], "dur_ns": [200, 10, 10]})
    # the timeline pass's assignment (by launch time): row 0 was launched by step 1, row 1 by none
    ks = pd.DataFrame({"row": [0, 1, 2], "step_id": pd.array([1, None, 0], dtype="Int64")})
    got = bound.with_steps(k, steps, ks)["step_id"].tolist()
    assert got[0] == 1 and np.isnan(got[1]) and got[2] == 0
    # without it: the window the kernel starts in
    by_start = bound.with_steps(k, steps)["step_id"].tolist()
    assert by_start[:2] == [0, 1] and np.isnan(by_start[2])


def test_an_op_whose_kernels_all_last_zero_ns_splits_its_cost_evenly() -> None:
    # op 0 (12e6 FLOP, 220 kB) launches two kernels whose durations round to 0 ns: half each
    gpu = _gpu().iloc[:1]
    gpu = pd.concat([gpu, gpu], ignore_index=True)
    gpu["dur_ns"] = 0
    k = bound.kernel_costs(gpu, CPU, TOY)
    assert k["flops"].tolist() == [6e6, 6e6] and k["bytes"].tolist() == [110_000, 110_000]


def test_copies_without_a_direction_column_count_their_bytes_once() -> None:
    # a trace whose copies carry bytes but no memcpy_kind: the direction is unknown, nothing is doubled
    k = bound.kernel_costs(_gpu().drop(columns=["memcpy_kind"]), CPU, TOY)
    assert k["bytes"].tolist()[9:11] == [4096, 1000]
    assert list(k["bound"][9:11]) == ["memcpy", "memcpy"]


def test_kernels_without_a_dtype_column_are_rated_against_the_fp16_peak() -> None:
    # the same phases as above from a kernels table that lacks dtype: 6 TFLOP/s is 6% of the fp16 100
    ph = bound.attribute_phases(_steps(), _kernels().drop(columns=["dtype"]), TOY)
    pre = ph[(ph["phase"] == "prefill") & ph["request_id"].isna()].iloc[0]
    assert pre["pct_peak_flops"] == pytest.approx(6.0)


def test_a_step_without_kernels_has_no_work_and_is_all_idle() -> None:
    st = pd.DataFrame({"step_id": [5], "request_id": [0], "kind": ["decode"], "cpu_start_ns": [10_000],
                       "cpu_end_ns": [10_400]})
    row = bound.attribute_steps(st, _kernels()).iloc[0]
    assert (row["flops"], row["bytes"], row["gpu_busy_ns"], row["idle_ns"], row["time_ns"]) == (0, 0, 0, 400, 400)
    assert (row["kernels_modelled"], row["kernels_class_only"], row["kernels_unmodelled"]) == (0, 0, 0)


def test_the_latency_line_is_sixty_percent_of_peak() -> None:
    # an fp32 add of 2 x 50,000 floats: 50,000 FLOP, 600,000 B (intensity 1/12, the memory side).
    # In 995 ns it moves 0.603 TB/s, 60.3% of 1 TB/s: over the line, memory-bound; in 1,005 ns 59.7%: latency.
    cpu = pd.DataFrame([_op(i, "aten::add", [[50_000], [50_000]], [F, F]) for i in (0, 1)])
    gpu = pd.DataFrame({"op_id": [0, 1], "name": ["vectorized_elementwise_kernel"] * 2, "kind": "kernel",
                        "ts_ns": [0, 10_000], "dur_ns": [995, 1_005], "device": 0, "stream": 7})
    k = bound.kernel_costs(gpu, cpu, TOY, EXACT)
    assert k["bytes"].tolist() == [600_000, 600_000]
    assert k["bw_pct_of_peak"].tolist() == pytest.approx([60.3015, 59.7015], abs=1e-4)
    assert list(k["bound"]) == ["memory", "latency"]


def test_without_a_cpu_ops_table_kernels_are_classed_by_name_only() -> None:
    k = bound.kernel_costs(_gpu(), None, TOY)
    # the GEMMs have no model: other; the elementwise kernels go by the size rule (under 20 us: latency)
    assert list(k["model"]) == ["none", "none", "kernel_class"] + ["none"] * 3 + ["kernel_class"] * 2 + ["none"] * 4
    assert list(k["bound"]) == ["other", "other", "latency", "other", "other", "other", "latency", "memory", "comm",
                                "memcpy", "memcpy", "other"]
    assert (k["flops"] == 0).all()
