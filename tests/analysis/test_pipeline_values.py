"""The pass runner and the whole default pipeline on a tiny hand-built trace; values worked out by hand."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from tracekit.analysis.inputs import AnalysisInput
from tracekit.analysis.pipeline import run_passes, trace_span
from tracekit.model import schema
from tracekit.model.ceilings import Ceiling, Ceilings

US = 1000


def test_the_output_holds_every_warning_once_and_reads_as_a_mapping() -> None:
    gpu = pd.DataFrame({"ts_ns": [100], "dur_ns": [50], "kind": ["kernel"], "name": ["k"], "device": [0]})
    why = "no GPU named in run.json or the trace"
    out = run_passes(AnalysisInput(tables={"gpu_activity": gpu}, ceilings=Ceilings(note=why)))
    assert out.warnings[-1] == f"no ceiling: {why}" and out.warnings.count(out.warnings[-1]) == 1
    assert out["warnings"] == list(out.warnings) and out.get("check") is out.check
    assert set(out) >= {"steps", "requests", "phases", "kernel_steps", "gpu_timeline", "warnings"}
    # a ceiling found another way than by the GPU run.json names: its note is said, not as missing
    found = Ceilings(Ceiling("G", {"fp32": 1e12}, 1e12, "test"), None, "identified from deviceProperties")
    assert run_passes(AnalysisInput(tables={}, ceilings=found)).warnings[-1] == "identified from deviceProperties"


def test_trace_span() -> None:
    t = {"gpu_activity": pd.DataFrame({"ts_ns": [100, None], "dur_ns": [50, 5]}),
         "cpu_ops": pd.DataFrame({"ts_ns": [50], "dur_ns": [None]}),
         "runtime": pd.DataFrame({"ts_ns": [20], "dur_ns": [500]}), "annotations": pd.DataFrame()}
    assert trace_span(t) == (20, 520)
    assert trace_span({}) is None
    # the ops of a graph-capture trace ran at capture time, on another clock: not part of the span (a
    # compiled run's capture 6 s before its requests made its outside row 6 s long)
    t["cpu_ops"] = pd.DataFrame({"ts_ns": [50, -6_000_000_000], "dur_ns": [1, 30], "captured": [False, True]})
    assert trace_span(t) == (20, 520)


def _tables() -> dict[str, Any]:
    ops, rt, gpu = [], [], []
    for i, (t, q, kv) in enumerate([(1000, 5, 5), (2000, 1, 6), (3000, 1, 7)]):
        ops += [{"op_id": 3 * i, "ts_ns": t * US, "dur_ns": 5 * US, "name": "aten::embedding", "cat": "cpu_op",
                 "input_dims": json.dumps([[32000, 64], [1, q]])},
                {"op_id": 3 * i + 1, "ts_ns": (t + 20) * US, "dur_ns": 5 * US, "cat": "cpu_op",
                 "name": "aten::scaled_dot_product_attention",
                 "input_dims": json.dumps([[1, 4, q, 16], [1, 2, kv, 16], [1, 2, kv, 16]])},
                {"op_id": 3 * i + 2, "ts_ns": (t + 30) * US, "dur_ns": 10 * US, "name": "aten::linear", "cat": "cpu_op"}]
        rt += [{"ts_ns": (t + 35) * US, "dur_ns": 2 * US, "name": "cudaLaunchKernel", "correlation": 2 * i + 1},
               {"ts_ns": (t + 45) * US, "dur_ns": 2 * US, "name": "cudaMemcpyAsync", "correlation": 2 * i + 2}]
        gpu += [{"ts_ns": (t + 50) * US, "dur_ns": (100 if i == 0 else 50) * US, "name": "sm90_gemm", "kind": "kernel",
                 "correlation": 2 * i + 1},
                {"ts_ns": (t + (160 if i == 0 else 110)) * US, "dur_ns": 10 * US, "kind": "memcpy",
                 "name": "Memcpy DtoH (Device -> Pageable)", "correlation": 2 * i + 2}]
    gpu.append({"ts_ns": 5000 * US, "dur_ns": 100 * US, "name": "sm90_gemm", "kind": "kernel"})  # launched by nobody
    for g in gpu:
        g.update(device=0, stream=7)

    def cols(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, list[Any]]:
        return {k: [r.get(k) for r in rows] for k in keys}

    return {
        "cpu_ops": schema.from_columns("cpu_ops", cols(ops, ("op_id", "ts_ns", "dur_ns", "name", "cat", "input_dims"))),
        "annotations": schema.from_columns("annotations", cols([], ("ts_ns", "dur_ns", "name", "cat"))),
        "runtime": schema.from_columns("runtime", cols(rt, ("ts_ns", "dur_ns", "name", "correlation"))),
        "gpu_activity": schema.from_columns("gpu_activity", cols(
            gpu, ("ts_ns", "dur_ns", "name", "kind", "device", "stream", "correlation"))),
        "ceiling": Ceiling("toy", {"fp16": 1e14, "fp32": 1e13}, 1e12, "test"),
    }


def test_the_default_pipeline_accounts_for_the_time_outside_every_step() -> None:
    out = run_passes(AnalysisInput.of(_tables()))
    ph = out["phases"]
    run = ph[ph["request_id"].isna()].set_index("phase")
    # the trace spans [1000, 5100) µs; the steps' windows [1000, 2000), [2000, 3000), [3000, 3100)
    # (the last pass ends with its GPU work): 2000 µs outside, holding the last token copy (launched after
    # its step's window, 10 µs) and the orphan GEMM (no model: other, 100 µs)
    o = run.loc["outside"]
    assert (o["time_ns"], o["memcpy_ns"], o["other_ns"], o["gpu_busy_ns"]) == (2000 * US, 10 * US, 100 * US, 110 * US)
    assert o["idle_ns"] == 1890 * US
    assert run.loc["prefill", "time_ns"] == 1000 * US and run.loc["decode", "time_ns"] == 1100 * US
    assert run.loc["prefill", "gpu_busy_ns"] == 110 * US  # the GEMM and the token copy
    assert run.loc["decode", "gpu_busy_ns"] == (50 + 10 + 50) * US
    req = out["requests"]
    assert len(req) == 1 and req.iloc[0]["output_tokens"] == 3
