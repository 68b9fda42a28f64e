"""The latency class: modelled kernels under the line on both peaks (60% of a datasheet rate, 65% of an achieved one); the size rule for name-class kernels.

Synthetic kernels whose durations set their achieved rates exactly, then the real H200 trace
(tests/fixtures/gpu/bound_h200.json.gz, TinyLlama shape, 1,000-token prefill and decode at batch 1).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers import FIXTURES, bound_pass_of

from tracekit.analysis import bound
from tracekit.analysis.opmodels import op_cost
from tracekit.app.ceiling import latency_line_peaks as decide_peaks
from tracekit.model.ceilings import datasheet

H200 = datasheet("NVIDIA H200")
assert H200 is not None
HALF = "c10::Half"
GEMV = ("aten::linear", [[1, 1, 2048], [5632, 2048], []], [HALF, HALF, ""])
GEMM = ("aten::linear", [[1, 1000, 2048], [5632, 2048], []], [HALF, HALF, ""])
ADD = ("aten::add", [[1, 1000, 2048], [1, 1000, 2048]], [HALF, HALF])


def cost(op: tuple[str, list, list]) -> Any:
    c = op_cost(op[0], json.dumps(op[1]), json.dumps(op[2]))
    assert c is not None
    return c


# Rates over the durations alone, every kernel's bytes against DRAM (no overhead, no L2 rule):
# the line itself is under test here.
EXACT = bound.BoundOptions(kernel_overhead_ns=0.0, l2_resident=False)


def kernels_at(rates: list[tuple[tuple[str, list, list], float, str]]) -> pd.DataFrame:
    """One kernel per (op, share of its roof's datasheet peak, name): its duration gives that rate."""
    cpu, gpu = [], []
    for i, (op, share, name) in enumerate(rates):
        c = cost(op)
        tensor = op[0] in ("aten::linear", "aten::mm")
        peak_f = H200.flops("fp16") if tensor else H200.flops("fp32")
        # the roof the kernel is under: its time at `share` of that roof's peak
        roof_s = max(c.flops / peak_f, c.bytes / H200.peak_bytes_per_s)  # type: ignore[operator]
        dur = round(roof_s / share * 1e9)
        cpu.append({"op_id": i, "name": op[0], "input_dims": json.dumps(op[1]), "input_types": json.dumps(op[2]),
                    "parent_id": None})
        gpu.append({"ts_ns": 1_000_000 * i, "dur_ns": dur, "name": name, "op_id": i, "kind": "kernel", "stream": 7})
    return bound.kernel_costs(pd.DataFrame(gpu), pd.DataFrame(cpu), H200, EXACT)


def test_under_60_percent_of_both_peaks_is_latency() -> None:
    k = kernels_at([(GEMV, 0.45, "gemv"), (GEMV, 0.75, "gemv"), (GEMM, 0.30, "gemm"), (GEMM, 0.70, "gemm"),
                    (ADD, 0.50, "vectorized_elementwise_kernel"), (ADD, 0.90, "vectorized_elementwise_kernel")])
    assert list(k["roof"]) == ["memory", "memory", "compute", "compute", "memory", "memory"]
    assert list(k["bound"]) == ["latency", "memory", "latency", "compute", "latency", "memory"]
    # the achieved share of the roof's peak, as the duration set it
    roof_pct = np.where(k["roof"] == "compute", k["flops_pct_of_peak"], k["bw_pct_of_peak"])
    assert roof_pct == pytest.approx([45, 75, 30, 70, 50, 90], rel=1e-3)
    assert (k["source"] == bound.SOURCE_MODEL).all()


def test_threshold_and_peaks_are_options() -> None:
    rates = [(GEMV, 0.55, "gemv")]
    assert kernels_at(rates)["bound"].iloc[0] == "latency"
    cpu = pd.DataFrame([{"op_id": 0, "name": GEMV[0], "input_dims": json.dumps(GEMV[1]),
                         "input_types": json.dumps(GEMV[2]), "parent_id": None}])
    gpu = kernels_at(rates)[["ts_ns", "dur_ns", "name", "op_id", "kind", "stream"]]
    low = bound.kernel_costs(gpu, cpu, H200, bound.BoundOptions(latency_threshold=0.5, kernel_overhead_ns=0.0, l2_resident=False))
    assert low["bound"].iloc[0] == "memory"
    assert bound.kernel_costs(gpu, cpu, H200, bound.ROOFLINE_ONLY)["bound"].iloc[0] == "memory"
    # a measured ceiling (bandwidth 3.6 TB/s, 75% of the datasheet's 4.8): the default line is taken
    # against the ceiling in use, 65% of an achieved rate: the kernel is at 55 x 4.8 / 3.6 = 73.3% of it
    meas = replace(H200, kind="measured", peak_bytes_per_s=3.6e12, achieved=("bandwidth",))
    on_ceiling = bound.kernel_costs(gpu, cpu, meas, EXACT)
    assert on_ceiling["bound"].iloc[0] == "memory"
    assert on_ceiling["bw_pct_of_peak"].iloc[0] == pytest.approx(55 * 4.8 / 3.6, rel=1e-3)
    # against the datasheet, as Nsight Compute's % of peak are: 55% < 60%
    on_datasheet = bound.kernel_costs(gpu, cpu, meas, EXACT, peaks=decide_peaks(meas, "datasheet"))
    assert on_datasheet["bound"].iloc[0] == "latency"


def test_name_class_kernels_follow_the_size_rule() -> None:
    gpu = pd.DataFrame({"ts_ns": [0, 100_000, 200_000, 300_000], "dur_ns": [3_000, 19_999, 20_000, 50_000],
                        "name": ["vectorized_elementwise_kernel", "reduce_kernel", "CatArrayBatchedCopy", "gemv2T"],
                        "kind": "kernel", "op_id": None, "stream": 7})
    cpu = pd.DataFrame(columns=["op_id", "name", "input_dims", "input_types"])
    k = bound.kernel_costs(gpu, cpu, H200)
    assert list(k["model"]) == ["kernel_class"] * 3 + ["none"]
    assert list(k["roof"][:3]) == ["memory"] * 3
    assert list(k["bound"]) == ["latency", "latency", "memory", "other"]  # a GEMM without shapes: no model
    assert list(bound.kernel_costs(gpu, cpu, H200, bound.ROOFLINE_ONLY)["bound"]) == ["memory"] * 3 + ["other"]


def test_latency_time_is_attributed_after_memory_before_other() -> None:
    k = pd.DataFrame({"ts_ns": [0, 50, 200, 300], "dur_ns": [100, 100, 100, 100],
                      "bound": ["latency", "memory", "latency", "other"], "device": 0, "flops": 0.0,
                      "bytes": 0.0, "model": "shape"})
    w = np.array([[0, 500]], dtype=np.int64)
    row = bound.attribute_windows(w, k)
    assert row["memory_bound_ns"] == 100 and row["latency_bound_ns"] == 50 + 100 and row["other_ns"] == 100
    assert row["idle_ns"] == 150
    assert sum(row[c] for c in bound.TIME_COLUMNS.values()) == row["time_ns"] == 500


# --- the real H200 trace ------------------------------------------------------------


@pytest.fixture(scope="module")
def h200() -> dict[str, Any]:
    from tracekit.analysis.inputs import AnalysisInput
    from tracekit.analysis.pipeline import run_passes
    from tracekit.ingest import read_trace_tables
    from tracekit.store import calibration

    gpu = FIXTURES / "gpu"
    timings = json.loads((gpu / "bound_h200_timings.json").read_text())
    tables: dict[str, Any] = dict(read_trace_tables(gpu / "bound_h200.json.gz"))
    tables["manifest"] = {"environment": {"gpu": timings["gpu"]}}
    tables["ceiling"] = calibration.load(gpu / "h200_ceiling.json")
    return dict(run_passes(AnalysisInput.of(tables)))


def test_h200_every_modelled_kernel_is_classed_by_its_achieved_rates(h200: dict[str, Any]) -> None:
    k = h200["kernel_bound"]
    s = k[k["model"] == bound.MODEL_SHAPE]
    assert not s["over_peak"].any()
    # the measured ceiling's rates are all achieved ones: the line is 65% of each
    under = np.fmax(s["flops_pct_of_peak"], s["bw_pct_of_peak"]) < 65
    # an elementwise / reduction / copy kernel whose bytes fit in the H200's 60 MiB L2: latency unless
    # its FLOPs reach the line
    resident = s["kclass"].isin(["elementwise", "reduction", "copy"]) & (s["bytes"] <= 60 * 2**20)
    assert (s.loc[under, "bound"] == "latency").all()
    assert (s.loc[resident & (s["flops_pct_of_peak"] < 65), "bound"] == "latency").all()
    assert (s.loc[~under & ~resident, "bound"] == s.loc[~under & ~resident, "roof"]).all()
    # every modelled kernel class takes the rule, not only GEMMs
    assert {"gemm", "elementwise", "copy", "reduction", "attention"} <= set(s.loc[under, "kclass"])


def test_h200_decode_kernels_are_mostly_latency_bound(h200: dict[str, Any]) -> None:
    k = h200["kernel_bound"]
    dec = k[(k["phase"] == "decode") & (k["kind"] == "kernel")]
    by = dec.groupby("bound")["dur_ns"].sum() / dec["dur_ns"].sum()
    # batch-1 decode: GEMVs, norms, rotary, copies reach neither 60% of peak bandwidth nor of compute
    assert by.get("latency", 0) > 0.5
    assert by.get("compute", 0) == 0
    gemv = dec[(dec["kclass"] == "gemm") & (dec["model"] == bound.MODEL_SHAPE)]
    assert (gemv["roof"] == "memory").all()  # all on the memory side of the ridge
    assert set(gemv["bound"]) <= {"memory", "latency"}


def test_h200_phase_sums_stay_exact_with_latency(h200: dict[str, Any]) -> None:
    ph = h200["phases"]
    rows = ph[ph["time_ns"].notna()]
    parts = sum(rows[c] for c in bound.TIME_COLUMNS.values())
    assert (parts == rows["time_ns"]).all()
    assert (rows["latency_bound_ns"] > 0).all()
    idle = rows["idle_host_ns"] + rows["idle_wait_ns"] + rows["idle_profiler_ns"].fillna(0)
    assert (idle == rows["idle_ns"]).all()


def test_a_trace_without_shapes_says_so_and_classes_what_it_can() -> None:
    gpu = pd.DataFrame({"ts_ns": [0, 10_000], "dur_ns": [3_000, 5_000], "name": ["vectorized_elementwise_kernel",
                                                                                 "nvjet_sm90_gemm"],
                        "kind": "kernel", "op_id": [1, 2], "stream": 7, "device": 0})
    cpu = pd.DataFrame({"op_id": [1, 2], "name": ["aten::add", "aten::mm"], "input_dims": [None, None],
                        "input_types": [None, None]})
    steps = pd.DataFrame({"step_id": [0], "request_id": [0], "kind": ["decode"], "cpu_start_ns": [0],
                          "cpu_end_ns": [20_000]})
    out = bound_pass_of({"gpu_activity": gpu, "cpu_ops": cpu, "steps": steps,
                         "manifest": {"environment": {"gpu": "NVIDIA H200"}}, "ceiling": datasheet("NVIDIA H200")})
    assert list(out["kernel_bound"]["bound"]) == ["latency", "other"]
    assert any("no op shapes" in w for w in out["warnings"])
    ph = out["phases"].iloc[0]
    assert sum(int(ph[c]) for c in bound.TIME_COLUMNS.values()) == int(ph["time_ns"])
