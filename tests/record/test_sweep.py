"""The quick sweep end to end on CPU (the CI variant): real model, real pipeline, report files."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers import need_module

from tracekit.analysis.sweep import SUMMARY_COLUMNS
from tracekit.cli import main
from tracekit.model.sweepspec import quick_points

need_module("torch")
need_module("transformers")

# Every test here records real runs (a sweep, several ranks): minutes on 2 cores.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quick_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "quick"
    assert main(["sweep", "--quick", "--out", str(out)]) == 0
    return out


def test_quick_sweep_summary(quick_sweep):
    s = pd.read_parquet(quick_sweep / "summary.parquet")
    assert list(s.columns) == list(SUMMARY_COLUMNS)
    assert list(s["point_id"]) == [p.id for p in quick_points()]
    assert (s["status"] == "complete").all(), s[["point_id", "reason"]]
    for col in (
        "ttft_ms",
        "tpot_ms",
        "e2e_ms",
        "prefill_share",
        "prefill_tok_s",
        "decode_tok_s",
        "cost_vs_chat",
    ):
        assert (s[col] > 0).all(), col
    assert ((s["prefill_share"] > 0) & (s["prefill_share"] < 1)).all()
    # two timed repetitions per point (the quick preset): medians between min and max
    assert (s["repeats"] == 2).all()
    for col in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert ((s[f"{col}_min"] <= s[col]) & (s[col] <= s[f"{col}_max"])).all(), col
        assert (s[f"{col}_min"] < s[f"{col}_max"]).all(), col  # two distinct measurements, not one copied
    # e2e covers every token, TTFT is a part of it
    assert (s["e2e_ms"] > s["ttft_ms"]).all()
    # KV bytes per token: the cache's tensors equal the formula (fp32 tiny: 2*4*2*32*4)
    assert (s["kv_formula_bytes_per_token"] == 2 * 4 * 2 * 32 * 4).all()
    req = s[s["agent_mode"].isna()]
    assert (req["kv_cache_bytes_per_token"] == req["kv_formula_bytes_per_token"]).all()
    # batch 4 generates 4x the tokens of batch 1
    b = s[s["group"] == "batch"].set_index("batch")
    assert b.loc[4, "generated_tokens"] == 4 * b.loc[1, "generated_tokens"]
    # the agent loop: kv-reuse prefilled fewer tokens for the same sent history
    ag = s[s["group"] == "agent"].set_index("agent_mode")
    assert ag.loc["kv-reuse", "sent_input_tokens"] == ag.loc["resend", "sent_input_tokens"]
    assert ag.loc["kv-reuse", "prefilled_tokens"] < ag.loc["resend", "prefilled_tokens"]
    # every point is a complete run directory with host tables and a trace of its window;
    # its requests table holds every repetition (agent: every call of every loop)
    assert sorted(d.name for d in (quick_sweep / "points").iterdir()) == sorted(s["point_id"])
    for rd in s["run_dir"]:
        run = quick_sweep / rd
        m = json.loads((run / "run.json").read_text())
        assert m["status"] == "complete" and (run / "trace.json.gz").stat().st_size > 1000
        n_req = len(pd.read_parquet(run / "tables" / "requests.parquet"))
        assert n_req == 2 * m["repeats"]["calls_per_repeat"] and m["repeats"]["n"] == 2
        assert m["warmup"]["runs"] == 1 and m["warmup"]["what"] == "the whole point"
        assert m["environment"]["torch"]  # record's environment: the bound pass looks the GPU up there
        assert (run / "tables" / "phases.parquet").is_file()


def test_point_tables_are_on_one_clock(quick_sweep):
    # The host tables (timed repetitions, perf_counter_ns) and the trace's tables
    # (capture window, Kineto ts + baseTimeNanoseconds) share one clock: ingest_into's.
    s = pd.read_parquet(quick_sweep / "summary.parquet")
    for rd in s["run_dir"]:
        run = quick_sweep / rd
        m = json.loads((run / "run.json").read_text())
        clock = m["clock"]
        assert clock["clock_syncs"] == 4 and clock["base_ns"] > 0, clock
        host = pd.read_parquet(run / "tables" / "steps.parquet")
        trace = pd.read_parquet(run / "tables" / "trace_steps.parquet")
        ops = pd.read_parquet(run / "tables" / "cpu_ops.parquet")
        assert len(host) and len(trace) and (trace["source"] == "tracekit").all()
        # the timed repetitions ran before the capture, seconds (not decades) earlier
        gap_s = (trace["cpu_start_ns"].min() - host["cpu_end_ns"].max()) / 1e9
        assert 0 < gap_s < 3600, (rd, gap_s)
        # the trace's steps sit among its own ops, on the epoch clock of run.json's creation
        assert ops["ts_ns"].min() <= trace["cpu_start_ns"].min() <= ops["ts_ns"].max()
        created = pd.Timestamp(m["created_at"]).timestamp()
        assert abs(host["cpu_start_ns"].min() / 1e9 - created) < 600, rd
        req = pd.read_parquet(run / "tables" / "requests.parquet")
        assert (req["start_ns"] <= req["end_ns"]).all() and req["end_ns"].max() < trace["cpu_start_ns"].min()
        # counters (none from NVML on CPU) would be on the same clock: ingest_into keeps and shifts them
        counters = pd.read_parquet(run / "tables" / "counters.parquet")
        assert counters.empty or abs(counters["ts_ns"].min() / 1e9 - created) < 600


def test_quick_sweep_report_and_plots(quick_sweep):
    md = (quick_sweep / "report.md").read_text()
    html = (quick_sweep / "report.html").read_text()
    for plot in ("prefill_share", "ttft_vs_prompt", "prefill_tps_vs_prompt", "tpot_vs_batch",
                 "read_write_asymmetry", "kv_bytes_per_token", "agent_loop", "cost_vs_chat"):  # fmt: skip
        svg = (quick_sweep / "plots" / f"{plot}.svg").read_text()
        assert svg.startswith("<svg ") and f'data-chart="{plot}"' in svg and '<g class="series"' in svg, plot
        assert f"plots/{plot}.svg" in md
    assert html.count("data:image/svg+xml;base64,") >= 8
    assert "seed" in md.lower() and "kv-reuse" in md
    seed = pd.read_parquet(quick_sweep / "seed_comparison.parquet")
    assert seed["measured"].notna().sum() >= 5


def test_resume_skips_complete_points(quick_sweep):
    assert main(["sweep", "--quick", "--out", str(quick_sweep), "--resume"]) == 0
    meta = json.loads((quick_sweep / "sweep.json").read_text())
    assert {o["status"] for o in meta["outcomes"].values()} == {"skipped"}
    assert len(pd.read_parquet(quick_sweep / "summary.parquet")) == len(quick_points())


def test_existing_out_without_resume_is_refused(quick_sweep, capsys):
    assert main(["sweep", "--quick", "--out", str(quick_sweep)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_preset_position_limit_is_raised_and_recorded(tmp_path):
    # GIVEN the tiny preset (random weights, 4,096 positions) and a 4,100-token point
    cfg = tmp_path / "s.toml"
    cfg.write_text(
        'model = "tiny"\ndevice = "cpu"\nshapes = ["4100/2", "smoke"]\ntrace_steps = 2\nrepeats = 1\n'
    )
    out = tmp_path / "out"
    # WHEN the sweep runs
    assert main(["sweep", "--config", str(cfg), "--out", str(out)]) == 0
    # THEN the point runs (the preset's limit is raised to fit), and run.json and the report say so
    s = pd.read_parquet(out / "summary.parquet").set_index("shape")
    assert (s["status"] == "complete").all(), s["reason"]
    run = json.loads((out / "points" / s.loc["4100/2", "point_id"] / "run.json").read_text())
    o = run["model"]["max_position_embeddings_override"]
    assert o["preset_value"] == 4096 and o["used"] == 4102
    assert run["model"]["config"]["max_position_embeddings"] == 4102
    assert "raised from 4096 to 4102" in (out / "report.md").read_text()


def test_real_model_over_its_limit_fails_the_point_and_sweep_goes_on(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    # GIVEN a local model directory (a real model as far as tracekit knows) with 64 positions
    config = AutoConfig.for_model("llama", vocab_size=256, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                  max_position_embeddings=64)  # fmt: skip
    model_dir = tmp_path / "model"
    AutoModelForCausalLM.from_config(config).save_pretrained(model_dir)
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'model = "{model_dir}"\ndevice = "cpu"\nshapes = ["100/2", "smoke"]\ntrace_steps = 2\n')
    out = tmp_path / "out"
    # WHEN the sweep runs
    assert main(["sweep", "--config", str(cfg), "--out", str(out)]) == 0
    # THEN the point beyond the limit failed with the one-line reason, the other ran
    s = pd.read_parquet(out / "summary.parquet").set_index("shape")
    assert s.loc["100/2", "status"] == "failed"
    assert (
        s.loc["100/2", "reason"] == "ValueError: 102 tokens exceed the model's max_position_embeddings (64)"
    )
    assert s.loc["smoke", "status"] == "complete"
    failed_run = json.loads((out / "points" / s.loc["100/2", "point_id"] / "run.json").read_text())
    assert failed_run["status"] == "incomplete" and failed_run["failed"] is True
    assert "max_position_embeddings_override" not in failed_run["model"]
    assert "failed" in (out / "report.md").read_text().lower()


def test_usage_errors():
    assert main(["sweep"]) == 2
    assert main(["sweep", "--quick", "--preset", "seed"]) == 2
    assert main(["sweep", "--preset", "nope"]) == 2


def test_every_sweep_table_is_declared(quick_sweep) -> None:
    from helpers import undeclared_tables

    # the sweep's own files and every point's run tables (steps, requests, trace_steps, ...)
    problems, seen = undeclared_tables(quick_sweep)
    assert not problems, "\n".join(problems)
    assert {"summary", "agent_steps", "seed_comparison", "trace_steps", "trace_requests", "phases"} <= seen



def _one_point(tmp_path):
    cfg = tmp_path / "one.toml"
    cfg.write_text('model = "tiny"\ndevice = "cpu"\nshapes = ["smoke"]\ntrace_steps = 2\nrepeats = 1\n')
    return cfg


def test_force_keeps_the_old_sweep_until_the_new_one_is_complete(tmp_path, monkeypatch):
    from tracekit.collectors import sweep_runner

    cfg, out = _one_point(tmp_path), tmp_path / "out"
    assert main(["sweep", "--config", str(cfg), "--out", str(out)]) == 0
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    old_summary = (out / "summary.parquet").read_bytes()
    real = sweep_runner.run_sweep

    def interrupted(spec, out_dir, **kw):  # the new sweep gets as far as its first point, then Ctrl-C
        real(spec, out_dir, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_runner, "run_sweep", interrupted)
    assert main(["sweep", "--config", str(cfg), "--out", str(out), "--force"]) == 130  # interrupted
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert (out / "summary.parquet").read_bytes() == old_summary
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tracekit-")] == []

    monkeypatch.setattr(sweep_runner, "run_sweep", real)
    (out / "points" / "stale-marker").write_text("from the old sweep")
    assert main(["sweep", "--config", str(cfg), "--out", str(out), "--force"]) == 0
    assert not (out / "points" / "stale-marker").exists()
    s = pd.read_parquet(out / "summary.parquet")
    assert (s["status"] == "complete").all() and list(s["run_dir"]) == [f"points/{s['point_id'][0]}"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tracekit-")] == []
