"""End to end on real CPU traces of plain model.generate (tests/fixtures/cpu, recorded by
record_cpu_traces.py there): no kernels on CPU, but the cpu_ops carry the embedding shapes,
so step and request detection run on what torch.profiler really writes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tracekit.analysis.inputs import AnalysisInput
from tracekit.analysis.pipeline import run_passes
from tracekit.model import schema


def load_cpu_trace(path: Path) -> dict[str, pa.Table]:
    """A minimal reader for these CPU fixtures (cpu_ops + user annotations), independent of ingest."""
    with gzip.open(path) as fh:
        events = json.load(fh)["traceEvents"]
    ops: dict[str, list[Any]] = {k: [] for k in ("op_id", "ts_ns", "dur_ns", "name", "cat", "tid", "input_dims")}
    ann: dict[str, list[Any]] = {k: [] for k in ("ts_ns", "dur_ns", "name", "cat", "tid")}
    for i, e in enumerate(events):
        if e.get("ph") != "X":
            continue
        ts, dur = round(float(e["ts"]) * 1000), round(float(e.get("dur", 0)) * 1000)
        if e.get("cat") == "cpu_op":
            dims = e.get("args", {}).get("Input Dims")
            for k, v in zip(ops, (i, ts, dur, e["name"], "cpu_op", e.get("tid"),
                                  json.dumps(dims) if dims is not None else None), strict=True):
                ops[k].append(v)
        elif e.get("cat") == "user_annotation":
            for k, v in zip(ann, (ts, dur, e["name"], "user_annotation", e.get("tid")), strict=True):
                ann[k].append(v)
    return {"cpu_ops": schema.from_columns("cpu_ops", ops), "annotations": schema.from_columns("annotations", ann)}


def analyse(path: Path) -> dict[str, Any]:
    return run_passes(AnalysisInput.of(load_cpu_trace(path)))


@pytest.fixture
def cpu_dir(fixtures_dir: Path) -> Path:
    return fixtures_dir / "cpu"


def test_batch2_generate_steps_are_the_forward_passes(cpu_dir: Path) -> None:
    # GIVEN generate(batch 2, 6 prompt tokens, 4 new tokens): 1 prefill + 3 decode passes
    out = analyse(cpu_dir / "batch2.json.gz")
    st = out["steps"]
    assert list(st["kind"]) == ["prefill", "decode", "decode", "decode"]
    assert list(st["batch"]) == [2, 2, 2, 2]
    assert list(st["q_len"]) == [6, 1, 1, 1]
    assert list(st["kv_len"]) == [6, 7, 8, 9]  # from the attention op's key length, growing
    assert set(st["source"]) == {"model_ops"}
    req = out["requests"]
    assert len(req) == 1
    r = req.iloc[0]
    assert (r["input_tokens"], r["output_tokens"], r["batch"]) == (6, 4, 2)
    assert r["source"] == "prefill_boundary"
    assert 0 < r["ttft_ns"] < r["e2e_ns"]
    assert r["tpot_ns"] == pytest.approx((r["e2e_ns"] - r["ttft_ns"]) / 3)
    # CPU trace: GPU idleness is unknown, not zero
    assert out["phases"]["idle_ns"].isna().all()


def test_two_requests_under_caller_named_record_functions(cpu_dir: Path) -> None:
    out = analyse(cpu_dir / "two_requests.json.gz")
    req = out["requests"]
    assert list(req["name"]) == ["chat-a", "chat-b"]
    assert list(req["source"]) == ["user_annotation", "user_annotation"]
    assert list(req["batch"]) == [1, 2]
    assert list(req["input_tokens"]) == [6, 4]
    assert list(req["output_tokens"]) == [4, 4]
    st = out["steps"]
    assert list(st.groupby("request_id").size()) == [4, 4]
    # steps never cross the request window: the last decode of chat-a ends inside chat-a
    a = req.iloc[0]
    assert st[st["request_id"] == 0]["cpu_end_ns"].max() <= a["end_ns"]
    ph = out["phases"]
    assert set(ph[ph["request_id"] == 1]["phase"]) == {"prefill", "decode"}
    assert int(ph[(ph["request_id"] == 1) & (ph["phase"] == "decode")]["steps"].iloc[0]) == 3


def test_profiler_step_windows_are_requests(cpu_dir: Path) -> None:
    out = analyse(cpu_dir / "profiler_steps.json.gz")
    req = out["requests"]
    assert list(req["source"]) == ["profiler_step"] * 3
    assert list(req["name"]) == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
    assert list(req["input_tokens"]) == [3, 4, 5]
    st = out["steps"]
    assert len(st) == 12
    assert list(st[st["kind"] == "prefill"]["q_len"]) == [3, 4, 5]
    assert out["warnings"] == []
