"""Trace events -> the tables of tracekit.schema, with linkage and counts.

Per chunk of events (tracekit.kineto), everything is columnar: the events
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

import gc
import os
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracekit import schema as _schema
from tracekit.errors import TraceFormatError, UsageError
from tracekit.kineto import DUR_TEXT_RE, TS_TEXT_RE, TraceReader, TruncatedTrace, events_to_struct, exact_ns

# Category routing (lower-cased cat). Anything not listed goes to other_events.
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver", "hip_runtime", "mtia_runtime"}
CPU_CATS = {"cpu_op", "operator", "python_function"}
ANNOTATION_CATS = {"user_annotation", "gpu_user_annotation", "trace"}
# Device-side activity of accelerators tracekit does not model as GPU activity.
NON_CUDA_DEVICE_CATS = {"mtia_ccp_events"}
TABLES_OUT = ("gpu_activity", "cpu_ops", "runtime", "annotations", "counters", "memory", "other_events")
_ROUTES = ("skip", *TABLES_OUT)
_R = {name: i for i, name in enumerate(_ROUTES)}
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


def _lower(arr: pa.Array) -> pa.Array:
    return pc.utf8_lower(arr)


def _route(ev: pa.StructArray, counts: Counts) -> np.ndarray:
    ph = pc.fill_null(pc.struct_field(ev, "ph"), "")
    cat = _lower(pc.fill_null(pc.struct_field(ev, "cat"), ""))
    name = pc.struct_field(ev, "name")
    has_ts = pc.is_valid(pc.struct_field(ev, "ts")).to_numpy(zero_copy_only=False)
    phn = np.asarray(ph.to_numpy(zero_copy_only=False), dtype=object)
    catn = np.asarray(cat.to_numpy(zero_copy_only=False), dtype=object)
    for k, v in zip(*np.unique(phn, return_counts=True), strict=True):
        counts.by_ph[str(k) or "(none)"] += int(v)
    route = np.full(len(ev), _R["other_events"], dtype=np.int8)
    is_x = phn == "X"
    route[is_x & np.isin(catn, list(GPU_CATS))] = _R["gpu_activity"]
    route[is_x & np.isin(catn, list(RUNTIME_CATS))] = _R["runtime"]
    route[is_x & np.isin(catn, list(CPU_CATS))] = _R["cpu_ops"]
    route[is_x & np.isin(catn, list(ANNOTATION_CATS))] = _R["annotations"]
    is_inst = (phn == "i") | (phn == "I")
    mem = is_inst & pc.fill_null(pc.equal(name, "[memory]"), False).to_numpy(zero_copy_only=False)
    route[mem] = _R["memory"]
    route[phn == "C"] = _R["counters"]
    # Timeline tables need a position; metadata and other events may lack one.
    modelled = (route != _R["other_events"]) & ~has_ts
    if modelled.any():
        counts.skipped["no ts"] += int(modelled.sum())
        route[modelled] = _R["skip"]
    invalid = phn == "?invalid"
    if invalid.any():
        counts.skipped["not a JSON object"] += int(invalid.sum())
        route[invalid] = _R["skip"]
    return route


def _json_texts(events: list[Any], idx: np.ndarray, key: str) -> list[str | None]:
    out: list[str | None] = []
    for i in idx.tolist():
        a = events[i].get("args")
        v = a.get(key) if isinstance(a, dict) else None
        out.append(None if v is None else orjson.dumps(v).decode())
    return out


class _Converter:
    """Turns chunks of events into per-table Arrow tables, counting everything."""

    def __init__(self, rank: int, offset_ns: int = 0) -> None:
        self.rank = rank
        self.offset_ns = offset_ns
        self.counts = Counts()
        self.parts: dict[str, list[pa.Table]] = {t: [] for t in TABLES_OUT}
        self.inexact = 0

    def add(self, events: list[Any], text: bytes) -> None:
        if not events:
            return
        self.counts.events_read += len(events)
        ev, slow = events_to_struct(events)
        if slow:
            self.counts.warnings["events with unexpected field types (coerced)"] += 1
        ts, ok1 = exact_ns(pc.struct_field(ev, "ts"), text, TS_TEXT_RE, offset_ns=self.offset_ns)
        dur, ok2 = exact_ns(pc.struct_field(ev, "dur"), text, DUR_TEXT_RE)
        if not (ok1 and ok2):
            self.counts.warnings["timestamps parsed as doubles (may be inexact below 1 us)"] += len(events)
        route = _route(ev, self.counts)
        for r, tname in enumerate(_ROUTES):
            if tname == "skip":
                continue
            idx = np.flatnonzero(route == r)
            if len(idx) == 0:
                continue
            self.counts.events_by_table[tname] += len(idx)
            take = pa.array(idx)
            sub = ev.take(take)
            t = getattr(self, "_" + tname)(sub, ts.take(take), dur.take(take), events, idx)
            self.parts[tname].append(t)

    # --- per table ---------------------------------------------------------
    def _common(self, sub: pa.StructArray, ts: pa.Array, dur: pa.Array, *, timed: bool = True) -> dict[str, Any]:
        n = len(sub)
        cols: dict[str, Any] = {"rank": pa.array(np.full(n, self.rank, dtype=np.int32)), "ts_ns": ts}
        if timed:
            neg = pc.fill_null(pc.less(dur, 0), False)
            nneg = pc.sum(neg).as_py() or 0
            if nneg:
                self.counts.warnings["negative dur (set to null)"] += nneg
                dur = pc.if_else(neg, pa.scalar(None, pa.int64()), dur)
            nnull = dur.null_count
            if nnull:
                self.counts.warnings["complete events without dur"] += nnull - nneg
            cols["dur_ns"] = dur
            cols["name"] = pc.struct_field(sub, "name")
            nname = cols["name"].null_count
            if nname:
                self.counts.warnings["events without name"] += nname
        return cols

    def _arg(self, sub: pa.StructArray, key: str) -> pa.Array:
        return pc.struct_field(pc.struct_field(sub, "args"), key)

    def _gpu_activity(self, sub: pa.StructArray, ts: pa.Array, dur: pa.Array, events: list[Any], idx: np.ndarray) -> pa.Table:
        c = self._common(sub, ts, dur)
        cat = _lower(pc.fill_null(pc.struct_field(sub, "cat"), ""))
        kind = pc.replace_substring_regex(cat, "^(gpu_)?", "")
        c["kind"] = kind
        c["device"] = pc.coalesce(self._arg(sub, "device"), pc.struct_field(sub, "pid"))
        c["stream"] = pc.coalesce(self._arg(sub, "stream"), pc.struct_field(sub, "tid"))
        c["correlation"] = self._arg(sub, "correlation")
        c["external_id"] = self._arg(sub, "External id")
        c["grid"] = self._arg(sub, "grid")
        c["block"] = self._arg(sub, "block")
        c["registers_per_thread"] = self._arg(sub, "registers per thread")
        c["shared_memory_bytes"] = self._arg(sub, "shared memory")
        c["bytes"] = self._arg(sub, "bytes")
        # Memcpy names carry the direction: "Memcpy HtoD (Pageable -> Device)".
        mk = pc.extract_regex(pc.fill_null(c["name"], ""), r"Memcpy (?P<k>[A-Za-z]+)")
        c["memcpy_kind"] = pc.if_else(pc.equal(kind, "memcpy"), pc.struct_field(mk, "k"), pa.scalar(None, pa.string()))
        return _schema.from_columns("gpu_activity", c)

    def _cpu_ops(self, sub: pa.StructArray, ts: pa.Array, dur: pa.Array, events: list[Any], idx: np.ndarray) -> pa.Table:
        c = self._common(sub, ts, dur)
        c["cat"] = pc.struct_field(sub, "cat")
        c["pid"] = pc.struct_field(sub, "pid")
        c["tid"] = pc.struct_field(sub, "tid")
        c["external_id"] = self._arg(sub, "External id")
        c["sequence_number"] = self._arg(sub, "Sequence number")
        c["input_dims"] = _json_texts(events, idx, "Input Dims")
        c["input_types"] = _json_texts(events, idx, "Input type")
        return _schema.from_columns("cpu_ops", c)

    def _runtime(self, sub: pa.StructArray, ts: pa.Array, dur: pa.Array, events: list[Any], idx: np.ndarray) -> pa.Table:
        c = self._common(sub, ts, dur)
        c["pid"] = pc.struct_field(sub, "pid")
        c["tid"] = pc.struct_field(sub, "tid")
        c["correlation"] = self._arg(sub, "correlation")
        c["external_id"] = self._arg(sub, "External id")
        return _schema.from_columns("runtime", c)

    def _annotations(self, sub: pa.StructArray, ts: pa.Array, dur: pa.Array, events: list[Any], idx: np.ndarray) -> pa.Table:
        c = self._common(sub, ts, dur)
        cat = pc.struct_field(sub, "cat")
        is_gpu = pc.fill_null(pc.equal(_lower(pc.fill_null(cat, "")), "gpu_user_annotation"), False)
        c["cat"] = cat
        c["pid"] = pc.struct_field(sub, "pid")
        c["tid"] = pc.struct_field(sub, "tid")
        null32 = pa.scalar(None, pa.int64())
        c["device"] = pc.if_else(is_gpu, pc.coalesce(self._arg(sub, "device"), c["pid"]), null32)
        c["stream"] = pc.if_else(is_gpu, pc.coalesce(self._arg(sub, "stream"), c["tid"]), null32)
        return _schema.from_columns("annotations", c)

    def _memory(self, sub: pa.StructArray, ts: pa.Array, dur: pa.Array, events: list[Any], idx: np.ndarray) -> pa.Table:
        c = self._common(sub, ts, dur, timed=False)
        c["device_type"] = self._arg(sub, "Device Type")
        c["device"] = self._arg(sub, "Device Id")
        c["addr"] = self._arg(sub, "Addr")
        c["bytes"] = self._arg(sub, "Bytes")
        c["total_allocated_bytes"] = self._arg(sub, "Total Allocated")
        c["total_reserved_bytes"] = self._arg(sub, "Total Reserved")
        return _schema.from_columns("memory", c)

    def _counters(self, sub: pa.StructArray, ts: pa.Array, dur: pa.Array, events: list[Any], idx: np.ndarray) -> pa.Table:
        # Long form: one row per (event, numeric arg). Counter events are few.
        tss = ts.to_pylist()
        pids = pc.struct_field(sub, "pid").to_pylist()
        rows_ts, rows_dev, rows_metric, rows_val = [], [], [], []
        for j, i in enumerate(idx.tolist()):
            args = events[i].get("args")
            name = events[i].get("name")
            if not isinstance(args, dict) or not args:
                self.counts.warnings["counter events without values"] += 1
                continue
            for k, v in args.items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    rows_ts.append(tss[j])
                    rows_dev.append(pids[j])
                    rows_metric.append(f"{name}.{k}" if name and k != name else str(k))
                    rows_val.append(float(v))
        n = len(rows_ts)
        return _schema.from_columns(
            "counters",
            {
                "rank": [self.rank] * n,
                "ts_ns": rows_ts,
                "device": rows_dev,
                "metric": rows_metric,
                "value": rows_val,
                "source": ["kineto"] * n,
            },
        )

    def _other_events(self, sub: pa.StructArray, ts: pa.Array, dur: pa.Array, events: list[Any], idx: np.ndarray) -> pa.Table:
        c = self._common(sub, ts, dur, timed=False)
        c["dur_ns"] = dur
        c["name"] = pc.struct_field(sub, "name")
        c["ph"] = pc.struct_field(sub, "ph")
        c["cat"] = pc.struct_field(sub, "cat")
        c["pid"] = pc.coalesce(pc.struct_field(sub, "pidS"), pc.cast(pc.struct_field(sub, "pid"), pa.string()))
        c["tid"] = pc.coalesce(pc.struct_field(sub, "tidS"), pc.cast(pc.struct_field(sub, "tid"), pa.string()))
        args: list[str | None] = []
        for i in idx.tolist():
            e = events[i]
            if not isinstance(e, dict):
                args.append(None)
                continue
            # Keep what the columns do not hold (flow id and binding point, scope, args).
            extra = {k: v for k, v in e.items() if k not in ("ph", "cat", "name", "ts", "dur", "pid", "tid", "pidS", "tidS")}
            args.append(orjson.dumps(extra).decode() if extra else None)
        c["args"] = args
        return _schema.from_columns("other_events", c)

    def finish(self) -> dict[str, pa.Table]:
        out = {}
        for t in TABLES_OUT:
            parts = self.parts[t]
            out[t] = pa.concat_tables(parts).combine_chunks() if parts else _schema.empty(t)
        return out


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


def _link(tables: dict[str, pa.Table], file_index: int, counts: Counts) -> dict[str, pa.Table]:
    cpu = tables["cpu_ops"]
    # cpu_ops: sort by thread then time (outer before inner), assign op ids and parents.
    if cpu.num_rows:
        pid = pc.fill_null(cpu["pid"], -1).to_numpy()
        tid = pc.fill_null(cpu["tid"], -1).to_numpy()
        ts = pc.fill_null(cpu["ts_ns"], 0).to_numpy()
        end = ts + pc.fill_null(cpu["dur_ns"], 0).to_numpy()
        order = np.lexsort((-end, ts, tid, pid))
        cpu = cpu.take(pa.array(order))
        pid, tid, ts, end = pid[order], tid[order], ts[order], end[order]
        # One key per thread: pid and tid packed (tids can be large OS ids).
        thread_key = np.unique(np.stack([pid, tid], axis=1), axis=0, return_inverse=True)[1].reshape(-1)
        parent = _nest_parents(thread_key, ts, end)
        op_id = np.arange(cpu.num_rows, dtype=np.int64) + file_index * OP_ID_STRIDE
        parent_id = np.where(parent >= 0, op_id[np.maximum(parent, 0)], -1)
        cpu = cpu.set_column(cpu.schema.get_field_index("op_id"), "op_id", pa.array(op_id))
        cpu = cpu.set_column(cpu.schema.get_field_index("parent_id"), "parent_id",
                             pa.array(parent_id, mask=parent < 0))
    tables["cpu_ops"] = cpu

    gpu, rt = tables["gpu_activity"], tables["runtime"]
    if gpu.num_rows == 0:
        return tables
    gdf = gpu.select(["correlation", "external_id"]).to_pandas()
    rdf = rt.select(["correlation", "name", "external_id", "ts_ns", "pid", "tid"]).to_pandas()
    rdf = rdf.dropna(subset=["correlation"]).drop_duplicates("correlation")
    rdf = rdf.rename(columns={"name": "launch_name", "external_id": "rt_external_id"})
    m = gdf.merge(rdf, on="correlation", how="left")
    launch_name = pa.array(m["launch_name"].astype(object).where(m["launch_name"].notna(), None).tolist(), pa.string())
    ext = m["external_id"].astype("Int64").fillna(m["rt_external_id"].astype("Int64"))
    op_s = pd_series_ext_to_op(cpu, ext)
    op_id = op_s.fillna(-1).to_numpy(dtype=np.int64)
    # Fallback: the innermost CPU op on the launching thread enclosing the runtime call.
    missing = (op_id < 0) & m["ts_ns"].notna().to_numpy()
    if missing.any() and cpu.num_rows:
        cpid = pc.fill_null(cpu["pid"], -1).to_numpy()
        ctid = pc.fill_null(cpu["tid"], -1).to_numpy()
        cts = pc.fill_null(cpu["ts_ns"], 0).to_numpy()
        cend = cts + pc.fill_null(cpu["dur_ns"], 0).to_numpy()
        keys, inv = np.unique(np.stack([cpid, ctid], axis=1), axis=0, return_inverse=True)
        tkey = inv.reshape(-1).astype(np.int64)
        parent_idx = _parents_as_index(cpu)
        sub = m.loc[missing]
        q = np.stack([sub["pid"].fillna(-1).astype(np.int64).to_numpy(), sub["tid"].fillna(-1).astype(np.int64).to_numpy()], axis=1)
        lookup = {tuple(k): i for i, k in enumerate(keys.tolist())}
        qkey = np.array([lookup.get(tuple(k), -1) for k in q.tolist()], dtype=np.int64)
        hit = _innermost_enclosing(tkey, cts, cend, parent_idx, qkey, sub["ts_ns"].astype(np.int64).to_numpy())
        ids = cpu["op_id"].to_numpy()
        found = hit >= 0
        op_id[np.flatnonzero(missing)[found]] = ids[hit[found]]
        n_found = int(found.sum())
        if n_found:
            counts.warnings["kernels linked to CPU ops by time nesting"] += n_found
    op_arr = pa.array(op_id, mask=op_id < 0)
    unlinked = op_arr.null_count
    if unlinked:
        counts.warnings["GPU activity without a launching CPU op"] += unlinked
    gpu = gpu.set_column(gpu.schema.get_field_index("op_id"), "op_id", op_arr)
    gpu = gpu.set_column(gpu.schema.get_field_index("launch_name"), "launch_name",
                         launch_name.dictionary_encode().cast(_schema.schema("gpu_activity").field("launch_name").type))
    tables["gpu_activity"] = gpu
    return tables


def _parents_as_index(cpu: pa.Table) -> np.ndarray:
    ids = cpu["op_id"].to_numpy()
    par = pc.fill_null(cpu["parent_id"], -1).to_numpy()
    base = ids[0] if len(ids) else 0
    return np.where(par >= 0, par - base, -1)


def pd_series_ext_to_op(cpu: pa.Table, ext: Any) -> Any:
    """op_id of the innermost cpu_op with each External id (latest start wins)."""
    import pandas as pd

    if cpu.num_rows == 0:
        return pd.Series([pd.NA] * len(ext), dtype="Int64")
    cdf = cpu.select(["external_id", "op_id", "ts_ns"]).to_pandas().dropna(subset=["external_id"])
    cdf = cdf.sort_values(["external_id", "ts_ns"]).drop_duplicates("external_id", keep="last")
    mapping = pd.Series(cdf["op_id"].to_numpy(), index=cdf["external_id"].astype("int64").to_numpy())
    return ext.map(mapping).astype("Int64")


# --------------------------------------------------------------------------- one file
def _offset_ns(meta: dict[str, Any]) -> int:
    base = meta.get("baseTimeNanoseconds")
    return int(base) if isinstance(base, int | float) and not isinstance(base, bool) else 0


def read_file(path: str | Path, *, rank: int | None = None, file_index: int = 0) -> FileResult:
    """Read one trace into tables (in memory). Raises TraceFormatError if it has no events."""
    t0 = time.perf_counter()
    was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived dicts: the cyclic GC only costs time here
    truncated: str | None = None
    reader = TraceReader(path)
    conv: _Converter | None = None
    try:
        try:
            for chunk in reader:
                if conv is None:
                    conv = _Converter(rank if rank is not None else 0, _offset_ns(reader.meta))
                conv.add(chunk.events, chunk.text)
        except TruncatedTrace as exc:
            truncated = exc.message
    finally:
        if was_enabled:
            gc.enable()
    if conv is None:
        conv = _Converter(rank if rank is not None else 0, _offset_ns(reader.meta))
    if conv.offset_ns == 0 and _offset_ns(reader.meta):
        conv.counts.warnings["baseTimeNanoseconds after traceEvents: ts_ns relative to it"] += 1
    meta = reader.meta
    if conv.counts.events_read == 0:
        if truncated:
            raise TraceFormatError(truncated)
        raise TraceFormatError(f"{path}: traceEvents is empty")
    dist = meta.get("distributedInfo")
    trace_rank = dist.get("rank") if isinstance(dist, dict) else None
    final_rank = rank if rank is not None else (trace_rank if isinstance(trace_rank, int) else 0)
    tables = conv.finish()
    if final_rank != conv.rank:
        tables = {k: _set_rank(v, final_rank) for k, v in tables.items()}
    tables = _link(tables, file_index, conv.counts)
    _device_warnings(tables, conv.counts)
    return FileResult(str(path), final_rank, tables, meta, conv.counts, reader.stats.bytes_in,
                      time.perf_counter() - t0, truncated)


def _set_rank(t: pa.Table, rank: int) -> pa.Table:
    i = t.schema.get_field_index("rank")
    return t.set_column(i, "rank", pa.array(np.full(t.num_rows, rank, dtype=np.int32)))


def _device_warnings(tables: dict[str, pa.Table], counts: Counts) -> None:
    if tables["gpu_activity"].num_rows == 0:
        other = tables["other_events"]
        cats = set(pc.unique(pc.fill_null(other["cat"].cast(pa.string()), "")).to_pylist()) if other.num_rows else set()
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


def _worker(args: tuple[str, int | None, int]) -> FileResult | TraceFormatError:
    path, rank, idx = args
    try:
        return read_file(path, rank=rank, file_index=idx)
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
    from tracekit import ingest_cache
    from tracekit.rundir import RunDir

    files = _expand(paths)
    key = ingest_cache.cache_key(files)
    if use_cache:
        hit = ingest_cache.lookup(out, key)
        if hit is not None:
            return hit
    t0 = time.perf_counter()
    run = RunDir.create(out, force=force, source="ingest", inputs=[str(f) for f in files])
    multi = len(files) > 1
    tasks = [(str(f), None, i) for i, f in enumerate(files)]
    n_jobs = max(1, min(jobs or os.cpu_count() or 1, len(files)))
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
    for t in TABLES_OUT:
        run.write_table(t, pa.concat_tables([r.tables[t] for r in good]) if len(good) > 1 else good[0].tables[t])
    total = Counts()
    for r in good:
        total.events_read += r.counts.events_read
        total.by_ph.update(r.counts.by_ph)
        total.events_by_table.update(r.counts.events_by_table)
        total.skipped.update(r.counts.skipped)
        total.warnings.update(r.counts.warnings)
    rows = {t: sum(r.tables[t].num_rows for r in good) for t in TABLES_OUT}
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


def write_parquet(table: pa.Table, path: Path) -> None:
    pq.write_table(table, path, compression="zstd")
