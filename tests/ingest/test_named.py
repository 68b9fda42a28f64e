"""tracekit.ingest.named: the events of one name prefix, found by a byte search, are the rows a full
read gives for them; record's annotations from it equal chrome.find_annotations'."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tracekit.ingest import read_raw
from tracekit.ingest.named import read_named
from tracekit.ingest.own import own_annotations
from tracekit.trace import chrome as chrome_trace

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "record_gpu_smoke" / "trace.json.gz"


def _events() -> list[dict]:
    ev: list[dict] = [{"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}}]
    for i in range(200):
        ev.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 7, "tid": 7, "ts": 1.0 + i, "dur": 0.5,
                   "args": {"Input Dims": [[2, 3], []], "Ev Idx": i}})
    ev += [
        {"ph": "X", "cat": "user_annotation", "name": "tracekit.clock_sync host_ns=5000", "pid": 7, "tid": 7,
         "ts": 100.25, "dur": 0.5, "args": {"External id": 1}},
        # the GPU mirror of it: in the annotations table, left out by record's filter
        {"ph": "X", "cat": "gpu_user_annotation", "name": "tracekit.clock_sync host_ns=5000", "pid": 0, "tid": 7,
         "ts": 100.5, "dur": 0.5, "args": {"External id": 1}},
        # a string that starts with the prefix inside another event's args: not that event's name
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 150.0, "dur": 1.0,
         "args": {"note": "tracekit.step id=99", "nested": {"name": "tracekit.step id=98", "ph": "X"}}},
        # the name after a nested object, and non-ASCII around it
        {"args": {"k": {"x": [1, 2]}, "é": "ü"}, "ph": "X", "cat": "user_annotation", "pid": 7, "tid": 7,
         "name": "tracekit.step id=3 request=0 kind=decode batch=1 q_len=1 kv_len=9", "ts": 200.0, "dur": 3.5},
        {"ph": "X", "cat": "user_annotation", "name": "tracekit.request id=0 name=r batch=1 input_tokens=4 "
         "output_tokens=2", "pid": 7, "tid": 7, "ts": 0.0, "dur": 300.0},
    ]
    return ev


def _write(path: Path, events: list[dict], indent: int | None, trailer: str) -> None:
    head = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "X"}], "baseTimeNanoseconds": 1000000000}
    text = json.dumps(head, indent=indent)[:-1].rstrip() + ',\n"traceEvents": [\n'
    text += ",\n".join(json.dumps(e, indent=indent, ensure_ascii=False) for e in events) + "\n]" + trailer
    path.write_text(text, encoding="utf-8")


def _rows(res, prefix: str) -> list[dict]:
    t = res.tables["annotations"]
    return [r for r in t.to_pylist() if r["name"].startswith(prefix)]


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("trailer", ["}\n", ',\n  "traceName": "a]b",\n  "extra": [{"c": 1}]\n}\n'])
def test_named_events_are_the_rows_of_a_full_read(tmp_path: Path, indent: int | None, trailer: str) -> None:
    raw = tmp_path / "kineto.raw.json"
    _write(raw, _events(), indent, trailer)
    fast = read_named(raw, "tracekit.")
    full = read_raw(raw)
    assert fast is not None
    assert fast.meta.get("baseTimeNanoseconds") == 1000000000
    assert _rows(fast, "tracekit.") == _rows(full, "tracekit.")
    assert len(_rows(fast, "tracekit.")) == 4  # three annotations and the GPU mirror; not the args strings
    assert "cpu_ops" not in fast.tables  # the events named otherwise were never read
    assert own_annotations(raw) == chrome_trace.find_annotations(raw)
    assert [a.name.split()[0] for a in own_annotations(raw)] == [
        "tracekit.request", "tracekit.clock_sync", "tracekit.step"]


def test_no_named_event_is_no_table(tmp_path: Path) -> None:
    raw = tmp_path / "kineto.raw.json"
    _write(raw, _events()[:50], 2, "}\n")
    res = read_named(raw, "tracekit.")
    assert res is not None and res.tables == {}
    assert own_annotations(raw) == [] == chrome_trace.find_annotations(raw)


def test_what_the_search_cannot_read_falls_back_to_a_full_read(tmp_path: Path) -> None:
    gz = tmp_path / "raw.json.gz"
    with gzip.open(gz, "wt") as fh:
        fh.write(json.dumps({"traceEvents": _events()}))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(_events()))
    for path in (gz, bare):
        assert read_named(path, "tracekit.") is None
        assert own_annotations(path) == chrome_trace.find_annotations(path)
        assert len(own_annotations(path)) == 3


def test_recorded_trace_annotations(tmp_path: Path) -> None:
    """The committed H200 recording (its annotations as Kineto wrote them), uncompressed as record reads it."""
    raw = tmp_path / "kineto.raw.json"
    raw.write_bytes(gzip.decompress(FIXTURE.read_bytes()))
    found = own_annotations(raw)
    assert found == chrome_trace.find_annotations(raw)
    assert sum(a.name.startswith("tracekit.step ") for a in found) == 3
