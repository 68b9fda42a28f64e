"""Reading a run's time-sorted tables window by window, and writing a table chunk by chunk.

Ingest writes gpu_activity, cpu_ops and runtime sorted by ``ts_ns``. ``TimeCursor`` reads such a table
once, front to back, in Parquet record batches, and hands out the rows of consecutive time windows
``[lo, hi)``: memory is one batch plus one window, never the table. ``TimeSlices`` hands out the
windows of a table held in memory (any order), indexed by time once. ``PositionReader`` hands out a table's rows by increasing position,
reading it front to back once. ``chunks`` reads a few columns
batch by batch. ``ChunkWriter`` writes a declared table one Arrow chunk at a time (one Parquet row group
each), atomically: the file appears whole when the writer closes, or not at all. Arrow and NumPy meet
through their buffers (tracekit.model.npa): reading a run window by window never imports pandas.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracekit.model import npa
from tracekit.model import schema as _schema
from tracekit.store.fsops import atomic_path
from tracekit.store.rundir import RunDir, check_unique_columns

BATCH_ROWS = 65_536


def _open(run: RunDir, name: str) -> pq.ParquetFile | None:
    """Table ``name``'s Parquet file (None where absent); an unreadable one is the run's CorruptRunError."""
    path = run.table_path(name)
    if not path.is_file():
        return None
    try:
        pf = pq.ParquetFile(path)
        check_unique_columns(pf.schema_arrow.names)
        return pf
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise run.unreadable(name, exc) from None


def _batches(run: RunDir, name: str, it: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``it``, with a damaged page said as the run's CorruptRunError."""
    try:
        yield from it
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise run.unreadable(name, exc) from None


def rows(run: RunDir, name: str) -> int:
    """The stored row count of table ``name`` (0 where absent), from the Parquet footer."""
    pf = _open(run, name)
    return pf.metadata.num_rows if pf is not None else 0


def empty_like(run: RunDir, name: str) -> pa.Table:
    """Table ``name`` with no rows: its stored schema (its declared one where absent)."""
    pf = _open(run, name)
    return _empty(pf.schema_arrow) if pf is not None else _schema.empty(name)


def _empty(schema: pa.Schema) -> pa.Table:
    return pa.Table.from_batches([], schema=schema)


def chunks(run: RunDir, name: str, columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
    """Record batches of ``columns`` (those the table has) of table ``name``, in stored order."""
    pf = _open(run, name)
    if pf is None:
        return
    cols = [c for c in columns if c in pf.schema_arrow.names]
    yield from _batches(run, name, pf.iter_batches(batch_size=BATCH_ROWS, columns=cols))


def overlapping(run: RunDir, name: str, columns: Sequence[str], start: int, end: int, *, sorted_: bool = False
                ) -> tuple[pa.Table, np.ndarray]:
    """The rows of table ``name`` (``columns``, those it has) that have a ``ts_ns`` and whose span
    [ts_ns, ts_ns + max(dur_ns, 0)] meets [start, end], in stored order, with their table positions;
    read batch by batch, so memory holds the rows kept and one batch. ``sorted_``: the table's
    ``ts_ns`` never decreases, so reading stops at the first row past ``end``."""
    pf = _open(run, name)
    if pf is None:
        empty = _schema.empty(name)
        return empty.select([c for c in columns if c in empty.column_names]), np.zeros(0, dtype=np.int64)
    have = pf.schema_arrow.names
    cols = [c for c in columns if c in have]
    extra = [c for c in ("ts_ns", "dur_ns") if c in have and c not in cols]
    kept: list[pa.Table] = []
    where: list[np.ndarray] = []
    seen = 0
    for b in _batches(run, name, pf.iter_batches(batch_size=BATCH_ROWS, columns=cols + extra)):
        t = pa.Table.from_batches([b])
        ts_col = t.column("ts_ns")
        ts = npa.values(ts_col).astype(np.int64)
        has = npa.valid(ts_col)
        dur = np.zeros(len(ts), dtype=np.int64)
        if "dur_ns" in t.column_names:
            d = t.column("dur_ns")
            dur = np.where(npa.valid(d), npa.values(d).astype(np.int64), 0)
        keep = has & (ts <= end) & (ts + np.maximum(dur, 0) >= start)
        at = np.flatnonzero(keep)
        if len(at):
            kept.append(t.select(cols).take(npa.array(at)))
            where.append(seen + at)
        seen += len(ts)
        if sorted_ and has.any() and int(ts[has].min()) > end:
            break
    if not kept:
        return _empty(pf.schema_arrow).select(cols), np.zeros(0, dtype=np.int64)
    return pa.concat_tables(kept), np.concatenate(where)


def is_time_sorted(run: RunDir, name: str) -> bool:
    """Whether table ``name``'s non-null ``ts_ns`` never decreases (read a column at a time, batch by batch)."""
    last = None
    for b in chunks(run, name, ["ts_ns"]):
        ts = npa.values(b.column(0))[npa.valid(b.column(0))]
        if not len(ts):
            continue
        if (last is not None and ts[0] < last) or bool((np.diff(ts) < 0).any()):
            return False
        last = ts[-1]
    return True


class TimeCursor:
    """The rows of a ``ts_ns``-sorted table, window after window, in one pass over the file.

    ``take(hi)`` returns the rows not handed out yet whose ``ts_ns`` is below ``hi`` (rows with a null
    ``ts_ns`` go to the last window, ``take(None)``); ``first_row`` is the table position of the first
    row it returned. ``drop``: a boolean column whose true rows are left out (they belong to no window)."""

    def __init__(self, run: RunDir, name: str, columns: Sequence[str] | None = None, drop: str | None = None) -> None:
        self.name = name
        self._drop = drop
        self._schema = _schema.schema(name) if name in _schema.SCHEMAS else None
        pf = _open(run, name)
        if pf is not None:
            cols = [c for c in columns if c in pf.schema_arrow.names] if columns is not None else None
            self._batches: Iterator[pa.RecordBatch] = _batches(
                run, name, pf.iter_batches(batch_size=BATCH_ROWS, columns=cols))
            self._empty = _empty(pf.schema_arrow) if cols is None else _empty(pf.schema_arrow).select(cols)
        else:
            self._batches = iter(())
            self._empty = _schema.empty(name)
        self._held: list[pa.Table] = []  # rows read and not yet handed out, in order
        self._nulls: list[pa.Table] = []
        self._pos = 0  # table position of the first held row
        self._done = False
        self.first_row = 0

    def _pull(self) -> bool:
        b = next(self._batches, None)
        if b is None:
            self._done = True
            return False
        self._held.append(pa.Table.from_batches([b]))
        return True

    def _held_max(self) -> int | None:
        if not self._held:
            return None
        ts = pc.max(self._held[-1].column("ts_ns")).as_py()
        return None if ts is None else int(ts)

    def take(self, hi: int | None) -> tuple[pa.Table, np.ndarray]:
        """(the window's rows, their positions in the table)."""
        while not self._done:
            m = self._held_max()
            if hi is not None and m is not None and m >= hi:
                break
            self._pull()
        held = pa.concat_tables(self._held) if self._held else self._empty
        pos = np.arange(self._pos, self._pos + held.num_rows, dtype=np.int64)
        valid = npa.valid(held.column("ts_ns"))
        if hi is None:
            cut = held.num_rows
        else:
            # sorted: the window is a prefix of the non-null rows
            past = ~(npa.values(held.column("ts_ns")) < hi) & valid
            cut = int(np.argmax(past)) if past.any() else held.num_rows
        out, rest = held.slice(0, cut), held.slice(cut)
        out_pos = pos[:cut]
        self._held = [rest] if rest.num_rows else []
        self._pos += cut
        keep = valid[:cut]
        if out.num_rows and not keep.all():
            self._nulls.append(out.filter(npa.array(~keep)))
            out, out_pos = out.filter(npa.array(keep)), out_pos[keep]
        if hi is None and self._nulls:
            out = pa.concat_tables([out, *self._nulls])
            out_pos = np.r_[out_pos, np.full(sum(t.num_rows for t in self._nulls), -1, dtype=np.int64)]
        if self._drop and self._drop in out.column_names and out.num_rows:
            keep_mask = ~npa.values(out.column(self._drop)).astype(bool)  # null: kept
            out, out_pos = out.filter(npa.array(keep_mask)), out_pos[keep_mask]
        out = out.combine_chunks()
        self.first_row = int(out_pos[0]) if len(out_pos) else self._pos
        return out, out_pos


class TimeSlices:
    """The rows of a table held in memory, window after window, each found through one time index.

    ``take(lo, hi)`` returns, in table order, the rows whose ``ts_ns`` (null as 0) is in ``[lo, hi)``
    (None: unbounded) and the ``span`` rows that overlap it (``ts_ns < hi`` and ``ts_ns + max(dur_ns,
    0) > lo``). The table is sorted by time once (not at all where it is already); a window then costs
    its own rows and the span rows, not the table: ``touched`` counts the rows each take looked at."""

    def __init__(self, table: pa.Table, span: np.ndarray) -> None:
        self.table = table
        n = table.num_rows
        ts = npa.values(table.column("ts_ns")) if n else np.empty(0, dtype=np.int64)
        sorted_ = n < 2 or bool((ts[1:] >= ts[:-1]).all())
        self._order = None if sorted_ else np.argsort(ts, kind="stable")
        self._ts = ts if sorted_ else ts[self._order]
        self._span = np.flatnonzero(span)
        dur = (npa.values(table.column("dur_ns"))[self._span] if "dur_ns" in table.column_names and n
               else np.zeros(len(self._span), dtype=np.int64))
        self._span_ts = ts[self._span]
        self._span_end = self._span_ts + np.maximum(dur, 0)
        self.touched = 0

    def take(self, lo: int | None, hi: int | None) -> pa.Table:
        if not self.table.num_rows:
            return self.table
        a = 0 if lo is None else int(np.searchsorted(self._ts, lo, side="left"))
        b = len(self._ts) if hi is None else int(np.searchsorted(self._ts, hi, side="left"))
        inside = np.arange(a, b, dtype=np.int64) if self._order is None else np.sort(self._order[a:b])
        lo_ = -(2**63) if lo is None else lo
        hi_ = 2**63 - 1 if hi is None else hi
        over = self._span[(self._span_ts < hi_) & (self._span_end > lo_)]
        self.touched += (b - a) + len(self._span)
        rows = np.union1d(inside, over) if len(over) else inside
        return self.table.take(npa.array(rows.astype(np.int64)))

class PositionReader:
    """A table's rows by position, read front to back once: ``take(positions)`` with increasing positions
    across calls."""

    def __init__(self, run: RunDir, name: str, columns: Sequence[str]) -> None:
        self._batches = chunks(run, name, columns)
        empty = empty_like(run, name)
        self._empty = empty.select([c for c in columns if c in empty.column_names])
        self._held: pa.Table | None = None
        self._start = 0  # table position of the first held row

    def take(self, pos: np.ndarray) -> pa.Table:
        if not len(pos):
            return self._empty
        need = int(pos.max()) + 1
        parts = [self._held] if self._held is not None else []
        end = self._start + sum(p.num_rows for p in parts)
        while end < need:
            b = next(self._batches)
            parts.append(pa.Table.from_batches([b]))
            end += b.num_rows
        held = pa.concat_tables(parts)
        out = held.take(npa.array((pos - self._start).astype(np.int64)))
        self._held, self._start = held.slice(need - self._start), need
        return out


class ChunkWriter(contextlib.AbstractContextManager["ChunkWriter"]):
    """Write the declared table ``name`` of ``run`` one chunk at a time (schema-checked as
    RunDir.write_table checks a whole table); the file is renamed into place on a clean exit."""

    def __init__(self, run: RunDir, name: str) -> None:
        self.name = name
        self.rows = 0
        self._ctx = atomic_path(run.table_path(name))
        self._tmp: Path = self._ctx.__enter__()
        self._writer: pq.ParquetWriter | None = None

    def write(self, table: pa.Table) -> None:
        table = _schema.check(self.name, table)
        if self._writer is None:
            dictionary = [f.name for f in table.schema if pa.types.is_dictionary(f.type)]
            self._writer = pq.ParquetWriter(self._tmp, table.schema, compression="zstd",
                                            use_dictionary=dictionary or False)
        self._writer.write_table(table.cast(self._writer.schema))
        self.rows += table.num_rows

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> bool | None:
        if self._writer is None and et is None:
            self.write(_schema.empty(self.name))
        if self._writer is not None:
            self._writer.close()
        return self._ctx.__exit__(et, ev, tb)
