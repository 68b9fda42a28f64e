"""One trace file -> per-table Arrow tables, with DuckDB's C++ JSON reader doing the parsing.

Two stages:

1. ``extract_array``: Python streams the (gzip) file in large blocks (zlib on a
   reader thread, tracekit.ingest.framing) and writes only the ``traceEvents`` array
   (``[ ... ]``) to a temporary file. Everything outside the array (header keys
   before it, trailer keys such as ``baseTimeNanoseconds`` or ``traceName``
   after it) is parsed with orjson as the trace metadata. Only the last block is
   held back in memory, so memory does not grow with the file. A bare top-level
   list that is not compressed is read in place. Truncated input (gzip cut,
   JSON cut) is closed after the last complete event, whose boundary is
   validated by ``kineto.split_point``; the caller marks the run incomplete.
2. ``TableBuilder``: DuckDB reads the array once with an explicit column list
   (unknown top-level keys ignored), decodes the args tracekit needs with one
   ``json_transform`` per event, routes events to tables by ``ph``/``cat`` and
   fills missing correlations from ``ac2g`` flow events, all in SQL; each
   table comes back as Arrow. Memory is bounded by DuckDB's ``memory_limit``
   (it spills to ``temp_directory``).

Exact timestamps: ``ts``/``dur`` are read as DECIMAL(38,3). DuckDB converts the
number's text to the decimal directly (it does not pass through a double), so
Kineto's ``1712195495519689.047`` (19 significant digits, more than a double
holds) becomes exactly 1712195495519689047 ns. Digits beyond the ns are rounded
half away from zero. Only the coercing fallback (events that are not objects,
timestamps that are not numbers) goes through doubles, and says so in a warning.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from tracekit.errors import TraceFormatError
from tracekit.ingest.framing import (
    ANNOTATION_CATS,
    BLOCK_BYTES,
    BOUNDARY_RE,
    CPU_CATS,
    GPU_CATS,
    RUNTIME_CATS,
    Body,
    bare_list_in_place,
    base_problem,
    is_gzip,
    loads,
    offset_ns,
    split_point,
)
from tracekit.ingest.result import TABLES_OUT, Counts, RawScan
from tracekit.model import schema as _schema

_TAIL_SEARCH = 2 << 20  # where to look for an event start near the end of the array
_MAX_STARTS = 8  # event-start candidates tried before giving up on the tail
# Largest single event DuckDB accepts. Its reader allocates buffers of this size per thread,
# so it is a memory cost: 16 MB (DuckDB's default) is far beyond any real event.
_MAX_EVENT = 16 << 20

TS_RANGE = "ts beyond the int64 ns range"  # why an event is skipped (as tracekit.ingest.native says)
TIMELINE_TABLES = ("gpu_activity", "cpu_ops", "runtime", "annotations", "counters", "memory")


# --------------------------------------------------------------------------- stage 1: the array
@dataclass
class Extracted:
    array: Path  # a file holding exactly the traceEvents array
    meta: dict[str, Any]  # every top-level key except traceEvents
    bytes_in: int  # decompressed bytes read
    truncated: str | None  # why the input ended early (events before it are in ``array``)
    pieces: tuple[Path, ...] = ()  # the array split at event boundaries (read in parallel); else ``array``
    seps: tuple[bytes, ...] = ()  # the bytes between pieces (``, `` or ``,\n``): a merge restores them
    notes: tuple[str, ...] = ()  # what was skipped outside the events array (counted as warnings)

    @property
    def files(self) -> tuple[Path, ...]:
        return self.pieces or (self.array,)


def _event_starts(tail: bytes, from_start: bool) -> list[int]:
    """Offsets in ``tail`` where an event may start: after a ``}, {`` boundary near the end, then
    (if ``tail`` starts at the array's start) 0. Parsing from near the end keeps the check cheap."""
    lo = max(0, len(tail) - _TAIL_SEARCH)
    starts = [m.end() - 1 for _, m in zip(range(_MAX_STARTS), BOUNDARY_RE.finditer(tail, lo), strict=False)]
    if not starts and lo:
        starts = [m.end() - 1 for _, m in zip(range(_MAX_STARTS), BOUNDARY_RE.finditer(tail), strict=False)]
    return [*starts, 0] if from_start else starts


def _array_end(tail: bytes, s: int, bare: bool) -> tuple[int, dict[str, Any]] | None:
    """(offset of the array's closing ``]`` in tail, trailer keys) if tail[s:] closes the array validly."""
    rest = tail[s:]
    try:
        whole = loads(rest and (b"[" + rest if bare else b'{"traceEvents":[' + rest))
    except orjson.JSONDecodeError:
        return None
    if bare:
        if not isinstance(whole, list):
            return None
        return s + len(rest.rstrip()) - 1, {}
    if not isinstance(whole, dict):
        return None
    whole.pop("traceEvents", None)
    # The closing bracket is the last "]" after which the trailer parses and before which the events do.
    q = len(rest)
    while (q := rest.rfind(b"]", 0, q)) >= 0:
        try:
            loads(b'{"x":[' + rest[q:])
            loads(b"[" + rest[:q] + b"]")
        except orjson.JSONDecodeError:
            continue
        return s + q, whole
    return None


def extract_array(path: str | Path, dest_dir: str | Path, *, block: int = BLOCK_BYTES) -> Extracted:
    """The traceEvents array of ``path`` as a file (written to ``dest_dir/events.json`` unless the
    input can be read in place) and the rest of the trace as metadata."""
    p = Path(path)
    gz = is_gzip(p)
    if not gz and bare_list_in_place(p) and _valid_prefix(p.read_bytes().strip()[1:-1]):
        # a cut list can end in "]" too (inside an event's args): in place only when it parses whole
        return Extracted(p, {}, p.stat().st_size, None)
    return _extract(p, Path(dest_dir), block)


def _body_end(body: Body, read: Any, body_len: int, *, whole: bool = True) -> int | None:
    """Offset in the body of the array's closing bracket (the trailer's keys go to ``meta``;
    a truncated input is cut after its last complete event). Raises TraceFormatError when
    no complete event is found. ``whole=False``: ``read`` holds only the last piece of the
    body; None when the answer is not in it (the caller then searches the whole body)."""
    p = body.p
    if body.truncated is None:
        found = _search_end(read, body_len, body.block, lambda w, st: _array_end(w, st, body.bare))
        # The end found from a "}, {" near it is confirmed by a parse from the array's start (one may lie
        # inside a string); with only the last piece (``whole=False``) DuckDB's parse of each piece is.
        if found is not None and (not whole or _valid_prefix(read(0, int(found[0])))):
            body.meta.update(found[1])
            return int(found[0])
        if not whole:
            return None
        body.truncated = f"{p}: JSON ends early or is invalid after the last complete event"
    cut = _search_end(read, body_len, body.block, _last_boundary)
    if cut is not None and not _valid_prefix(read(0, int(cut[0]))):
        # the window's parse started after a "}, {" inside a string: only a parse from the array's
        # start tells a real event boundary (rare: a truncated trace read by this fallback reader)
        if not whole:
            return None
        sp = split_point(read(0, body_len))
        cut = (sp[0], {}) if sp is not None else None
    if cut is None:
        if not whole:
            return None
        t = body.truncated
        raise TraceFormatError(t if body_len < body.block else f"{p}: invalid JSON in traceEvents ({t})")
    return int(cut[0])


def _valid_prefix(events: bytes) -> bool:
    """True if ``events`` (the array's text after its ``[``) is a complete list of events."""
    try:
        return isinstance(loads(b"[" + events + b"]"), list)
    except orjson.JSONDecodeError:
        return False


def _extract(p: Path, tmp: Path, block: int) -> Extracted:
    out_path = tmp / "events.json"
    body = Body(p, block)
    with open(out_path, "w+b") as out:
        out.write(b"[")
        for data in body:
            # Everything after the array's "[" goes to the file; its end is found afterwards.
            out.write(data)
        out.flush()
        body_len = out.tell() - 1

        def read(lo: int, hi: int) -> bytes:
            out.seek(1 + lo)
            return bytes(out.read(hi - lo))

        end = _body_end(body, read, body_len)
        assert end is not None  # the whole body was searched: an answer or an error
        out.seek(1 + end)
        out.truncate()
        out.write(b"]")
    return Extracted(out_path, body.meta, body.bytes_in, body.truncated, notes=tuple(body.notes))


PIECE_BYTES = 32 << 20  # DuckDB reads one JSON array file on one thread: pieces of this size run in parallel


def extract_pieces(path: str | Path, tmp: Path, *, block: int = BLOCK_BYTES, piece: int | None = None) -> Extracted:
    """Like ``extract_array``, with the array split into files of about ``piece`` bytes.

    A split is made at a ``}, {`` candidate, not validated here: a candidate inside a string or a
    nested object leaves an unbalanced piece, which DuckDB rejects, and the caller then reads
    ``merge_pieces`` instead. The array's end (or the last complete event of a truncated input)
    must be in the last piece; otherwise the pieces are merged here and searched as one file.
    """
    p = Path(path)
    piece = piece or PIECE_BYTES
    if not is_gzip(p) and bare_list_in_place(p) and _valid_prefix(p.read_bytes().strip()[1:-1]):
        return Extracted(p, {}, p.stat().st_size, None)
    body = Body(p, block)
    paths: list[Path] = []
    seps: list[bytes] = []
    out: Any = None
    size = 0
    try:
        for data in body:
            if out is None:
                paths.append(tmp / f"events-{len(paths):05d}.json")
                out = open(paths[-1], "w+b")  # noqa: SIM115 - closed below or at the next piece
                out.write(b"[")
                size = 0
            view = memoryview(data)
            at = 0  # bytes of data already written
            while size + len(data) - at > piece:
                m = BOUNDARY_RE.search(data, at + max(0, piece - size))
                if m is None:
                    break
                out.write(view[at : m.start() + 1])
                seps.append(bytes(data[m.start() + 1 : m.end() - 1]))
                out.close()
                paths.append(tmp / f"events-{len(paths):05d}.json")
                out = open(paths[-1], "w+b")  # noqa: SIM115
                out.write(b"[")
                at, size = m.end() - 1, 0
            out.write(view[at:])
            size += len(data) - at
        if out is None:  # an empty body: the end search below reports why
            paths.append(tmp / "events-00000.json")
            out = open(paths[-1], "w+b")  # noqa: SIM115
            out.write(b"[")
        out.flush()
        body_len = out.tell() - 1
        f = out

        def read(lo: int, hi: int) -> bytes:
            f.seek(1 + lo)
            return bytes(f.read(hi - lo))

        end = _body_end(body, read, body_len, whole=len(paths) == 1)
        if end is not None:
            out.seek(1 + end)
            out.truncate()
            out.write(b"]")
            out.close()
            for q in paths[:-1]:
                with open(q, "ab") as fh:
                    fh.write(b"]")
            return Extracted(paths[0], body.meta, body.bytes_in, body.truncated, tuple(paths) if len(paths) > 1 else (),
                             tuple(seps), tuple(body.notes))
    finally:
        if out is not None:
            out.close()
    # The end lies before the last piece (or is not found there): one file, searched as a whole.
    merged = _merge(paths, seps, tmp / "events.json")
    with open(merged, "r+b") as fm:
        body_len = merged.stat().st_size - 1

        def read_m(lo: int, hi: int) -> bytes:
            fm.seek(1 + lo)
            return bytes(fm.read(hi - lo))

        end = _body_end(body, read_m, body_len)
        assert end is not None
        fm.seek(1 + end)
        fm.truncate()
        fm.write(b"]")
    return Extracted(merged, body.meta, body.bytes_in, body.truncated, notes=tuple(body.notes))


def _merge(paths: Sequence[Path], seps: Sequence[bytes], dest: Path, *, closed: bool = False) -> Path:
    """One array file from pieces (each ``[`` + events, closed with ``]`` when ``closed``) and the
    original bytes between them, so the result is byte for byte the array ``extract_array`` writes."""
    with open(dest, "wb") as out:
        out.write(b"[")
        for i, q in enumerate(paths):
            with open(q, "rb") as fh:
                fh.seek(1)
                data = fh.read()
            if closed:
                data = data[: data.rfind(b"]")]
            if i:
                out.write(seps[i - 1])
            out.write(data)
            q.unlink()
        if closed:
            out.write(b"]")
    return dest


def _last_boundary(window: bytes, start: int) -> tuple[int, dict[str, Any]] | None:
    sp = split_point(window[start:])
    return (start + sp[0], {}) if sp is not None else None


_MAX_WINDOW = 256 << 20  # the end of the array must be found within this many bytes of the file's end


def _search_end(read: Any, body_len: int, block: int, find: Any) -> tuple[int, dict[str, Any]] | None:
    """Look for the array's end in growing windows at the end of the body (offsets into the body);
    ``read(lo, hi)`` gives body bytes [lo, hi)."""
    width = max(block, 1 << 16)
    while True:
        lo = max(0, body_len - width)
        window = read(lo, body_len)
        for start in _event_starts(window, lo == 0):
            found = find(window, start)
            if found is not None:
                return lo + found[0], found[1]
        if lo == 0 or width >= _MAX_WINDOW:
            return None
        width *= 4


# --------------------------------------------------------------------------- stage 2: SQL
# The args tracekit reads, decoded once per event (DuckDB struct field names
# are case-insensitive, so the [memory] fields, "Bytes" among them, have their own spec).
_ARGS_SPEC = {
    "External id": "BIGINT",
    "correlation": "BIGINT",
    "device": "BIGINT",
    "stream": "BIGINT",
    "grid": "INTEGER[]",
    "block": "INTEGER[]",
    "registers per thread": "BIGINT",
    "shared memory": "BIGINT",
    "bytes": "BIGINT",
    "Sequence number": "BIGINT",
    "Input Dims": "JSON",
    "Input type": "JSON",
    "Concrete Inputs": "JSON",
    "Input Strides": "JSON",
}
_MEM_SPEC = {
    "Device Type": "BIGINT",
    "Device Id": "BIGINT",
    "Addr": "BIGINT",
    "Bytes": "BIGINT",
    "Total Allocated": "BIGINT",
    "Total Reserved": "BIGINT",
}
# Top-level event keys read besides the modelled ones; kept in other_events.args (their JSON text
# joined by string concatenation: concat_ws skips the absent ones, and it is cheaper than building a
# map and serialising it).
_EXTRA_KEYS = ("id", "bp", "s", "scope", "id2", "cname", "tts", "tdur", "sf", "stack")
_OTHER_PARTS = ", ".join(f"""'"{k}":' || {k}::VARCHAR""" for k in ("args", *_EXTRA_KEYS))
_COLUMNS = {"ph": "VARCHAR", "cat": "VARCHAR", "name": "VARCHAR", "pid": "JSON", "tid": "JSON",
            "ts": "DECIMAL(38,3)", "dur": "DECIMAL(38,3)", "args": "JSON", **{k: "JSON" for k in _EXTRA_KEYS}}
# Exceptions DuckDB raises when an event does not fit the column types.
_COERCE_HINTS = ("transform error", "Expected OBJECT", "Failed to cast", "Could not convert", "Conversion Error")


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _spec(d: dict[str, str]) -> str:
    return _q(orjson.dumps(d).decode())


def _in(values: Any) -> str:
    return "(" + ", ".join(_q(v) for v in values) + ")"


def _source(path: Path | list[Path], strict: bool) -> str:
    """A SELECT of the raw event fields with uniform types, from the strict or the coercing reader."""
    p = "[" + ", ".join(_q(str(x)) for x in path) + "]" if isinstance(path, list) else _q(str(path))
    if strict:
        cols = "{" + ", ".join(f"{_q(k)}: {_q(t)}" for k, t in _COLUMNS.items()) + "}"
        src = f"read_json({p}, format='array', columns={cols}, maximum_object_size={_MAX_EVENT})"
        return f"SELECT *, TRUE AS is_obj, ts IS NOT NULL AS ts_num FROM {src}"
    # Any element of any type: one JSON value per row, every field coerced (numbers via doubles).
    fields = ", ".join(
        [f"CASE WHEN json_type(j -> '$.{k}') = 'VARCHAR' THEN j ->> '$.{k}' ELSE (j -> '$.{k}')::VARCHAR END AS {k}" for k in ("ph", "cat", "name")]
        + [f"j -> '$.{k}' AS {k}" for k in ("pid", "tid", "args", *_EXTRA_KEYS)]
        + [f"TRY_CAST(TRY_CAST(j -> '$.{k}' AS DOUBLE) AS DECIMAL(38,3)) AS {k}" for k in ("ts", "dur")]
    )
    src = f"read_json({p}, format='array', records=false, columns={{j: 'JSON'}}, maximum_object_size={_MAX_EVENT})"
    num = "('BIGINT', 'UBIGINT', 'HUGEINT', 'DOUBLE')"
    return (f"SELECT {fields}, coalesce(json_type(j) = 'OBJECT', FALSE) AS is_obj, "
            f"coalesce(json_type(j -> '$.ts') IN {num}, FALSE) AS ts_num FROM {src}")


def _events_sql(path: Path | list[Path], strict: bool) -> str:
    gpu = _in(GPU_CATS)
    route = f"""CASE
        WHEN NOT is_obj THEN 'skip'
        WHEN ph = 'X' AND lcat IN {gpu} THEN 'gpu_activity'
        WHEN ph = 'X' AND lcat IN {_in(RUNTIME_CATS)} THEN 'runtime'
        WHEN ph = 'X' AND lcat IN {_in(CPU_CATS)} THEN 'cpu_ops'
        WHEN ph = 'X' AND lcat IN {_in(ANNOTATION_CATS)} THEN 'annotations'
        WHEN ph IN ('i', 'I') AND name = '[memory]' THEN 'memory'
        WHEN ph = 'C' THEN 'counters'
        ELSE 'other_events' END"""
    # ts * 1000 is exact in DECIMAL(38,3); the BIGINT cast rounds the sub-ns digits and gives
    # NULL (counted) beyond int64's range. baseTimeNanoseconds is added by TableBuilder.finish.
    return f"""
    WITH src AS ({_source(path, strict)}),
    typed AS (
      SELECT *, lower(coalesce(cat, '')) AS lcat,
        TRY_CAST(ts * 1000 AS BIGINT) AS ts_ns,
        TRY_CAST(dur * 1000 AS BIGINT) AS dur_ns0,
        TRY_CAST(pid AS BIGINT) AS pid_i, TRY_CAST(tid AS BIGINT) AS tid_i
      FROM src),
    routed AS (SELECT *, {route} AS route0 FROM typed)
    SELECT ph, cat, name, lcat, ts_ns, dur_ns0, ts_num AND ts_ns IS NULL AS ts_overflow,
      pid_i, tid_i,
      CASE WHEN route0 <> 'other_events' THEN NULL WHEN json_type(pid) = 'VARCHAR' THEN pid ->> '$'
           ELSE pid::VARCHAR END AS pid_s,
      CASE WHEN route0 <> 'other_events' THEN NULL WHEN json_type(tid) = 'VARCHAR' THEN tid ->> '$'
           ELSE tid::VARCHAR END AS tid_s,
      CASE WHEN route0 NOT IN ('skip', 'other_events') AND (ts_num OR ts IS NULL) AND ts_ns IS NULL THEN 'skip'
           ELSE route0 END AS route,
      CASE WHEN NOT is_obj THEN 'not a JSON object'
           WHEN route0 NOT IN ('skip', 'other_events') AND ts_num AND ts_ns IS NULL THEN '{TS_RANGE}'
           WHEN route0 NOT IN ('skip', 'other_events') AND ts IS NULL THEN 'no ts' END AS skip_reason,
      CASE WHEN route0 IN ('gpu_activity', 'runtime', 'cpu_ops', 'annotations')
           THEN json_transform(args, {_spec(_ARGS_SPEC)}) END AS a,
      CASE WHEN route0 = 'memory' THEN json_transform(args, {_spec(_MEM_SPEC)}) END AS m,
      CASE WHEN route0 = 'counters' THEN args END AS counter_args,
      CASE WHEN route0 = 'other_events' AND lcat = 'ac2g' AND ph IN ('s', 'f') THEN TRY_CAST(id AS BIGINT) END AS flow_id,
      CASE WHEN route0 = 'other_events' THEN nullif('{{' || concat_ws(',', {_OTHER_PARTS}) || '}}', '{{}}')
        END AS other_args
    FROM routed"""


def _dur(alias: str = "") -> str:
    return f"CASE WHEN {alias}dur_ns0 >= 0 THEN {alias}dur_ns0 END"


_TABLE_SQL: dict[str, str] = {
    "gpu_activity": f"""
      SELECT e.ts_ns, {_dur('e.')} AS dur_ns,
        regexp_replace(e.lcat, '^gpu_', '') AS kind, e.name,
        TRY_CAST(coalesce(e.a."device", e.pid_i) AS INTEGER) AS device,
        TRY_CAST(coalesce(e.a."stream", e.tid_i) AS INTEGER) AS stream,
        coalesce(e.a."correlation", f.flow_id) AS correlation,
        e.a."External id" AS external_id, e.a."grid" AS grid, e.a."block" AS block,
        TRY_CAST(e.a."registers per thread" AS INTEGER) AS registers_per_thread, e.a."shared memory" AS shared_memory_bytes,
        e.a."bytes" AS bytes,
        CASE WHEN e.lcat IN ('gpu_memcpy', 'memcpy') THEN nullif(regexp_extract(e.name, 'Memcpy ([A-Za-z]+)', 1), '') END
          AS memcpy_kind
      FROM ev e LEFT JOIN flows f ON f.ph = 'f' AND f.pid_i = e.pid_i AND f.tid_i = e.tid_i AND f.ts_ns = e.ts_ns
      WHERE e.route = 'gpu_activity' ORDER BY e.ts_ns""",
    "runtime": f"""
      SELECT e.ts_ns, {_dur('e.')} AS dur_ns, e.name, e.pid_i AS pid, e.tid_i AS tid,
        coalesce(e.a."correlation", f.flow_id) AS correlation, e.a."External id" AS external_id
      FROM ev e LEFT JOIN flows f ON f.ph = 's' AND f.pid_i = e.pid_i AND f.tid_i = e.tid_i AND f.ts_ns = e.ts_ns
      WHERE e.route = 'runtime' ORDER BY e.ts_ns""",
    "cpu_ops": f"""
      SELECT ts_ns, {_dur()} AS dur_ns, name, cat, pid_i AS pid, tid_i AS tid,
        a."External id" AS external_id, a."Sequence number" AS sequence_number,
        a."Input Dims"::VARCHAR AS input_dims, a."Input type"::VARCHAR AS input_types,
        CASE WHEN regexp_matches(a."Concrete Inputs"::VARCHAR, '[^\\[\\]", ]')
          THEN a."Concrete Inputs"::VARCHAR END AS concrete_inputs,
        CASE WHEN regexp_matches(a."Input Strides"::VARCHAR, '(^|[\\[,\\s])0([\\],\\s]|$)')
          THEN a."Input Strides"::VARCHAR END AS input_strides
      FROM ev WHERE route = 'cpu_ops'""",
    "annotations": f"""
      SELECT ts_ns, {_dur()} AS dur_ns, name, cat, pid_i AS pid, tid_i AS tid,
        CASE WHEN lcat = 'gpu_user_annotation' THEN TRY_CAST(coalesce(a."device", pid_i) AS INTEGER) END AS device,
        CASE WHEN lcat = 'gpu_user_annotation' THEN TRY_CAST(coalesce(a."stream", tid_i) AS INTEGER) END AS stream
      FROM ev WHERE route = 'annotations' ORDER BY ts_ns""",
    "memory": """
      SELECT ts_ns, TRY_CAST(m."Device Type" AS INTEGER) AS device_type, TRY_CAST(m."Device Id" AS INTEGER) AS device,
        m."Addr" AS addr,
        m."Bytes" AS bytes, m."Total Allocated" AS total_allocated_bytes, m."Total Reserved" AS total_reserved_bytes
      FROM ev WHERE route = 'memory' ORDER BY ts_ns""",
    "other_events": """
      SELECT ts_ns, dur_ns0 AS dur_ns, ph, cat, name, pid_s AS pid, tid_s AS tid, other_args AS args
      FROM ev WHERE route = 'other_events'""",
}


@dataclass(frozen=True)
class EngineConfig:
    """DuckDB settings for one file. memory_limit bounds DuckDB's own memory; it spills past it."""

    threads: int = 0  # 0: the cores available
    # 2GB: a lower limit makes DuckDB spill the events table of a large trace (less memory, more CPU);
    # TableBuilder.stage cuts the peak as much without spilling (docs/measurements/2026-12-07-docstring-figures.md).
    memory_limit: str = "2GB"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class TableBuilder:
    """Reads one extracted array with DuckDB and hands out per-table Arrow tables."""

    def __init__(self, array: Path | None, temp_dir: Path, *, offset_ns: int = 0, config: EngineConfig = EngineConfig(),
                 source: str | Path | None = None) -> None:
        """``array``: the file to read now (None: the caller calls ``load`` and ``finish``)."""
        import duckdb

        self.con = duckdb.connect(":memory:")
        threads = config.threads or _cores()
        self.con.execute(f"SET threads = {int(threads)}")
        self.con.execute(f"SET memory_limit = {_q(config.memory_limit)}")
        self.con.execute(f"SET temp_directory = {_q(str(temp_dir))}")
        # Row order within a table is set by ORDER BY where it matters; dropping insertion
        # order lets DuckDB stream and spill with less memory.
        self.con.execute("SET preserve_insertion_order = false")
        self.coerced = False
        self._staged: set[str] = set()  # tables built by stage() and not fetched yet
        if array is not None:
            self.load(array, source=source)
            self.finish(offset_ns)

    def load(self, array: Path, *, source: str | Path | None = None) -> None:
        """Read the array strictly, else (events that do not fit the column types) coercing."""
        import duckdb

        where = source or array  # errors name the user's file, not the extracted array
        try:
            self._load(array, strict=True)
        except duckdb.Error as exc:
            msg = str(exc)
            if not any(h in msg for h in _COERCE_HINTS):
                raise TraceFormatError(f"{where}: invalid JSON in traceEvents ({_first_line(msg)})") from None
            self.coerced = True
            try:
                self._load(array, strict=False)
            except duckdb.Error as exc2:
                raise TraceFormatError(f"{where}: invalid JSON in traceEvents ({_first_line(str(exc2))})") from None

    def _load(self, array: Path | list[Path], *, strict: bool) -> None:
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE ev AS {_events_sql(array, strict)}")

    def finish(self, offset_ns: int) -> None:
        """Apply the time base (known only once the trailer is read) and index the ac2g flows. An event
        whose ts plus the base is beyond int64 ns is skipped (counted) as one beyond it on its own."""
        if offset_ns:
            shifted = f"TRY_CAST(ts_ns::HUGEINT + {int(offset_ns)} AS BIGINT)"
            self.con.execute(f"UPDATE ev SET ts_ns = {shifted}, "
                             f"ts_overflow = ts_overflow OR (ts_ns IS NOT NULL AND {shifted} IS NULL)")
            self.con.execute(f"UPDATE ev SET route = 'skip', skip_reason = '{TS_RANGE}' "
                             "WHERE ts_overflow AND route NOT IN ('skip', 'other_events')")
        self.con.execute(
            "CREATE OR REPLACE TEMP TABLE flows AS SELECT ph, pid_i, tid_i, ts_ns, min(flow_id) AS flow_id "
            "FROM ev WHERE flow_id IS NOT NULL AND pid_i IS NOT NULL AND tid_i IS NOT NULL AND ts_ns IS NOT NULL "
            "GROUP BY ALL"
        )

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return self.con.execute(sql).fetchall()

    _COUNTER_SQL = "SELECT ts_ns, pid_i, name, counter_args FROM ev WHERE route = 'counters'"

    def stage(self, names: Sequence[str]) -> None:
        """Build the tables ``names`` inside DuckDB, then drop the events table (and the flows).

        The events table (every event, args decoded) is the largest thing DuckDB holds; once the
        per-table results exist it is dropped, so it never coexists with the Arrow tables handed
        out by ``table``, each of which drops its DuckDB copy as it goes (what it saves:
        docs/measurements/2026-12-07-docstring-figures.md). Call after the counts (they read ev).
        """
        self._staged = set(names)
        for name in self._staged:
            # The order is applied when each table is fetched (a table keeps none here).
            sql = self._COUNTER_SQL if name == "counters" else _TABLE_SQL[name].rsplit(" ORDER BY ", 1)[0]
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE t_{name} AS {sql}")
        self.con.execute("DROP TABLE IF EXISTS ev")
        self.con.execute("DROP TABLE IF EXISTS flows")

    def _fetch(self, name: str, sql: str) -> Any:
        if name not in self._staged:
            return self.con.sql(sql)
        order = " ORDER BY ts_ns" if "ORDER BY" in sql else ""
        return self.con.sql(f"SELECT * FROM t_{name}{order}")

    def _unstage(self, name: str) -> None:
        if name in self._staged:
            self.con.execute(f"DROP TABLE t_{name}")
            self._staged.discard(name)

    def table(self, name: str) -> pa.Table:
        t = self._fetch(name, _TABLE_SQL[name]).to_arrow_table()
        self._unstage(name)
        return t

    def counter_rows(self) -> tuple[list[Any], int]:
        """Counter samples in long form: (ts_ns, device, metric, value) per numeric arg; events without values."""
        rows: list[Any] = []
        empty = 0
        got = self._fetch("counters", self._COUNTER_SQL + " ORDER BY ts_ns").fetchall()
        self._unstage("counters")
        for ts, pid, name, args in got:
            try:
                d = orjson.loads(args) if args is not None else None
            except orjson.JSONDecodeError:
                d = None
            if not isinstance(d, dict) or not d:
                empty += 1
                continue
            for k, v in d.items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    rows.append((ts, pid, f"{name}.{k}" if name and k != name else str(k), float(v)))
        return rows, empty

    def close(self) -> None:
        self.con.close()


def open_events(path: str | Path, tmp: Path, config: EngineConfig = EngineConfig()) -> tuple[TableBuilder, Extracted]:
    """DuckDB's events table of one trace, and what the extraction found (meta, bytes, truncation).

    The array is extracted to a file first: DuckDB buffers a non-seekable input (a FIFO) in memory,
    which breaks the bounded-memory requirement (docs/measurements/2026-12-07-docstring-figures.md).
    """
    ex = extract_pieces(path, tmp)
    if ex.pieces:
        b = TableBuilder(None, tmp, config=config)
        try:
            b._load(list(ex.pieces), strict=True)
            b.finish(offset_ns(ex.meta))
            return b, ex
        except Exception:  # a wrong split or odd events: the one-file path decides
            b.close()
        ex = Extracted(_merge(ex.pieces, ex.seps, tmp / "events.json", closed=True), ex.meta, ex.bytes_in, ex.truncated,
                       notes=ex.notes)
    return TableBuilder(ex.array, tmp, offset_ns=offset_ns(ex.meta), config=config, source=path), ex


def _first_line(msg: str) -> str:
    return msg.strip().splitlines()[0] if msg.strip() else "error"


# --------------------------------------------------------------------------- the reader
_TIMED = "('gpu_activity', 'cpu_ops', 'runtime', 'annotations')"


def count(b: TableBuilder, counts: Counts) -> None:
    """events_read, by_ph, events_by_table, skipped and the per-event warnings, from SQL aggregates."""
    for ph, n in b.rows("SELECT coalesce(nullif(ph, ''), '(none)'), count(*) FROM ev GROUP BY 1"):
        counts.by_ph[str(ph)] += int(n)
        counts.events_read += int(n)
    for route, reason, n in b.rows("SELECT route, skip_reason, count(*) FROM ev GROUP BY 1, 2"):
        if route == "skip":
            counts.skipped[str(reason)] += int(n)
        else:
            counts.events_by_table[str(route)] += int(n)
    neg, nodur, noname = b.rows(
        f"SELECT count(*) FILTER (dur_ns0 < 0), count(*) FILTER (dur_ns0 IS NULL), count(*) FILTER (name IS NULL) "
        f"FROM ev WHERE route IN {_TIMED}"
    )[0]
    if neg:
        counts.warnings["negative dur (set to null)"] += int(neg)
    if nodur:
        counts.warnings["complete events without dur"] += int(nodur)
    if noname:
        counts.warnings["events without name"] += int(noname)
    (over,) = b.rows("SELECT count(*) FILTER (ts_overflow) FROM ev WHERE route = 'other_events'")[0]
    if over:
        counts.warnings["timestamps beyond the int64 ns range (set to null)"] += int(over)
    if b.coerced:
        counts.warnings["events with unexpected field types (coerced)"] += 1
        counts.warnings["timestamps parsed as doubles (may be inexact below 1 us)"] += counts.events_read
    (filled,) = b.rows(
        "SELECT count(*) FROM ev e JOIN flows f ON f.pid_i = e.pid_i AND f.tid_i = e.tid_i AND f.ts_ns = e.ts_ns "
        "AND f.ph = CASE e.route WHEN 'gpu_activity' THEN 'f' ELSE 's' END "
        "WHERE e.route IN ('gpu_activity', 'runtime') AND e.a.\"correlation\" IS NULL"
    )[0]
    if filled:
        counts.warnings["correlations filled from ac2g flow events"] += int(filled)


# Inputs from this many decompressed bytes up have their tables staged inside DuckDB and the events
# table dropped first (TableBuilder.stage): it lowers the peak memory of large traces for a little CPU;
# below this size staging only costs (docs/measurements/2026-12-07-docstring-figures.md).
STAGE_BYTES = 1 << 30


def _build_tables(b: TableBuilder, counts: Counts, stage: bool = False) -> dict[str, pa.Table]:
    out: dict[str, pa.Table] = {}
    if stage:
        b.stage([name for name in TABLES_OUT if counts.events_by_table.get(name, 0)])
    for name in TABLES_OUT:
        if counts.events_by_table.get(name, 0) == 0:
            continue
        if name == "counters":
            rows, empty = b.counter_rows()
            if empty:
                counts.warnings["counter events without values"] += empty
            cols: list[Any] = list(zip(*rows, strict=True)) if rows else [[], [], [], []]
            n = len(rows)
            out[name] = _schema.from_columns("counters", {
                "ts_ns": cols[0], "device": cols[1], "metric": cols[2], "value": cols[3],
                "source": ["kineto"] * n,
            })
            continue
        out[name] = b.table(name)
    return out



def read(path: str | Path, *, threads: int | None = None, work_dir: str | Path | None = None) -> RawScan:
    """One trace through DuckDB: raw tables, metadata and counts (the Reader protocol).

    ``threads``: DuckDB's threads (default the cores available); ``work_dir``: where the extracted
    array and DuckDB's spill files go (default TMPDIR; removed after).
    """
    tmp = Path(tempfile.mkdtemp(prefix="tracekit-ingest-", dir=work_dir))
    try:
        b, ex = open_events(path, tmp, EngineConfig(threads=threads or 0))
        counts = Counts()
        try:
            count(b, counts)
            for note in [*ex.notes, *([why] if (why := base_problem(ex.meta)) else [])]:
                counts.warnings[note] += 1
            if counts.events_read == 0:
                raise TraceFormatError(ex.truncated or f"{path}: traceEvents is empty")
            tables = _build_tables(b, counts, stage=ex.bytes_in >= STAGE_BYTES)
        finally:
            b.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return RawScan(tables, ex.meta, counts, ex.bytes_in, ex.truncated)


def available() -> bool:
    """DuckDB is a core dependency: always."""
    return True

