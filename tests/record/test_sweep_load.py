"""`tracekit sweep --rates`: the load dimension, its latency-throughput summary, plot and cost per request."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from helpers import need_module

from tracekit.analysis import sweep as sweep_analysis
from tracekit.errors import UsageError
from tracekit.model import pricing, sweepspec


def test_load_points_from_toml_have_stable_ids_and_the_mix_longest_shape() -> None:
    spec = sweepspec.from_mapping({"load": {"rates": [0.5, 2, 0], "shape": "chat,rag", "requests": 8},
                                   "modes": ["eager", "compiled"]})
    ids = [p.id for p in spec.points]
    assert ids[:3] == ["load-chat+rag-n8-r0.5-eager", "load-chat+rag-n8-r2-eager", "load-chat+rag-n8-rall-eager"]
    assert len(ids) == 6 and {p.group for p in spec.points} == {"load"}
    p = spec.points[0]
    assert (p.input_tokens, p.output_tokens, p.requests, p.rate) == (1205, 128, 8, 0.5)
    assert spec.points[2].rate is None
    agentic = sweepspec.load_points([1], ["eager"], shape="agentic,16/4")[0]
    assert (agentic.input_tokens, agentic.output_tokens) == (640, 64)
    assert sweepspec.estimate_seconds(spec, cuda=True) > 0
    with pytest.raises(UsageError):
        sweepspec.from_mapping({"load": {"rates": [-1]}})
    with pytest.raises(UsageError):
        sweepspec.from_mapping({"load": {"rate": [1]}})


def test_load_summary_takes_percentiles_without_the_profiler_and_cost_from_the_requests() -> None:
    ms = 1_000_000
    manifest = {"timings": {
        "unprofiled": {"load": {"output_tok_s": 950.0, "ttft_ns_p50": 40 * ms, "ttft_ns_p99": 90 * ms,
                                "tpot_ns_p50": 21 * ms, "tpot_ns_p99": 30 * ms, "e2e_ns_p50": 700 * ms,
                                "itl_ns_p99": 33 * ms, "queue_ns_p99": 12 * ms}},
        "profiled": {"load": {"output_tok_s": 1.0}},
    }}
    point = {"id": "load-chat-n2-r4-eager", "group": "load", "shape": "chat", "mode": "eager", "batch": 1,
             "input_tokens": 128, "output_tokens": 128, "requests": 2, "rate": 4.0}
    req = pd.DataFrame({"request_id": [0, 1], "step_time_ns": [300 * ms, 500 * ms], "gpu_time_ns": [30 * ms, 50 * ms],
                        "energy_j": [12.0, 20.0]})
    row = sweep_analysis.summarize_point(sweep_analysis.PointData(point, "complete", manifest, req), 0.15, 0.6,
                                         gpu_per_hour=3.6)
    assert row["throughput_tok_s"] == 950.0 and row["rate_rps"] == 4.0 and row["requests"] == 2
    assert (row["ttft_p50_ms"], row["ttft_p99_ms"], row["tpot_p99_ms"], row["queue_p99_ms"]) == (40, 90, 30, 12)
    assert row["step_ms_per_request"] == 400 and row["gpu_ms_per_request"] == 40 and row["j_per_request"] == 16
    assert row["usd_per_request"] == pytest.approx(0.4 / 3600 * 3.6)  # 400 ms of a $3.60/h GPU
    assert set(sweep_analysis.summarize([sweep_analysis.PointData(point, "complete", manifest, req)],
                                        input_price=0.1, output_price=0.1).columns) == set(
        sweep_analysis.SUMMARY_COLUMNS)


def test_gpu_price_overrides() -> None:
    p = pricing.from_mapping({"gpu_per_hour": 2.5})
    assert p.gpu_per_hour == 2.5 and p.gpu_cost(3.6e12) == 2.5 and p.input_per_mtok == pricing.DEFAULT.input_per_mtok
    with pytest.raises(UsageError):
        pricing.from_mapping({"gpu_per_hour": -1})


@pytest.mark.slow
def test_load_sweep_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    need_module("torch")
    need_module("transformers")
    from tracekit.cli import main

    out = tmp_path / "sw"
    rc = main(["sweep", "--rates", "50,all", "--load-shape", "8/3,16/4", "--load-requests", "4", "--model", "tiny",
               "--device", "cpu", "--warmup-runs", "1", "--gpu-price", "3.6", "--out", str(out)])
    assert rc == 0
    s = pd.read_parquet(out / "summary.parquet")
    assert s["point_id"].tolist() == ["load-8x3+16x4-n4-r50-eager", "load-8x3+16x4-n4-rall-eager"]
    assert (s["status"] == "complete").all(), s["reason"].tolist()
    assert (s["throughput_tok_s"] > 0).all() and (s["ttft_p50_ms"] <= s["ttft_p99_ms"]).all()
    assert s["step_ms_per_request"].notna().all()
    assert s["usd_per_request"].tolist() == pytest.approx((s["step_ms_per_request"] / 1e3 / 3600 * 3.6).tolist())
    assert (out / "plots" / "latency_vs_throughput.svg").is_file()
    md = (out / "report.md").read_text()
    assert "## Load: latency against throughput" in md and "load-8x3+16x4-n4-rall-eager" in md
    # Each point is a served, analysed run: its requests' shares add up to its steps.
    run = out / "points" / "load-8x3+16x4-n4-rall-eager" / "tables"
    sr, steps = pd.read_parquet(run / "step_requests.parquet"), pd.read_parquet(run / "steps.parquet")
    assert int(sr["step_time_ns"].sum()) == int((steps["cpu_end_ns"] - steps["cpu_start_ns"]).sum())
