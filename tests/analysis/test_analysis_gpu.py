"""End to end on real H200 traces of plain model.generate (tests/fixtures/gpu, recorded by
scripts/gpu/plain_generate_fixtures.py, shrunk by trim_gpu_traces.py there): no tracekit
annotations. The steps found must be exactly the forward passes that ran, and TTFT / TPOT
from the trace must agree within 3% with the host timers taken around the same generate()
calls (torch.cuda.synchronize + perf_counter, a streamer stamping each token)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from typing import Any

import pandas as pd
import pytest
from helpers import FIXTURES

from tracekit.cli import main

CASES = ("a_batch2", "b_two_requests", "c_profiler_steps", "d_compiled")
# d_compiled: Transformers' compiled path (static cache, CUDA graphs): an eager prefill, then
# one cudaGraphLaunch per decode step and no aten ops of the layers.
SOURCES = {"d_compiled": ["model_ops"] + ["cuda_graph"] * 7}
TOLERANCE = 0.03


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each fixture through `tracekit analyze` (ingest + passes), once per module, with the
    H200's measured calibration (tests/fixtures/gpu/h200_ceiling.json) in the ceiling cache."""
    fixtures = FIXTURES / "gpu"
    cache = tmp_path_factory.mktemp("cache")
    (cache / "ceilings").mkdir()
    shutil.copyfile(fixtures / "h200_ceiling.json", cache / "ceilings" / "nvidia-h200.json")
    mp = pytest.MonkeyPatch()
    mp.setenv("TRACEKIT_CACHE_DIR", str(cache))
    out: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    try:
        for name in CASES:
            run = tmp_path_factory.mktemp(name) / "run"
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                assert main(["analyze", str(fixtures / f"{name}.json.gz"), "--out", str(run)]) == 0
            timings = json.loads((fixtures / f"{name}.timings.json").read_text())
            tables: dict[str, Any] = {t: pd.read_parquet(run / "tables" / f"{t}.parquet") for t in
                                      ("steps", "requests", "phases", "kernel_steps", "kernel_bound", "step_bound")}
            tables["summary"] = buf.getvalue()
            tables["manifest"] = json.loads((run / "run.json").read_text())
            out[name] = (timings, tables)
    finally:
        mp.undo()
    return out


@pytest.mark.parametrize("name", CASES)
def test_steps_are_exactly_the_forward_passes_that_ran(analysed: dict[str, Any], name: str) -> None:
    timings, t = analysed[name]
    steps = t["steps"].sort_values("cpu_start_ns")
    expected = [(p["kind"], p["batch"], p["q_len"], rid)
                for rid, r in enumerate(timings["requests"]) for p in r["expected_forward_passes"]]
    found = list(zip(steps["kind"], steps["batch"], steps["q_len"], steps["request_id"], strict=True))
    assert found == expected
    assert list(steps["source"]) == SOURCES.get(name, ["model_ops"] * len(steps))
    # KV length after each pass: the prompt, then one more per decode step (dynamic cache).
    for rid, r in enumerate(timings["requests"]):
        kv = list(steps.loc[steps["request_id"] == rid, "kv_len"])
        assert kv == list(range(r["input_tokens"], r["input_tokens"] + r["output_tokens"]))
    # Every forward pass launched GPU work; every GPU activity is in one step or reported outside.
    assert (steps["gpu_busy_ns"] > 0).all()
    # What falls outside every pass is generate()'s input handling before each prefill
    # (isin, small copies; the compiled path's static cache setup adds a few: 52 there):
    # a few dozen tiny activities per request, < 1% of GPU time.
    ks = t["kernel_steps"]
    outside = ks[ks["step_id"].isna()]
    assert len(outside) < 60 * len(timings["requests"])
    assert outside["dur_ns"].sum() < 0.01 * ks["dur_ns"].sum()


@pytest.mark.parametrize("name", CASES)
def test_ttft_and_tpot_agree_with_synchronised_host_timers(analysed: dict[str, Any], name: str) -> None:
    timings, t = analysed[name]
    req = t["requests"].sort_values("request_id")
    assert len(req) == len(timings["requests"])
    for (_, r), host in zip(req.iterrows(), timings["requests"], strict=True):
        assert r["input_tokens"] == host["input_tokens"] and r["output_tokens"] == host["output_tokens"]
        if "name" in host:
            assert r["name"] == host["name"]
        for ours, theirs in (("ttft_ns", "host_ttft_ns"), ("tpot_ns", "host_tpot_ns"), ("e2e_ns", "host_e2e_ns")):
            rel = abs(float(r[ours]) - host[theirs]) / host[theirs]
            assert rel < TOLERANCE, f"{name} request {r['request_id']}: {ours} {r[ours]} vs host {host[theirs]}"


def test_profiler_session_annotation_is_not_a_request(analysed: dict[str, Any]) -> None:
    # GIVEN a plain profile() around one generate: the profiler's own "PyTorch Profiler (0)"
    # span also holds the caller's synchronisation and the profiler's start-up stall.
    _, t = analysed["a_batch2"]
    r = t["requests"].iloc[0]
    assert not str(r["name"]).startswith("PyTorch Profiler")
    assert r["source"] == "prefill_boundary"


def test_phase_timeline_on_h200_decode_is_mostly_gpu_idle(analysed: dict[str, Any]) -> None:
    # Eager decode under the profiler: the GPU is busy a small part of each step (DESIGN.md).
    _, t = analysed["b_two_requests"]
    ph = t["phases"]
    dec = ph[ph["request_id"].isna() & (ph["phase"] == "decode")].iloc[0]
    assert dec["steps"] == 14
    assert dec["gpu_busy_ns"] + dec["idle_ns"] == dec["time_ns"]  # one device
    assert dec["idle_ns"] > dec["gpu_busy_ns"]


def test_the_measured_ceiling_is_used_named_and_the_roofline_tables_written(analysed: dict[str, Any]) -> None:
    _, t = analysed["a_batch2"]
    assert "ceiling: NVIDIA H200 (measured)" in t["summary"]
    assert t["manifest"]["analysis"]["ceiling"]["kind"] == "measured"
    ph = t["phases"]
    run_rows = ph[ph["request_id"].isna() & ph["phase"].isin(["prefill", "decode"])]
    assert set(run_rows["ceiling"]) == {"NVIDIA H200 (measured)"}
    # the bound split covers each phase's time exactly (one device)
    parts = run_rows[["compute_bound_ns", "memory_bound_ns", "latency_bound_ns", "other_ns", "comm_ns", "memcpy_ns",
                      "idle_ns"]]
    assert (parts.sum(axis=1) == run_rows["time_ns"]).all()
    assert len(t["kernel_bound"]) == len(t["kernel_steps"])
    assert len(t["step_bound"]) == len(t["steps"])
    # 48 prompt tokens and batch-2 decode: every GEMM sits below the ridge point (the memory roof);
    # the small ones reach neither roof (latency-bound)
    bounds = set(t["kernel_bound"]["bound"].dropna())
    assert "memory" in set(t["kernel_bound"]["roof"].dropna())
    assert "latency" in bounds and bounds <= {"compute", "memory", "latency", "other", "comm", "memcpy"}
