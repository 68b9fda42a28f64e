"""Two GPUs in one process and interleaved groups: busy, idle and its split per device, worked by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis import bound, timeline


def _kernels(rows: list[tuple[int, int, int, str]]) -> pd.DataFrame:
    """(device, ts, dur, bound class) rows as the bound pass's kernels frame (class-only, no FLOPs)."""
    return pd.DataFrame({"device": [r[0] for r in rows], "ts_ns": [r[1] for r in rows], "dur_ns": [r[2] for r in rows],
                         "bound": [r[3] for r in rows], "model": bound.MODEL_CLASS, "flops": np.nan, "bytes": np.nan,
                         "source": "model"})


def test_idle_of_two_gpus_in_one_process_counts_both() -> None:
    # GIVEN one step window [0, 100) in which GPU 0 runs [10, 40) and GPU 1 runs [20, 70) and [60, 90)
    kern = _kernels([(0, 10, 30, bound.MEMORY), (1, 20, 50, bound.COMPUTE), (1, 60, 30, bound.COMPUTE)])
    row = bound.attribute_windows(np.array([[0, 100]]), kern)
    # THEN busy is per device, summed: 30 + [20, 90) = 70 -> 100; idle = 100 x 2 devices - 100 = 100
    assert (row["time_ns"], row["gpu_busy_ns"], row["idle_ns"]) == (100, 100, 100)
    assert (row["memory_bound_ns"], row["compute_bound_ns"]) == (30, 70)
    # and the idle split adds up to it (no issue times: all of it is the host's)
    assert row["idle_host_ns"] + row["idle_wait_ns"] + row["idle_before_window_ns"] == 100


def test_busy_of_interleaved_groups_is_each_groups_own_union() -> None:
    # GIVEN two steps whose kernels interleave in time: step 0 [0, 10), [20, 30); step 1 [5, 15), [25, 35);
    # step 1 also has a kernel on GPU 1 [5, 12) overlapping its GPU 0 kernel
    gpu = pd.DataFrame({"step": [0, 1, 0, 1, 1], "device": [0, 0, 0, 0, 1], "ts_ns": [0, 5, 20, 25, 5],
                        "dur_ns": [10, 10, 10, 10, 7]})
    busy = timeline.busy_by_group(gpu, "step")
    # THEN step 0 is busy 20 ns over [0, 30); step 1 10 + 10 on GPU 0 and 7 on GPU 1 = 27 over [5, 35)
    assert busy.values.tolist() == [[0, 0, 30, 20], [1, 5, 35, 27]]
    # AND given in another row order, the same
    assert timeline.busy_by_group(gpu.iloc[::-1], "step").values.tolist() == busy.values.tolist()
