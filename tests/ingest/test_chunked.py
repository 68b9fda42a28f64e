"""A big trace read in chunks (tracekit.ingest.chunked) writes the very tables, counts and warnings of
reading it whole: forced on every committed trace with chunks of a few events, on shuffled threads,
correlations filled from flows in other chunks, and on input that ends early or is not JSON."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from helpers import CORPUS, FIXTURES, corpus_traces

from tracekit.errors import TraceFormatError
from tracekit.ingest import TABLES_OUT, chunked, ingest, spill
from tracekit.store.rundir import RunDir


def _ingest(path: Path, out: Path, monkeypatch: pytest.MonkeyPatch, *, chunk: int | None) -> dict[str, Any]:
    """Ingest ``path`` whole (chunk None) or in chunks of ``chunk`` events: every table, run.json's
    counts, warnings and status, and the one-line error (or None)."""
    with monkeypatch.context() as m:
        m.setattr(chunked, "CHUNKED_MIN_BYTES", 1 << 62 if chunk is None else 0)
        m.setattr(chunked, "CHUNK_EVENTS", chunk or chunked.CHUNK_EVENTS)
        m.setattr(spill, "GATHER_ROWS", 5)
        try:
            ingest([path], out, force=True, use_cache=False, jobs=1, captures=[])
            error = None
        except TraceFormatError as exc:
            error = exc.message.replace(str(out), "<out>")
    run = RunDir.open(out) if (out / "run.json").is_file() else None
    if run is None:
        return {"error": error}
    manifest = json.loads((out / "run.json").read_text())
    return {"error": error, "status": manifest.get("status"), "warnings": manifest.get("warnings"),
            "counts": (manifest.get("ingest") or {}).get("counts"),
            "tables": {t: (run.read_table(t).schema, run.read_table(t).to_pylist()) for t in TABLES_OUT
                       if run.has_table(t)}}


def _traces() -> list[Path]:
    found = corpus_traces(CORPUS) if CORPUS.is_dir() else []
    return found + sorted(FIXTURES.glob("gpu/*.json.gz")) + sorted(FIXTURES.glob("cpu/*.json.gz")) + [
        FIXTURES / "ncu" / "compiled_qwen2.5-0.5b_b1.json.gz", FIXTURES / "record_gpu_smoke" / "trace.json.gz"]


@pytest.mark.parametrize("path", _traces(), ids=lambda p: p.name)
@pytest.mark.slow
def test_committed_traces_in_tiny_chunks_write_the_same_tables(path: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a real trace, WHEN it is ingested whole and in chunks of 97 events
    whole = _ingest(path, tmp_path / "whole", monkeypatch, chunk=None)
    parts = _ingest(path, tmp_path / "parts", monkeypatch, chunk=97)
    # THEN every table (values and row order), the counts, warnings and status are the same
    assert parts == whole


def _shuffled_trace(seed: int) -> dict[str, Any]:
    """Ops on three threads written out of order, kernels and runtime calls out of ts order, some
    without a correlation in args (their ac2g flow events far away in the file), a few without ts."""
    rnd = random.Random(seed)
    ev: list[dict[str, Any]] = []
    flows: list[dict[str, Any]] = []
    for i in range(120):
        tid = rnd.choice([3, 7, 11])
        t = 1_000 + 50 * i + rnd.randrange(30)
        ev.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 5}", "pid": 1, "tid": tid, "ts": t, "dur": 40,
                   "args": {"External id": i + 1, "Input Dims": [[i, 2]]}})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::inner", "pid": 1, "tid": tid, "ts": t + 2, "dur": 10})
        corr = 10_000 + i
        rt_args: dict[str, Any] = {"External id": i + 1} if i % 7 else {}
        kern_args: dict[str, Any] = {"device": 0, "stream": 7}
        if i % 4:
            rt_args["correlation"] = corr
            kern_args["correlation"] = corr
        else:  # the correlation only in the flow events
            flows.append({"ph": "s", "cat": "ac2g", "id": corr, "pid": 1, "tid": tid, "ts": t + 5, "name": "ac2g"})
            flows.append({"ph": "f", "cat": "ac2g", "id": corr, "pid": 0, "tid": 7, "ts": t + 300, "name": "ac2g",
                          "bp": "e"})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid, "ts": t + 5,
                   "dur": 4, "args": rt_args})
        ev.append({"ph": "X", "cat": "kernel", "name": f"k{i % 3}", "pid": 0, "tid": 7, "ts": t + 300, "dur": 9,
                   "args": kern_args})
        if i % 30 == 0:
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"step{i}", "pid": 1, "tid": tid, "ts": t, "dur": 500})
            ev.append({"ph": "C", "name": "mem", "pid": 0, "ts": t, "args": {"bytes": i}})
            ev.append({"ph": "X", "cat": "kernel", "name": "no ts", "pid": 0, "tid": 7, "dur": 3})
    rnd.shuffle(ev)
    cut = len(ev) // 2  # flows in the middle: before some of their kernels, after others
    return {"schemaVersion": 1, "traceEvents": ev[:cut] + flows + ev[cut:], "baseTimeNanoseconds": 1_700_000_000_000_000_000}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("chunk", [1, 13, 200])
def test_shuffled_threads_and_far_flows_in_chunks(seed: int, chunk: int, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a trace whose tables need whole-file ordering and flow fills across chunks
    # (and baseTimeNanoseconds after the events: known only once the last chunk is read)
    src = tmp_path / "t.json.gz"
    src.write_bytes(gzip.compress(json.dumps(_shuffled_trace(seed)).encode(), 1))
    whole = _ingest(src, tmp_path / "whole", monkeypatch, chunk=None)
    parts = _ingest(src, tmp_path / "parts", monkeypatch, chunk=chunk)
    # THEN the chunked read writes what the whole read writes
    assert whole["counts"]["warnings"]["correlations filled from ac2g flow events"] > 0
    assert parts == whole


@pytest.mark.parametrize("cut", [0.3, 0.77])
def test_input_that_ends_early_or_breaks_gives_the_same_error_and_tables(cut: float, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    data = json.dumps(_shuffled_trace(5)).encode()
    for name, body in (("truncated.json", data[: int(len(data) * cut)]),
                       ("garbage.json", data[: int(len(data) * cut)] + b"}{ not json ]"),
                       ("empty.json", b'{"traceEvents": []}'), ("text.json", b"hello")):
        src = tmp_path / name
        src.write_bytes(body)
        whole = _ingest(src, tmp_path / f"whole-{name}", monkeypatch, chunk=None)
        parts = _ingest(src, tmp_path / f"parts-{name}", monkeypatch, chunk=11)
        assert whole["error"] and "\n" not in whole["error"]
        assert parts == whole, name


def test_a_trace_that_replays_graphs_is_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = chunked.read_into
    monkeypatch.setattr(chunked, "read_into", lambda *a, **k: calls.append(r := real(*a, **k)) or r)
    monkeypatch.setattr(chunked, "CHUNKED_MIN_BYTES", 0)
    monkeypatch.setattr(chunked, "CHUNK_EVENTS", 50)
    ingest([FIXTURES / "gpu" / "h100_manual_graph.json.gz"], tmp_path / "run", use_cache=False, captures=[])
    assert calls == [None]


def test_runs_gather_any_permutation(tmp_path: Path) -> None:
    runs = spill.Runs(tmp_path, "t", pa.schema([("v", pa.int64()), ("s", pa.string())]))
    n = 0
    for size in (3, 0, 17, 1, 40):
        runs.append(pa.table({"v": np.arange(n, n + size), "s": [str(i) for i in range(n, n + size)]}))
        n += size
    order = np.random.default_rng(3).permutation(n)
    got = pa.concat_tables(runs.gather(order, batch=7))
    assert got["v"].to_pylist() == order.tolist()
    assert got["s"].to_pylist() == [str(i) for i in order]
    assert pa.concat_tables(runs.gather(None, batch=4))["v"].to_pylist() == list(range(n))


def test_big_traces_are_read_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = json.dumps(_shuffled_trace(1)).encode()
    plain, gz = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_bytes(doc)
    gz.write_bytes(gzip.compress(doc, 1))
    monkeypatch.setattr(chunked, "CHUNKED_MIN_BYTES", len(doc))
    assert chunked.wanted(plain) and chunked.wanted(gz)
    monkeypatch.setattr(chunked, "CHUNKED_MIN_BYTES", len(doc) + 1)
    assert not chunked.wanted(plain)
    # gzip states its size mod 2^32 (here: wrapped to 5 bytes): a compressed file of an eighth of the
    # bound is taken as big
    monkeypatch.setattr(chunked.native, "inflated_size", lambda p: 5 if p == gz else p.stat().st_size)
    monkeypatch.setattr(chunked, "CHUNKED_MIN_BYTES", 8 * gz.stat().st_size)
    assert chunked.wanted(gz)
    monkeypatch.setattr(chunked, "CHUNKED_MIN_BYTES", 8 * gz.stat().st_size + 1)
    assert not chunked.wanted(gz)
