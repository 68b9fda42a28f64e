"""Fault class: trace metadata no trace writer produces (distributedInfo out of any range), through both
readers, into a run directory and into a dataset.

Invariant: one line and an exit code (no traceback); a field that cannot be what it names is read as
absent.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from faultlib import cli, env, events, one_line, trace_doc, write_trace


@pytest.mark.parametrize("rank", [2**40, -1, True, 2**31])
@pytest.mark.parametrize("engine", ["native", "duckdb"])
@pytest.mark.parametrize("dataset", [False, True])
def test_a_rank_past_the_rank_column_is_no_rank(tmp_path: Path, rank: object, engine: str, dataset: bool) -> None:
    # distributedInfo.rank 2**40 was an OverflowError traceback (numpy int32 fill) from every ingest.
    src = write_trace(tmp_path / "t.json", trace_doc(events(3), distributedInfo={"rank": rank, "world_size": 2}))
    out = tmp_path / "out"
    with env(TRACEKIT_INGEST_ENGINE=engine):
        r = cli(["ingest", "-q", src, "--out", out, *(["--dataset"] if dataset else [])])
    one_line(r, ok=(0,))
    files = sorted((out / "gpu_activity").rglob("*.parquet")) if dataset else [out / "tables" / "gpu_activity.parquet"]
    assert files and all(pq.read_table(f).num_rows == 3 for f in files)
    if dataset:
        assert all("rank=0" in str(f) for f in files), files
    else:
        assert pq.read_table(files[0]).column("rank").to_pylist() == [0, 0, 0]


def test_capture_execution_details_nested_too_deep_are_skipped(tmp_path: Path) -> None:
    # TraceLens's execution_details.json beside the captures: nested past the recursion limit it was a
    # RecursionError traceback (the reader skips only unreadable or invalid ones).
    src = write_trace(tmp_path / "t.json", trace_doc(events(3)))
    caps = tmp_path / "capture_traces"
    caps.mkdir()
    write_trace(caps / "graph_capture_1.json", trace_doc(events(2)))
    (caps / "execution_details.json").write_text("[" * 100_000 + "]" * 100_000)
    r = cli(["ingest", "-q", src, "--out", tmp_path / "run"])
    one_line(r, ok=(0,))


def test_a_capture_that_is_no_regular_file_is_named_so(tmp_path: Path) -> None:
    src = write_trace(tmp_path / "t.json", trace_doc(events(3)))
    r = cli(["ingest", "-q", src, "--out", tmp_path / "run", "--capture", "/dev/null"])  # "no such file" before
    one_line(r)
    assert r.rc == 2 and "not a regular file" in r.err


def test_input_dims_nested_past_the_recursion_limit_are_no_shape(tmp_path: Path) -> None:
    # The DuckDB reader keeps Input Dims nested 1000 deep as text (the native one refuses the event); the
    # op models, the step finder and the export parse that text: a RecursionError traceback in analyze
    # and export.
    import json

    deep = "[" * 1000 + "1" + "]" * 1000
    text = json.dumps(trace_doc(events(4))).replace('"Input Dims": [[4, 8], [8, 4]]', f'"Input Dims": {deep}', 1)
    src = tmp_path / "t.json"
    src.write_text(text)
    run = tmp_path / "run"
    with env(TRACEKIT_INGEST_ENGINE="duckdb"):
        one_line(cli(["analyze", "-q", src, "--out", run]), ok=(0,))
    assert any(len(d or "") > 2000 for d in pq.read_table(run / "tables" / "cpu_ops.parquet").column("input_dims").to_pylist())
    for fmt in ("json", "proto"):
        one_line(cli(["export", "-q", run, "--format", fmt, "--out", tmp_path / f"x.{fmt}"]), ok=(0,))
