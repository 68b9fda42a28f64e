"""Idle by cause: the profiler's own cost, the host still issuing, waiting on something else."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.analysis import bound, idle
from tracekit.analysis.intervals import EMPTY, union

W = np.array([[0, 100]], dtype=np.int64)


def wait(starts: list[int], ends: list[int], issued: list[float], syncs: np.ndarray = EMPTY) -> int:
    return idle.wait_ns(W, np.array(starts), np.array(ends), np.array(issued, dtype=float), syncs, launch_latency_ns=0)


def test_a_gap_is_the_hosts_until_the_next_kernel_was_issued() -> None:
    # kernel A [10, 20) issued at 5; kernel B [50, 60) issued at 20: B waited 30 ns, queued
    assert wait([10, 50], [20, 60], [5, 20]) == 5 + 30
    # B issued at 45: the host was still issuing until then (25 ns), then 5 ns queued
    assert wait([10, 50], [20, 60], [5, 45]) == 5 + 5
    # after the last kernel nothing more is issued in the window: the host's time
    assert wait([10], [20], [10]) == 0
    # ... unless the host sat in a synchronising call: the GPU waited on something else
    assert wait([10], [20], [10], np.array([[70, 90]])) == 20
    # an unknown issue time leaves the gap to the host
    assert wait([10, 50], [20, 60], [np.nan, np.nan]) == 0


def test_launch_latency_counts_as_issuing() -> None:
    # a kernel started 2 us after its launch returned: launch latency, not waiting
    w = np.array([[0, 100_000]], dtype=np.int64)
    got = idle.wait_ns(w, np.array([50_000]), np.array([60_000]), np.array([48_000.0]), EMPTY)
    assert got == 0
    got = idle.wait_ns(w, np.array([50_000]), np.array([60_000]), np.array([30_000.0]), EMPTY)
    assert got == 50_000 - (30_000 + idle.LAUNCH_LATENCY_NS)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 900), st.integers(1, 80), st.integers(-50, 900)), max_size=12),
       st.lists(st.tuples(st.integers(0, 900), st.integers(1, 100)), max_size=3))
def test_wait_never_exceeds_idle(kern: list, sync: list) -> None:
    s = np.array([a for a, _, _ in kern], dtype=np.int64)
    e = s + np.array([d for _, d, _ in kern], dtype=np.int64)
    iss = np.array([i for _, _, i in kern], dtype=float)
    syncs = union([a for a, _ in sync], [a + d for a, d in sync])
    win = np.array([[0, 1000]], dtype=np.int64)
    busy = union(s, e)
    idle_ns = 1000 - int((np.clip(busy[:, 1], 0, 1000) - np.clip(busy[:, 0], 0, 1000)).sum()) if busy.size else 1000
    got = idle.wait_ns(win, s, e, iss, syncs, launch_latency_ns=0)
    assert 0 <= got <= idle_ns
    # brute force: an idle ns is waiting if the next activity starting after the gap was already issued,
    # or a sync covers it
    active = np.zeros(1000, bool)
    for a, b in busy:
        active[max(a, 0):min(b, 1000)] = True
    in_sync = np.zeros(1000, bool)
    for a, b in syncs:
        in_sync[max(a, 0):min(b, 1000)] = True
    order = np.argsort(s, kind="stable")
    expect = 0
    for t in np.flatnonzero(~active):
        nxt = s[order][s[order] > t]
        nxt_start = nxt[0] if nxt.size else None
        gap_end = nxt_start if nxt_start is not None and not active[t:nxt_start].any() else None
        if gap_end is not None:
            issued = iss[s == gap_end]
            if np.isfinite(issued).all() and t >= issued.max():
                expect += 1
                continue
        if in_sync[t]:
            expect += 1
    assert got == expect


def test_profiler_share_from_the_unprofiled_pass() -> None:
    m = {"timings": {"profiled": {"aggregate": {"ttft_ns": 30e6, "tpot_ns": 27e6}},
                     "unprofiled": {"aggregate": {"ttft_ns": 29e6, "tpot_ns": 14e6}}}}
    over = idle.overheads(m)
    assert over == {"prefill": (1e6, 30e6), "decode": (13e6, 27e6)}
    # a 27 ms decode step: the whole 13 ms extra is in it; a 13.5 ms window holds half of it
    assert idle.profiler_share_ns("decode", 27_000_000, 25_000_000, over) == 13_000_000
    assert idle.profiler_share_ns("decode", 13_500_000, 12_000_000, over) == 6_500_000
    # never more than the host's idle
    assert idle.profiler_share_ns("decode", 27_000_000, 2_000_000, over) == 2_000_000
    # no unprofiled pass: unknown (null), never a silent 0
    assert idle.overheads({"timings": {"profiled": {"aggregate": {"tpot_ns": 1.0}}}}) is None
    assert idle.profiler_share_ns("decode", 27_000_000, 25_000_000, None) is None
    assert idle.profiler_share_ns("mixed", 27_000_000, 25_000_000, over) is None
    # the profiled pass faster than the unprofiled one (noise): 0, not negative
    fast = {"timings": {"profiled": {"aggregate": {"tpot_ns": 10.0}}, "unprofiled": {"aggregate": {"tpot_ns": 12.0}}}}
    assert idle.overheads(fast) == {"decode": (0.0, 10.0)}


def test_blocking_calls() -> None:
    rt = pd.DataFrame({"name": ["cudaLaunchKernel", "cudaStreamSynchronize", "cudaMemcpyAsync", "cudaMemcpy",
                                "cudaDeviceSynchronize"],
                       "ts_ns": [0, 10, 40, 60, 65], "dur_ns": [5, 20, 5, 10, 20]})
    assert idle.sync_intervals(rt).tolist() == [[10, 30], [60, 85]]
    g = pd.DataFrame({"correlation": [7, 7, 8, None]})
    r2 = pd.DataFrame({"correlation": [7, 8, 7], "ts_ns": [100, 200, 900], "dur_ns": [5, 3, 1]})
    got = idle.issued_ns(g, r2)
    assert got[:3].tolist() == [105, 105, 203] and pd.isna(got[3])
    # epoch-scale times keep every nanosecond (a float64 would round them to 256 ns)
    big = pd.DataFrame({"correlation": [1], "ts_ns": [1_795_981_012_140_692_718], "dur_ns": [3]})
    assert idle.issued_ns(pd.DataFrame({"correlation": [1]}), big)[0] == 1_795_981_012_140_692_721


def test_steps_split_idle_exactly() -> None:
    # a decode step [0, 100 us): two kernels; the second waited on a sync the host was in
    gpu = pd.DataFrame({"ts_ns": [10_000, 60_000], "dur_ns": [10_000, 10_000], "name": ["a_kernel", "b_kernel"],
                        "kind": "kernel", "op_id": None, "stream": 7, "device": 0, "correlation": [1, 2]})
    runtime = pd.DataFrame({"name": ["cudaLaunchKernel", "cudaLaunchKernel", "cudaStreamSynchronize"],
                            "ts_ns": [5_000, 20_000, 80_000], "dur_ns": [1_000, 1_000, 10_000],
                            "correlation": [1, 2, None]})
    steps = pd.DataFrame({"step_id": [0], "request_id": [0], "kind": ["decode"], "cpu_start_ns": [0],
                          "cpu_end_ns": [100_000]})
    cpu = pd.DataFrame(columns=["op_id", "name", "input_dims", "input_types"])
    m = {"timings": {"profiled": {"aggregate": {"tpot_ns": 100_000.0}},
                     "unprofiled": {"aggregate": {"tpot_ns": 80_000.0}}}}
    out = bound.bound_tables(gpu, cpu, steps, None, runtime=runtime, manifest=m)
    s = out["step_bound"].iloc[0]
    assert s["idle_ns"] == 100_000 - 20_000
    # 21 us issued + 5 us launch latency -> queued until 60 us: 34 us waiting; the 10 us sync after the last kernel
    assert s["idle_wait_ns"] == (60_000 - 26_000) + 10_000
    assert s["idle_profiler_ns"] == 20_000  # the extra 20 us per decode step of the profiled pass
    assert s["idle_profiler_ns"] + s["idle_host_ns"] + s["idle_wait_ns"] == s["idle_ns"]
    ph = out["phases"].iloc[0]
    assert ph["idle_profiler_ns"] == 20_000 and ph["idle_wait_ns"] == s["idle_wait_ns"]
    # without the unprofiled pass: null, and the host keeps it
    out = bound.bound_tables(gpu, cpu, steps, None, runtime=runtime)
    s = out["step_bound"].iloc[0]
    assert pd.isna(s["idle_profiler_ns"]) and s["idle_host_ns"] + s["idle_wait_ns"] == s["idle_ns"]
