"""Linkage of one file's raw tables: op ids and parents, kernel -> runtime call -> launching CPU op.

Runs once per file on the assembled tables, vectorised with numpy (no per-row Python):

- cpu_ops sorted by thread then time (outer before inner on an equal start), each op given an
  ``op_id`` (unique across the files of a run: file index * OP_ID_STRIDE + row) and the
  ``parent_id`` of the innermost op on its thread that encloses it;
- each GPU activity joined to the runtime call with its correlation (``launch_name``), then to the
  innermost CPU op with its External id (the kernel's own, else its runtime call's); failing that, to
  the innermost CPU op on the launching thread enclosing the runtime call (counted in a warning).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from tracekit.ingest import arrays as A
from tracekit.model import schema as _schema
from tracekit.store import heap

OP_ID_STRIDE = 1 << 40  # op_id = file index * stride + row: unique across the files of a run


def _nest_parents(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Index of the innermost enclosing interval with the same key, or -1.

    Rows must be sorted by (key, start, -end), so every earlier row of the same key starts no later:
    the innermost enclosing interval of row i is the nearest earlier row of its key whose end is at
    least its own. Found for all rows at once by pointer jumping: ``nxt[i]`` is the nearest earlier
    row that may qualify (every row between it and i ends before i does); a row whose candidate
    ends too early jumps to the candidate's own ``nxt``, which skips only rows ending before the
    candidate, so before i. About log2(n) rounds.
    """
    n = len(start)
    parent = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return parent
    nxt = np.arange(n, dtype=np.int64) - 1
    todo = np.arange(1, n, dtype=np.int64)
    while len(todo):
        c = nxt[todo]
        cc = np.maximum(c, 0)
        same = (c >= 0) & (key[cc] == key[todo])
        ok = same & (end[cc] >= end[todo])
        parent[todo[ok]] = c[ok]
        move = same & ~ok
        nxt[todo[move]] = nxt[c[move]]  # the right side is read before the assignment: last round's values
        todo = todo[move]
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


def link(tables: dict[str, pa.Table], file_index: int, counts: Any) -> dict[str, pa.Table]:
    cpu = tables.pop("cpu_ops")  # out of the dict: the unsorted table is freed as its sorted copy is built
    # cpu_ops: sort by thread then time (outer before inner), assign op ids and parents.
    if cpu.num_rows:
        pid, tid = _np(cpu["pid"], -1), _np(cpu["tid"], -1)
        ts = _np(cpu["ts_ns"], 0)
        end = ts + _np(cpu["dur_ns"], 0)
        order = np.lexsort((-end, ts, tid, pid))
        pid, tid, ts, end = pid[order], tid[order], ts[order], end[order]
        cols, schema = cpu.columns, cpu.schema
        del cpu  # the sorted copy is built a column at a time, each source column freed once copied
        cpu = A.take_consuming(cols, schema, A.from_numpy(order))
        del order
        thread_key = _thread_codes(pid, tid, pid[:0], tid[:0])[0]
        del pid, tid
        parent = _nest_parents(thread_key, ts, end)
        del ts, end, thread_key  # the sort keys: not needed by the kernels' linkage below
        op_id = np.arange(cpu.num_rows, dtype=np.int64) + file_index * OP_ID_STRIDE
        parent_id = np.where(parent >= 0, op_id[np.maximum(parent, 0)], -1)
        cpu = cpu.set_column(cpu.schema.get_field_index("op_id"), "op_id", A.from_numpy(op_id))
        cpu = cpu.set_column(cpu.schema.get_field_index("parent_id"), "parent_id",
                             A.from_numpy(parent_id, parent >= 0))
    tables["cpu_ops"] = cpu
    heap.trim()  # the unsorted table's freed pages, before the kernels' linkage allocates its own

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
        # Only the ops with an External id take part (the stable sort keeps their relative order).
        has_ext = np.flatnonzero(A.valid(cpu["external_id"]))
        cext = _np(cpu["external_id"], 0)[has_ext]
        sub = np.lexsort((-_np(cpu["ts_ns"], 0)[has_ext], cext))  # per External id, latest start first
        order = has_ext[sub]
        cix = _first_match(cext[sub], np.ones(len(sub), dtype=bool), ext_v, ext_ok)
        del has_ext, cext, sub
        ids = A.to_numpy(cpu["op_id"])
        hit = cix >= 0
        op_id[hit] = ids[order[cix[hit]]]  # ``order`` is empty where no op has an External id
        del ids, order, cix, hit
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
    # The column alone to the schema's type (conforming a whole gpu_activity table around it would
    # allocate every other column as nulls).
    gpu = gpu.set_column(gpu.schema.get_field_index("launch_name"), "launch_name",
                         _schema.conform_column("gpu_activity", "launch_name", launch_name))
    tables["gpu_activity"] = gpu
    return tables


def _parents_as_index(cpu: pa.Table) -> np.ndarray:
    ids = A.to_numpy(cpu["op_id"])
    par = A.to_numpy(cpu["parent_id"], -1)
    base = ids[0] if len(ids) else 0
    return np.where(par >= 0, par - base, -1)
