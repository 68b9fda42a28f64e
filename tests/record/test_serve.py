"""`tracekit record --serve`: Transformers' continuous batching on the CPU with the tiny preset, end to end."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from helpers import need_module

from tracekit.cli import main
from tracekit.collectors import serve as sv
from tracekit.model.stepnames import batch_kind, parse_step
from tracekit.store.rundir import STATUS_COMPLETE, RunDir
from tracekit.trace import chrome as chrome_trace

need_module("torch")
need_module("transformers")

# Prompt / output lengths: with 32 tokens per step the 70- and 40-token prompts are prefilled in chunks.
LENGTHS = [(5, 4), (40, 6), (12, 3), (70, 5), (3, 8), (18, 4)]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunDir, int]:
    d = tmp_path_factory.mktemp("serve")
    f = d / "lengths.txt"
    f.write_text("# prompt output\n" + "\n".join(f"{a} {b}" for a, b in LENGTHS) + "\n")
    rc = main(["record", "--serve", "--lengths", str(f), "--max-batch-tokens", "32", "--warmup", "1",
               "--device", "cpu", "--no-nvml", "-q", "--out", str(d / "run")])
    return RunDir.open(d / "run"), rc


@pytest.mark.slow
def test_serve_run_is_complete_with_engine_timings_under_load(served: tuple[RunDir, int]) -> None:
    run, rc = served
    assert rc == 0
    m = run.read_manifest()
    assert m["status"] == STATUS_COMPLETE, m.get("incomplete_reason")
    assert m["serve"]["requests"] == 6 and m["serve"]["max_batch_tokens"] == 32
    assert m["workload"]["kind"] == "serve" and m["workload"]["input_tokens"] == sum(a for a, _ in LENGTHS)
    for which in ("unprofiled", "profiled"):
        load = m["timings"][which]["load"]
        assert load["completed"] == 6 and load["output_tok_s"] > 0
        assert load["ttft_ns_p50"] <= load["ttft_ns_p99"] and load["tpot_ns_p50"] > 0
    kinds = m["steps_by_kind"]
    assert kinds.get("mixed", 0) >= 1 and kinds.get("decode", 0) >= 1
    assert m["max_batch"] >= 2
    # On a CPU the serve run's summary leads with the split by operator class, as every recording's does.
    for p in m["cpu_split"]:
        assert sum(p["classes"].values()) == p["time_ns"] > 0, p
    assert {"mixed", "decode"} <= {p["phase"] for p in m["cpu_split"]}
    from tracekit.report.record_summary import render

    assert render(m, run.path).splitlines()[1].startswith("  where the time went (CPU: no roofline")


@pytest.mark.slow
def test_every_step_lists_its_requests_with_exact_query_and_kv_lengths(served: tuple[RunDir, int]) -> None:
    run, _ = served
    sr = run.read_df("step_requests").sort_values(["request_id", "step_id"])
    steps = run.read_df("steps").set_index("step_id")
    for rid, (prompt, out) in enumerate(LENGTHS):
        g = sr[sr["request_id"] == rid]
        ph = g["phase"].astype(str)
        # The prompt is consumed exactly once, in chunks; the last chunk samples the first token.
        assert int(g.loc[ph.isin(["p", "f"]), "q_len"].sum()) == prompt
        assert int((ph == "f").sum()) == 1 and int((ph == "d").sum()) == out - 1
        assert (g.loc[ph == "d", "q_len"] == 1).all()
        # kv_len after each step is everything fed so far.
        assert g["kv_len"].tolist() == g["q_len"].cumsum().tolist()
    assert int((sr.groupby("request_id")["phase"].apply(lambda p: (p.astype(str) == "p").sum())).max()) >= 1
    # The steps table agrees with its requests: kind from their phases, tokens their sum.
    for sid, g in sr.groupby("step_id"):
        s = steps.loc[sid]
        assert s["kind"] == batch_kind(list(g["phase"].astype(str)))
        assert int(s["tokens"]) == int(g["q_len"].sum()) and int(s["batch"]) == len(g)
        assert int(s["q_len"]) == int(g["q_len"].max())
        assert pd.isna(s["request_id"]) if len(g) > 1 else int(s["request_id"]) == int(g["request_id"].iloc[0])


@pytest.mark.slow
def test_the_trace_holds_each_steps_annotation_with_the_same_requests(served: tuple[RunDir, int]) -> None:
    run, _ = served
    sr = run.read_df("step_requests")
    want = {sid: sorted(zip(g["request_id"], g["phase"].astype(str), g["q_len"], g["kv_len"], strict=True))
            for sid, g in sr.groupby("step_id")}
    got: dict[int, list[Any]] = {}
    for a in chrome_trace.find_annotations(run.trace_path):
        lab = parse_step(a.name)
        if lab is not None and lab.seqs:
            got[lab.step_id] = sorted((q.request_id, q.phase, q.q_len, q.kv_len) for q in lab.seqs)
    assert got == want


@pytest.mark.slow
def test_engine_timestamps_agree_with_the_trace(served: tuple[RunDir, int]) -> None:
    run, _ = served
    req = run.read_df("requests").set_index("request_id")
    assert (req["output_tokens"].tolist(), req["input_tokens"].tolist()) == \
        ([b for _, b in LENGTHS], [a for a, _ in LENGTHS])
    # The engine stamps a token in update_batch, just after the step that sampled it ends.
    d_first = req["ttft_ns"] - req["trace_ttft_ns"]
    d_last = req["e2e_ns"] - req["trace_e2e_ns"]
    assert (d_first > -1_000_000).all() and (d_first < 100_000_000).all(), d_first.tolist()
    assert (d_last > -1_000_000).all() and (d_last < 100_000_000).all(), d_last.tolist()
    assert (req["queue_ns"] >= 0).all() and (req["queue_ns"] <= req["ttft_ns"]).all()
    tpot = (req["e2e_ns"] - req["ttft_ns"]) / (req["output_tokens"] - 1)
    assert req["tpot_ns"].tolist() == pytest.approx(tpot.tolist())


@pytest.mark.slow
def test_analyze_splits_every_step_across_its_requests(served: tuple[RunDir, int]) -> None:
    run, _ = served
    assert main(["analyze", str(run.path)]) == 0
    steps = run.read_df("steps")
    sr = run.read_df("step_requests")
    req = run.read_df("requests")
    assert steps["captured"].all()
    window = (steps.set_index("step_id")["cpu_end_ns"] - steps.set_index("step_id")["cpu_start_ns"]).sort_index()
    got = sr.groupby("step_id")["step_time_ns"].sum().sort_index()
    assert got.astype("int64").tolist() == window.astype("int64").tolist()
    assert int(req["step_time_ns"].sum()) == int(window.sum())
    assert math.isclose(float(sr.groupby("step_id")["share"].sum().min()), 1.0)
    # The serve columns survive the analysis.
    assert req["queue_ns"].notna().all() and req["trace_ttft_ns"].notna().all()
    assert set(req["steps"]) == set(sr.groupby("request_id")["step_id"].nunique())


def test_arrivals_are_poisson_seeded_and_shapes_take_turns() -> None:
    a = sv.plan(["chat", "rag", "agentic"], 300, 4.0, seed=3)
    b = sv.plan(["chat", "rag", "agentic"], 300, 4.0, seed=3)
    assert a == b and a[0].arrival_s == 0.0
    gaps = [y.arrival_s - x.arrival_s for x, y in itertools.pairwise(a)]
    assert all(g > 0 for g in gaps) and 0.2 < sum(gaps) / len(gaps) < 0.3  # mean 1/rate
    assert [r.name.split("-")[0] for r in a[:4]] == ["chat", "rag", "agentic", "chat"]
    assert (a[0].input_tokens, a[0].output_tokens, a[1].input_tokens) == (128, 128, 1205)
    assert {r.input_tokens for r in a if r.name.startswith("agentic")} <= {128, 256, 384, 512, 640}
    together = sv.plan(["smoke"], 3, None, seed=0, input_tokens=7)
    assert [r.arrival_s for r in together] == [0.0] * 3 and {r.input_tokens for r in together} == {7}


def test_bad_serve_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "l.txt"
    f.write_text("10 4\nten four\n")
    assert main(["record", "--serve", "--lengths", str(f), "--device", "cpu", "--out", str(tmp_path / "r")]) == 2
    assert "l.txt:2" in capsys.readouterr().err
    assert main(["record", "--rate", "2", "--device", "cpu"]) == 2
    assert "--rate applies to --serve only" in capsys.readouterr().err
    assert main(["record", "--serve", "--batch", "2", "--device", "cpu"]) == 2
    assert "--serve does not combine with --batch" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_stack_without_the_engine_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from transformers.generation.continuous_batching import continuous_api as api

    monkeypatch.delattr(api.ContinuousBatchProcessor, "update_batch")
    rc = main(["record", "--serve", "--requests", "2", "--device", "cpu", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and "continuous batching" in err[0] and "transformers" in err[0]
    assert not (tmp_path / "r").exists()
