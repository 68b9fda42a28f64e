"""One trace file -> per-table Arrow tables through tracekit's native scanner (tracekit/ingest/_kscan.c).

The scanner reads the ``traceEvents`` array in one pass as the inflater thread hands over blocks
(tracekit.ingest.framing, ISA-L), with the GIL released. Each element's route (the table it goes to, or
why it is skipped) decides where its columns go: every route has its own interned ph/cat/name
codes, exact int64 ns ts/dur (from the number's text, never through a double), pid, tid and flags,
and per arg tracekit reads a sparse store (the positions that have it and the values). This module
turns those into the tables of tracekit.model.schema with numpy and pyarrow only, mostly as views of the
scanner's buffers: no per-event Python, no DOM, no SQL engine.

Semantics are those of the DuckDB reader (tracekit/ingest/duckdb_reader.py), which stays as the fallback
where the extension is not built and as the reference in tests (tests/test_ingest_native.py
compares both on every corpus trace):

- routing by ph and the lower-cased cat, ``[memory]`` instants, counters, everything else to
  other_events with its args and the Chrome-trace extras (id, bp, s, scope, ...) as JSON text;
- a timeline event without a usable ts is skipped and counted (``no ts``), an element that is not
  an object likewise (``not a JSON object``); a ts beyond int64 ns stays, with ts null (counted);
- a ts/dur/pid/tid given as a string is parsed as a number when it is one (counted as coerced);
- invalid JSON: the events before it are kept and the file is marked incomplete with the byte
  offset (the DuckDB reader rejected the whole file).
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tracekit.errors import TraceFormatError
from tracekit.ingest import arrays as A
from tracekit.ingest.framing import (
    ANNOTATION_CATS,
    CPU_CATS,
    GPU_CATS,
    RUNTIME_CATS,
    Body,
    base_problem,
    offset_ns,
)
from tracekit.ingest.result import Counts, RawScan
from tracekit.model import progress
from tracekit.store import heap

try:  # built by setup.py where a C compiler is present
    import tracekit.ingest._kscan as _kscan
except ImportError:  # pragma: no cover - exercised where the extension is absent
    _kscan = None  # type: ignore[assignment]

if _kscan is not None:
    # Routes (the table of each element, or why it is skipped), cat classes and row flags: the
    # scanner's own enums, exported by the extension.
    R_SKIP_NOTOBJ, R_SKIP_NOTS, R_GPU, R_RUNTIME, R_CPU, R_ANNOT, R_MEMORY, R_COUNTERS, R_OTHER = (
        _kscan.R_SKIP_NOTOBJ, _kscan.R_SKIP_NOTS, _kscan.R_GPU, _kscan.R_RUNTIME, _kscan.R_CPU, _kscan.R_ANNOT,
        _kscan.R_MEMORY, _kscan.R_COUNTERS, _kscan.R_OTHER)
    N_ROUTES = _kscan.N_ROUTES
    F_TS_OK, F_TS_OVF, F_DUR_OK, F_DUR_OVF, F_PID_OK, F_TID_OK, F_COERCED = (
        _kscan.F_TS_OK, _kscan.F_TS_OVF, _kscan.F_DUR_OK, _kscan.F_DUR_OVF, _kscan.F_PID_OK, _kscan.F_TID_OK,
        _kscan.F_COERCED)
    ROUTE_TABLE = {R_GPU: "gpu_activity", R_RUNTIME: "runtime", R_CPU: "cpu_ops", R_ANNOT: "annotations",
                   R_MEMORY: "memory", R_COUNTERS: "counters", R_OTHER: "other_events"}
    SKIP_REASON = {R_SKIP_NOTOBJ: "not a JSON object", R_SKIP_NOTS: "no ts"}
    TIMED_ROUTES = (R_GPU, R_RUNTIME, R_CPU, R_ANNOT)
    # Routes whose events are skipped (and counted) when their ts is beyond int64 ns, with the base added.
    RANGED_ROUTES = (R_GPU, R_RUNTIME, R_CPU, R_ANNOT, R_MEMORY, R_COUNTERS)
    # Category classes the scanner routes by (lower-cased cat -> class).
    CAT_CLASSES: dict[str, int] = {
        **{c: _kscan.C_GPU for c in GPU_CATS},
        **{c: _kscan.C_RUNTIME for c in RUNTIME_CATS},
        **{c: _kscan.C_CPU for c in CPU_CATS},
        **{c: _kscan.C_ANNOT for c in ANNOTATION_CATS},
        "ac2g": _kscan.C_AC2G,
    }

# Inflated bytes per block handed to the scanner. Small, because up to ~5 blocks are alive at once
# (the inflater's queue, the one scanned, the carry joined to the next); larger blocks are not
# faster (docs/measurements/2026-12-07-docstring-figures.md).
SCAN_BLOCK = 1 << 20
_MAX_CARRY = 256 << 20  # one event larger than this is not a trace event
TS_RANGE = "ts beyond the int64 ns range"  # why an event is skipped (tracekit.ingest.duckdb_reader says the same)
_MEMCPY_RE = re.compile(r"Memcpy ([A-Za-z]+)")
_I32 = (-(1 << 31), (1 << 31) - 1)


def available() -> bool:
    """True when the native scanner is built and not switched off (TRACEKIT_INGEST_ENGINE=duckdb)."""
    return _kscan is not None and os.environ.get("TRACEKIT_INGEST_ENGINE", "").lower() != "duckdb"


@dataclass
class Scanned:
    cols: dict[str, Any]  # the scanner's result (read-only buffers), see _kscan.c Scanner_result
    meta: dict[str, Any]  # every top-level key except traceEvents
    bytes_in: int
    truncated: str | None  # why the input ended early (the events before it are in cols)
    offset_ns: int  # baseTimeNanoseconds, added to every ts
    notes: list[str]  # what was skipped outside the events array (counted as warnings)

    @property
    def rows(self) -> int:
        return int(self.cols["rows"])

    def arr(self, key: str, dtype: Any) -> np.ndarray:
        """A column as a read-only numpy view (empty when the scanner wrote nothing under ``key``)."""
        buf = self.cols.get(key)
        return np.frombuffer(buf, dtype=dtype) if buf is not None else np.zeros(0, dtype=dtype)

    def n(self, route: int) -> int:
        """Elements with this route (rows of its table)."""
        return int(self.cols[f"r{route}.n"])

    def ts_out_of_range(self, route: int) -> np.ndarray:
        """Per element of ``route``: its ts (plus the base) is beyond int64 ns."""
        flags = self.arr(f"r{route}.flags", np.uint8)
        bad = (flags & F_TS_OVF) != 0
        if self.offset_ns:
            ts = self.arr(f"r{route}.ts", np.int64)
            lim = np.iinfo(np.int64)
            wraps = ts > lim.max - self.offset_ns if self.offset_ns > 0 else ts < lim.min - self.offset_ns
            bad |= ((flags & F_TS_OK) != 0) & wraps
        return bad

    def release(self, *prefixes: str) -> None:
        """Drop the buffers whose key starts with one of ``prefixes`` (freed unless a table uses them)."""
        for k in [k for k in self.cols if k.startswith(prefixes)]:
            del self.cols[k]

    def dictionary(self, key: str) -> pa.Array:
        offs = self.cols[f"{key}.offsets"]
        return pa.StringArray.from_buffers(len(offs) // 4 - 1, pa.py_buffer(offs), pa.py_buffer(self.cols[f"{key}.data"]))


def scan(path: str | Path, *, block: int = SCAN_BLOCK, chunk_events: int = 0,
         on_chunk: Callable[[dict[str, Any]], None] | None = None) -> Scanned:
    """Scan one trace file. Raises TraceFormatError when no traceEvents array is found.

    With ``on_chunk``, the columns of every ``chunk_events`` elements or more are handed to it as they
    are scanned (the scanner's ``take()``: dictionary codes valid across chunks, row positions from 0
    per chunk); the Scanned returned holds the last chunk's, with the whole file's metadata.
    """
    if _kscan is None:
        raise RuntimeError("tracekit.ingest._kscan is not built")
    p = Path(path)
    body = Body(p, block)
    sc = _kscan.Scanner(CAT_CLASSES)
    carry = b""
    done = 0  # body bytes before ``carry``
    truncated: str | None = None
    ended = False
    handed = 0  # elements handed to on_chunk
    meta: dict[str, Any] = {}
    it = iter(body)
    total = inflated_size(p)
    label = f"reading {p.name}"
    for data in it:
        buf = carry + data if carry else data
        consumed, status = sc.feed(buf)
        progress.report(label, body.bytes_in, max(total, body.bytes_in + 1))
        if status == _kscan.END:
            ended = True
            truncated, meta = _trailer(body, buf[consumed:], it)
            break
        if status == _kscan.ERROR:
            msg, pos = sc.error or ("error", 0)
            truncated = f"{p}: invalid JSON in traceEvents at byte {done + pos} of the array ({msg})"
            break
        carry = buf[consumed:]
        done += consumed
        if on_chunk is not None and sc.rows - handed >= max(chunk_events, 1):
            handed = sc.rows
            on_chunk(_columns(sc.take()))
        if len(carry) > _MAX_CARRY:
            truncated = f"{p}: an event larger than {_MAX_CARRY >> 20} MB at byte {done} of the array"
            break
    meta = {**body.meta, **meta}
    if not ended and truncated is None:
        truncated = body.truncated or f"{p}: JSON ends early (the last event is incomplete); events before it kept"
    n_rows = sc.rows
    cols = _columns(sc.result())
    del sc, carry
    heap.trim()  # the inflated blocks (~1 MB each) leave the heap fragmented
    offset = offset_ns(meta)
    if n_rows == 0:
        raise TraceFormatError(truncated or f"{p}: traceEvents is empty")
    notes = [*body.notes, *([why] if (why := base_problem(meta)) else [])]
    return Scanned(cols, meta, body.bytes_in, truncated, offset, notes)


def _columns(result: dict[str, Any]) -> dict[str, Any]:
    """The scanner's buffers, moved out without a copy (read-only views)."""
    return {k: v if isinstance(v, int) else memoryview(v) for k, v in result.items()}


def _trailer(body: Body, first: bytes, rest: Any) -> tuple[str | None, dict[str, Any]]:
    """Read what follows the array's ``]`` (``first``, then the blocks left in ``rest``) in bounded
    memory: (why the trace is not whole, or None; the trailer's keys)."""
    p = body.p
    if body.bare:  # a bare list: nothing but whitespace may follow
        for data in itertools.chain((first,), rest):
            if data.strip():
                return f"{p}: unexpected data after the traceEvents array", {}
        return None, {}
    tail = body.trailer()
    try:
        end = None
        for data in itertools.chain((first,), rest):
            if end is None:
                end = tail.feed(data)
                if end is not None and data[end:].strip():
                    raise tail._invalid(end, "data after the end of the trace")
            elif data.strip():
                raise tail._invalid(0, "data after the end of the trace")
        tail.finish()
        meta = tail.meta()
    except TraceFormatError as exc:
        return body.truncated or exc.message, {}
    body.notes.extend(tail.notes)
    return None, meta


def inflated_size(p: Path) -> int:
    """About how many bytes reading ``p`` yields (for progress only): its size, or for gzip the size
    its trailer states (mod 2**32: where that is below the file's, ten times the file)."""
    try:
        size = p.stat().st_size
        with open(p, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b":
                return size
            fh.seek(-4, 2)
            isize = int.from_bytes(fh.read(4), "little")
    except OSError:
        return 1
    return isize if isize >= size else 10 * size


def read(path: str | Path, *, threads: int | None = None, work_dir: str | Path | None = None) -> RawScan:
    """One trace through the native scanner: raw tables, metadata and counts (the Reader protocol).

    ``threads`` and ``work_dir`` are the DuckDB reader's; the scanner uses one thread and no files.
    """
    sc = scan(path)
    counts = Counts()
    count(sc, counts)
    raw = tables(sc, counts)
    return RawScan(raw, sc.meta, counts, sc.bytes_in, sc.truncated)


# --------------------------------------------------------------------------- counts
# The warnings ``count`` gives, in the order it gives them (then the scan's notes); ``tables`` gives
# TABLE_WARNINGS after them.
COUNT_WARNINGS = ("negative dur (set to null)", "complete events without dur", "events without name",
                  "timestamps beyond the int64 ns range (set to null)", "events with unexpected field types (coerced)")
TABLE_WARNINGS = ("counter events without values", "correlations filled from ac2g flow events")


def count(s: Scanned, counts: Any) -> None:
    """events_read, by_ph, events_by_table, skipped and warnings (a tracekit.ingest.Counts)."""
    counts.events_read += s.rows
    phd = s.dictionary("ph").to_pylist()
    neg = nodur = noname = over = 0
    for r in range(N_ROUTES):
        n = s.n(r)
        if not n:
            continue
        kept = np.ones(n, dtype=bool)
        if r in SKIP_REASON:
            counts.skipped[SKIP_REASON[r]] += n
        elif r in RANGED_ROUTES:
            kept = ~s.ts_out_of_range(r)
            k = int(np.count_nonzero(kept))
            if k:
                counts.events_by_table[ROUTE_TABLE[r]] += k
            if k < n:
                counts.skipped[TS_RANGE] += n - k
        else:
            counts.events_by_table[ROUTE_TABLE[r]] += n
            over += int(np.count_nonzero(s.ts_out_of_range(r)))
        for code, k in enumerate(np.bincount(s.arr(f"r{r}.ph", np.int32) + 1, minlength=1)):
            if k:
                key = phd[code - 1] if code else None
                counts.by_ph[key if key else "(none)"] += int(k)
        flags = s.arr(f"r{r}.flags", np.uint8)
        if r in TIMED_ROUTES:
            dur_ok = (flags & F_DUR_OK) != 0
            neg += int(np.count_nonzero(kept & dur_ok & (s.arr(f"r{r}.dur", np.int64) < 0)))
            nodur += int(np.count_nonzero(kept & ~dur_ok))
            noname += int(np.count_nonzero(kept & (s.arr(f"r{r}.name", np.int32) < 0)))
    for why, n in zip(COUNT_WARNINGS, (neg, nodur, noname, over, int(s.cols["coerced"])), strict=True):
        if n:
            counts.warnings[why] += n
    for note in s.notes:
        counts.warnings[note] += 1


# --------------------------------------------------------------------------- table building
class _Rows:
    """The events of one route: the scanner wrote their columns contiguously, so a table's columns
    are views of the scanner's buffers (no gather, no copy) wherever no value has to change."""

    def __init__(self, s: Scanned, route: int) -> None:
        self.s, self.route, self.n = s, route, s.n(route)
        self.p = f"r{route}."
        self.flags = s.arr(self.p + "flags", np.uint8)

    def col(self, key: str, dtype: Any) -> np.ndarray:
        return self.s.arr(self.p + key, dtype)

    def _exact(self, rows: np.ndarray) -> bool:
        """The store has one entry per row of this table, in order: use it as it is (no copy)."""
        return len(rows) == self.n and bool(np.array_equal(rows, np.arange(self.n, dtype=rows.dtype)))

    def ts(self) -> pa.Array:
        return A.from_numpy(*self.ts_np())

    def ts_np(self) -> tuple[np.ndarray, np.ndarray]:
        """(ts + base, valid): not valid where absent or beyond int64 ns (the sum would wrap)."""
        ts = self.col("ts", np.int64)
        ok = (self.flags & F_TS_OK) != 0
        if self.s.offset_ns:
            ok &= ~self.s.ts_out_of_range(self.route)
            with np.errstate(over="ignore"):
                ts = ts + self.s.offset_ns
        return ts, ok

    def in_range(self) -> np.ndarray | None:
        """The rows kept (ts within int64 ns) where some are not, else None (all kept)."""
        if self.route not in RANGED_ROUTES:
            return None
        bad = self.s.ts_out_of_range(self.route)
        return ~bad if bad.any() else None

    def dur(self, drop_negative: bool = True) -> pa.Array:
        v = self.col("dur", np.int64)
        bad = (self.flags & F_DUR_OK) == 0
        if drop_negative:
            bad |= v < 0
        return A.from_numpy(v, ~bad)

    def ints(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(values, present) of an int arg store."""
        rows = self.col(f"i.{key}.rows", np.int32)
        vals = self.col(f"i.{key}.values", np.int64)
        if self._exact(rows):
            return vals, np.ones(self.n, dtype=bool)
        out = np.zeros(self.n, dtype=np.int64)
        has = np.zeros(self.n, dtype=bool)
        out[rows] = vals
        has[rows] = True
        return out, has

    def int_col(self, key: str, i32: bool = False) -> pa.Array:
        v, has = self.ints(key)
        return _int_array(v, has, i32)

    def pid_tid(self, which: str) -> tuple[np.ndarray, np.ndarray]:
        return self.col(which, np.int64), (self.flags & (F_PID_OK if which == "pid" else F_TID_OK)) != 0

    def _spread(self, store: pa.Array, rows: np.ndarray) -> pa.Array:
        if self._exact(rows):
            return store
        take = np.full(self.n, -1, dtype=np.int64)
        take[rows] = np.arange(len(rows), dtype=np.int64)
        return store.take(A.from_numpy(take, take >= 0))

    def text(self, key: str) -> pa.Array:
        rows = self.col(f"t.{key}.rows", np.int32)
        if len(rows) == 0:
            return pa.nulls(self.n, pa.string())
        cols = self.s.cols
        store = pa.StringArray.from_buffers(len(rows), pa.py_buffer(cols[f"{self.p}t.{key}.offsets"]),
                                            pa.py_buffer(cols[f"{self.p}t.{key}.data"]))
        return self._spread(store, rows)

    def lists(self, key: str) -> pa.Array:
        rows = self.col(f"l.{key}.rows", np.int32)
        if len(rows) == 0:
            return pa.nulls(self.n, pa.list_(pa.int32()))
        store = pa.ListArray.from_arrays(A.from_numpy(self.col(f"l.{key}.offsets", np.int32)),
                                         A.from_numpy(self.col(f"l.{key}.values", np.int32)))
        return self._spread(store, rows)

    def codes(self, key: str) -> np.ndarray:
        return self.col(key, np.int32)

    def dict_col(self, key: str) -> pa.DictionaryArray:
        return _compact(self.codes(key), self.s.dictionary(key))


def _int_array(v: np.ndarray, has: np.ndarray, i32: bool = False) -> pa.Array:
    if i32:
        has = has & (v >= _I32[0]) & (v <= _I32[1])  # TRY_CAST semantics: out of range -> null
        return A.from_numpy(np.where(has, v, 0).astype(np.int32), has)
    return A.from_numpy(v, has)


def _compact(codes: np.ndarray, dictionary: pa.Array) -> pa.DictionaryArray:
    """A dictionary array holding only the entries these codes use (-1: null)."""
    valid = codes >= 0
    used = np.zeros(len(dictionary), dtype=bool)
    used[codes[valid]] = True
    keep = np.flatnonzero(used)
    remap = np.concatenate([np.cumsum(used, dtype=np.int64) - 1, [0]])  # [0]: an empty dictionary
    new = np.where(valid, remap[np.maximum(codes, 0)], 0).astype(np.int32)
    return pa.DictionaryArray.from_arrays(A.from_numpy(new, valid), dictionary.take(A.from_numpy(keep)))


def _mapped(codes: np.ndarray, values: Sequence[str | None]) -> pa.DictionaryArray:
    """Codes (-1: null) through a code -> string mapping that may repeat strings or give None."""
    uniq: dict[str, int] = {}
    lut = np.array([uniq.setdefault(v, len(uniq)) if v is not None else -1 for v in values] + [-1], dtype=np.int64)
    return _compact(lut[codes], A.strings(list(uniq)))


def _ranged(rows: _Rows, t: pa.Table, ts: np.ndarray, ok: np.ndarray) -> pa.Table:
    """The table without the events whose ts is beyond int64 ns (skipped and counted), ordered by ts."""
    keep = rows.in_range()
    if keep is None:
        return _by_ts(t, ts, ok)
    return _by_ts(t.filter(A.from_numpy(keep)), ts[keep], ok[keep])


def ts_order(ts: np.ndarray, ok: np.ndarray) -> np.ndarray | None:
    """The row order by ts (stable; null ts last, as SQL's ORDER BY); None where the rows are in it."""
    key = np.where(ok, ts, np.iinfo(np.int64).max)
    if len(key) < 2 or bool((key[1:] >= key[:-1]).all()):
        return None
    return np.argsort(key, kind="stable")


def _by_ts(t: pa.Table, ts: np.ndarray, ok: np.ndarray) -> pa.Table:
    """Rows ordered by ts (``ts_order``)."""
    order = ts_order(ts, ok)
    return t if order is None else t.take(A.from_numpy(order))


def flow_ids(s: Scanned, ph_char: str) -> dict[tuple[int, int, int], int]:
    """(pid, tid, ts_ns) -> the smallest ac2g flow id of that ph ('s' start, 'f' end)."""
    o = _Rows(s, R_OTHER)
    rows = o.col("i.flow id.rows", np.int32)
    if len(rows) == 0:
        return {}
    ids = o.col("i.flow id.values", np.int64)
    want = [i for i, v in enumerate(s.dictionary("ph").to_pylist()) if v == ph_char]
    flags = o.flags[rows]
    sel = np.isin(o.codes("ph")[rows], want)
    sel &= ((flags & F_PID_OK) != 0) & ((flags & F_TID_OK) != 0) & ((flags & F_TS_OK) != 0)
    r, fid = rows[sel], ids[sel]
    pid, tid = o.col("pid", np.int64)[r], o.col("tid", np.int64)[r]
    ts = o.col("ts", np.int64)[r] + s.offset_ns
    out: dict[tuple[int, int, int], int] = {}
    for key, v in zip(zip(pid.tolist(), tid.tolist(), ts.tolist(), strict=True), fid.tolist(), strict=True):
        if key not in out or v < out[key]:
            out[key] = v
    return out


FlowLookup = Callable[[str], dict[tuple[int, int, int], int]]


def missing_flow_keys(s: Scanned) -> dict[str, set[tuple[int, int, int]]]:
    """Per flow ph ('f' for GPU activity, 's' for runtime calls): the (pid, tid, ts_ns) of the rows
    without a correlation in their args, those the flow events would fill."""
    out: dict[str, set[tuple[int, int, int]]] = {"f": set(), "s": set()}
    for route, ph_char in ((R_GPU, "f"), (R_RUNTIME, "s")):
        t = _Rows(s, route)
        if not t.n:
            continue
        miss = np.flatnonzero(~t.ints("correlation")[1])
        if not len(miss):
            continue
        (pid, pok), (tid, tok), (ts, tsok) = t.pid_tid("pid"), t.pid_tid("tid"), t.ts_np()
        for i in miss.tolist():
            if pok[i] and tok[i] and tsok[i]:
                out[ph_char].add((int(pid[i]), int(tid[i]), int(ts[i])))
    return out


def _fill_from_flows(t: _Rows, corr: np.ndarray, has: np.ndarray, ph_char: str, lookup: FlowLookup | None) -> int:
    """Correlations missing from args taken from the ac2g flow event at the same pid, tid and ts
    (``lookup``: the flows of the whole file where ``t`` is one chunk of it, else those of ``t``'s scan)."""
    miss = np.flatnonzero(~has)
    if len(miss) == 0:
        return 0
    flows = lookup(ph_char) if lookup is not None else flow_ids(t.s, ph_char)
    if not flows:
        return 0
    pid, pok = t.pid_tid("pid")
    tid, tok = t.pid_tid("tid")
    ts, tsok = t.ts_np()
    filled = 0
    for i in miss.tolist():
        if pok[i] and tok[i] and tsok[i]:
            v = flows.get((int(pid[i]), int(tid[i]), int(ts[i])))
            if v is not None:
                corr[i], has[i] = v, True
                filled += 1
    return filled


def _coalesce(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return np.where(a[1], a[0], b[0]), a[1] | b[1]


def _lcat(s: Scanned) -> list[str]:
    return [(c or "").lower() for c in s.dictionary("cat").to_pylist()]


def tables(s: Scanned, counts: Any, flows: FlowLookup | None = None) -> dict[str, pa.Table]:
    """The raw tables (no rank, op_id, parent_id, launch_name: ingest adds them) keyed by name.

    ``flows``: where ``s`` is one chunk of a file, the ac2g flow ids of the whole file (``flow_ids``
    merged over its chunks), else None (those of ``s``).
    """
    out: dict[str, pa.Table] = {}
    filled = 0

    # Built in this order so that each arg store is dropped after its last use (peak memory).
    t = _Rows(s, R_CPU)
    if t.n:
        tab = pa.table({
            "ts_ns": t.ts(), "dur_ns": t.dur(), "name": t.dict_col("name"), "cat": t.dict_col("cat"),
            "pid": _int_array(*t.pid_tid("pid")), "tid": _int_array(*t.pid_tid("tid")),
            "external_id": t.int_col("External id"), "sequence_number": t.int_col("Sequence number"),
            "input_dims": t.text("Input Dims"), "input_types": t.text("Input type"),
            "concrete_inputs": t.text("Concrete Inputs"), "input_strides": t.text("Input Strides"),
        })
        keep = t.in_range()
        out["cpu_ops"] = tab if keep is None else tab.filter(A.from_numpy(keep))
    s.release("r4.")  # what cpu_ops did not keep (its columns stay alive in the table)

    t = _Rows(s, R_GPU)
    if t.n:
        lcat = _lcat(s)
        kinds = [re.sub(r"^gpu_", "", c) for c in lcat]
        codes = t.codes("cat")
        kind = _mapped(codes, kinds)
        corr = t.ints("correlation")
        cv, ch = corr[0].copy(), corr[1].copy()
        filled += _fill_from_flows(t, cv, ch, "f", flows)
        names = s.dictionary("name").to_pylist()
        is_memcpy = np.array([c in ("gpu_memcpy", "memcpy") for c in lcat], dtype=bool)
        mk = [(_MEMCPY_RE.search(n).group(1) if n and _MEMCPY_RE.search(n) else None) for n in names]  # type: ignore[union-attr]
        name_codes = t.codes("name")
        mk_codes = np.where(is_memcpy[codes] & (name_codes >= 0), name_codes, -1)
        memcpy_kind = _mapped(mk_codes, mk)
        ts, ok = t.ts_np()
        tab = pa.table({
            "ts_ns": A.from_numpy(ts, ok), "dur_ns": t.dur(), "kind": kind, "name": t.dict_col("name"),
            "device": _int_array(*_coalesce(t.ints("device"), t.pid_tid("pid")), i32=True),
            "stream": _int_array(*_coalesce(t.ints("stream"), t.pid_tid("tid")), i32=True),
            "correlation": _int_array(cv, ch), "external_id": t.int_col("External id"),
            "grid": t.lists("grid"), "block": t.lists("block"),
            "registers_per_thread": t.int_col("registers per thread", i32=True),
            "shared_memory_bytes": t.int_col("shared memory"), "bytes": t.int_col("bytes"),
            "memcpy_kind": memcpy_kind,
        })
        out["gpu_activity"] = _ranged(t, tab, ts, ok)
    s.release("r2.")

    t = _Rows(s, R_RUNTIME)
    if t.n:
        corr = t.ints("correlation")
        cv, ch = corr[0].copy(), corr[1].copy()
        filled += _fill_from_flows(t, cv, ch, "s", flows)
        ts, ok = t.ts_np()
        tab = pa.table({
            "ts_ns": A.from_numpy(ts, ok), "dur_ns": t.dur(), "name": t.dict_col("name"),
            "pid": _int_array(*t.pid_tid("pid")), "tid": _int_array(*t.pid_tid("tid")),
            "correlation": _int_array(cv, ch), "external_id": t.int_col("External id"),
        })
        out["runtime"] = _ranged(t, tab, ts, ok)
    s.release("r3.")

    t = _Rows(s, R_ANNOT)
    if t.n:
        lcat = _lcat(s)
        gpu_ann = np.array([c == "gpu_user_annotation" for c in lcat], dtype=bool)[t.codes("cat")]
        dv, dh = _coalesce(t.ints("device"), t.pid_tid("pid"))
        sv, sh = _coalesce(t.ints("stream"), t.pid_tid("tid"))
        ts, ok = t.ts_np()
        tab = pa.table({
            "ts_ns": A.from_numpy(ts, ok), "dur_ns": t.dur(), "name": t.dict_col("name"), "cat": t.dict_col("cat"),
            "pid": _int_array(*t.pid_tid("pid")), "tid": _int_array(*t.pid_tid("tid")),
            "device": _int_array(dv, dh & gpu_ann, i32=True), "stream": _int_array(sv, sh & gpu_ann, i32=True),
        })
        out["annotations"] = _ranged(t, tab, ts, ok)
    s.release("r5.")

    t = _Rows(s, R_MEMORY)
    if t.n:
        ts, ok = t.ts_np()
        tab = pa.table({
            "ts_ns": A.from_numpy(ts, ok), "device_type": t.int_col("Device Type", i32=True),
            "device": t.int_col("Device Id", i32=True), "addr": t.int_col("Addr"), "bytes": t.int_col("Bytes"),
            "total_allocated_bytes": t.int_col("Total Allocated"), "total_reserved_bytes": t.int_col("Total Reserved"),
        })
        out["memory"] = _ranged(t, tab, ts, ok)
    s.release("r6.")

    t = _Rows(s, R_OTHER)
    if t.n:
        out["other_events"] = pa.table({
            "ts_ns": t.ts(), "dur_ns": t.dur(drop_negative=False), "ph": t.dict_col("ph"), "cat": t.dict_col("cat"),
            "name": t.dict_col("name"), "pid": t.text("pid text"), "tid": t.text("tid text"), "args": t.text("other args"),
        })
    s.release("r8.", "r0.", "r1.")

    t = _Rows(s, R_COUNTERS)
    if t.n:
        out["counters"] = _counters(s, t, counts)

    if filled:
        counts.warnings[TABLE_WARNINGS[1]] += filled
    return out


def _counters(s: Scanned, t: _Rows, counts: Any) -> pa.Table:
    """Long form: one row per numeric arg of a C event; metric = name.key (key alone when equal)."""
    empty = len(t.col("i.counter without values.rows", np.int32))
    if empty:
        counts.warnings[TABLE_WARNINGS[0]] += empty
    rows = s.arr("counter.rows", np.int32)  # positions among the counter events
    keys = s.arr("counter.keys", np.int32)
    vals = s.arr("counter.values", np.float64)
    keep = t.in_range()
    if keep is not None:  # samples of events whose ts is beyond int64 ns are skipped with their event
        sel = keep[rows]
        rows, keys, vals = rows[sel], keys[sel], vals[sel]
    names = s.dictionary("name").to_pylist()
    ckeys = s.dictionary("counter.key").to_pylist()
    pairs = t.codes("name")[rows].astype(np.int64) * (len(ckeys) + 1) + keys
    uniq, inv = np.unique(pairs, return_inverse=True)
    metrics = []
    for pr in uniq.tolist():
        nc, kc = divmod(pr, len(ckeys) + 1)
        nm, k = (names[nc] if nc >= 0 else None), ckeys[kc]
        metrics.append(f"{nm}.{k}" if nm and k != nm else str(k))
    ts_all, ok_all = t.ts_np()
    ts, ok = ts_all[rows], ok_all[rows]
    pid, pok = (v[rows] for v in t.pid_tid("pid"))
    tab = pa.table({
        "ts_ns": A.from_numpy(ts, ok), "device": _int_array(pid, pok, i32=True),
        "metric": A.dictionary(inv.astype(np.int32), A.strings(metrics)),
        "value": A.from_numpy(vals), "source": A.dictionary(np.zeros(len(rows), dtype=np.int32), A.strings(["kineto"])),
    })
    return _by_ts(tab, ts, ok)


__all__ = ["CAT_CLASSES", "COUNT_WARNINGS", "TABLE_WARNINGS", "FlowLookup", "Scanned", "available", "count", "flow_ids", "inflated_size", "missing_flow_keys", "scan", "tables"]
