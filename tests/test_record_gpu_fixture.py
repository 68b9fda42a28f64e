"""A real GPU run brought back by scripts/device/validate_record.py (trimmed), read as a fixture.

The lead copies OUT/runs/smoke from an H200 run to tests/fixtures/record_gpu_smoke/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit import chrome_trace
from tracekit.rundir import STATUS_COMPLETE, RunDir
from tracekit.stepnames import parse_step

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "record_gpu_smoke"

pytestmark = pytest.mark.skipif(
    not FIXTURE.is_dir(), reason=f"GPU record fixture not committed yet ({FIXTURE})"
)


def test_gpu_run_manifest_and_tables() -> None:
    run = RunDir.open(FIXTURE)
    m = run.read_manifest()
    assert m["status"] == STATUS_COMPLETE and m["workload"]["device"].startswith("cuda")
    assert m["workload"]["model"] == "tinyllama-1.1b" and m["workload"]["dtype"] == "fp16"
    steps = run.read_df("steps")
    per_request = steps.groupby("request_id")["kind"].apply(list)
    assert all(k == ["prefill"] + ["decode"] * 7 for k in per_request)
    req = run.read_df("requests")
    assert (req["output_tokens"] == 8).all() and (req["ttft_ns"] < req["e2e_ns"]).all()
    assert m["nvml"]["available"] and run.read_table("counters").num_rows > 0


def test_gpu_trimmed_trace_is_small_and_consistent() -> None:
    run = RunDir.open(FIXTURE)
    assert run.trace_path.stat().st_size <= 2 * 1024 * 1024
    events = chrome_trace.load(run.trace_path)["traceEvents"]
    launches = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert kernels and all(k["args"]["correlation"] in launches for k in kernels)
    steps = run.read_df("steps").set_index("step_id")
    traced = [
        e
        for e in events
        if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("tracekit.step ")
    ]
    assert traced
    for e in traced:
        label = parse_step(e["name"])
        assert label is not None
        assert abs(steps.loc[label.step_id, "cpu_start_ns"] - round(e["ts"] * 1000)) <= 1
