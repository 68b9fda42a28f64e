"""Interval arithmetic and the GPU timeline on tiny hand-drawn inputs; every value worked out by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis import intervals, timeline


def test_union_complement_clip_length() -> None:
    u = intervals.union([5, 0, 10, 20, 30], [8, 6, 15, 20, 32])
    assert u.tolist() == [[0, 8], [10, 15], [30, 32]]  # overlaps merge, the empty [20, 20) goes
    assert intervals.union([0, 5], [5, 7]).tolist() == [[0, 7]]  # touching intervals merge too
    assert intervals.union([], []).shape == (0, 2)
    assert intervals.length(u) == 15 and intervals.length(intervals.EMPTY) == 0
    iv = np.array([[2, 4], [6, 8]])
    assert intervals.complement(iv, 0, 10).tolist() == [[0, 2], [4, 6], [8, 10]]
    assert intervals.complement(np.array([[2, 12]]), 0, 10).tolist() == [[0, 2]]
    assert intervals.complement(np.array([[0, 3]]), 1, 5).tolist() == [[3, 5]]
    assert intervals.complement(np.array([[-5, -1]]), 0, 3).tolist() == [[0, 3]]
    assert intervals.complement(np.array([[0, 10]]), 0, 10).shape == (0, 2)
    assert intervals.clip(np.array([[0, 5], [8, 12]]), 3, 10).tolist() == [[3, 5], [8, 10]]
    assert intervals.clip(np.array([[0, 5]]), 6, 10).shape == (0, 2)
    assert intervals.clip(np.array([[0, 5]]), 4, 4).shape == (0, 2)


def test_step_windows() -> None:
    steps = pd.DataFrame({"step_id": [0, 1, 2, 3], "cpu_start_ns": [0, None, 50, None],
                          "gpu_start_ns": [5, 20, 60, None], "cpu_end_ns": [10, 30, 40, 9],
                          "gpu_end_ns": [15, None, 45, 9]})
    w = intervals.step_windows(steps)
    # the host's start, else the GPU's; the later of the two ends; an end before the start is the start;
    # a step with no start at all is dropped
    assert w[["step_id", "start_ns", "end_ns", "time_ns"]].values.tolist() == [[0, 0, 15, 15], [1, 20, 30, 10],
                                                                                [2, 50, 50, 0]]
    assert intervals.window_union(w).tolist() == [[0, 15], [20, 30]]


def test_categories_launch_times_and_windows() -> None:
    gpu = pd.DataFrame({"kind": ["kernel", "Memcpy", "memset", "kernel"],
                        "name": ["gemm", "Memcpy HtoD", "Memset", "ncclDevKernel_AllReduce"],
                        "correlation": [1, 2, None, 4], "op_id": [10, None, 11, 12],
                        "ts_ns": [100, 200, 300, 400], "dur_ns": [50, 10, 10, 20], "device": [0, 0, 1, 1]})
    assert timeline.categorise(gpu).tolist() == ["compute", "memcpy", "memset", "comm"]
    rt = pd.DataFrame({"correlation": [1, 1, 2], "ts_ns": [90, 95, 190]})
    ops = pd.DataFrame({"op_id": [10, 11, 12], "ts_ns": [80, 280, 380]})
    # the runtime call with the correlation (the first of them), else the launching op's start
    lt = timeline.launch_times(gpu, rt, ops)
    assert lt.tolist() == [90, 190, 280, 380]
    assert timeline.launch_times(gpu, rt.iloc[:0], ops.iloc[:0]).isna().all()
    # windows [100, 250) and [0, 100), given unsorted: 90 -> second, 190 -> first, 280 -> none
    sid = timeline.assign_to_windows(pd.Series([90, 190, 280, 250, None], dtype="Int64"), np.array([100, 0]),
                                     np.array([250, 100]), np.array([7, 8]))
    assert [None if pd.isna(s) else int(s) for s in sid] == [8, 7, None, None, None]
    busy = timeline.busy_by_group(gpu.assign(step=[0, 0, 1, None], ts_ns=[100, 120, 300, 400]), "step")
    # step 0: [100, 150) and [120, 130) on device 0: 50; step 1: one memset of 10
    assert busy.values.tolist() == [[0, 100, 150, 50], [1, 300, 310, 10]]
    split = timeline.device_split(gpu, windows=np.array([[0, 250], [395, 410]]))
    assert split == {"busy": 50 + 10 + 10, "compute": 50, "memcpy": 10, "comm": 10}
    assert timeline.device_split(gpu, windows=np.zeros((0, 2), dtype=np.int64))["busy"] == 0
