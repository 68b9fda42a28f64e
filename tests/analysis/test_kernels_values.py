"""Kernel classes by name and kind, and graph replays; expected classes from the kernels' own names."""

from __future__ import annotations

import pandas as pd

from tracekit.analysis import kernels


def test_the_kind_decides_copies_whatever_the_name() -> None:
    names = pd.Series(["x", "x", "ncclDevKernel_AllReduce", "triton_red_fused_add_0"])
    kinds = pd.Series(["memcpy", "kernel", "kernel", "kernel"])
    assert kernels.kernel_classes(names, kinds).tolist() == ["copy", "other", "communication", "reduction"]
    assert kernels.kernel_classes(names).tolist() == ["other", "other", "communication", "reduction"]
    assert kernels.kernel_class("x", "memset") == "copy" and kernels.kernel_class(None) == "other"  # type: ignore[arg-type]


def test_graph_replays_are_the_graph_launch_correlations() -> None:
    gpu = pd.DataFrame({"launch_name": ["cudaGraphLaunch", "cudaLaunchKernel", "hipGraphLaunch", None],
                        "correlation": [7, 8, 9, None]})
    assert kernels.graph_replay(gpu).tolist() == [7, -1, 9, -1]
    assert kernels.graph_replay(gpu.drop(columns=["launch_name"])).tolist() == [-1, -1, -1, -1]
