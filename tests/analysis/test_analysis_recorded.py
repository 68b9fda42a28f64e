"""Runs recorded by tracekit with a kernel-capture window (--trace-steps): the recorder's
host timers are the latency truth, the trace only adds the GPU timeline of the steps it
covers, and steps without kernel capture are marked, never counted as GPU idle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from helpers import FIXTURES
from test_analysis import US, Trace

from tracekit.analysis.inputs import AnalysisInput
from tracekit.analysis.pipeline import run_passes
from tracekit.cli import main
from tracekit.model.stepnames import StepLabel, format_step
from tracekit.store.rundir import RunDir


def recorded_run(steps: int, captured: int) -> dict[str, Any]:
    """GIVEN a recorder's steps table of `steps` passes (1 ms apart) and a trace that
    annotates and holds kernels for the first `captured` of them (100 us of GPU each)."""
    t = Trace()
    rows = []
    for i in range(steps):
        ts = i * 1000 * US
        kind, q = ("prefill", 5) if i == 0 else ("decode", 1)
        rows.append({"step_id": i, "request_id": 0, "kind": kind, "batch": 1, "q_len": q, "kv_len": 5 + i,
                     "tokens": q, "source": "tracekit", "cpu_start_ns": ts, "cpu_end_ns": ts + 900 * US})
        if i < captured:
            t.annotate(format_step(StepLabel(i, 0, kind, 1, q, 5 + i)), ts, 900 * US)
            t.forward(ts, 1, q, 5 + i)
    manifest = {"steps": steps, "timings": {
        "profiled": {"requests": [{"request_id": 0, "name": "r", "batch": 1, "input_tokens": 5,
                                   "output_tokens": steps, "ttft_ns": 950 * US, "tpot_ns": 1000 * US,
                                   "e2e_ns": (950 + 1000 * (steps - 1)) * US, "prefill_share": 0.1,
                                   "itl_ns": {"p50": 1000 * US, "p99": 1100 * US}}]},
        "unprofiled": {"requests": [{"request_id": 0, "ttft_ns": 500 * US, "tpot_ns": 600 * US, "e2e_ns": 1}]},
    }}
    return dict(t.tables(), recorded_steps=pd.DataFrame(rows), manifest=manifest)


def test_uncaptured_steps_are_kept_marked_and_not_idle() -> None:
    out = run_passes(AnalysisInput.of(recorded_run(steps=10, captured=3)))
    st = out["steps"].sort_values("step_id")
    assert len(st) == 10
    assert list(st["captured"]) == [True] * 3 + [False] * 7
    assert st.loc[~st["captured"], ["gpu_start_ns", "gpu_end_ns", "gpu_busy_ns"]].isna().all().all()
    assert (st.loc[st["captured"], "gpu_busy_ns"] == 100 * US).all()
    ph = out["phases"]
    dec = ph[ph["request_id"].isna() & (ph["phase"] == "decode")].iloc[0]
    assert dec["steps"] == 9 and dec["steps_captured"] == 2
    # time and idle over the two captured decode windows only (900 us each; 100 us busy each)
    assert dec["time_ns"] == 2 * 900 * US
    assert dec["idle_ns"] == 2 * 800 * US


def test_latency_comes_from_the_recorder_not_the_window() -> None:
    out = run_passes(AnalysisInput.of(recorded_run(steps=10, captured=3)))
    r = out["requests"].iloc[0]
    assert r["source"] == "tracekit_host"
    assert (r["ttft_ns"], r["tpot_ns"], r["e2e_ns"]) == (950 * US, 1000 * US, 9950 * US)
    assert r["output_tokens"] == 10
    assert (r["itl_p50_ns"], r["itl_p99_ns"]) == (1000 * US, 1100 * US)
    assert (r["host_ttft_ns"], r["host_tpot_ns"]) == (500 * US, 600 * US)  # the unprofiled run
    # GPU time per token from the captured steps: 100 us per decode step, 100 us / 5 prompt tokens
    assert r["decode_gpu_ns_per_token"] == 100 * US
    assert r["prefill_gpu_ns_per_token"] == 20 * US


@pytest.mark.slow
def test_cpu_record_with_trace_steps_then_analyze(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a real CPU recording whose trace holds steps 0..2 of 6
    out = tmp_path / "r"
    assert main(["record", "-q", "--warmup", "0", "--output-tokens", "6", "--trace-steps", "0:3",
                 "--out", str(out)]) == 0
    run = RunDir.open(out)
    recorder_steps = run.read_df("steps")
    assert len(recorder_steps) == 6
    prof = json.loads((out / "run.json").read_text())["timings"]["profiled"]["requests"][0]
    for _ in range(2):  # WHEN analysed twice (the second run must still see the recorder's tables)
        assert main(["analyze", str(out)]) == 0
        st = run.read_df("steps")
        assert len(st) == 6 and list(st.sort_values("step_id")["captured"]) == [True] * 3 + [False] * 3
        req = run.read_df("requests").iloc[0]
        assert req["source"] == "tracekit_host"
        assert (req["ttft_ns"], req["e2e_ns"], req["output_tokens"]) == (prof["ttft_ns"], prof["e2e_ns"], 6)
        assert req["tpot_ns"] == pytest.approx(prof["tpot_ns"])
    assert run.has_table("recorded_steps") and len(run.read_df("recorded_steps")) == 6
    assert "3 with kernel capture" in capsys.readouterr().out




def test_analyze_keeps_the_recorded_counters_on_the_trace_clock(tmp_path: Path) -> None:
    # GIVEN the H200 smoke run as `tracekit record` wrote it: steps, requests and its NVML/GPM
    # samples on Kineto's raw ts clock, and a trace whose events ingest puts on ts + baseTimeNanoseconds
    import shutil

    run_dir = tmp_path / "smoke"
    shutil.copytree(FIXTURES / "record_gpu_smoke", run_dir)
    before = pd.read_parquet(run_dir / "tables" / "counters.parquet")
    base = json.loads(run_dir.joinpath("run.json").read_text())["clock"]["offset_ns"]
    # WHEN it is analysed (twice: the second run must not shift or duplicate anything)
    assert main(["analyze", str(run_dir)]) == 0
    assert main(["analyze", str(run_dir)]) == 0
    # THEN every recorded sample is still there, beside the trace's own counter events
    after = pd.read_parquet(run_dir / "tables" / "counters.parquet")
    src = after["source"].astype(str)
    mine = after[src != "kineto"].sort_values(["ts_ns", "metric"]).reset_index(drop=True)
    assert len(mine) == len(before) > 100  # 2,344 samples in the committed smoke run
    # tracekit's own counter tracks in the merged trace are these same samples: not added twice
    from tracekit.trace.tracks import TRACEKIT_PID

    assert not (after["device"] >= TRACEKIT_PID).any()
    assert set(mine["unit"].astype(str)) == set(before["unit"].astype(str))
    clock = json.loads(run_dir.joinpath("run.json").read_text())["clock"]
    shift = clock["base_ns"]
    assert clock["offset_ns"] == base + shift and shift > 10**18
    old = before.sort_values(["ts_ns", "metric"]).reset_index(drop=True)
    assert (mine["ts_ns"].to_numpy() == old["ts_ns"].to_numpy() + shift).all()
    # and counters, steps (captured or not), requests and kernels share one clock: they overlap
    steps = pd.read_parquet(run_dir / "tables" / "steps.parquet")
    req = pd.read_parquet(run_dir / "tables" / "requests.parquet")
    gpu = pd.read_parquet(run_dir / "tables" / "gpu_activity.parquet")
    lo, hi = int(steps["cpu_start_ns"].min()), int(steps["cpu_end_ns"].max())
    assert int(mine["ts_ns"].min()) < hi and int(mine["ts_ns"].max()) > lo
    assert ((mine["ts_ns"] >= lo) & (mine["ts_ns"] < hi)).sum() > 100
    assert hi - lo < 10 * 10**9  # the run took seconds, not the 1.79e18 ns between the two clocks
    assert req["start_ns"].min() <= lo and req["start_ns"].max() < hi
    cap = steps[steps["captured"]]
    assert len(cap) and gpu["ts_ns"].min() >= cap["cpu_start_ns"].min() - 10**9
    ph = pd.read_parquet(run_dir / "tables" / "phases.parquet")
    # the phases see the recorded samples: energy and GPM bandwidth of the captured steps
    run_rows = ph[ph["request_id"].isna() & ph["phase"].isin(["prefill", "decode"])]
    assert (run_rows["energy_j"] > 0).all() and run_rows["gpm_dram_bw_util_pct"].notna().all()


def test_analyze_on_a_multirank_directory_analyses_every_rank(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a two-rank run directory (top-level run.json, ranks/<k>/ with a trace each)
    import shutil

    top = RunDir.create(tmp_path / "tp", tp={"world_size": 2})
    for k in (0, 1):
        rd = RunDir.create(tmp_path / "tp" / "ranks" / str(k))
        shutil.copyfile(FIXTURES / "cpu" / "two_requests.json.gz", rd.trace_path)
    # WHEN `tracekit analyze` is pointed at the top directory
    assert main(["analyze", str(top.path)]) == 0
    # THEN each rank was analysed as a run and the cross-rank tables exist at the top
    for k in (0, 1):
        steps = RunDir.open(tmp_path / "tp" / "ranks" / str(k)).read_df("steps")
        assert len(steps) > 0
    merged = top.read_df("steps")
    assert sorted(merged["rank"].unique()) == [0, 1]
    assert top.has_table("rank_skew") and top.has_table("comm_phases")
    assert not (top.path / "tables" / "kernel_bound.parquet").exists()  # not analysed as a single run
    capsys.readouterr()
