"""tracekit/trace/chrome.py: merging tracekit's tracks into a Kineto trace, clock syncs, trimming."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from helpers import need_module

from tracekit.errors import TraceFormatError
from tracekit.trace import chrome as chrome_trace

_HEADER = '{\n  "schemaVersion": 1,\n  "deviceProperties": [],\n  "baseTimeNanoseconds": 1000000000,\n  "traceEvents": [\n'


def _kineto_text(events: list[dict]) -> str:
    # Kineto pretty-prints one key per line; the finder must cope with that layout.
    body = ",\n".join(json.dumps(e, indent=2) for e in events)
    return _HEADER + body + '\n],\n  "traceName": "x"\n}\n'


def _annot(name: str, ts: float, dur: float = 1.0, cat: str = "user_annotation") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": 7, "ts": ts, "dur": dur, "args": {}}


def _track_events() -> list[dict]:
    """tracekit's record-time tracks, built by tracekit.trace.tracks from tables (as the recorder does)."""
    from tracekit.model import schema
    from tracekit.trace.recorded import record_track_events

    steps = schema.from_columns(
        "steps",
        {
            "step_id": [0],
            "request_id": [0],
            "kind": ["prefill"],
            "cpu_start_ns": [9_500],
            "cpu_end_ns": [19_000],
        },
    )
    reqs = schema.from_columns(
        "requests",
        {"request_id": [0], "name": ["r0"], "start_ns": [9_000], "end_ns": [20_000], "ttft_ns": [10_500]},
    )
    counters = schema.from_columns(
        "counters", {"ts_ns": [11_000], "device": [0], "metric": ["gpu_util"], "value": [42.0], "unit": ["%"]}
    )
    return record_track_events(steps, reqs, counters)


def test_merge_splices_tracekit_events_and_keeps_kineto_header(tmp_path: Path) -> None:
    raw = tmp_path / "raw.json"
    raw.write_text(_kineto_text([_annot("aten::mm", 10.0), _annot("aten::add", 12.0)]))
    out = chrome_trace.merge(raw, tmp_path / "trace.json.gz", _track_events())
    with gzip.open(out, "rt") as fh:
        data = json.load(fh)
    assert data["baseTimeNanoseconds"] == 1000000000 and data["traceName"] == "x"
    names = [e["name"] for e in data["traceEvents"]]
    assert "aten::mm" in names and "aten::add" in names
    counter = next(e for e in data["traceEvents"] if e["ph"] == "C")
    assert counter["ts"] == 11.0 and counter["args"] == {"value": 42.0} and "gpu_util" in counter["name"]
    step = next(e for e in data["traceEvents"] if e.get("cat") == "tracekit.step")
    assert (step["name"], step["ts"], step["dur"]) == ("prefill", 9.5, 9.5)
    req = [e for e in data["traceEvents"] if e.get("cat") == "tracekit.request"]
    assert sorted((e["name"], e["ts"], e["dur"]) for e in req) == [("r0", 9.0, 11.0), ("ttft", 9.0, 10.5)]
    # nothing is classified at record time: no bound track
    assert not any(e.get("cat") == "tracekit.bound" for e in data["traceEvents"])


def test_merge_into_an_empty_or_missing_trace_is_valid_json(tmp_path: Path) -> None:
    raw = tmp_path / "raw.json"
    raw.write_text(_kineto_text([]))
    ev = _track_events()
    data = chrome_trace.load(chrome_trace.merge(raw, tmp_path / "a.json.gz", ev))
    assert sum(e.get("cat") == "tracekit.step" for e in data["traceEvents"]) == 1
    data = chrome_trace.load(chrome_trace.merge(None, tmp_path / "b.json.gz", ev))
    assert sum(e.get("cat") == "tracekit.step" for e in data["traceEvents"]) == 1


def test_merge_rejects_a_file_without_trace_events(tmp_path: Path) -> None:
    raw = tmp_path / "raw.json"
    raw.write_text('{"foo": 1}')
    with pytest.raises(TraceFormatError):
        chrome_trace.merge(raw, tmp_path / "t.json.gz", [])
    assert not (tmp_path / "t.json.gz").exists()  # atomic: nothing half-written


@pytest.mark.parametrize("chunk", [97, 251, 4099])
def test_annotations_are_found_across_chunk_boundaries(tmp_path: Path, monkeypatch, chunk: int) -> None:
    filler = [_annot(f"aten::op{i}", 1.0 + i) for i in range(300)]
    marks = [
        _annot("tracekit.clock_sync host_ns=5000", 100.25, 0.5),
        _annot(
            "tracekit.clock_sync host_ns=5000", 100.5, 0.5, cat="gpu_user_annotation"
        ),  # GPU mirror: ignored
        _annot("tracekit.step id=3 request=0 kind=decode batch=1 q_len=1 kv_len=9", 200.0, 3.5),
    ]
    raw = tmp_path / "raw.json.gz"
    with gzip.open(raw, "wt") as fh:
        fh.write(_kineto_text(filler[:150] + marks[:2] + filler[150:] + marks[2:]))
    monkeypatch.setattr(chrome_trace, "_CHUNK", chunk)  # force events to straddle chunks
    found = chrome_trace.find_annotations(raw)
    assert [(a.name.split()[0], a.ts_ns, a.dur_ns) for a in found] == [
        ("tracekit.clock_sync", 100_250, 500),
        ("tracekit.step", 200_000, 3_500),
    ]
    syncs = chrome_trace.find_clock_syncs(raw)
    assert syncs == [chrome_trace.ClockSync(trace_ns=100_250, host_ns=5000)]


def test_clock_offset_takes_the_minimum_excess() -> None:
    s = [
        chrome_trace.ClockSync(1_015_000, 0),
        chrome_trace.ClockSync(2_000_010, 1_000_000),
        chrome_trace.ClockSync(3_000_000, 2_000_000),
    ]
    assert chrome_trace.clock_offset(s) == 1_000_000
    assert chrome_trace.clock_offset([]) is None


def _gpu_like_trace() -> dict:
    """Two steps with a kernel each; the second step's kernel runs after the step ends on the host."""
    ev: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
        _annot("tracekit.request id=0 name=r batch=1 input_tokens=4 output_tokens=2", 0.0, 100.0),
    ]
    for sid, (t0, t1) in enumerate(((10.0, 40.0), (50.0, 80.0))):
        kind, q = ("prefill", 4) if sid == 0 else ("decode", 1)
        ev.append(
            _annot(
                f"tracekit.step id={sid} request=0 kind={kind} batch=1 q_len={q} kv_len={4 + sid}",
                t0,
                t1 - t0,
            )
        )
        ev.append(_annot("aten::mm", t0 + 1, 5.0, cat="cpu_op"))
        corr = 100 + sid
        launch = {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 7,
            "tid": 7,
            "ts": t0 + 2,
            "dur": 1.0,
            "args": {"correlation": corr},
        }
        kernel = {
            "ph": "X",
            "cat": "kernel",
            "name": f"gemm{sid}",
            "pid": 0,
            "tid": 7,
            "ts": t1 + 5,
            "dur": 3.0,
            "args": {"correlation": corr},
        }
        ev += [launch, kernel]
        ev.append({"ph": "s", "id": corr, "cat": "ac2g", "name": "ac2g", "pid": 7, "tid": 7, "ts": t0 + 2})
        ev.append(
            {
                "ph": "f",
                "id": corr,
                "cat": "ac2g",
                "name": "ac2g",
                "pid": 0,
                "tid": 7,
                "ts": t1 + 5,
                "bp": "e",
            }
        )
    ev.append({"ph": "C", "name": "gpu_util", "pid": 1, "tid": 0, "ts": 60.0, "args": {"gpu_util": 1}})
    ev.append({"ph": "C", "name": "gpu_util", "pid": 1, "tid": 0, "ts": 5.0, "args": {"gpu_util": 1}})
    return {"schemaVersion": 1, "traceEvents": ev}


def test_trim_keeps_a_consistent_window() -> None:
    out = chrome_trace.trim(_gpu_like_trace(), 1, 1)
    ev = out["traceEvents"]
    names = [e["name"] for e in ev]
    assert "gemm1" in names and "gemm0" not in names  # kernel kept with its launch, even after the step
    assert names.count("cudaLaunchKernel") == 1
    assert any(n.startswith("tracekit.request") for n in names)  # enclosing request kept
    assert not any(n.startswith("tracekit.step id=0") for n in names)
    flows = [e for e in ev if e["ph"] in ("s", "f")]
    assert sorted(e["ph"] for e in flows) == ["f", "s"] and {e["id"] for e in flows} == {101}
    assert [e["ts"] for e in ev if e["ph"] == "C"] == [60.0]
    assert out["tracekitTrim"] == {"first_step": 1, "last_step": 1}
    # Every kept kernel has its runtime launch: the invariant the ingest relies on.
    kept_corr = {e["args"]["correlation"] for e in ev if e.get("cat") == "cuda_runtime"}
    assert all(e["args"]["correlation"] in kept_corr for e in ev if e.get("cat") == "kernel")


def test_trim_of_a_missing_window_is_an_error() -> None:
    with pytest.raises(TraceFormatError, match=r"no tracekit\.step"):
        chrome_trace.trim(_gpu_like_trace(), 5, 9)


def test_trim_a_trace_recorded_on_this_machine(tmp_path: Path) -> None:
    torch = need_module("torch")
    need_module("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM

    import tracekit

    cfg = LlamaConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(3, 256, (1, 8))
    with tracekit.record("trim", out=tmp_path / "r", nvml=False) as run:
        model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=6,
            min_new_tokens=6,
            do_sample=False,
            pad_token_id=0,
        )
    src = run.path / "trace.json.gz"
    dst = chrome_trace.trim_file(src, tmp_path / "fixture.json.gz", 2, 3)
    full, small = chrome_trace.load(src), chrome_trace.load(dst)
    assert dst.stat().st_size < src.stat().st_size
    steps = {
        e["name"].split()[1]
        for e in small["traceEvents"]
        if str(e.get("name", "")).startswith("tracekit.step") and e.get("cat") == "user_annotation"
    }
    assert steps == {"id=2", "id=3"}
    lo = min(e["ts"] for e in small["traceEvents"] if str(e.get("name", "")).startswith("tracekit.step id=2"))
    ops = [e for e in small["traceEvents"] if e.get("cat") == "cpu_op"]
    assert ops and all(e["ts"] >= lo for e in ops)
    full_ops = [e for e in full["traceEvents"] if e.get("cat") == "cpu_op"]
    assert len(ops) < len(full_ops)
