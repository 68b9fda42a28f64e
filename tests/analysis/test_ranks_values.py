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
    per_step = ranks.comm_per_step(steps, kern)
    assert list(per_step.index) == [0, 1, 2, 3]  # one row per (rank, step), numbered once
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


def test_a_lone_zero_length_collective_outside_the_steps_still_gets_an_outside_row() -> None:
    # GIVEN one rank, a decode step [0, 1000) with a 100 ns all-reduce, and one more all-reduce after the
    # step whose duration rounds to 0 ns: no comm time outside, but one NCCL kernel there.
    steps = _steps([(0, 0, "decode", 0, 1000)])
    kern = _kernels([(0, NCCL, 200, 100), (0, NCCL, 2000, 0)])
    ph = ranks.comm_per_phase(steps, kern).set_index(["rank", "phase"])
    assert sorted(ph.index) == [(0, "decode"), (0, ranks.OUTSIDE)]
    out = ph.loc[(0, ranks.OUTSIDE)]
    assert (out["nccl_kernels"], out["comm_ns"], out["exposed_comm_ns"], out["steps"]) == (1, 0, 0, 0)
    assert ph.loc[(0, "decode"), "nccl_kernels"] == 1 and ph.loc[(0, "decode"), "comm_ns"] == 100


def test_clock_offsets_from_collective_ends_and_where_they_cannot_be_matched() -> None:
    # rank 1's two all-reduces end 30 and 50 ns after rank 0's: median offset 40; rank 2 ran one
    # collective fewer than the reference and cannot be matched: 0
    kern = _kernels([(0, NCCL, 100, 100), (0, NCCL, 500, 100), (1, NCCL, 110, 120), (1, NCCL, 540, 110),
                     (2, NCCL, 100, 100)])
    assert ranks.clock_offsets_from_collectives(kern) == {0: 0, 1: 40, 2: 0}
    # a reference rank without a single collective: no rank can be aligned to it
    assert ranks.clock_offsets_from_collectives(kern, reference_rank=5) == {0: 0, 1: 0, 2: 0}


def test_a_collective_only_one_rank_ran_in_a_step_is_unmatched() -> None:
    # 2 ranks: in the prefill step only rank 0 issued an all-reduce (100 ns), nothing to match it with;
    # in the decode step both did (rank 0 from 1100, rank 1 from 1150, both to 1200)
    steps = _steps([(0, 0, "prefill", 0, 1000), (1, 0, "prefill", 0, 1000),
                    (0, 1, "decode", 1000, 2000), (1, 1, "decode", 1000, 2000)])
    kern = _kernels([(0, NCCL, 100, 100), (0, NCCL, 1100, 100), (1, NCCL, 1150, 50)])
    ph = ranks.comm_per_phase(steps, kern).set_index(["rank", "phase"])
    p0, d0 = ph.loc[(0, "prefill")], ph.loc[(0, "decode")]
    assert (p0["nccl_kernel_ns"], p0["transfer_ns"], p0["wait_ns"], p0["unmatched_ns"]) == (100, 0, 0, 100)
    assert (d0["nccl_kernel_ns"], d0["transfer_ns"], d0["wait_ns"], d0["unmatched_ns"]) == (100, 50, 50, 0)
