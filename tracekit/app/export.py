"""Export a run's timeline for Perfetto, as Chrome JSON or native protobuf.

Both formats are rebuilt from the run's tables (kernels, CPU ops, runtime calls,
annotations) plus tracekit's own tracks (requests, steps, bound class,
counters), so a window costs a table filter, not a pass over a multi-GB JSON.
``--window STEP_A:STEP_B`` keeps the steps A..B (ids, inclusive) and everything
overlapping them; ``--window-ms A:B`` keeps a time range, in ms from the first
event of the run. Perfetto's UI runs out of memory near 2 GB of trace; a window
of a few hundred steps keeps a long run viewable.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.errors import TraceFormatError, UsageError, visible
from tracekit.model import npa
from tracekit.model import schema as _schema
from tracekit.store import windows as _win
from tracekit.store.rundir import RunDir
from tracekit.trace.blocks import COLUMNS
from tracekit.trace.tracks import TrackSet, Window, build_tracks, window_for_steps, write_chrome_json_gz

TRACE_TABLES = ("gpu_activity", "cpu_ops", "runtime", "annotations", "counters", "steps", "requests",
                "step_bound", "kernel_bound", "step_memory", "memory")  # the bound pass's, where analyze wrote them


def _pair(text: str, opt: str, conv: type) -> tuple[float, float]:
    try:
        a, b = text.split(":")
        lo, hi = conv(a), conv(b)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(text)
    except ValueError:
        raise UsageError(f"{opt} {text!r}: expected A:B, e.g. {opt} {'3:10' if conv is int else '0:250.5'}") from None
    if hi < lo:
        raise UsageError(f"{opt} {text!r}: end before start")
    return lo, hi


def _first_ts(tables: Mapping[str, pa.Table]) -> int | None:
    firsts = []
    for name, col in (("gpu_activity", "ts_ns"), ("cpu_ops", "ts_ns"), ("runtime", "ts_ns"), ("annotations", "ts_ns"),
                      ("steps", "cpu_start_ns"), ("requests", "start_ns"), ("counters", "ts_ns")):
        t = tables.get(name)
        if t is not None and name == "cpu_ops" and "captured" in t.column_names:
            t = t.filter(pc.invert(pc.fill_null(t.column("captured"), False)))  # capture traces: another clock
        if t is not None and col in t.column_names and t.num_rows:
            m = pc.min(t.column(col)).as_py()
            if m is not None:
                firsts.append(int(m))
    return min(firsts) if firsts else None


def resolve_window(tables: Mapping[str, pa.Table], window: str | None, window_ms: str | None) -> Window | None:
    if window and window_ms:
        raise UsageError(f"--window {window} and --window-ms {window_ms} conflict: give one")
    if window:
        a, b = _pair(window, "--window", int)
        try:
            steps = tables["steps"] if "steps" in tables else _schema.empty("steps")
            return window_for_steps(steps, int(a), int(b))
        except ValueError as exc:
            raise UsageError(f"--window {window}: {exc}") from None
    if window_ms:
        a_ms, b_ms = _pair(window_ms, "--window-ms", float)
        t0 = _first_ts(tables)
        if t0 is None:
            raise UsageError("--window-ms: the run has no timed events")
        return Window(_ns_after(t0, a_ms), _ns_after(t0, b_ms))
    return None


def _ns_after(t0: int, ms: float) -> int:
    """``t0`` plus ``ms`` milliseconds in ns, held to int64 (a time past its ends is at the end)."""
    off = max(-(2.0**64), min(2.0**64, ms * 1e6))  # a finite ms can still overflow to inf in ns
    return max(-(2**63), min(2**63 - 1, t0 + int(off)))


def load_tables(run: RunDir) -> RunTables:
    """The run's tables the trace writers read (``TRACE_TABLES`` that the run has), read on lookup."""
    return RunTables(run)


class RunTables(Mapping[str, pa.Table]):
    """A run's trace tables by name, each read from its Parquet file when looked up.

    The small tables (steps, requests, counters, ...) are kept once read, whole and fitted to their
    schema as ``RunDir.read_table`` reads them. The large ones (kernels, CPU ops, runtime calls,
    annotations, kernel_bound: as long as the trace) are read with only the columns the trace's
    blocks use (tracekit.trace.blocks.COLUMNS) and never kept, so a writer holds one at a time and
    frees it once its block is built."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        self.names = [name for name in TRACE_TABLES if run.has_table(name)]
        self.kept: dict[str, pa.Table] = {}

    def __getitem__(self, name: str) -> pa.Table:
        if name not in self.names:
            raise KeyError(name)
        if name in self.kept:
            return self.kept[name]
        if name not in COLUMNS:
            self.kept[name] = self.run.read_table(name)
            return self.kept[name]
        return self._columns(name, COLUMNS[name])

    def _columns(self, name: str, columns: tuple[str, ...]) -> pa.Table:
        # kernel_bound's class columns are read as written, the others fitted to their schema where the
        # file does not hold it
        return self.run.read_columns(name, columns, fit=name != "kernel_bound")

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


class WindowTables(RunTables):
    """``RunTables`` of the rows that meet ``window``: each big table (of a run that ``streams``: its
    declared schema, time-sorted) read batch by batch and only its rows overlapping the window kept
    (the trace blocks keep no others), so memory follows the window, not the run; kernel_bound's rows
    are gpu_activity's kept ones where the two are aligned."""

    def __init__(self, run: RunDir, window: Window) -> None:
        super().__init__(run)
        self.window = window
        self._gpu_rows: np.ndarray | None = None

    def _columns(self, name: str, columns: tuple[str, ...]) -> pa.Table:
        if name == "kernel_bound":
            if _win.rows(self.run, name) != _win.rows(self.run, "gpu_activity"):
                empty = _win.empty_like(self.run, name)
                return empty.select([c for c in columns if c in empty.column_names])
            return _win.PositionReader(self.run, name, columns).take(self._gpu_positions())
        if name not in STREAMED:  # annotations: small, read as the whole-table path reads them
            return super()._columns(name, columns)
        got, pos = self._overlapping(name, columns)
        if name == "gpu_activity":
            self._gpu_rows = pos
        return got

    def _overlapping(self, name: str, columns: tuple[str, ...]) -> tuple[pa.Table, np.ndarray]:
        return _win.overlapping(self.run, name, columns, self.window.start_ns, self.window.end_ns, sorted_=True)

    def _gpu_positions(self) -> np.ndarray:
        if self._gpu_rows is None:
            _, self._gpu_rows = self._overlapping("gpu_activity", ("ts_ns",))
        return self._gpu_rows


def export_run(
    run: RunDir, fmt: str, out: Path, window: Window | None, tables: Mapping[str, pa.Table] | None = None
) -> tuple[TrackSet, dict[str, int]]:
    """Write the run's tracks to ``out`` as ``fmt`` ("proto" or "json"); returns the tracks and counts."""
    tables = load_tables(run) if tables is None else tables
    if window is None and isinstance(tables, RunTables) and streams(run):
        return (stream_proto if fmt == "proto" else stream_json)(run, tables, out)
    if window is not None and type(tables) is RunTables and streams(run):
        tables = WindowTables(run, window)
    ts = build_tracks(tables, window=window)
    if fmt == "proto":
        from tracekit.trace.perfetto import write_proto

        counts = write_proto(ts, out)
    else:
        counts = {"tracks": len(ts.tracks), "events": write_chrome_json_gz(ts, out, extra=_json_extra(run, ts, window))}
    return ts, counts


def _json_extra(run: RunDir, ts: TrackSet, window: Window | None) -> dict[str, Any]:
    """The Chrome JSON's top-level keys after traceEvents."""
    # distributedInfo: HTA reads the rank from it (and warns without it).
    extra: dict[str, Any] = {"displayTimeUnit": "ns", "distributedInfo": {"rank": 0},
                             "tracekit": {"run_id": run.run_id, "notes": ts.notes}}
    if window is not None:
        extra["tracekit"]["window_ns"] = [window.start_ns, window.end_ns]
    return extra


def export_from_trace(run: RunDir, out: Path, tables: Mapping[str, pa.Table]) -> tuple[TrackSet, dict[str, int]]:
    """Splice tracekit's tracks into the run's Kineto trace.json.gz (every original event kept) as ``out``."""
    import gzip
    import zlib

    from tracekit.trace.chrome import merge
    from tracekit.trace.tracks import chrome_event_dicts

    if not run.trace_path.is_file():
        raise UsageError(f"--from-trace: {visible(run.trace_path)} not found")
    ts = build_tracks(tables, include_trace=False)
    try:
        merge(run.trace_path, out, chrome_event_dicts(ts))
    except (EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError) as exc:
        # A cut or corrupt trace.json.gz: nothing is written (the merge writes atomically).
        what = "truncated" if isinstance(exc, EOFError) else "corrupt"
        detail = str(exc).strip().split("\n", 1)[0][:200] or type(exc).__name__
        raise TraceFormatError(f"--from-trace: {visible(run.trace_path)} is {what} ({detail})") from None
    return ts, {"tracks": len(ts.tracks), "tracekit events": len(ts.slices) + len(ts.counters)}


# --- a whole run's Perfetto trace, a time window of the raw tables at a time -----------------------

STREAM_ROWS = 24_576  # rows of each big table per export window, at most (and ties at a cut)
STREAMED = ("gpu_activity", "cpu_ops", "runtime")  # read through a time cursor; annotations held (small)
TRACK_COLUMNS = {"gpu_activity": ("ts_ns", "device", "stream"),
                 **{t: ("ts_ns", "cat", "pid", "tid", "device", "stream", "captured") for t in ("cpu_ops", "runtime")}}


def streams(run: RunDir) -> bool:
    """Whether ``run``'s Perfetto trace is written window by window: its big tables hold their declared
    schema (as read whole, unfitted) and are time-sorted, as ingest writes them."""
    for name in STREAMED:
        if not run.has_table(name):
            continue
        have = _win.empty_like(run, name).schema
        if any(have.get_field_index(f.name) < 0 or have.field(f.name).type != f.type for f in _schema.schema(name)):
            return False
        if not _win.is_time_sorted(run, name):
            return False
    return True


def stream_proto(run: RunDir, tables: RunTables, out: Path, rows: int | None = None) -> tuple[TrackSet, dict[str, int]]:
    """``export_run``'s Perfetto trace of the whole run, the same bytes, its big tables read a window of
    at most ``rows`` rows each (STREAM_ROWS) at a time (tracekit.trace.streamed). Falls back to the
    whole tables where the trace's tracks share a track with tracekit's own slices."""
    from tracekit.trace.perfetto import write_proto
    from tracekit.trace.streamed import write_proto_windows

    got = _windows(run, tables, rows or STREAM_ROWS)
    if got is None:
        ts = build_tracks(tables)
        return ts, write_proto(ts, out)
    ts, _keys, windows = got
    return ts, write_proto_windows(ts, windows, out)


def stream_json(run: RunDir, tables: RunTables, out: Path, rows: int | None = None) -> tuple[TrackSet, dict[str, int]]:
    """``export_run``'s Chrome JSON of the whole run, the same bytes, its big tables read a window at a
    time (tracekit.trace.streamed_json); the whole tables where its tracks share one with tracekit's own
    slices or there are too many tracks to spill."""
    from tracekit.trace.streamed_json import MAX_TRACKS, write_json_windows

    got = _windows(run, tables, rows or STREAM_ROWS)
    if got is None or len(got[1]) > MAX_TRACKS:
        ts = build_tracks(tables)
        return ts, {"tracks": len(ts.tracks), "events": write_chrome_json_gz(ts, out, extra=_json_extra(run, ts, None))}
    ts, keys, windows = got
    n = write_json_windows(ts, keys, windows, out, extra=_json_extra(run, ts, None))
    return ts, {"tracks": len(ts.tracks), "events": n}


def _windows(run: RunDir, tables: RunTables, step: int
             ) -> tuple[TrackSet, list[str], Iterator[tuple[int | None, int | None, dict[str, pa.Table]]]] | None:
    """tracekit's own tracks with the trace's tracks added (their keys, in the blocks' order) and the
    run's big tables as consecutive time windows of at most ``step`` rows each; None where a trace
    track holds one of tracekit's own slices (those must nest together: the whole-table writers)."""
    from tracekit.trace.streamed import block_tracks

    ts = build_tracks(tables, include_trace=False)
    own = {s.track for s in ts.own_slices}
    annotations = tables.get("annotations", None)
    cuts: set[int] = set()

    def track_batches() -> Iterator[dict[str, pa.Table]]:
        for name in STREAMED:
            if name not in tables:
                continue
            seen = 0
            for b in _win.chunks(run, name, TRACK_COLUMNS[name]):
                t = pa.Table.from_batches([b])
                ts_ = npa.values(t.column("ts_ns"))[npa.valid(t.column("ts_ns"))]
                at = np.arange((-seen) % step, len(ts_), step)
                cuts.update(int(x) for x in ts_[at] if x > ts_[0] or seen)
                seen += len(ts_)
                yield {name: t}
        if annotations is not None:
            yield {"annotations": annotations}

    keys = block_tracks(ts, track_batches())
    if not keys or own & set(keys):
        return None
    bounds = [None, *sorted(cuts), None]
    kb_rows = _win.rows(run, "kernel_bound") if "kernel_bound" in tables else 0
    aligned = kb_rows > 0 and kb_rows == _win.rows(run, "gpu_activity")

    def windows() -> Iterator[tuple[int | None, int | None, dict[str, pa.Table]]]:
        cursors = {t: _win.TimeCursor(run, t, COLUMNS[t], drop="captured" if t == "cpu_ops" else None)
                   for t in STREAMED if t in tables}
        bound = _win.PositionReader(run, "kernel_bound", COLUMNS["kernel_bound"]) if aligned else None
        ann = _win.TimeSlices(annotations, np.zeros(annotations.num_rows, dtype=bool)) if annotations is not None \
            else None
        for lo, hi in itertools.pairwise(bounds):
            w: dict[str, pa.Table] = {}
            for t, cur in cursors.items():
                got, pos = cur.take(hi)
                if t == "gpu_activity":
                    got, pos = got.filter(npa.array(pos >= 0)), pos[pos >= 0]  # no time: in no slice
                    if bound is not None:
                        w["kernel_bound"] = bound.take(pos)
                w[t] = got
            if ann is not None:
                w["annotations"] = ann.take(lo, hi)
            yield lo, hi, w

    return ts, keys, windows()
