"""One big trace into a run's tables chunk by chunk: the same tables as reading it whole, in less memory.

The native scanner hands out the columns of every ``CHUNK_EVENTS`` elements (tracekit.ingest.native
``scan(on_chunk=...)``); each chunk's columns go to a temporary file at once, since building a
chunk's tables needs the file's metadata, which may follow the events (``baseTimeNanoseconds``).
Then chunk by chunk: counts, tables (tracekit.ingest.native.tables; ac2g flows of the whole file
where a correlation is missing), ends past int64 ns skipped, rank; other_events is written as it
comes, every other table is kept as runs (tracekit.ingest.spill) with its key columns in memory.
Last, the whole-file steps run on the key columns alone: ts order (a stable sort of the chunks'
sorted runs is the stable sort of the file) and linkage (tracekit.ingest.linkage.link itself, on
tables of key columns), and each table is written by gathering its rows in that order.

Memory: one chunk, plus the key columns (~40 bytes per CPU op and runtime call, ~24 per GPU activity,
8 per other timed row) and linkage's temporaries over them, so it still grows with the trace. Traces
that replay CUDA graphs are not read this way (``read_into`` returns None: the graph merge needs
whole tables).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tracekit.errors import TraceFormatError
from tracekit.ingest import arrays as A
from tracekit.ingest import chunk_counts, linkage, native, reader
from tracekit.ingest.capture import GRAPH_LAUNCH
from tracekit.ingest.result import TABLES_OUT, Counts, FileResult, RawScan, not_a_trace
from tracekit.ingest.spill import RawChunks, Runs
from tracekit.model import schema as _schema
from tracekit.store import heap
from tracekit.store.rundir import RunDir
from tracekit.store.windows import ChunkWriter

CHUNKED_MIN_BYTES = 512 << 20  # traces of at least this many bytes of JSON are read in chunks
CHUNK_EVENTS = 1 << 19  # elements per chunk (~150 MB of JSON, ~80 MB of columns)

# The key columns each table keeps in memory across chunks: what ordering and linkage read.
KEYS = {
    "cpu_ops": ("pid", "tid", "ts_ns", "dur_ns", "external_id"),
    "gpu_activity": ("ts_ns", "correlation", "external_id"),
    "runtime": ("ts_ns", "name", "pid", "tid", "correlation", "external_id"),
    "annotations": ("ts_ns",),
    "memory": ("ts_ns",),
    "counters": ("ts_ns",),
}
Flows = dict[str, dict[tuple[int, int, int], int]]


def wanted(path: Path) -> bool:
    """Whether ``path`` is read in chunks: the native scanner is in use and the trace is big (gzip's
    stated size is mod 2^32: a gzip file of an eighth of the bound counts as big too)."""
    if not native.available():
        return False
    size, json_bytes = path.stat().st_size, native.inflated_size(path)
    return json_bytes >= CHUNKED_MIN_BYTES or (json_bytes != size and size * 8 >= CHUNKED_MIN_BYTES)


class _Replays(Exception):
    """The trace replays CUDA graphs: read it whole."""


def read_into(run: RunDir, path: Path, file_index: int = 0) -> FileResult | None:
    """Read ``path`` and write its tables into ``run`` (as reader.read_file then RunDir.write_table
    would); the FileResult's ``written`` gives each table's rows. None where the trace replays CUDA
    graphs (nothing written). TraceFormatError as read_file, and where the file holds no trace
    (tracekit.ingest.result.not_a_trace): then no table is written."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=".ingest-chunks-", dir=run.path) as tmp:
        folder = Path(tmp)
        raw = RawChunks(folder)
        missing: dict[str, set[tuple[int, int, int]]] = {"f": set(), "s": set()}

        def look(cols: dict[str, Any]) -> None:
            s = native.Scanned(cols, {}, 0, None, 0, [])  # no base yet: raw ts
            if _replays_graphs(s):
                raise _Replays
            for ph, keys in native.missing_flow_keys(s).items():
                missing[ph] |= keys

        def keep(cols: dict[str, Any]) -> None:
            look(cols)
            raw.save(cols)

        try:
            last = native.scan(path, chunk_events=CHUNK_EVENTS, on_chunk=keep)
            look(last.cols)
        except _Replays:
            return None
        return _build(run, path, file_index, raw, last, folder, _flows(raw, last, missing), t0)


def _replays_graphs(s: native.Scanned) -> bool:
    """Whether a runtime call of ``s`` launches a CUDA / HIP graph (tracekit.ingest.capture's test)."""
    used = np.unique(s.arr(f"r{native.R_RUNTIME}.name", np.int32))
    names = s.dictionary("name").take(A.from_numpy(used[used >= 0].astype(np.int64))).to_pylist()
    return any(n and GRAPH_LAUNCH.search(n) for n in names)


def _chunks(raw: RawChunks, last: native.Scanned) -> Callable[[int], native.Scanned]:
    """Chunk ``i`` as a Scanned with the whole file's metadata and base (notes: the last's only)."""
    def get(i: int) -> native.Scanned:
        if i == raw.count:
            return last
        return native.Scanned(raw.load(i), last.meta, 0, None, last.offset_ns, [])
    return get


def _flows(raw: RawChunks, last: native.Scanned, missing: dict[str, set[tuple[int, int, int]]]) -> native.FlowLookup | None:
    """The ac2g flow ids of the whole file at the keys some row misses a correlation at (None: none
    does). ``missing`` holds raw ts (no base): the lookup is by ts with the base, as the flows'."""
    if not (missing["f"] or missing["s"]):
        return None
    wrap = 1 << 64
    want = {ph: {(p, t, (ts + last.offset_ns + (1 << 63)) % wrap - (1 << 63)) for p, t, ts in keys}
            for ph, keys in missing.items()}
    found: Flows = {"f": {}, "s": {}}
    get = _chunks(raw, last)
    for i in range(raw.count + 1):
        s = get(i)
        for ph in ("f", "s"):
            if not want[ph]:
                continue
            for key, v in native.flow_ids(s, ph).items():
                if key in want[ph] and (key not in found[ph] or v < found[ph][key]):
                    found[ph][key] = v
    return lambda ph: found[ph]


class _Keys:
    """A table's key columns, chunk by chunk, as arrays of their own (not views of a chunk's)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.parts: dict[str, list[pa.Array]] = {n: [] for n in names}

    def add(self, t: pa.Table) -> None:
        every = A.from_numpy(np.arange(t.num_rows, dtype=np.int64))
        for n in self.names:
            self.parts[n].append(t[n].combine_chunks().take(every))

    def column(self, name: str, like: pa.DataType, keep: bool = False) -> pa.Array:
        """The column of every chunk, as one array (``keep``: not dropped from here)."""
        parts = self.parts[name] if keep else self.parts.pop(name)
        if not parts:
            return pa.nulls(0, like)  # pa.array([]) would load pandas (tracekit.model.npa)
        out = pa.chunked_array(parts).unify_dictionaries().combine_chunks() \
            if pa.types.is_dictionary(like) else pa.concat_arrays(parts)
        del parts
        heap.trim()  # the chunks' small parts, freed but kept by malloc
        return out


def _build(run: RunDir, path: Path, file_index: int, raw: RawChunks, last: native.Scanned, folder: Path,
           flows: native.FlowLookup | None, t0: float) -> FileResult:
    counted, built = Counts(), Counts()  # what native.count says, and what building the tables says
    first_ph: dict[str, tuple[int, int]] = {}  # by_ph key -> (route, code) where the whole file's count meets it
    rank = reader.rank_of(last.meta, None)
    runs = {t: Runs(folder, t, _schema.schema(t)) for t in KEYS}
    keys = {t: _Keys(cols) for t, cols in KEYS.items()}
    other_cats: set[str] = set()
    get = _chunks(raw, last)
    with ChunkWriter(run, "other_events") as other:
        for i in range(raw.count + 1):
            s = get(i)
            native.count(s, counted)
            chunk_counts.note_ph(s, first_ph)
            tabs = reader.skip_overflowing_ends(RawScan(native.tables(s, built, flows), {}, built, 0, None)).tables
            del s
            if i < raw.count:
                raw.drop(i)
            for name in TABLES_OUT:
                t = tabs.pop(name, None)
                if t is None or t.num_rows == 0:
                    continue
                t = reader.ranked(name, t, rank)
                if name == "other_events":
                    other.write(t)
                    other_cats |= _used(t["cat"])
                else:
                    keys[name].add(t)
                    runs[name].append(t)
            del tabs
            heap.trim()
        last.cols.clear()
        counts = chunk_counts.merged(counted, built, first_ph, last.notes)
        res = FileResult(str(path), rank, {t: _schema.empty(t) for t in TABLES_OUT}, last.meta, counts,
                         last.bytes_in, 0.0, last.truncated)
        why = not_a_trace(res)
        if why:
            raise TraceFormatError(why)
    orders = {t: _ts_order(keys[t].column("ts_ns", pa.int64(), keep=t == "runtime")) for t in KEYS if t != "cpu_ops"}
    written = {"other_events": other.rows, **_write_linked(run, file_index, runs, keys, orders, counts)}
    for name in ("runtime", "annotations", "memory", "counters"):
        written[name] = _write(run, name, runs[name], orders[name])
    cats = sorted(other_cats)
    probe = {"gpu_activity": pa.table({"n": pa.nulls(written["gpu_activity"])}),
             "other_events": pa.table({"cat": A.dictionary(np.arange(len(cats), dtype=np.int32), A.strings(cats))})}
    reader.device_warnings(probe, counts)
    res.written, res.seconds = written, time.perf_counter() - t0
    return res


def _used(col: Any) -> set[str]:
    """The distinct non-null values of a dictionary column, as device_warnings reads them ('' for null)."""
    d = col.combine_chunks()
    used = np.unique(A.to_numpy(d.indices, -1))
    return {c or "" for c in d.dictionary.take(A.from_numpy(used[used >= 0].astype(np.int64))).to_pylist()}


def _ts_order(ts: pa.Array) -> np.ndarray | None:
    """Row order by ts, as the whole path's sort (native.ts_order); None where already in order."""
    return native.ts_order(A.to_numpy(ts), A.valid(ts))


def _write(run: RunDir, name: str, runs: Runs, order: np.ndarray | None,
           extra: Callable[[pa.Table, int], pa.Table] | None = None) -> int:
    """Write table ``name`` from its runs in ``order`` (``extra(batch, first row)``: columns set)."""
    with ChunkWriter(run, name) as w:
        lo = 0
        for batch in runs.gather(order):
            w.write(extra(batch, lo) if extra else batch)
            lo += batch.num_rows
            del batch
            heap.trim()
    return w.rows


def _setter(ids: pa.Table) -> Callable[[pa.Table, int], pa.Table]:
    """A batch starting at row ``lo`` of its table, with ``ids``' columns (rows lo...) in place of its own."""
    def put(batch: pa.Table, lo: int) -> pa.Table:
        for name in ids.column_names:
            batch = batch.set_column(batch.schema.get_field_index(name), name, ids[name].slice(lo, batch.num_rows))
        return batch
    return put


def _write_linked(run: RunDir, file_index: int, runs: dict[str, Runs], keys: dict[str, _Keys],
                  orders: dict[str, np.ndarray | None], counts: Counts) -> dict[str, int]:
    """cpu_ops and gpu_activity: linkage.link on tables of their key columns (and runtime's, in ts
    order), then each written in its order with the columns linkage set."""
    def key_table(name: str, extra: dict[str, Any]) -> pa.Table:  # extra: the columns linkage sets (null type: no buffers)
        schema = _schema.schema(name)
        t = pa.table({**{c: keys[name].column(c, schema.field(c).type) for c in KEYS[name] if c in keys[name].parts},
                      **extra})
        order = orders.get(name)
        return t if order is None else t.take(A.from_numpy(order))

    n_cpu, n_gpu = runs["cpu_ops"].rows, runs["gpu_activity"].rows
    linked = linkage.link({
        "cpu_ops": key_table("cpu_ops", {"op_id": pa.nulls(n_cpu), "parent_id": pa.nulls(n_cpu),
                                         "row": A.from_numpy(np.arange(n_cpu, dtype=np.int64))}),
        "gpu_activity": key_table("gpu_activity", {"op_id": pa.nulls(n_gpu), "launch_name": pa.nulls(n_gpu)}),
        "runtime": key_table("runtime", {}),
    }, file_index, counts)
    cpu, gpu = linked.pop("cpu_ops"), linked.pop("gpu_activity")
    del linked
    cpu_rows = A.to_numpy(cpu["row"])
    out = {"cpu_ops": _write(run, "cpu_ops", runs["cpu_ops"], cpu_rows, _setter(cpu.select(["op_id", "parent_id"])))}
    del cpu, cpu_rows
    heap.trim()
    out["gpu_activity"] = _write(run, "gpu_activity", runs["gpu_activity"], orders["gpu_activity"],
                                 _setter(gpu.select(["op_id", "launch_name"])))
    return out


__all__ = ["CHUNKED_MIN_BYTES", "CHUNK_EVENTS", "read_into", "wanted"]
