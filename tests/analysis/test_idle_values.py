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
    # HIP's synchronous copies block too; its async ones do not
    hip = pd.DataFrame({"name": ["hipMemcpyWithStream", "hipMemcpyAsync", "hipMemcpy"], "ts_ns": [0, 20, 40],
                        "dur_ns": [10, 10, 10]})
    assert idle.sync_intervals(hip).tolist() == [[0, 10], [40, 50]]


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


MS = 1000 * US


def test_before_window_is_queued_work_behind_nothing_visible() -> None:
    # a step window [0, 10 ms); its one kernel was issued at 0.5 ms into an idle device and started at 8 ms
    w = np.array([[0, 10 * MS]], dtype=np.int64)
    starts, ends, issued = np.array([8 * MS]), np.array([9 * MS]), np.array([500 * US])
    # queued from 0.5 ms + 5 us launch latency to 8 ms: 7.495 ms, all of it behind unseen work
    assert idle.wait_ns(w, starts, ends, issued, idle.EMPTY) == 7_495 * US
    assert idle.before_window_ns(w, starts, ends, issued) == 7_495 * US
    # visible work on the device between the issue and the start (another step's kernel [1, 7.9) ms):
    # the kernel queued behind it, nothing unseen
    dev = np.array([[1 * MS, 7_900 * US], [8 * MS, 9 * MS]], dtype=np.int64)
    assert idle.before_window_ns(w, starts, ends, issued, dev) == 0
    # issued 50 us before it started: within what queueing explains (100 us), waiting
    late = np.array([7_950 * US])
    assert idle.wait_ns(w, starts, ends, late, idle.EMPTY) == 45 * US
    assert idle.before_window_ns(w, starts, ends, late) == 0
    # unknown issue time: the host's, never unseen
    assert idle.before_window_ns(w, starts, ends, np.array([idle.UNKNOWN])) == 0


def test_before_window_needs_the_device_idle_from_the_issue_on() -> None:
    # kernels [0, 1) ms and [5, 6) ms; the second was issued at 0.5 ms, while the first ran: it was
    # queued behind visible work and then waited 4 ms on something else (an event): waiting, not unseen
    w = np.array([[0, 10 * MS]], dtype=np.int64)
    starts, ends = np.array([0, 5 * MS]), np.array([1 * MS, 6 * MS])
    issued = np.array([0, 500 * US])
    assert idle.wait_ns(w, starts, ends, issued, idle.EMPTY) == 4 * MS
    assert idle.before_window_ns(w, starts, ends, issued) == 0
    # issued at 2 ms instead, into the idle device, 3 ms before it ran: 2.995 ms unseen
    issued = np.array([0, 2 * MS])
    assert idle.before_window_ns(w, starts, ends, issued) == 2_995 * US


def test_step_split_names_the_unseen_work() -> None:
    # the vLLM pattern: a step's host part [0, 2.4 ms) issues a copy at 0.5 ms and a graph at 1.5 ms; the GPU
    # starts the copy at 8 ms (the previous step's work, launched before the window, still running) and the
    # graph right after it, ending at 12 ms. A 4 us sync at 0.04 ms found nothing to wait for.
    from tracekit.analysis import bound

    gpu = pd.DataFrame({"ts_ns": [8 * MS, 8_010 * US], "dur_ns": [10 * US, 3_990 * US],
                        "name": ["Memcpy DtoD", "a_kernel"], "kind": ["memcpy", "kernel"], "op_id": None,
                        "stream": 0, "device": 0, "correlation": [1, 2]})
    runtime = pd.DataFrame({"name": ["hipEventSynchronize", "hipMemcpyAsync", "hipGraphLaunch"],
                            "ts_ns": [40 * US, 490 * US, 1_000 * US], "dur_ns": [4 * US, 10 * US, 500 * US],
                            "correlation": [None, 1, 2]})
    steps = pd.DataFrame({"step_id": [0], "request_id": [0], "kind": ["decode"], "cpu_start_ns": [0],
                          "cpu_end_ns": [2_400 * US], "gpu_start_ns": [8 * MS], "gpu_end_ns": [12 * MS]})
    cpu = pd.DataFrame(columns=["op_id", "name", "input_dims", "input_types"])
    s = bound.bound_tables(gpu, cpu, steps, None, runtime=runtime)["step_bound"].iloc[0]
    assert s["time_ns"] == 12 * MS and s["idle_ns"] == 8 * MS
    # issued at 0.5 ms (+5 us): [0.505, 8) ms is behind unseen work; [0, 0.505) the host's, the 4 us sync
    # inside it waiting
    assert s["idle_before_window_ns"] == 7_495 * US
    assert s["idle_wait_ns"] == 4 * US
    assert s["idle_host_ns"] == 505 * US - 4 * US
    assert s["idle_host_ns"] + s["idle_wait_ns"] + s["idle_before_window_ns"] == s["idle_ns"]
    from tracekit.analysis.advice import advice

    ph = bound.bound_tables(gpu, cpu, steps, None, runtime=runtime)["phases"].iloc[0].to_dict()
    text = advice(ph)
    assert text is not None and text.startswith("decode: 62% of its 12.0 ms is the GPU running work the trace does "
                                                "not show") and "longer window" in text and "syncs will not help" in text


def test_visible_work_of_other_groups_is_not_unseen() -> None:
    # the outside row's kernel A [8, 9) ms was issued at 0.5 ms; a step's kernel V ran [1, 7.9) ms on the same
    # device: A queued behind visible work. Alone A looks behind unseen work (7.495 ms); with the whole
    # trace as context it is not
    from tracekit.analysis import bound

    def frame(ts: list[int], dur: list[int], issued: list[int]) -> pd.DataFrame:
        return pd.DataFrame({"ts_ns": ts, "dur_ns": dur, "device": 0, "bound": "other", "model": "none",
                             "flops": np.nan, "bytes": np.nan, "issued_ns": pd.array(issued, dtype="Int64")})

    a = frame([8 * MS], [1 * MS], [500 * US])
    both = frame([1 * MS, 8 * MS], [6_900 * US, 1 * MS], [900 * US, 500 * US])
    w = np.array([[0, 10 * MS]], dtype=np.int64)
    assert bound.attribute_windows(w, a)["idle_before_window_ns"] == 7_495 * US
    row = bound.attribute_windows(w, a, context=both)
    assert row["idle_before_window_ns"] == 0 and row["idle_wait_ns"] == 7_495 * US


def test_a_wait_on_another_devices_visible_work_is_not_unseen() -> None:
    # device 1's kernel [8, 9) ms, issued at 0.5 ms, waited on device 0's kernel [1, 7.9) ms (a peer copy, an
    # event of the other GPU): visible work, so waiting; device 0's leading gap [0, 1) is the host's
    from tracekit.analysis import bound

    k = pd.DataFrame({"ts_ns": [1 * MS, 8 * MS], "dur_ns": [6_900 * US, 1 * MS], "device": [0, 1], "bound": "other",
                      "model": "none", "flops": np.nan, "bytes": np.nan,
                      "issued_ns": pd.array([900 * US, 500 * US], dtype="Int64")})
    row = bound.attribute_windows(np.array([[0, 10 * MS]], dtype=np.int64), k)
    assert row["idle_before_window_ns"] == 0
    # device 1: 7.495 ms queued; device 0: its kernel was queued from 0.905 ms: 95 us
    assert row["idle_wait_ns"] == 7_495 * US + 95 * US
    assert row["idle_ns"] == 2 * 10 * MS - 6_900 * US - 1 * MS
