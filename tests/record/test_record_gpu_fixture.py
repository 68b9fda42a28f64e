"""A real GPU run brought back by scripts/gpu/record_timers.py (trimmed), read as a fixture.

tests/fixtures/record_gpu_smoke/ is OUT/runs/smoke of that script on an H200 (torch 2.11,
transformers 5.17, eager, tinyllama-1.1b fp16, 3 requests of 22 in / 8 out), recorded with the
current trace tracks (tracekit.trace.tracks); the trace keeps the first 3 steps.
"""

from __future__ import annotations

import pytest
from helpers import FIXTURES

from tracekit.model.stepnames import parse_step
from tracekit.store.rundir import STATUS_COMPLETE, RunDir
from tracekit.trace import chrome as chrome_trace

FIXTURE = FIXTURES / "record_gpu_smoke"

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
        # cuBLASLt launches through the driver API (cuLaunchKernelEx, cat cuda_driver) on the H200
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
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


def test_gpu_run_kv_lengths_counters_and_timings_agree() -> None:
    run = RunDir.open(FIXTURE)
    m = run.read_manifest()
    steps = run.read_df("steps")
    # GIVEN a 22-token prompt and 8 forced tokens: the KV cache grows by one per decode step
    for _, g in steps.groupby("request_id"):
        assert g["kv_len"].tolist() == list(range(22, 30))
        assert g["q_len"].tolist() == [22] + [1] * 7
    # THEN the requests table carries run.json's profiled per-request host timings exactly
    req = run.read_df("requests").set_index("request_id")
    for r in m["timings"]["profiled"]["requests"]:
        assert req.loc[r["request_id"], "ttft_ns"] == r["ttft_ns"]
        assert abs(req.loc[r["request_id"], "tpot_ns"] - r["tpot_ns"]) < 1
    # AND the profiler overhead was computed from both passes
    over = m["timings"]["profiler_overhead"]
    u = m["timings"]["unprofiled"]["aggregate"]["tpot_ns"]
    p = m["timings"]["profiled"]["aggregate"]["tpot_ns"]
    assert abs(over["tpot_pct"] - 100 * (p - u) / u) < 0.01
    # AND the H200 sampled both basic NVML and GPM metrics, percentages within 0..100
    c = run.read_df("counters")
    metrics = set(c["metric"].astype(str))
    assert {"gpu_util", "power", "energy", "dram_bw_util", "tensor_util"} <= metrics
    pct = c[c["unit"].astype(str) == "%"]["value"]
    assert len(pct) and pct.between(0, 100).all()
    # AND counter samples lie inside the recording (same clock as the steps)
    lo, hi = steps["cpu_start_ns"].min(), steps["cpu_end_ns"].max()
    assert c["ts_ns"].between(lo - 2_000_000_000, hi + 2_000_000_000).all()


def test_gpu_trace_carries_the_tracks_record_builds_today() -> None:
    # GIVEN the fixture's own tables, WHEN record's track builder runs on them now
    from tracekit.trace.recorded import record_track_events

    run = RunDir.open(FIXTURE)
    built = record_track_events(
        run.read_table("steps"), run.read_table("requests"), run.read_table("counters")
    )
    events = chrome_trace.load(run.trace_path)["traceEvents"]
    ours = {e["pid"] for e in built}
    key = ("ph", "name", "cat", "pid", "tid", "ts", "dur")
    in_trace = [e for e in events if e.get("pid") in ours and e.get("ph") == "X"]
    fresh = {tuple(e.get(k) for k in key) for e in built if e.get("ph") == "X"}
    # THEN every tracekit slice kept in the trimmed trace is one the builder makes today (same track, same times)
    assert in_trace and all(tuple(e.get(k) for k in key) in fresh for e in in_trace)
    assert {e["name"] for e in in_trace} >= {"prefill", "decode"}
    assert all(str(e["cat"]).startswith("tracekit.") for e in in_trace)
    names = {e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    assert "tracekit" in names and any(n.endswith("counters") for n in names)


def test_gpu_host_timers_agree_with_cuda_events() -> None:
    # check A of validate_record: the same unprofiled requests timed by host clock and CUDA events
    m = RunDir.open(FIXTURE).read_manifest()
    diff = m["timings"]["unprofiled"]["cuda_events"]["host_minus_events_pct"]
    assert abs(diff["ttft_pct"]) < 1.0 and abs(diff["tpot_pct"]) < 1.0
    # and the profiled pass is slower than the unprofiled one: the profiler's cost, reported
    assert m["timings"]["profiler_overhead"]["tpot_pct"] > 0
