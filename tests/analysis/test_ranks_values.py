"""Communication per phase across ranks on tiny hand-built traces; expected values worked out by hand."""

from __future__ import annotations

import math

from tracekit.analysis import ranks
from tracekit.model import schema

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _steps(rows: list[tuple[int, int, str, int, int]]):  # (rank, step_id, kind, gpu_start, gpu_end)
    return schema.from_columns("steps", {
        "rank": [r[0] for r in rows], "step_id": [r[1] for r in rows], "request_id": [0] * len(rows),
        "kind": [r[2] for r in rows], "gpu_start_ns": [r[3] for r in rows], "gpu_end_ns": [r[4] for r in rows],
        "cpu_start_ns": [r[3] for r in rows], "cpu_end_ns": [r[4] for r in rows],
    })


def _kernels(rows: list[tuple[int, str, int, int]]):  # (rank, name, ts, dur)
    return schema.from_columns("gpu_activity", {
        "rank": [r[0] for r in rows], "kind": ["kernel"] * len(rows), "name": [r[1] for r in rows],
        "ts_ns": [r[2] for r in rows], "dur_ns": [r[3] for r in rows], "device": [r[0] for r in rows],
        "stream": [7] * len(rows),
    })


def test_a_phase_without_collectives_has_zero_split_and_a_phase_with_them_is_split() -> None:
    # GIVEN 2 ranks: a prefill step [0, 1000) with only a GEMM, a decode step [1000, 2000) with one all-reduce
    # each: rank 0 starts it at 1100 (100 ns), rank 1 at 1150 (50 ns), both end at 1200 -> transfer 50,
    # rank 0 waits 50; a GEMM on rank 1 at [1180, 1280) hides 20 ns of its all-reduce.
    steps = _steps([(0, 0, "prefill", 0, 1000), (1, 0, "prefill", 0, 1000),
                    (0, 1, "decode", 1000, 2000), (1, 1, "decode", 1000, 2000)])
    kern = _kernels([(0, "sm90_gemm", 100, 300), (1, "sm90_gemm", 100, 300),
                     (0, NCCL, 1100, 100), (1, NCCL, 1150, 50), (1, "sm90_gemm", 1180, 100)])
    ph = ranks.comm_per_phase(steps, kern).set_index(["rank", "phase"])
    assert sorted(ph.index) == [(0, "decode"), (0, "prefill"), (1, "decode"), (1, "prefill")]
    for rank in (0, 1):
        pre = ph.loc[(rank, "prefill")]
        assert (pre["steps"], pre["time_ns"], pre["comm_ns"], pre["exposed_comm_ns"]) == (1, 1000, 0, 0)
        assert (pre["nccl_kernel_ns"], pre["transfer_ns"], pre["wait_ns"], pre["unmatched_ns"]) == (0, 0, 0, 0)
        assert pre["last_arrivals"] == 0 and pre["nccl_kernels"] == 0
    d0, d1 = ph.loc[(0, "decode")], ph.loc[(1, "decode")]
    assert (d0["comm_ns"], d0["exposed_comm_ns"], d0["overlapped_comm_ns"]) == (100, 100, 0)
    assert (d1["comm_ns"], d1["exposed_comm_ns"], d1["overlapped_comm_ns"]) == (50, 30, 20)
    assert (d0["transfer_ns"], d0["wait_ns"], d1["transfer_ns"], d1["wait_ns"]) == (50, 50, 50, 0)
    assert (d0["last_arrivals"], d1["last_arrivals"]) == (0, 1)
    assert math.isclose(d0["comm_share"], 0.1) and math.isclose(d1["exposed_share"], 0.03)
    assert math.isclose(d0["wait_share"], 0.5) and d1["wait_share"] == 0
