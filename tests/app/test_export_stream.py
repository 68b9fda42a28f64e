"""A whole run's Perfetto export window by window (tracekit.app.export.stream_proto) against the
whole-table writer: the same bytes, each window holding at most its share of the big tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import FIXTURES

from tracekit.app import analyze, export
from tracekit.ingest import ingest
from tracekit.store.rundir import RunDir
from tracekit.trace import streamed
from tracekit.trace.perfetto import write_proto
from tracekit.trace.tracks import build_tracks

TRACES = {"kernels with bound classes": FIXTURES / "gpu" / "a_batch2.json.gz",
          "counters": FIXTURES / "record_gpu_smoke" / "trace.json.gz"}


@pytest.fixture(scope="module", params=sorted(TRACES))
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    r = ingest([TRACES[request.param]], tmp_path_factory.mktemp("stream") / "run")
    analyze.analyse_run(r)
    return r


def _counted(windows: Any, sizes: list[dict[str, int]]) -> Any:
    """``windows`` as they are, each window's rows per table appended to ``sizes``."""
    for lo, hi, tables in windows:
        sizes.append({k: v.num_rows for k, v in tables.items()})
        yield lo, hi, tables


def test_many_small_windows_write_the_whole_runs_bytes(run: RunDir, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an ingested, analysed run, WHEN its Perfetto trace is written window by window, a few
    # hundred rows at a time, THEN the file is the whole-table writer's, byte for byte, and no window
    # held more than its share of each big table
    assert export.streams(run)
    whole = tmp_path / "whole.pftrace"
    write_proto(build_tracks(export.load_tables(run)), whole)
    sizes: list[dict[str, int]] = []
    real = streamed.write_proto_windows

    def spy(ts: Any, windows: Any, path: Path) -> dict[str, int]:
        return real(ts, _counted(windows, sizes), path)

    monkeypatch.setattr(streamed, "write_proto_windows", spy)
    out = tmp_path / "streamed.pftrace"
    _, counts = export.stream_proto(run, export.load_tables(run), out, rows=300)
    assert out.read_bytes() == whole.read_bytes()
    assert len(sizes) > 10
    for name in export.STREAMED:
        rows = [s.get(name, 0) for s in sizes]
        assert sum(rows) <= run.read_columns(name, ["ts_ns"]).num_rows and max(rows) <= 300 + 50  # ties at a cut
    assert counts["slices"] > 0


@pytest.mark.parametrize(("fmt", "writer", "name"), [("proto", "stream_proto", "t.pftrace"),
                                                     ("json", "stream_json", "t.json.gz")])
def test_export_run_streams_a_whole_export(run: RunDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str,
                                           writer: str, name: str) -> None:
    # GIVEN a sorted run, WHEN export_run writes its whole Perfetto trace or Chrome JSON, THEN it goes
    # window by window
    called: list[int] = []
    real = getattr(export, writer)
    monkeypatch.setattr(export, writer, lambda *a, **k: called.append(1) or real(*a, **k))
    export.export_run(run, fmt, tmp_path / name, None)
    assert called == [1]


def test_many_small_windows_write_the_whole_runs_chrome_json(run: RunDir, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an ingested, analysed run, WHEN its Chrome JSON is written window by window, a few hundred
    # rows at a time, THEN the text is the whole-table writer's, byte for byte, each window held at most
    # its share of each big table, and the spill files are gone
    import gzip

    from tracekit.trace import streamed_json

    whole = tmp_path / "whole.json.gz"
    monkeypatch.setattr(export, "streams", lambda r: False)
    export.export_run(run, "json", whole, None)
    monkeypatch.undo()
    sizes: list[dict[str, int]] = []
    real = streamed_json.write_json_windows

    def spy(ts: Any, keys: Any, windows: Any, path: Path, extra: Any = None) -> int:
        return real(ts, keys, _counted(windows, sizes), path, extra)

    monkeypatch.setattr(streamed_json, "write_json_windows", spy)
    out = tmp_path / "streamed.json.gz"
    _, counts = export.stream_json(run, export.load_tables(run), out, rows=300)
    assert gzip.decompress(out.read_bytes()) == gzip.decompress(whole.read_bytes())
    assert len(sizes) > 10
    for name in export.STREAMED:
        rows = [s.get(name, 0) for s in sizes]
        assert max(rows) <= 300 + 50  # ties at a cut
    assert counts["events"] > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["streamed.json.gz", "whole.json.gz"]


@pytest.mark.parametrize("fmt", ["proto", "json"])
def test_a_window_export_reads_only_the_rows_that_meet_it(run: RunDir, tmp_path: Path, fmt: str) -> None:
    # GIVEN an analysed run and windows over its steps and over a time range, WHEN exported through the
    # window reader (each big table read batch by batch, only rows meeting the window kept), THEN the
    # bytes are those of the whole tables filtered by the writers, and fewer rows were held
    import gzip

    full = export.load_tables(run)
    suffix = "pftrace" if fmt == "proto" else "json.gz"
    steps = full["steps"].num_rows
    for i, (w, w_ms) in enumerate([("0:1", None), (f"{steps // 2}:{steps // 2}", None), (None, "1:40")]):
        win = export.resolve_window(full, w, w_ms)
        assert win is not None
        a, b = tmp_path / f"whole{i}.{suffix}", tmp_path / f"win{i}.{suffix}"
        export.export_run(run, fmt, a, win, dict(full.items()))  # a plain mapping: whole tables
        tables = export.WindowTables(run, win)
        export.export_run(run, fmt, b, win, tables)
        read = (lambda p: gzip.decompress(p.read_bytes())) if fmt == "json" else (lambda p: p.read_bytes())
        assert read(a) == read(b), (w, w_ms)
        held = tables["gpu_activity"].num_rows
        assert 0 < held < full["gpu_activity"].num_rows or w_ms


def test_export_run_reads_a_window_through_the_window_reader(run: RunDir, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real = export.WindowTables._columns
    monkeypatch.setattr(export.WindowTables, "_columns", lambda self, n, c: seen.append(n) or real(self, n, c))
    tables = export.load_tables(run)
    export.export_run(run, "proto", tmp_path / "w.pftrace", export.resolve_window(tables, "0:1", None))
    assert "gpu_activity" in seen and "cpu_ops" in seen
