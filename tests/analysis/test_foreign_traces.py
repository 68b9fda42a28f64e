"""Traces written the way users and engines write them (plain torch.profiler, no tracekit recorder), recorded
on an H100 by scripts/gpu/foreign_traces.py and trimmed by tests/fixtures/gpu/foreign/trim_foreign.py; and the
engine corpus (../shared/corpus/engines: SGLang, vLLM, xDiT on MI300X), skipped where absent.

The truth of each case is what the script did, worked out from the trace's own annotations
(tests/fixtures/gpu/foreign/*.truth.json) and written here by hand.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from helpers import FIXTURES, REPO

from tracekit.cli import main

FOREIGN = FIXTURES / "gpu" / "foreign"
ENGINES = next((p for p in (REPO.parent / "shared" / "corpus" / "engines",
                            REPO.parent.parent / "shared" / "corpus" / "engines") if p.is_dir()), None)


def _analyse(trace: Path, out: Path) -> dict[str, Any]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["analyze", str(trace), "--out", str(out), "-q"]) == 0
    t: dict[str, Any] = {n: pd.read_parquet(out / "tables" / f"{n}.parquet") for n in ("steps", "requests", "phases")}
    t["manifest"] = json.loads((out / "run.json").read_text())
    t["printed"] = buf.getvalue()
    t["steps"] = t["steps"].sort_values("cpu_start_ns").reset_index(drop=True)
    return t


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return {n: _analyse(FOREIGN / f"{n}.json.gz", tmp_path_factory.mktemp(n) / "run")
            for n in ("engine_format", "hand_decode", "diffusion", "train_loop")}


def test_nested_engine_annotations_are_one_step_each(runs: dict[str, dict[str, Any]]) -> None:
    """vLLM's detailed execute_… around SGLang's step[…] for each pass: prompts 40, 24, 56 in one batched
    prefill, then 4 batched decodes (KV 41, 42, 43, 44 per sequence after each)."""
    t = runs["engine_format"]
    s = t["steps"]
    assert s["kind"].tolist() == ["prefill"] + ["decode"] * 4
    assert s["batch"].tolist() == [3] * 5
    assert s["tokens"].tolist() == [120, 3, 3, 3, 3]
    assert s["q_len"].tolist() == [40, 1, 1, 1, 1]  # 120 / 3: the mean prompt chunk
    assert s["kv_len"].tolist() == [40, 41, 42, 43, 44]  # Σsk / 3: 120, 123, 126, 129, 132
    assert set(s["source"]) == {"sglang"}  # the engine's own step annotation names the step
    ctx = json.loads(s["seq_stats"][0])["context"]
    assert ctx == {"requests": 3, "sq": 120, "sk": 120, "sqsq": 40 ** 2 + 24 ** 2 + 56 ** 2, "sqsk": 5312}
    r = t["requests"]
    assert len(r) == 1 and (r["batch"][0], r["input_tokens"][0], r["output_tokens"][0]) == (3, 40, 5)
    assert t["manifest"]["analysis"]["workload"]["kind"] == "llm"


def test_hand_written_loop_requests_are_the_users_annotations(runs: dict[str, dict[str, Any]]) -> None:
    """record_function("request_i") around a prefill forward and 7 decode forwards in a Python loop."""
    t = runs["hand_decode"]
    r = t["requests"].sort_values("start_ns")
    assert r["name"].tolist() == ["request_0", "request_1"]
    assert set(r["source"]) == {"user_annotation"}
    assert r["input_tokens"].tolist() == [48, 96] and r["output_tokens"].tolist() == [8, 8]
    s = t["steps"]
    assert s["request_id"].notna().all()  # no step outside every request
    for rid in r["request_id"]:
        mine = s[s["request_id"] == rid]
        assert mine["kind"].tolist() == ["prefill"] + ["decode"] * 7
    assert "outside every request" not in t["printed"]


def test_diffusion_loop_has_denoising_steps_and_no_tokens(runs: dict[str, dict[str, Any]]) -> None:
    """A UNet denoising loop (8 DDIM steps) inside record_function("denoise_2x64x64"), no ProfilerStep window."""
    t = runs["diffusion"]
    assert t["manifest"]["analysis"]["workload"]["kind"] == "diffusion"
    s = t["steps"]
    assert s["kind"].tolist() == ["denoise"] * 8 and set(s["source"]) == {"loop"}
    r = t["requests"]
    assert r["name"].tolist() == ["denoise_2x64x64"]
    assert r["ttft_ns"].isna().all() and r["tpot_ns"].isna().all() and r["output_tokens"].isna().all()
    assert int(r["steps"][0]) == 8
    assert "workload: diffusion" in t["printed"] and "8 denoising steps" in t["printed"]
    assert "TTFT" not in t["printed"]


def test_training_loop_has_one_step_per_profiler_step(runs: dict[str, dict[str, Any]]) -> None:
    """6 training iterations under schedule(wait=1, warmup=1, active=3): ProfilerStep#2..4 recorded."""
    t = runs["train_loop"]
    w = t["manifest"]["analysis"]["workload"]
    assert w["kind"] == "iterations" and "backward" in w["rule"]
    s = t["steps"]
    assert s["kind"].tolist() == ["iteration"] * 3 and set(s["source"]) == {"profiler_step"}
    assert s["gpu_busy_ns"].gt(0).all()
    assert t["requests"].empty
    ph = t["phases"]
    run_row = ph[ph["request_id"].isna() & (ph["phase"] == "iteration")]
    assert int(run_row["steps"].iloc[0]) == 3


@pytest.mark.skipif(ENGINES is None, reason="engine corpus (../shared/corpus/engines) absent")
@pytest.mark.parametrize(("trace", "kind", "steps", "batch", "source"), [
    # execute_32_context_0(sq0…)_generation_32(sq32sk32785…) around step[DECODE bs=32]: one pass
    ("sglang_decode/sglang_Qwen3-8B_decode.json.gz", "llm", ["decode"], [32], "sglang"),
    ("vllm_decode_full/graph_execution.json.gz", "llm", ["decode"], [32], "vllm"),
    # execute_diffusion_1_256x256 holding 4 compiled transformer calls (one per denoising step)
    ("xdit_flux.1_aiter_sage/profile_trace_rank_0.json.gz", "diffusion", ["denoise"] * 4, [None] * 4, None),
])
def test_engine_corpus(tmp_path: Path, trace: str, kind: str, steps: list[str], batch: list[Any],
                       source: str | None) -> None:
    assert ENGINES is not None
    t = _analyse(ENGINES / trace, tmp_path / "run")
    assert t["manifest"]["analysis"]["workload"]["kind"] == kind
    s = t["steps"]
    assert s["kind"].tolist() == steps
    assert [None if pd.isna(b) else int(b) for b in s["batch"]] == batch
    if source:
        assert set(s["source"]) == {source}
    if kind == "diffusion":
        r = t["requests"]
        assert len(r) == 1 and int(r["batch"][0]) == 1 and r["ttft_ns"].isna().all()
