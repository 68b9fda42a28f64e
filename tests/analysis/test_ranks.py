from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.analysis import ranks
from tracekit.model import schema

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _steps(rows: list[tuple[int, int, str, int, int]]):
    # (rank, step_id, kind, gpu_start, gpu_end)
    return schema.from_columns(
        "steps",
        {
            "rank": [r[0] for r in rows],
            "step_id": [r[1] for r in rows],
            "request_id": [0] * len(rows),
            "kind": [r[2] for r in rows],
            "gpu_start_ns": [r[3] for r in rows],
            "gpu_end_ns": [r[4] for r in rows],
            "cpu_start_ns": [r[3] - 5 for r in rows],
            "cpu_end_ns": [r[4] - 1 for r in rows],
        },
    )


def _kernels(rows: list[tuple[int, str, int, int]], kind: str = "kernel"):
    # (rank, name, ts, dur)
    return schema.from_columns(
        "gpu_activity",
        {
            "rank": [r[0] for r in rows],
            "kind": [kind] * len(rows),
            "name": [r[1] for r in rows],
            "ts_ns": [r[2] for r in rows],
            "dur_ns": [r[3] for r in rows],
            "device": [r[0] for r in rows],
            "stream": [7] * len(rows),
        },
    )


def test_steps_align_by_id_with_skew_straggler_and_missing_ranks() -> None:
    # GIVEN two ranks; rank 1 ends step 0 30 ns late and has no step 2
    steps = _steps(
        [
            (0, 0, "prefill", 0, 100), (1, 0, "prefill", 10, 130),
            (0, 1, "decode", 200, 250), (1, 1, "decode", 200, 240),
            (0, 2, "decode", 300, 350),
        ]
    )  # fmt: skip
    before = steps.to_pandas()
    # WHEN aligned
    a = ranks.align_steps(steps).set_index("step_id")
    # THEN each step_id is one row with the spread of its ends and the last rank
    assert a.loc[0, "skew_ns"] == 30 and a.loc[0, "straggler_rank"] == 1
    assert a.loc[0, "start_skew_ns"] == 10 and a.loc[0, "ranks"] == 2
    assert a.loc[1, "skew_ns"] == 10 and a.loc[1, "straggler_rank"] == 0
    assert a.loc[2, "ranks"] == 1 and a.loc[2, "missing_ranks"] == "1"
    assert a.loc[0, "missing_ranks"] == ""
    assert a.loc[0, "dur_max_ns"] == 120 and a.loc[0, "dur_min_ns"] == 100
    # and the input is untouched
    pd.testing.assert_frame_equal(steps.to_pandas(), before)
    summ = ranks.skew_summary(ranks.align_steps(steps)).set_index("phase")
    assert summ.loc["decode", "steps"] == 2 and summ.loc["decode", "skew_max_ns"] == 10
    assert summ.loc["prefill", "straggler_counts"] == {1: 1}


def test_clock_offsets_shift_a_rank_before_skew() -> None:
    steps = _steps([(0, 0, "decode", 0, 100), (1, 0, "decode", 1000, 1100)])
    assert ranks.align_steps(steps).loc[0, "skew_ns"] == 1000
    assert ranks.align_steps(steps, clock_offsets_ns={1: 1000}).loc[0, "skew_ns"] == 0


def test_cpu_window_is_used_where_gpu_window_is_missing() -> None:
    t = schema.from_columns(
        "steps",
        {
            "rank": [0, 1],
            "step_id": [0, 0],
            "kind": ["decode"] * 2,
            "cpu_start_ns": [0, 0],
            "cpu_end_ns": [50, 80],
        },
    )
    a = ranks.align_steps(t)
    assert a.loc[0, "skew_ns"] == 30 and a.loc[0, "straggler_rank"] == 1


def test_exposed_communication_is_nccl_time_not_covered_by_compute() -> None:
    # GIVEN rank 0, step [0, 100): gemm [0, 40), all-reduce [30, 60), gemm [60, 90)
    #       rank 1, step [0, 100): all-reduce [10, 50) fully under a gemm [0, 70)
    steps = _steps([(0, 0, "prefill", 0, 100), (1, 0, "prefill", 0, 100), (0, 1, "decode", 100, 200),
                    (1, 1, "decode", 100, 200)])  # fmt: skip
    kern = _kernels(
        [
            (0, "sm90_gemm", 0, 40), (0, NCCL, 30, 30), (0, "sm90_gemm", 60, 30),
            (1, "sm90_gemm", 0, 70), (1, NCCL, 10, 40),
            # decode step on rank 0: an all-reduce crossing the step end (clipped), nothing else
            (0, NCCL, 180, 40),
            # outside every step on rank 1
            (1, NCCL, 500, 25),
        ]
    )  # fmt: skip
    per = ranks.comm_per_step(steps, kern).set_index(["rank", "step_id"])
    assert per.loc[(0, 0), "comm_ns"] == 30
    assert per.loc[(0, 0), "exposed_comm_ns"] == 20  # [40, 60)
    assert per.loc[(0, 0), "compute_ns"] == 70
    assert per.loc[(1, 0), "comm_ns"] == 40 and per.loc[(1, 0), "exposed_comm_ns"] == 0
    assert per.loc[(0, 1), "comm_ns"] == 20 and per.loc[(0, 1), "exposed_comm_ns"] == 20
    assert per.loc[(0, 0), "nccl_kernels"] == 1 and per.loc[(1, 1), "nccl_kernels"] == 0

    ph = ranks.comm_per_phase(steps, kern).set_index(["rank", "phase"])
    assert ph.loc[(0, "prefill"), "comm_ns"] == 30
    assert ph.loc[(0, "prefill"), "overlapped_comm_ns"] == 10
    assert ph.loc[(0, "prefill"), "exposed_share"] == 0.2
    assert ph.loc[(1, ranks.OUTSIDE), "comm_ns"] == 25 and ph.loc[(1, ranks.OUTSIDE), "nccl_kernels"] == 1
    # rank 0's crossing kernel: 20 ns inside decode, 20 ns after it
    assert ph.loc[(0, ranks.OUTSIDE), "comm_ns"] == 20

    coll = ranks.comm_by_collective(kern).set_index(["rank", "collective"])
    assert coll.loc[(0, "AllReduce"), "kernels"] == 2 and coll.loc[(0, "AllReduce"), "total_ns"] == 70


def test_memcpy_is_not_compute_and_concurrent_collectives_count_once() -> None:
    steps = _steps([(0, 0, "decode", 0, 100)])
    kern = pa_concat(
        _kernels([(0, NCCL, 0, 50), (0, "ncclDevKernel_AllGather_RING_LL", 20, 50)]),
        _kernels([(0, "Memcpy DtoD", 0, 100)], kind="memcpy"),
    )
    per = ranks.comm_per_step(steps, kern)
    assert per.loc[0, "comm_ns"] == 70 and per.loc[0, "exposed_comm_ns"] == 70


def pa_concat(*tables):
    import pyarrow as pa

    return pa.concat_tables([t.cast(tables[0].schema) for t in tables], promote_options="permissive")


def test_empty_tables_give_empty_frames() -> None:
    res = ranks.analyze_ranks(schema.empty("steps"), schema.empty("gpu_activity"))
    assert (
        res.aligned_steps.empty and res.comm_steps.empty and res.comm_phases.empty and res.collectives.empty
    )


def test_clock_offsets_from_collectives_recovers_a_shift() -> None:
    base = [(0, NCCL, 100 * i, 10) for i in range(5)]
    shifted = [(1, NCCL, 100 * i + 777 + (3 if i == 2 else 0), 10) for i in range(5)]
    off = ranks.clock_offsets_from_collectives(_kernels(base + shifted))
    assert off == {0: 0, 1: 777}


intervals = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 20)), max_size=8)


@settings(max_examples=150, deadline=None)
@given(comm=intervals, comp=intervals, lo=st.integers(0, 40), width=st.integers(0, 50))
def test_interval_arithmetic_matches_brute_force(comm, comp, lo, width) -> None:
    rows = [(0, NCCL, s, d) for s, d in comm] + [(0, "gemm", s, d) for s, d in comp]
    steps = _steps([(0, 0, "decode", lo, lo + width)])
    per = ranks.comm_per_step(steps, _kernels(rows))
    grid = np.arange(lo, lo + width)
    in_comm = np.zeros(len(grid), bool)
    in_comp = np.zeros(len(grid), bool)
    for s, d in comm:
        in_comm |= (grid >= s) & (grid < s + d)
    for s, d in comp:
        in_comp |= (grid >= s) & (grid < s + d)
    assert per.loc[0, "comm_ns"] == in_comm.sum()
    assert per.loc[0, "exposed_comm_ns"] == (in_comm & ~in_comp).sum()
    assert per.loc[0, "compute_ns"] == in_comp.sum()


def test_gpu_windows_come_from_the_kernels_each_step_launched() -> None:
    steps = schema.from_columns(
        "steps",
        {"rank": [0, 0, 1], "step_id": [0, 1, 0], "kind": ["prefill", "decode", "prefill"],
         "cpu_start_ns": [0, 100, 0], "cpu_end_ns": [100, 200, 100]},
    )  # fmt: skip
    runtime = schema.from_columns(
        "runtime",
        {"rank": [0, 0, 0, 1], "ts_ns": [10, 90, 150, 5], "dur_ns": [1] * 4, "correlation": [1, 2, 3, 1]},
    )
    kern = schema.from_columns(
        "gpu_activity",
        {"rank": [0, 0, 0, 1], "kind": ["kernel"] * 4, "name": ["a", "b", "c", "d"], "ts_ns": [50, 120, 260, 30],
         "dur_ns": [10, 40, 5, 7], "correlation": [1, 2, 3, 1]},
    )  # fmt: skip
    w = ranks.gpu_windows(steps, runtime, kern).set_index(["rank", "step_id"])
    # step 0 launched kernels a and b (b runs after the CPU window closed): GPU window [50, 160)
    assert (w.loc[(0, 0), "gpu_start_ns"], w.loc[(0, 0), "gpu_end_ns"], w.loc[(0, 0), "gpu_busy_ns"]) == (
        50,
        160,
        50,
    )
    assert (w.loc[(0, 1), "gpu_start_ns"], w.loc[(0, 1), "gpu_end_ns"]) == (260, 265)
    assert w.loc[(1, 0), "gpu_end_ns"] == 37
    assert steps.column("gpu_start_ns").null_count == 3  # input untouched


def test_nccl_time_splits_into_transfer_and_wait_by_matched_instances() -> None:
    # GIVEN 2 ranks, one decode step each [0, 1000). Two all-reduces per step.
    #   instance 0: rank 0 arrives at 100, rank 1 at 400, both end at 450 -> transfer 50,
    #               rank 0 waited 300 (for rank 1), rank 1 waited 0
    #   instance 1: rank 1 arrives at 500, rank 0 at 520, both end at 560 -> transfer 40, rank 1 waits 20
    # and a prefill step 1 [1000, 2000) where rank 1 has one all-reduce fewer: unmatched, not guessed.
    steps = _steps([(0, 0, "decode", 0, 1000), (1, 0, "decode", 0, 1000),
                    (0, 1, "prefill", 1000, 2000), (1, 1, "prefill", 1000, 2000)])  # fmt: skip
    kern = _kernels(
        [
            (0, NCCL, 100, 350), (1, NCCL, 400, 50), (0, NCCL, 520, 40), (1, NCCL, 500, 60),
            (0, "sm90_gemm", 0, 100), (1, "sm90_gemm", 0, 400),
            (0, NCCL, 1100, 30), (0, NCCL, 1200, 30), (1, NCCL, 1100, 30),
        ]
    )  # fmt: skip
    before = kern.to_pandas()
    inst = ranks.comm_instances(steps, kern)
    pd.testing.assert_frame_equal(kern.to_pandas(), before)
    dec = inst[inst["kind"] == "decode"].set_index(["rank", "seq"])
    assert dec["matched"].all()
    assert (dec.loc[(0, 0), "transfer_ns"], dec.loc[(0, 0), "wait_ns"]) == (50, 300)
    assert (dec.loc[(1, 0), "transfer_ns"], dec.loc[(1, 0), "wait_ns"]) == (50, 0)
    assert (dec.loc[(1, 1), "transfer_ns"], dec.loc[(1, 1), "wait_ns"]) == (40, 20)
    assert dec.loc[(1, 0), "last_arrival"] and not dec.loc[(0, 0), "last_arrival"]
    assert dec.loc[(0, 1), "last_arrival"]
    assert dec.loc[(0, 0), "end_spread_ns"] == 0
    pre = inst[inst["kind"] == "prefill"]
    assert len(pre) == 3 and not pre["matched"].any() and (pre["unmatched_ns"] == 30).all()
    assert (pre["transfer_ns"] == 0).all() and (pre["wait_ns"] == 0).all()
    # every kernel is split completely
    assert ((inst["transfer_ns"] + inst["wait_ns"] + inst["unmatched_ns"]) == inst["dur_ns"]).all()

    ph = ranks.comm_per_phase(steps, kern).set_index(["rank", "phase"])
    assert ph.loc[(0, "decode"), "wait_ns"] == 300 and ph.loc[(0, "decode"), "transfer_ns"] == 90
    assert ph.loc[(1, "decode"), "wait_ns"] == 20 and ph.loc[(1, "decode"), "transfer_ns"] == 90
    assert ph.loc[(1, "decode"), "last_arrivals"] == 1 and ph.loc[(0, "decode"), "last_arrivals"] == 1
    assert ph.loc[(0, "decode"), "nccl_kernel_ns"] == ph.loc[(0, "decode"), "comm_ns"] == 390
    assert ph.loc[(0, "prefill"), "unmatched_ns"] == 60 and ph.loc[(0, "prefill"), "wait_ns"] == 0
    assert abs(ph.loc[(0, "decode"), "wait_share"] - 300 / 390) < 1e-12


def test_a_collective_order_that_differs_across_ranks_is_unmatched() -> None:
    steps = _steps([(0, 0, "decode", 0, 100), (1, 0, "decode", 0, 100)])
    gather = "ncclDevKernel_AllGather_RING_LL"
    kern = _kernels([(0, NCCL, 10, 5), (0, gather, 20, 5), (1, gather, 10, 5), (1, NCCL, 20, 5)])
    inst = ranks.comm_instances(steps, kern)
    assert not inst["matched"].any() and inst["unmatched_ns"].sum() == 20


def test_one_rank_has_nothing_to_match_and_outside_kernels_get_step_minus_one() -> None:
    steps = _steps([(0, 0, "decode", 0, 100)])
    inst = ranks.comm_instances(steps, _kernels([(0, NCCL, 10, 5), (0, NCCL, 500, 7)]))
    assert list(inst["step_id"]) == [0, -1] and list(inst["kind"]) == ["decode", ranks.OUTSIDE]
    assert not inst["matched"].any() and list(inst["unmatched_ns"]) == [5, 7]
    assert ranks.comm_instances(steps, schema.empty("gpu_activity")).empty
