"""The trace's own events as columnar slices: one ``TraceBlock`` per table (kernels, CPU ops, runtime
calls, annotations), built with Arrow and NumPy, never a Python object per row.

A block holds, per kept row (rows without a timestamp, or outside the window, are left out): its
track, its clipped start and duration, its name, category and colour as codes into lists of distinct
values, and its args as columns in the order they appear in the slice's args. ``slices()`` gives the
same ``Slice`` objects, args dicts and all, that a row-by-row build gives; the writers
(tracekit.trace.tracks, tracekit.trace.perfetto) encode the columns directly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.model import npa
from tracekit.trace.trackset import Slice, Track, TrackSet, Window

GPU_CATS = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
CPU_TABLES = (("cpu_ops", "cpu_op"), ("runtime", "cuda_runtime"), ("annotations", "user_annotation"))
# The columns each block reads: a reader may leave the others out.
COLUMNS = {
    "gpu_activity": ("ts_ns", "dur_ns", "kind", "name", "device", "stream", "correlation", "external_id", "grid",
                     "block", "bytes"),
    "kernel_bound": ("bound", "source"),
    **{name: ("ts_ns", "dur_ns", "name", "cat", "pid", "tid", "device", "stream", "external_id", "correlation",
              "input_dims") for name, _ in CPU_TABLES},
}
COLUMNS["cpu_ops"] += ("captured",)


@dataclass
class ArgColumn:
    """One arg of a block's slices: present where ``present``; an int64 (``ints``) or a Python value
    (``values[codes]``)."""

    key: str
    present: np.ndarray
    ints: np.ndarray | None = None
    codes: np.ndarray | None = None
    values: list[Any] = field(default_factory=list)

    def value(self, i: int) -> Any:
        return int(self.ints[i]) if self.ints is not None else self.values[int(self.codes[i])]  # type: ignore[index]


@dataclass
class TraceBlock:
    n: int
    keys: list[str]  # track key per track code
    track: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    names: list[str]
    name: np.ndarray
    cats: list[str]
    cat: np.ndarray
    cnames: list[str]
    cname: np.ndarray  # -1: none
    args: list[ArgColumn]

    def slices(self) -> list[Slice]:
        keys, names, cats, cnames = self.keys, self.names, self.cats, self.cnames
        cols = [(a.key, a.present.tolist(), a.ints.tolist() if a.ints is not None else None,
                 a.codes.tolist() if a.codes is not None else None, a.values) for a in self.args]
        out = []
        for i, (t, s, d, nm, ct, cn) in enumerate(zip(self.track.tolist(), self.ts.tolist(), self.dur.tolist(),
                                                      self.name.tolist(), self.cat.tolist(), self.cname.tolist(),
                                                      strict=True)):
            args = {k: (ints[i] if ints is not None else vals[codes[i]])  # type: ignore[index]
                    for k, pres, ints, codes, vals in cols if pres[i]}
            out.append(Slice(keys[t], names[nm], s, d, cats[ct], args, cnames[cn] if cn >= 0 else None))
        return out


# --- columns -------------------------------------------------------------------------


def _ints(table: pa.Table, name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values with nulls as 0, present) of an integer column; absent column: all missing."""
    if name not in table.column_names:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    col = table.column(name)
    present = npa.valid(col) if col.null_count else np.ones(n, dtype=bool)
    return npa.values(col, 0), present


def _distinct(table: pa.Table, name: str, n: int) -> tuple[np.ndarray, list[Any]]:
    """(codes, distinct Python values) of a column; -1 where null or the column is absent."""
    if name not in table.column_names:
        return np.full(n, -1, dtype=np.int64), []
    col = table.column(name)
    if pa.types.is_dictionary(col.type):
        col = col.unify_dictionaries() if col.num_chunks > 1 else col
        values = col.chunk(0).dictionary.to_pylist() if col.num_chunks else []
        return npa.values(col, -1), values
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        return _list_codes(col, n)
    if pa.types.is_floating(col.type) or not _hashable_type(col.type):
        vals = col.to_pylist()  # -0.0 / 0.0 and NaN keep their own text: no hashing of floats
        return np.arange(n, dtype=np.int64) - np.array([v is None for v in vals], dtype=np.int64) * (
            np.arange(n) + 1), vals
    enc = pc.dictionary_encode(col).combine_chunks()
    return npa.values(enc.indices, -1), enc.dictionary.to_pylist()


def _hashable_type(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_boolean(t) or pa.types.is_binary(t))


def _list_codes(col: pa.ChunkedArray, n: int) -> tuple[np.ndarray, list[Any]]:
    """Codes of a list<int> column by its items' text (grid, block): one Python list per distinct value."""
    flat = pc.list_flatten(col)
    if not pa.types.is_integer(col.type.value_type) or flat.null_count:
        vals = col.to_pylist()
        return np.arange(n, dtype=np.int64) - np.array([v is None for v in vals], dtype=np.int64) * (
            np.arange(n) + 1), vals
    text = pc.binary_join(pc.cast(col, pa.list_(pa.string())), npa.text(","))
    enc = pc.dictionary_encode(text).combine_chunks()
    values = [[int(x) for x in t.split(",")] if t else [] for t in enc.dictionary.to_pylist()]
    return npa.values(enc.indices, -1), values


def _text(codes: np.ndarray, values: list[Any], fn: Any) -> tuple[np.ndarray, list[str]]:
    """Codes into distinct texts ``fn(value)`` (``fn(None)`` where the code is -1), first use first."""
    mapped = [fn(v) for v in values] + [fn(None)]
    ids: dict[str, int] = {}
    remap = np.array([ids.setdefault(t, len(ids)) for t in mapped], dtype=np.int64)
    return remap[codes], list(ids)


def _clip(ts: np.ndarray, dur: np.ndarray, window: Window | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kept, start, duration): the row-wise rule of tracekit.trace.tracks, on arrays."""
    end = ts + np.maximum(dur, 0)
    if window is None:
        return np.ones(len(ts), dtype=bool), ts, np.maximum(dur, 0)
    # Touching the window's start edge is not overlapping it (no zero-length stubs).
    keep = ~((end < window.start_ns) | (ts > window.end_ns) | ((end == window.start_ns) & (dur > 0)))
    s = np.maximum(ts, window.start_ns)
    e = np.minimum(end, window.end_ns)
    return keep, s, e - s


def _spans(table: pa.Table, n: int, window: Window | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kept, start, duration) of a table's slices: ``_clip`` of its ts_ns / dur_ns, rows without a
    timestamp dropped."""
    t, has_ts = _ints(table, "ts_ns", n)
    d, _ = _ints(table, "dur_ns", n)
    keep, start, dur = _clip(t, d, window)
    return keep & has_ts, start, dur


def _tracks(ts: TrackSet, cols: list[np.ndarray], make: Any) -> tuple[np.ndarray, list[str]]:
    """Track codes of rows identified by the tuple of ``cols`` (first appearance first); ``make(values)``
    gives the Track of one identity, added to ``ts`` in that order."""
    n = len(cols[0])
    if not n:
        return np.zeros(0, dtype=np.int64), []
    combined = np.zeros(n, dtype=np.int64)
    for c in cols:
        _, inv = np.unique(c, return_inverse=True)
        _, combined = np.unique(combined * (int(inv.max()) + 1) + inv.ravel(), return_inverse=True)
        combined = combined.ravel()
    _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    keys = []
    for row in first[order]:
        t = make(tuple(int(c[row]) for c in cols))
        ts.add_track(t)
        keys.append(t.key)
    return rank[inverse.ravel()], keys


def _select(col: ArgColumn, keep: np.ndarray) -> ArgColumn:
    return ArgColumn(col.key, col.present[keep], col.ints[keep] if col.ints is not None else None,
                     _code32(col.codes[keep]) if col.codes is not None else None, col.values)


def _code32(codes: np.ndarray) -> np.ndarray:
    """Codes into lists of distinct values as int32: a block holds several per row for its lifetime."""
    return codes.astype(np.int32)


def _arg(table: pa.Table, column: str, key: str, n: int) -> ArgColumn:
    """An arg from a column, present where the column is not null; ints kept as int64."""
    if column in table.column_names and pa.types.is_integer(table.column(column).type) and not pa.types.is_uint64(
            table.column(column).type):
        vals, present = _ints(table, column, n)
        return ArgColumn(key, present, ints=vals)
    codes, values = _distinct(table, column, n)
    return ArgColumn(key, codes >= 0, codes=codes, values=values)


# --- the blocks -------------------------------------------------------------------------


def gpu_block(ts: TrackSet, gpu: pa.Table | None, kernel_bound: pa.Table | None, window: Window | None,
              cname_of: dict[str, str]) -> TraceBlock | None:
    """Kernels, memcpys and memsets: one track per (device, stream); args device, stream, correlation,
    External id, grid, block, bytes, and the kernel's bound class (``kernel_bound``, same rows) with
    its source; the class's colour from ``cname_of``."""
    if gpu is None or gpu.num_rows == 0:
        return None
    n = gpu.num_rows
    keep, start, dur = _spans(gpu, n, window)
    dev, _ = _ints(gpu, "device", n)
    stream, _ = _ints(gpu, "stream", n)
    args = [ArgColumn("device", np.ones(n, dtype=bool), ints=dev), ArgColumn("stream", np.ones(n, dtype=bool), ints=stream)]
    for src, dst in (("correlation", "correlation"), ("external_id", "External id"), ("grid", "grid"),
                     ("block", "block"), ("bytes", "bytes")):
        args.append(_arg(gpu, src, dst, n))
    cname = np.full(n, -1, dtype=np.int64)
    cnames: list[str] = []
    kb = kernel_bound
    if kb is not None and kb.num_rows == n and "bound" in kb.column_names:
        b_codes, b_values = _distinct(kb, "bound", n)
        bound = ArgColumn("bound", b_codes >= 0, codes=b_codes, values=b_values)
        if "source" in kb.column_names:
            s_codes, s_values = _distinct(kb, "source", n)
            source = ArgColumn("bound_source", bound.present & (s_codes >= 0), codes=s_codes, values=s_values)
        else:
            source = ArgColumn("bound_source", np.zeros(n, dtype=bool), codes=np.full(n, -1), values=[])
        args += [bound, source]
        colour = [cname_of.get(str(v)) for v in b_values]
        ids: dict[str, int] = {}
        lut = np.array([ids.setdefault(c, len(ids)) if c is not None else -1 for c in colour] + [-1], dtype=np.int64)
        cname = lut[b_codes]
        cnames = list(ids)
    k_codes, k_values = _distinct(gpu, "kind", n)
    cat, cats = _text(k_codes, k_values, lambda v: (lambda kind: GPU_CATS.get(kind, kind))(str(v or "kernel")))
    n_codes, n_values = _distinct(gpu, "name", n)
    name, names = _text(n_codes, n_values, str)
    dev_k, stream_k = dev[keep], stream[keep]
    track, keys = _tracks(ts, [dev_k, stream_k],
                          lambda u: Track(f"gpu/{u[0]}/{u[1]}", f"stream {u[1]}", f"GPU {u[0]}", u[0], u[1], "slice",
                                          u[1], 1000 + u[0]))
    return TraceBlock(int(keep.sum()), keys, _code32(track), start[keep], dur[keep], names, _code32(name[keep]), cats,
                      _code32(cat[keep]), cnames, _code32(cname[keep]), [_select(a, keep) for a in args])


def cpu_block(ts: TrackSet, table: pa.Table | None, cat_default: str, window: Window | None) -> TraceBlock | None:
    """CPU ops, runtime calls or annotations: one track per host thread (GPU annotations: per device
    stream, beside its kernels); args External id, correlation, Input Dims. The ops of graph-capture
    traces (``cpu_ops.captured``) are left out: they ran at capture time, on another clock (their own
    traces are the run's capture_traces/)."""
    if table is None or table.num_rows == 0:
        return None
    n = table.num_rows
    keep, start, dur = _spans(table, n, window)
    if "captured" in table.column_names:
        keep &= ~npa.values(table.column("captured"), 0).astype(bool)
    c_codes, c_values = _distinct(table, "cat", n)
    cat, cats = _text(c_codes, c_values, lambda v: str(v or cat_default))
    is_ann = (np.array([c == "gpu_user_annotation" for c in cats], dtype=bool)[cat] if cats
              else np.zeros(n, dtype=bool))
    dev, _ = _ints(table, "device", n)
    stream, _ = _ints(table, "stream", n)
    pid, _ = _ints(table, "pid", n)
    tid, _ = _ints(table, "tid", n)
    a = np.where(is_ann, dev, pid)
    b = np.where(is_ann, stream, tid)

    def make(u: tuple[int, ...]) -> Track:
        ann, x, y = u
        if ann:
            tid_ = y + 1_000_000  # own lane: GPU annotations need not nest with kernels
            return Track(f"gpu/{x}/{y}/annotations", f"stream {y} annotations", f"GPU {x}", x, tid_, "slice",
                         tid_ % 1_000_000, 2000)
        return Track(f"cpu/{x}/{y}", f"thread {y}", f"host {x}", x, y, "slice", y % 1_000_000, 2000)

    track, keys = _tracks(ts, [is_ann[keep].astype(np.int64), a[keep], b[keep]], make)
    args = [_arg(table, "external_id", "External id", n), _arg(table, "correlation", "correlation", n)]
    dims_codes, dims_values = _distinct(table, "input_dims", n)
    truthy = np.array([bool(v) for v in dims_values] + [False], dtype=bool)[dims_codes]
    args.append(ArgColumn("Input Dims", truthy, codes=dims_codes, values=[json_or_text(v) for v in dims_values]))
    n_codes, n_values = _distinct(table, "name", n)
    name, names = _text(n_codes, n_values, str)
    return TraceBlock(int(keep.sum()), keys, _code32(track), start[keep], dur[keep], names, _code32(name[keep]), cats,
                      _code32(cat[keep]), [], np.full(int(keep.sum()), -1, dtype=np.int32), [_select(x, keep) for x in args])


def json_or_text(text: Any) -> Any:
    """``text`` parsed as JSON, else ``text`` itself (not JSON, or nested past the recursion limit)."""
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return text


def trace_blocks(ts: TrackSet, tables: Mapping[str, pa.Table], window: Window | None,
                 cname_of: dict[str, str]) -> list[TraceBlock]:
    """Every trace table's block, in the order their tracks and slices are added."""
    out = [gpu_block(ts, tables.get("gpu_activity"), tables.get("kernel_bound"), window, cname_of)]
    out += [cpu_block(ts, tables.get(name), default, window) for name, default in CPU_TABLES]
    return [b for b in out if b is not None and b.n]
