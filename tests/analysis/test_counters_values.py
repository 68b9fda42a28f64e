"""Nsight Compute counters: the Speed-Of-Light class and the per-step join, on hand-made tables."""

from __future__ import annotations

import math

import pandas as pd

from tracekit.analysis import counters as c


def test_counter_class_rule() -> None:
    assert c.counter_class(70, 50) == "memory" and c.counter_class(50, 70) == "compute"
    assert c.counter_class(59.9, 59.9) == "latency"
    assert c.counter_class(60, 10) == "memory"  # exactly the threshold is not under it
    assert c.counter_class(10, 60) == "compute"
    assert c.counter_class(70, 70) == "memory"  # a tie goes to memory
    # only memory measured: never compute, also under a threshold low enough that 0.5% clears it
    assert c.counter_class(0.5, None, threshold=0.1) == "memory"
    assert c.counter_class(None, 0.5, threshold=0.1) == "compute"
    # memory throughput is memory_pct where collected (it includes L1/L2), else DRAM
    assert c.counter_class(10, 50, memory_pct=80) == "memory"
    assert c.counter_class(90, 50, memory_pct=20) == "latency"
    # compute is the larger of the SM and tensor-pipe throughputs
    assert c.counter_class(30, 10, tensor_pct=65) == "compute"
    assert c.counter_class(None, 65) == "compute" and c.counter_class(65, None) == "memory"
    assert c.counter_class(None, None) is None and c.counter_class("n/a", float("nan")) is None
    assert c.counter_class(70, 50, threshold=80) == "latency"
    df = pd.DataFrame({"dram_pct": [70, 5, None], "sm_pct": [50, 5, None]})
    assert c.counter_classes(df).tolist() == ["memory", "latency", None]
    assert c.counter_classes(df, threshold=4).tolist() == ["memory", "memory", None]  # 5 and 5: a tie
    assert c.counter_classes(pd.DataFrame({"tensor_pct": [61.0]})).tolist() == ["compute"]


def test_names() -> None:
    assert c.base_name("void at::native::(anonymous namespace)::kernel<float, 4>(int*)") == "kernel"
    assert c.base_name("  void   ns::gemm_kernel<(int)1>(float)  ") == "gemm_kernel"
    assert c.base_name("plain") == "plain"
    assert c.same_kernel("void k<1>( int )", "void k<1>(int)") == "exact"
    assert c.same_kernel("void k<1>(int)", "k<2>") == "base"
    assert c.same_kernel("k<1>", "k<2>", ([64, 1, 1], [128, 1, 1]), ("[64, 1, 1]", "[128, 1, 1]")) == "base"
    assert c.same_kernel("k<1>", "k<2>", ([64, 1, 1], None), ([32, 1, 1], None)) is None
    assert c.same_kernel("k<1>", "j<1>") is None


def _kernels() -> pd.DataFrame:
    # step 0: a, b launched in that order (b starts first on another stream); step 1: a; step 2: x, y
    return pd.DataFrame({
        "name": ["a_kernel", "b_kernel", "a_kernel", "x_kernel", "y_kernel", "memcpy"],
        "kind": ["kernel", "kernel", "kernel", "kernel", "kernel", "memcpy"],
        "step_id": [0, 0, 1, 2, 2, 0], "ts_ns": [500, 400, 900, 1000, 1100, 450],
        "issued_ns": pd.array([100, 200, 800, None, None, 150], dtype="Int64"),
    })


def test_join_per_step_in_launch_order() -> None:
    order = c.launch_order(_kernels())
    assert order["name"].tolist() == ["a_kernel", "b_kernel", "a_kernel", "x_kernel", "y_kernel"]
    cnt = pd.DataFrame({
        "step_id": [0, 0, 1, 2, 3, None], "ordinal": [1, 0, 0, 0, 0, 0],
        "name": ["void b_kernel<2>(int)", "a_kernel", "a_kernel", "x_kernel", "z_kernel", "w_kernel"],
        "dram_pct": [10.0, 80.0, 50.0, 1.0, 2.0, 3.0], "sm_pct": [90.0, 5.0, 40.0, 1.0, 2.0, 3.0],
    })
    out, rep = c.join(_kernels(), cnt)
    # step 0 joins (by profiling order: a, then b spelled its own way), step 1 joins, step 2 has one
    # kernel profiled for two in the trace: refused; step 3 is not in the trace; one row had no step
    assert out["dram_pct"].tolist()[:3] == [80.0, 10.0, 50.0] and out["dram_pct"][3:].isna().all()
    assert out["ncu_match"].tolist() == ["exact", "base", "exact", None, None, None]
    assert (rep.kernels_counted, rep.kernels_matched, rep.exact_names) == (6, 3, 2)
    assert rep.steps_joined == (0, 1) and rep.not_in_trace == (3,)
    assert rep.refused == ((2, "1 kernels profiled, 2 in the trace"),)
    lines = rep.lines()
    assert lines[0] == "counters: 3 of 6 profiled kernels matched to the trace (2 step(s) joined, 1 refused)"
    assert "1 matched by function name only" in lines[1]
    assert any("outside every tracekit step range" in s for s in lines)
    assert rep.to_dict()["refused"] == [{"step_id": 2, "reason": "1 kernels profiled, 2 in the trace"}]
    # a kernel that differs refuses the step, never shifts it
    bad = cnt.assign(name=["void q_kernel(int)", "a_kernel", "a_kernel", "x_kernel", "z_kernel", "w_kernel"])
    _, rep2 = c.join(_kernels(), bad)
    assert rep2.steps_joined == (1,) and rep2.refused[0][0] == 0 and "kernel 1 differs" in rep2.refused[0][1]
    empty, rep3 = c.join(_kernels(), cnt.iloc[:0])
    assert rep3.kernels_counted == 0 and empty["sm_pct"].isna().all() and math.isnan(empty["waves"].iloc[0])
