"""Nsight Compute counters joined to the trace's kernels, and the class they give.

Real counters: tests/fixtures/ncu (an H200, a tiny Llama forward of 102 kernels); its trace side is
the same forward's torch.profiler activity list (names, kinds, streams, grids) in trace order.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from helpers import FIXTURES, bound_pass_of

from tracekit.analysis import bound
from tracekit.analysis import counters as C
from tracekit.ingest import ncu
from tracekit.model.ceilings import datasheet

NCU = FIXTURES / "ncu"
STEP = 3


def trace_activities(step: int = STEP) -> pd.DataFrame:
    """The forward's GPU activities as a gpu_activity-like frame: launched 3 us before each starts."""
    rows = [line.split("|") for line in (NCU / "tiny_forward_kineto.txt").read_text().splitlines()]
    n = len(rows)
    ts = np.arange(n, dtype=np.int64) * 10_000
    return pd.DataFrame({
        "ts_ns": ts, "dur_ns": 2_000, "name": [r[0] for r in rows],
        "kind": ["kernel" if r[1] == "kernel" else "memset" for r in rows],
        "stream": [int(r[2]) for r in rows], "device": 0, "correlation": np.arange(n),
        "grid": [[int(x) for x in re.findall(r"\d+", r[3])] for r in rows],
        "block": [[int(x) for x in re.findall(r"\d+", r[4])] for r in rows],
        "issued_ns": ts - 3_000, "step_id": float(step), "op_id": np.nan,
        "model": "none", "bound": "other", "source": "model", "flops": 0.0, "bytes": 0.0,
    })


def measured(step: int = STEP) -> pd.DataFrame:
    # recorded with cudaProfilerStart/Stop around one forward (no NVTX): all of it is one step
    c = ncu.read_csv(NCU / "tiny_forward_mangled.csv").to_pandas()
    c["step_id"] = step
    return c


def test_every_kernel_of_the_real_forward_joins_by_order_and_name() -> None:
    k, rep = C.join(trace_activities(), measured())
    assert rep.kernels_counted == 102 and rep.kernels_matched == 102 and rep.exact_names == 102
    assert rep.steps_joined == (STEP,) and not rep.refused
    kern = k[k["kind"] == "kernel"]
    assert kern["ncu_dur_ns"].notna().all() and kern["dram_pct"].notna().all()
    # the two memsets of the trace are not kernels: ncu does not profile them, they stay unmatched
    assert k.loc[k["kind"] == "memset", "ncu_dur_ns"].isna().all()
    # position i of the step got the i-th profiled kernel
    c = measured()
    assert kern["ncu_dur_ns"].tolist() == c["ncu_dur_ns"].tolist()
    assert "102 of 102 profiled kernels matched" in rep.lines()[0]


def test_launch_order_not_gpu_order_decides() -> None:
    # GIVEN two streams whose kernels ran out of launch order on the GPU
    k = trace_activities()
    ks = k[k["kind"] == "kernel"].index
    a, b = ks[5], ks[6]
    k.loc[a, "ts_ns"], k.loc[b, "ts_ns"] = k.loc[b, "ts_ns"], k.loc[a, "ts_ns"]
    j, rep = C.join(k, measured())
    assert rep.kernels_matched == 102  # issued_ns still orders them as ncu saw them
    assert j.loc[a, "ncu_dur_ns"] == measured()["ncu_dur_ns"].iloc[5]


def test_a_step_whose_sequence_differs_is_refused_never_shifted() -> None:
    c = measured()
    short, rep = C.join(trace_activities(), c.drop(index=40).reset_index(drop=True))
    assert rep.kernels_matched == 0 and rep.refused == ((STEP, "101 kernels profiled, 102 in the trace"),)
    assert short["ncu_dur_ns"].isna().all()
    gemm = int(c.index[c["name"].str.startswith("nvjet")][0])
    swapped = c.copy()
    swapped.loc[[10, gemm], "name"] = swapped.loc[[gemm, 10], "name"].to_numpy()
    _, rep = C.join(trace_activities(), swapped)
    assert rep.kernels_matched == 0 and "kernel 10 differs" in rep.refused[0][1]
    # the same function with another launch shape is another kernel, even when only its base name is known
    renamed = c.copy()
    renamed["name"] = [C.base_name(n) for n in renamed["name"]]
    _, rep = C.join(trace_activities(), renamed)
    assert rep.kernels_matched == 102 and rep.exact_names < 102
    renamed.at[0, "grid"] = np.array([1, 2, 3])
    _, rep = C.join(trace_activities(), renamed)
    assert rep.kernels_matched == 0 and "kernel 0 differs" in rep.refused[0][1]
    # counters of a run whose steps the trace does not have (another run's file)
    _, rep = C.join(trace_activities(step=0), c)
    assert rep.kernels_matched == 0 and rep.not_in_trace == (STEP,)
    assert any("have counters but no kernels in the trace" in line for line in rep.lines())


def test_other_runs_counters_with_other_kernels_are_refused() -> None:
    # the captured graph's replay is another kernel sequence than the eager forward: refused
    other = ncu.read_csv(NCU / "tiny_forward_graph_nodes.csv").to_pandas()
    other["step_id"] = STEP
    _, rep = C.join(trace_activities(), other)
    assert rep.kernels_matched == 0 and "121 kernels profiled, 102 in the trace" in rep.refused[0][1]


def test_counter_class_follows_speed_of_light() -> None:
    assert C.counter_class(85, None, None, 10) == "memory"
    assert C.counter_class(20, None, None, 75) == "compute"
    assert C.counter_class(50, None, None, 55) == "latency"
    assert C.counter_class(59.9, 30, None, None) == "latency"
    # gpu__compute_memory_throughput (max of L1, L2, DRAM) wins over DRAM alone where collected
    assert C.counter_class(10, 20, 70, None) == "memory"
    assert C.counter_class(None, None, None, None) is None
    assert C.counter_class("n/a", 70, None, None) == "compute"


def test_real_counters_say_the_tiny_forward_is_latency_bound() -> None:
    # Nsight Compute's own SOL inputs (sm__throughput, gpu__compute_memory_throughput) for every kernel
    sol = ncu.read_csv(NCU / "tiny_forward_sol.csv").to_pandas()
    assert (sol[["sm_pct", "memory_pct"]].max(axis=1) < C.SOL_THRESHOLD_PCT).all()
    assert set(C.counter_classes(sol)) == {"latency"}
    # and the one-pass proxy (DRAM %, tensor pipe %) agrees on every kernel
    one = measured()
    assert list(C.counter_classes(one)) == list(C.counter_classes(sol))


def test_measured_kernels_take_their_counter_class() -> None:
    k = trace_activities()
    k.loc[k["name"].str.startswith("nvjet"), "bound"] = "memory"
    c = measured()
    c.loc[c["name"].str.startswith("nvjet"), "tensor_pct"] = 80.0  # pretend one GEMM saturates the tensor pipe
    out, rep = bound.apply_counters(k, c)
    assert rep is not None and rep.kernels_matched == 102
    kern = out[out["kind"] == "kernel"]
    assert (kern["source"] == bound.SOURCE_NCU).all()
    nvjet = kern["name"].str.startswith("nvjet")
    assert (kern.loc[nvjet, "bound"] == "compute").all() and (kern.loc[~nvjet, "bound"] == "latency").all()
    assert (out.loc[out["kind"] == "memset", "source"] == bound.SOURCE_MODEL).all()
    # no counters: unchanged
    same, none = bound.apply_counters(k, None)
    assert none is None and same is k


def test_names_match_exactly_or_by_function_name() -> None:
    assert C.same_kernel("void f<1>(int)", "void  f<1>(int)") == "exact"
    assert C.same_kernel("void at::native::(anonymous namespace)::k<(int)4>(char *)",
                         "void at::native::(anonymous namespace)::k<4>(char*)") == "base"
    assert C.same_kernel("nvjet_a", "nvjet_b") is None
    assert C.base_name("void <unnamed>::elementwise_kernel_with_index<int>(T1)") == "elementwise_kernel_with_index"


def test_pipeline_classes_from_counters_and_sums_stay_exact() -> None:
    # GIVEN a one-step trace of the real forward and its counters, THEN the bound pass classifies from
    # the counters and every class still sums to the step's time
    k = trace_activities(step=0)
    gpu = k[["ts_ns", "dur_ns", "name", "kind", "stream", "device", "correlation"]]
    runtime = pd.DataFrame({"ts_ns": k["issued_ns"] - 1_000, "dur_ns": 1_000, "name": "cudaLaunchKernel",
                            "correlation": k["correlation"], "tid": 1})
    steps = pd.DataFrame({"step_id": [0], "request_id": [0], "kind": ["prefill"], "cpu_start_ns": [-5_000],
                          "cpu_end_ns": [int(k["ts_ns"].max()) + 5_000]})
    counters = measured(step=0)
    t = {"gpu_activity": gpu, "cpu_ops": pd.DataFrame(columns=["op_id", "name", "input_dims", "input_types"]),
         "steps": steps, "runtime": runtime, "ncu_counters": counters,
         "manifest": {"environment": {"gpu": "NVIDIA H200"}}, "ceiling": datasheet("NVIDIA H200")}
    out = bound_pass_of(t)
    kb = out["kernel_bound"]
    assert (kb.loc[kb["kind"] == "kernel", "bound"] == "latency").all()
    ph = out["phases"].iloc[0]
    assert ph["kernels_measured"] == 102
    assert sum(int(ph[c]) for c in bound.TIME_COLUMNS.values()) == int(ph["time_ns"])
    assert ph["latency_bound_ns"] > 0 and ph["memory_bound_ns"] == 0
    assert any("102 of 102 profiled kernels matched" in w for w in out["warnings"])
    # an unknown GPU: no ceiling, yet what the counters measured is classified, and a clear line says so
    t2 = {**t, "manifest": {"environment": {"gpu": "Mystery GPU 9000"}}, "ceiling": None}
    out2 = bound_pass_of(t2)
    assert (out2["kernel_bound"].loc[lambda d: d["kind"] == "kernel", "bound"] == "latency").all()
    assert any(re.search("no ceiling for GPU 'Mystery GPU 9000'.*only from counters", w) for w in out2["warnings"])
