"""Trace events -> the tables of tracekit.model.schema, with linkage and counts.

Per chunk of events (tracekit.ingest.framing), everything is columnar: the events
become one Arrow struct array, a routing vector says which table each event
goes to, and each table takes its rows with one ``take``. Only the events
whose args must become JSON text (unknown categories, input shapes, counters)
are visited in Python. Linkage (runtime -> kernel by correlation, kernel ->
CPU op by External id with time nesting as fallback, parent_id by nesting)
runs once per file on the assembled tables, vectorised with numpy.

Nothing is dropped silently: ``counts`` says how many events were read, how
many went to each table, and how many were skipped and why;
read == sum(events per table) + sum(skipped).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

# Table.take imports pyarrow.compute: load it with the module, not inside a timed ingest.
import pyarrow.compute

from tracekit.errors import TraceFormatError, UsageError
from tracekit.ingest import arrays as A
from tracekit.ingest import native as ingest_native
from tracekit.ingest.duckdb_reader import EngineConfig, TableBuilder, extract_array, open_events  # noqa: F401
from tracekit.ingest.framing import (  # noqa: F401 - the routing sets are part of this module's interface
    ANNOTATION_CATS,
    CPU_CATS,
    GPU_CATS,
    RUNTIME_CATS,
)
from tracekit.model import schema as _schema

# Device-side activity of accelerators tracekit does not model as GPU activity.
NON_CUDA_DEVICE_CATS = {"mtia_ccp_events"}
TABLES_OUT = ("gpu_activity", "cpu_ops", "runtime", "annotations", "counters", "memory", "other_events")
OP_ID_STRIDE = 1 << 40  # op_id = file index * stride + row: unique across the files of a run


@dataclass
class Counts:
    events_read: int = 0
    by_ph: Counter[str] = field(default_factory=Counter)
    events_by_table: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    warnings: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "events_read": self.events_read,
            "by_ph": dict(self.by_ph),
            "events_by_table": dict(self.events_by_table),
            "skipped": dict(self.skipped),
            "warnings": dict(self.warnings),
        }


@dataclass
class FileResult:
    path: str
    rank: int
    tables: dict[str, pa.Table]
    meta: dict[str, Any]
    counts: Counts
    bytes_in: int
    seconds: float
    truncated: str | None = None


# --------------------------------------------------------------------------- linkage
def _nest_parents(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Index of the innermost enclosing interval with the same key, or -1.

    Rows must be sorted by (key, start, -end). The parent of row i is i-1 if it
    contains i, else the parent of i-1 if that contains i, and so on: climb
    for all rows at once, one level per iteration (depth iterations).
    """
    n = len(start)
    parent = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return parent
    cand = np.arange(n, dtype=np.int64) - 1
    todo = np.arange(1, n, dtype=np.int64)
    c = cand[todo]
    while len(todo):
        ok = (key[c] == key[todo]) & (start[c] <= start[todo]) & (end[c] >= end[todo])
        parent[todo[ok]] = c[ok]
        # Not containing: climb to that candidate's own parent (already final,
        # since parents come earlier in the order and are resolved first).
        rest = ~ok & (key[c] == key[todo])
        todo, c = todo[rest], c[rest]
        c = parent[c]
        alive = c >= 0
        todo, c = todo[alive], c[alive]
    return parent


def _innermost_enclosing(key: np.ndarray, start: np.ndarray, end: np.ndarray, parent: np.ndarray,
                         qkey: np.ndarray, qt: np.ndarray) -> np.ndarray:
    """For each query (key, time) the index of the innermost interval containing it, or -1."""
    if len(start) == 0 or len(qt) == 0:
        return np.full(len(qt), -1, dtype=np.int64)
    # Intervals are sorted by (key, start): make that one monotonic int64 by
    # giving each key its own span of the time axis, then one searchsorted.
    lo = int(min(start.min(), qt.min()))
    span = int(max(end.max(), qt.max())) - lo + 1
    flat = key * span + (start - lo)
    qflat = qkey * span + (qt - lo)
    pos = np.searchsorted(flat, qflat, side="right") - 1
    pos[qkey < 0] = -1
    res = np.full(len(qt), -1, dtype=np.int64)
    todo = np.flatnonzero(pos >= 0)
    c = pos[todo]
    while len(todo):
        same = key[c] == qkey[todo]
        ok = same & (end[c] >= qt[todo])
        res[todo[ok]] = c[ok]
        rest = same & ~ok
        todo, c = todo[rest], parent[c[rest]]
        alive = c >= 0
        todo, c = todo[alive], c[alive]
    return res


def _np(col: Any, fill: int) -> np.ndarray:
    return A.to_numpy(col, fill).astype(np.int64, copy=False)


def _thread_codes(pid: np.ndarray, tid: np.ndarray, qpid: np.ndarray, qtid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One int64 code per (pid, tid) pair, for the rows and for queries (-1: a thread the rows lack).

    Pids and tids are ranked among the rows' distinct values, so the pair packs into one
    int64 whatever their size (tids can be large OS ids); no per-row Python.
    """
    up, ut = np.unique(pid), np.unique(tid)
    code = np.searchsorted(up, pid) * len(ut) + np.searchsorted(ut, tid)
    pi = np.minimum(np.searchsorted(up, qpid), len(up) - 1)
    ti = np.minimum(np.searchsorted(ut, qtid), len(ut) - 1)
    ok = (up[pi] == qpid) & (ut[ti] == qtid)
    return code, np.where(ok, pi * len(ut) + ti, -1)


def _first_match(keys: np.ndarray, valid: np.ndarray, queries: np.ndarray, qvalid: np.ndarray) -> np.ndarray:
    """For each query the index of the first row with an equal key, or -1."""
    idx = np.flatnonzero(valid)
    out = np.full(len(queries), -1, dtype=np.int64)
    if len(idx) == 0 or len(queries) == 0:
        return out
    uk, first = np.unique(keys[idx], return_index=True)
    pos = np.minimum(np.searchsorted(uk, queries), len(uk) - 1)
    hit = qvalid & (uk[pos] == queries)
    out[hit] = idx[first[pos[hit]]]
    return out


def _link(tables: dict[str, pa.Table], file_index: int, counts: Counts) -> dict[str, pa.Table]:
    cpu = tables["cpu_ops"]
    # cpu_ops: sort by thread then time (outer before inner), assign op ids and parents.
    if cpu.num_rows:
        pid, tid = _np(cpu["pid"], -1), _np(cpu["tid"], -1)
        ts = _np(cpu["ts_ns"], 0)
        end = ts + _np(cpu["dur_ns"], 0)
        order = np.lexsort((-end, ts, tid, pid))
        cpu = cpu.take(A.from_numpy(order))
        pid, tid, ts, end = pid[order], tid[order], ts[order], end[order]
        thread_key = _thread_codes(pid, tid, pid[:0], tid[:0])[0]
        parent = _nest_parents(thread_key, ts, end)
        op_id = np.arange(cpu.num_rows, dtype=np.int64) + file_index * OP_ID_STRIDE
        parent_id = np.where(parent >= 0, op_id[np.maximum(parent, 0)], -1)
        cpu = cpu.set_column(cpu.schema.get_field_index("op_id"), "op_id", A.from_numpy(op_id))
        cpu = cpu.set_column(cpu.schema.get_field_index("parent_id"), "parent_id",
                             A.from_numpy(parent_id, parent >= 0))
    tables["cpu_ops"] = cpu

    gpu, rt = tables["gpu_activity"], tables["runtime"]
    if gpu.num_rows == 0:
        return tables
    # Kernel -> runtime call with the same correlation (the first such call: a cudaGraphLaunch
    # has one correlation for many kernels, a many-to-one join).
    gcorr_valid = A.valid(gpu["correlation"])
    rcorr_valid = A.valid(rt["correlation"])
    rix = _first_match(_np(rt["correlation"], 0), rcorr_valid, _np(gpu["correlation"], 0), gcorr_valid)
    has_rt = rix >= 0
    take_rt = A.from_numpy(np.maximum(rix, 0), has_rt)
    launch_name = rt["name"].take(take_rt) if rt.num_rows else pa.nulls(gpu.num_rows, pa.string())
    ext_v, ext_ok = _np(gpu["external_id"], 0), A.valid(gpu["external_id"])
    if rt.num_rows:  # the kernel's own External id, else its runtime call's
        rt_ext = rt["external_id"].take(take_rt)
        ext_v = np.where(ext_ok, ext_v, _np(rt_ext, 0))
        ext_ok = ext_ok | A.valid(rt_ext)
    # External id -> the innermost cpu_op with it (latest start wins).
    op_id = np.full(gpu.num_rows, -1, dtype=np.int64)
    if cpu.num_rows:
        cext_valid = A.valid(cpu["external_id"])
        cext, cts = _np(cpu["external_id"], 0), _np(cpu["ts_ns"], 0)
        order = np.lexsort((-cts, cext))  # per External id, latest start first
        cix = _first_match(cext[order], cext_valid[order], ext_v, ext_ok)
        ids = A.to_numpy(cpu["op_id"])
        op_id = np.where(cix >= 0, ids[order[np.maximum(cix, 0)]], -1)
    # Fallback: the innermost CPU op on the launching thread enclosing the runtime call.
    missing = (op_id < 0) & has_rt
    if rt.num_rows:
        missing &= A.valid(rt["ts_ns"].take(take_rt))
    if missing.any() and cpu.num_rows:
        cpid, ctid = _np(cpu["pid"], -1), _np(cpu["tid"], -1)
        cts = _np(cpu["ts_ns"], 0)
        cend = cts + _np(cpu["dur_ns"], 0)
        r = rix[missing]
        tkey, qkey = _thread_codes(cpid, ctid, _np(rt["pid"], -1)[r], _np(rt["tid"], -1)[r])
        parent_idx = _parents_as_index(cpu)
        hit = _innermost_enclosing(tkey, cts, cend, parent_idx, qkey, _np(rt["ts_ns"], 0)[r])
        ids = A.to_numpy(cpu["op_id"])
        found = hit >= 0
        op_id[np.flatnonzero(missing)[found]] = ids[hit[found]]
        n_found = int(found.sum())
        if n_found:
            counts.warnings["kernels linked to CPU ops by time nesting"] += n_found
    op_arr = A.from_numpy(op_id, op_id >= 0)
    unlinked = op_arr.null_count
    if unlinked:
        counts.warnings["GPU activity without a launching CPU op"] += unlinked
    gpu = gpu.set_column(gpu.schema.get_field_index("op_id"), "op_id", op_arr)
    ln_type = _schema.schema("gpu_activity").field("launch_name").type
    gpu = gpu.set_column(gpu.schema.get_field_index("launch_name"), "launch_name",
                         _schema.conform("gpu_activity", pa.table({"launch_name": launch_name}))["launch_name"].cast(ln_type))
    tables["gpu_activity"] = gpu
    return tables


def _parents_as_index(cpu: pa.Table) -> np.ndarray:
    ids = A.to_numpy(cpu["op_id"])
    par = A.to_numpy(cpu["parent_id"], -1)
    base = ids[0] if len(ids) else 0
    return np.where(par >= 0, par - base, -1)


# --------------------------------------------------------------------------- one file
_TIMED = "('gpu_activity', 'cpu_ops', 'runtime', 'annotations')"


def _count(b: TableBuilder, counts: Counts) -> None:
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
    (over,) = b.rows("SELECT count(*) FILTER (ts_overflow) FROM ev")[0]
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
# table dropped first (TableBuilder.stage): on a 2 GB trace peak RSS 3.57 -> 2.49-2.52 GB for
# +7-13% CPU; below it staging only costs (84 MB trace: +0.4 s wall, +0.25 s CPU, no RSS saved).
STAGE_BYTES = 1 << 30


def _rank_of(meta: dict[str, Any], rank: int | None) -> int:
    """The rank given, else the trace's distributedInfo.rank, else 0."""
    if rank is not None:
        return rank
    dist = meta.get("distributedInfo")
    trace_rank = dist.get("rank") if isinstance(dist, dict) else None
    return trace_rank if isinstance(trace_rank, int) else 0


def _ranked(name: str, t: pa.Table, rank: int) -> pa.Table:
    """A reader's raw table with its rank column, conformed to the schema."""
    return _schema.conform(name, t.append_column("rank", A.from_numpy(np.full(t.num_rows, rank, dtype=np.int32))))


def _build_tables(b: TableBuilder, rank: int, counts: Counts, stage: bool = False) -> dict[str, pa.Table]:
    out: dict[str, pa.Table] = {}
    if stage:
        b.stage([name for name in TABLES_OUT if counts.events_by_table.get(name, 0)])
    for name in TABLES_OUT:
        if counts.events_by_table.get(name, 0) == 0:
            out[name] = _schema.empty(name)
            continue
        if name == "counters":
            rows, empty = b.counter_rows()
            if empty:
                counts.warnings["counter events without values"] += empty
            cols: list[Any] = list(zip(*rows, strict=True)) if rows else [[], [], [], []]
            n = len(rows)
            out[name] = _schema.from_columns("counters", {
                "rank": [rank] * n, "ts_ns": cols[0], "device": cols[1], "metric": cols[2], "value": cols[3],
                "source": ["kineto"] * n,
            })
            continue
        out[name] = _ranked(name, b.table(name), rank)
    return out


def read_file(
    path: str | Path,
    *,
    rank: int | None = None,
    file_index: int = 0,
    threads: int | None = None,
    work_dir: str | Path | None = None,
) -> FileResult:
    """Read one trace into tables (in memory). Raises TraceFormatError if it has no events.

    The native scanner reads it (tracekit.ingest.native) unless the extension is not built or
    TRACEKIT_INGEST_ENGINE=duckdb; then the DuckDB reader does, and only it uses ``threads``
    (default: the cores available; 1 when files are read in parallel) and ``work_dir`` (where the
    extracted array and DuckDB's spill files go, default TMPDIR; removed after).
    Safe to call from a worker process (process pool, Ray task): it shares no state.
    """
    t0 = time.perf_counter()
    if ingest_native.available():
        return _read_native(path, rank, file_index, t0)
    tmp = Path(tempfile.mkdtemp(prefix="tracekit-ingest-", dir=work_dir))
    try:
        b, ex = open_events(path, tmp, EngineConfig(threads=threads or 0))
        meta = ex.meta
        counts = Counts()
        try:
            _count(b, counts)
            if counts.events_read == 0:
                raise TraceFormatError(ex.truncated or f"{path}: traceEvents is empty")
            final_rank = _rank_of(meta, rank)
            tables = _build_tables(b, final_rank, counts, stage=ex.bytes_in >= STAGE_BYTES)
        finally:
            b.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    tables = _link(tables, file_index, counts)
    _device_warnings(tables, counts)
    return FileResult(str(path), final_rank, tables, meta, counts, ex.bytes_in, time.perf_counter() - t0, ex.truncated)


def _read_native(path: str | Path, rank: int | None, file_index: int, t0: float) -> FileResult:
    """read_file through the native scanner (tracekit.ingest.native)."""
    sc = ingest_native.scan(path)
    counts = Counts()
    ingest_native.count(sc, counts)
    meta = sc.meta
    final_rank = _rank_of(meta, rank)
    raw = ingest_native.tables(sc, counts)
    bytes_in, truncated = sc.bytes_in, sc.truncated
    del sc  # the scanner's columns: the tables below hold what is needed
    tables: dict[str, pa.Table] = {}
    for name in TABLES_OUT:
        t = raw.pop(name, None)
        if t is None or t.num_rows == 0:
            tables[name] = _schema.empty(name)
            continue
        tables[name] = _ranked(name, t, final_rank)
    tables = _link(tables, file_index, counts)
    _device_warnings(tables, counts)
    ingest_native.trim_heap()  # the temporaries of table building and linkage
    return FileResult(str(path), final_rank, tables, meta, counts, bytes_in, time.perf_counter() - t0, truncated)


def _set_rank(t: pa.Table, rank: int) -> pa.Table:
    i = t.schema.get_field_index("rank")
    return t.set_column(i, "rank", A.from_numpy(np.full(t.num_rows, rank, dtype=np.int32)))


def _device_warnings(tables: dict[str, pa.Table], counts: Counts) -> None:
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


# --------------------------------------------------------------------------- many files -> run dir
def _expand(paths: Sequence[str | Path]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.name.endswith((".json", ".json.gz")))
            if not found:
                raise UsageError(f"{p}: no .json or .json.gz traces in this directory")
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            raise UsageError(f"{p}: no such file")
    if not out:
        raise UsageError("no trace given")
    return out


def _worker(args: tuple[str, int | None, int, int | None]) -> FileResult | TraceFormatError:
    path, rank, idx, threads = args
    try:
        return read_file(path, rank=rank, file_index=idx, threads=threads)
    except TraceFormatError as exc:
        return exc


def ingest(
    paths: Sequence[str | Path],
    out: str | Path,
    *,
    force: bool = False,
    jobs: int | None = None,
    use_cache: bool = True,
) -> Any:
    """Ingest traces into the run directory ``out``; return its RunDir.

    Several files become one dataset partitioned by ``rank`` (from
    distributedInfo.rank, else file order), read in parallel processes.
    run.json stays "incomplete" until every table is written.
    """
    from tracekit.ingest import cache as ingest_cache

    files = _expand(paths)
    key = ingest_cache.cache_key(files)
    if use_cache:
        hit = ingest_cache.lookup(out, key)
        if hit is not None:
            return hit
    return _ingest_files(files, key, out, force=force, jobs=jobs)


def _ingest_files(files: list[Path], key: str, out: str | Path, *, force: bool, jobs: int | None) -> Any:
    from tracekit.store.rundir import RunDir

    t0 = time.perf_counter()
    run = RunDir.create(out, force=force, source="ingest", inputs=[str(f) for f in files])
    multi = len(files) > 1
    n_jobs = max(1, min(jobs or os.cpu_count() or 1, len(files)))
    # Files in parallel: one DuckDB thread each, so processes x threads stays at the core count.
    tasks = [(str(f), None, i, 1 if n_jobs > 1 else None) for i, f in enumerate(files)]
    results: list[FileResult | TraceFormatError]
    if n_jobs > 1:
        with ProcessPoolExecutor(n_jobs) as pool:
            results = list(pool.map(_worker, tasks))
    else:
        results = [_worker(t) for t in tasks]
    good = [r for r in results if isinstance(r, FileResult)]
    errors = [r for r in results if isinstance(r, TraceFormatError)]
    for e in errors:
        run.add_warning(e.message)
    if not good:
        run.mark_incomplete("nothing usable was read")
        raise errors[0] if len(errors) == 1 else TraceFormatError(f"no usable events in {len(files)} traces: {errors[0].message}")
    if multi:
        # Ranks from distributedInfo when they are distinct, else file order.
        ranks = [r.rank for r in good]
        if len(set(ranks)) != len(ranks):
            for i, r in enumerate(good):
                r.rank = i
                r.tables = {k: _set_rank(v, i) for k, v in r.tables.items()}
            run.add_warning("ranks from file order (distributedInfo.rank missing or repeated)")
    rows = {t: sum(r.tables[t].num_rows for r in good) for t in TABLES_OUT}
    for t in TABLES_OUT:
        run.write_table(t, pa.concat_tables([r.tables[t] for r in good]) if len(good) > 1 else good[0].tables[t])
        for r in good:  # written: let its memory go before the next table is encoded
            r.tables[t] = _schema.empty(t)
        ingest_native.trim_heap()  # and the Parquet encoder's buffers (freed, but kept by malloc)
    total = Counts()
    for r in good:
        total.events_read += r.counts.events_read
        total.by_ph.update(r.counts.by_ph)
        total.events_by_table.update(r.counts.events_by_table)
        total.skipped.update(r.counts.skipped)
        total.warnings.update(r.counts.warnings)
    seconds = time.perf_counter() - t0
    mb = sum(r.bytes_in for r in good) / 1e6
    info = {
        "cache_key": key,
        "files": [
            {"path": r.path, "rank": r.rank, "events": r.counts.events_read, "bytes": r.bytes_in,
             "seconds": round(r.seconds, 3), "truncated": r.truncated}
            for r in good
        ],
        "counts": {**total.as_dict(), "rows_by_table": rows},
        "seconds": round(seconds, 3),
        "mb_per_s": round(mb / seconds, 1) if seconds > 0 else None,
    }
    trace_meta = {r.path: _trace_meta(r.meta) for r in good} if multi else _trace_meta(good[0].meta)
    run.update_manifest(ingest=info, trace_meta=trace_meta)
    for w, n in total.warnings.items():
        run.add_warning(f"{w}: {n}")
    truncated = [r.truncated for r in good if r.truncated]
    if truncated or errors:
        reason = truncated[0] if truncated else errors[0].message
        run.mark_incomplete(reason)
        raise TraceFormatError(f"{reason} (tables hold the events read before it; run marked incomplete)")
    run.mark_complete()
    return run


_META_DROP = {"traceEvents"}


def _trace_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The top-level keys of the trace, as they were (deviceProperties, distributedInfo, ...)."""
    return {k: v for k, v in meta.items() if k not in _META_DROP}


