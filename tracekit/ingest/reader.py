"""Reading one trace file into its tables: one protocol, two readers, then rank and linkage.

A reader is a module with ``available() -> bool`` and ``read(path, *, threads, work_dir) -> RawScan``
(raw tables without rank, metadata, counts). Two implement it: ``native`` (the C scanner, the default)
and ``duckdb_reader`` (the fallback where the extension is not built, or TRACEKIT_INGEST_ENGINE=duckdb;
the reference in tests). ``read_file`` picks the first available, adds the rank column, links the
tables (tracekit.ingest.linkage) and warns about traces without GPU activity.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import pyarrow as pa

# Table.take imports pyarrow.compute: load it with the module, not inside a timed ingest.
import pyarrow.compute

from tracekit.ingest import arrays as A
from tracekit.ingest import duckdb_reader, linkage, native
from tracekit.ingest.result import TABLES_OUT, Counts, FileResult, RawScan
from tracekit.model import npa
from tracekit.model import schema as _schema
from tracekit.store import heap

# Device-side activity of accelerators tracekit does not model as GPU activity.
NON_CUDA_DEVICE_CATS = {"mtia_ccp_events"}


class Reader(Protocol):
    def available(self) -> bool: ...

    def read(self, path: str | Path, *, threads: int | None = None,
             work_dir: str | Path | None = None) -> RawScan: ...


READERS: tuple[Reader, ...] = (cast(Reader, native), cast(Reader, duckdb_reader))


def reader() -> Reader:
    """The reader ingest uses: the first available of READERS."""
    return next(r for r in READERS if r.available())


RANK_LIMIT = 2**31  # the rank column is int32; no job has this many ranks


def trace_rank(meta: dict[str, Any]) -> int | None:
    """The trace's own ``distributedInfo.rank``: a whole number in [0, 2**31), else None (absent, or no
    rank: text, negative, past the int32 rank column)."""
    dist = meta.get("distributedInfo")
    rank = dist.get("rank") if isinstance(dist, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < RANK_LIMIT else None


def rank_of(meta: dict[str, Any], rank: int | None) -> int:
    """The rank given, else the trace's distributedInfo.rank, else 0."""
    if rank is not None:
        return rank
    traced = trace_rank(meta)
    return 0 if traced is None else traced


def ranked(name: str, t: pa.Table, rank: int) -> pa.Table:
    """A reader's raw table with its rank column set, conformed to the schema."""
    col = A.from_numpy(np.full(t.num_rows, rank, dtype=np.int32))
    i = t.schema.get_field_index("rank")
    t = t.set_column(i, "rank", col) if i >= 0 else t.append_column("rank", col)
    return _schema.conform(name, t)


def read_file(
    path: str | Path,
    *,
    rank: int | None = None,
    file_index: int = 0,
    threads: int | None = None,
    work_dir: str | Path | None = None,
) -> FileResult:
    """Read one trace into linked tables (in memory). Raises TraceFormatError if it has no events.

    ``rank``: the rank to give (default the trace's distributedInfo.rank, else 0); ``file_index``:
    the file's place in a multi-file run (op ids stay unique across files). ``threads`` and
    ``work_dir`` are the DuckDB reader's. Safe in a worker process (process pool, Ray task).
    """
    t0 = time.perf_counter()
    raw = skip_overflowing_ends(reader().read(path, threads=threads, work_dir=work_dir))
    counts = raw.counts
    final_rank = rank_of(raw.meta, rank)
    tables: dict[str, pa.Table] = {}
    for name in TABLES_OUT:
        t = raw.tables.pop(name, None)
        tables[name] = _schema.empty(name) if t is None or t.num_rows == 0 else ranked(name, t, final_rank)
    tables = linkage.link(tables, file_index, counts)
    device_warnings(tables, counts)
    heap.trim()  # the temporaries of table building and linkage
    return FileResult(str(path), final_rank, tables, raw.meta, counts, raw.bytes_in, time.perf_counter() - t0,
                      raw.truncated)


def read_raw(path: str | Path) -> RawScan:
    """One trace's raw tables (as the reader makes them: no rank, no linkage), its metadata and counts.
    For a caller that needs a table's own columns and nothing that linkage adds (record's search for
    its annotations): linkage is a third of read_file's time."""
    return skip_overflowing_ends(reader().read(path))


END_RANGE = "end (ts + dur) beyond the int64 ns range"  # why an event is skipped (as a ts beyond it is)
_I64_MAX = np.iinfo(np.int64).max


def skip_overflowing_ends(raw: RawScan) -> RawScan:
    """``raw`` without the events whose end (ts_ns + dur_ns) is past int64 ns: skipped and counted,
    ``END_RANGE``, as events whose ts is past it are. Every pass computes ends; none may wrap."""
    for name, t in list(raw.tables.items()):
        if t is None or t.num_rows == 0 or "ts_ns" not in t.column_names or "dur_ns" not in t.column_names:
            continue
        ts, dur = (npa.values(t.column(c), fill=0) for c in ("ts_ns", "dur_ns"))  # never pyarrow's pandas shim
        over = (dur > 0) & (ts > _I64_MAX - np.maximum(dur, 0))
        n = int(np.count_nonzero(over))
        if n:
            raw.tables[name] = t.filter(npa.array(~over))
            raw.counts.events_by_table[name] -= n
            raw.counts.skipped[END_RANGE] += n
    return raw


def set_rank(t: pa.Table, rank: int) -> pa.Table:
    i = t.schema.get_field_index("rank")
    return t.set_column(i, "rank", A.from_numpy(np.full(t.num_rows, rank, dtype=np.int32)))


def device_warnings(tables: dict[str, pa.Table], counts: Counts) -> None:
    """Warn when ``tables`` hold no GPU activity: a CPU-only trace, or a device tracekit does not model
    (its categories, from other_events)."""
    if tables["gpu_activity"].num_rows == 0:
        other = tables["other_events"]
        cat = other["cat"].combine_chunks()
        used = np.unique(A.to_numpy(cat.indices, -1)) if other.num_rows else np.zeros(0, dtype=np.int64)
        cats = {c or "" for c in cat.dictionary.take(A.from_numpy(used[used >= 0].astype(np.int64))).to_pylist()} if other.num_rows else set()
        dev = sorted(c for c in cats if c.lower() in NON_CUDA_DEVICE_CATS)
        if dev:
            counts.warnings[f"non-CUDA device trace: device events ({', '.join(dev)}) kept in other_events"] += 1
        else:
            counts.warnings["no GPU activity (CPU-only trace)"] += 1


def read_trace_tables(path: str | Path) -> dict[str, pa.Table]:
    """Every table of one trace, in memory (small traces and tests)."""
    return read_file(path).tables
