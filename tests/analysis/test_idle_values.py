"""GPU idle split by cause on hand-drawn timelines; every value worked out by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis import idle

US = 1000


def test_issue_times_from_the_launching_calls() -> None:
    gpu = pd.DataFrame({"correlation": [1, 2, 2, None, 7]})
    rt = pd.DataFrame({"correlation": [1, 2, 2, None], "ts_ns": [100, 200, 900, 5], "dur_ns": [10, 5, 5, 1]})
    got = idle.issued_ns(gpu, rt)
    # the end of the first call with the correlation; unknown without one
    assert [None if pd.isna(v) else int(v) for v in got] == [110, 205, 205, None, None]
    assert idle.issued_ns(gpu, None).isna().all()
    assert list(idle.as_issued([5.0, np.nan, 7])) == [5, idle.UNKNOWN, 7]


def test_blocking_calls() -> None:
    rt = pd.DataFrame({"name": ["cudaDeviceSynchronize", "cudaMemcpy", "cudaMemcpyAsync", "cudaLaunchKernel",
                                "cuMemcpyDtoH_v2", "cudaStreamSynchronize"],
                       "ts_ns": [0, 50, 200, 300, 400, 420], "dur_ns": [100, 100, 10, 10, 30, 30]})
    # [0, 100) and [50, 150) merge; the async copy and the launch do not block; [400, 430) and [420, 450) merge
    assert idle.sync_intervals(rt).tolist() == [[0, 150], [400, 450]]
    assert idle.sync_intervals(None).shape == (0, 2)


def test_wait_is_the_part_of_a_gap_after_the_work_was_issued() -> None:
    w = np.array([[0, 100 * US]], dtype=np.int64)
    # kernels [0, 10) and [50, 60) µs; the second was issued at 20 µs: of the 40 µs gap [10, 50), the host's
    # runs to 20 + 5 (launch latency), the GPU waits 25; the tail [60, 100) ends no work: the host's
    starts, ends = np.array([0, 50]) * US, np.array([10, 60]) * US
    issued = np.array([0, 20 * US])
    assert idle.wait_ns(w, starts, ends, issued, idle.EMPTY) == 25 * US
    assert idle.wait_ns(w, starts, ends, issued, idle.EMPTY, launch_latency_ns=0) == 30 * US
    # issued before the gap began: the GPU waits the whole gap
    assert idle.wait_ns(w, starts, ends, np.array([0, -100 * US]), idle.EMPTY, launch_latency_ns=0) == 40 * US
    # unknown issue time: the gap is the host's; but a blocking call inside it [15, 35) is waiting
    unknown = np.array([0, idle.UNKNOWN])
    assert idle.wait_ns(w, starts, ends, unknown, idle.EMPTY) == 0
    syncs = np.array([[15, 35]], dtype=np.int64) * US
    assert idle.wait_ns(w, starts, ends, unknown, syncs) == 20 * US
    # a sync that overlaps the queued part counts once: the host part [10, 25) holds [15, 25) of it
    assert idle.wait_ns(w, starts, ends, issued, syncs) == 25 * US + 10 * US
    assert idle.wait_ns(np.zeros((0, 2), dtype=np.int64), starts, ends, issued, syncs) == 0
    # no kernels at all: the window is one gap, the sync inside it waiting
    none = np.zeros(0, dtype=np.int64)
    assert idle.wait_ns(w, none, none, none, syncs) == 20 * US


def test_profiler_overheads_per_step_kind() -> None:
    manifest = {"timings": {"profiled": {"aggregate": {"ttft_ns": 30e6, "tpot_ns": 12e6}},
                            "unprofiled": {"aggregate": {"ttft_ns": 26e6, "tpot_ns": 13e6}}}}
    over = idle.overheads(manifest)
    assert over == {"prefill": (4e6, 30e6), "decode": (0.0, 12e6)}  # a faster profiled decode counts 0
    assert idle.overheads({"timings": {"profiled": {"aggregate": {"ttft_ns": 1}}}}) is None
    assert idle.overheads({"timings": {"unprofiled": {"aggregate": {"ttft_ns": "x"}}, "profiled": {}}}) is None
    # a 15 ms window of a 30 ms prefill carries half the 4 ms extra; never more than its host idle
    assert idle.profiler_share_ns("prefill", 15_000_000, 10_000_000, over) == 2_000_000
    assert idle.profiler_share_ns("prefill", 15_000_000, 1_500_000, over) == 1_500_000
    assert idle.profiler_share_ns("prefill", 60_000_000, 10_000_000, over) == 4_000_000  # at most one step's
    assert idle.profiler_share_ns("prefill", 15_000_000, -5, over) == 0
    assert idle.profiler_share_ns("decode", 12_000_000, 10_000_000, over) == 0
    assert idle.profiler_share_ns("mixed", 1, 1, over) is None and idle.profiler_share_ns("prefill", 1, 1, None) is None
