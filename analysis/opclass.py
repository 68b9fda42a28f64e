"""Where host time went on a CPU run: each phase's time by operator class (pure: tables in, Arrow tables out).

A CPU has no kernels and no roofline; what it has are the profiler's aten ops. Each op's self time
(its duration less its children's) goes to one class:

  attention    scaled_dot_product_attention and its kernels, *attention*, softmax
  gemm         linear, matmul, mm, addmm, bmm, baddbmm, einsum, conv, *gemm*
  norm         *norm* ops, and the ops an RMSNorm written out in Python is made of (pow, mean, rsqrt, var)
  sampling     argmax, topk, sort, multinomial, cumsum, isin, any, all (token choice and stop checks)
  elementwise  every other aten op (activations, adds, copies, views, concatenation)
  framework    the step's wall time on its thread that no op covers: Python, module dispatch, generate's loop

An op under an op of a named class (a matmul inside scaled_dot_product_attention's math path) counts
for the outermost named class. Only the thread that ran the steps is read (the one with the most op
time inside them); ops on other threads are left out. The classes of one phase add up to its time.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa

from tracekit.analysis import arrays

CLASSES = ("attention", "gemm", "norm", "elementwise", "sampling", "framework")
SPLIT_COLUMNS = ["phase", "op_class", "time_ns", "share", "steps"]
STEP_COLUMNS = ["step_id", "phase", "op_class", "time_ns"]

_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("attention", re.compile(r"attention|softmax", re.I)),
    ("gemm", re.compile(r"^(aten::)?(linear|matmul|mm|addmm|bmm|baddbmm|addbmm|einsum|_int_mm|conv\w*|"
                        r"_convolution|mkldnn_\w*linear\w*)$|gemm", re.I)),
    ("norm", re.compile(r"norm|^(aten::)?(pow|mean|rsqrt|var|var_mean)_?$", re.I)),
    ("sampling", re.compile(r"^(aten::)?(argmax|argmin|topk|sort|argsort|multinomial|cumsum|isin|any|all|"
                            r"max|exponential_|bernoulli_?)$", re.I)),
)
_NAMED = {c for c, _ in _RULES}


def op_classes(names: Any) -> np.ndarray:
    """The class each op name belongs to by itself (its ancestors not yet considered), each distinct
    name once. ``names``: any sequence of names."""
    values = np.array([str(n) for n in np.asarray(names, dtype=object).tolist()], dtype=object)
    out = np.full(len(values), "elementwise", dtype=object)
    if len(values):
        uniq, inv = np.unique(values, return_inverse=True)
        cls = np.array([next((c for c, rx in _RULES if rx.search(n)), "elementwise") for n in uniq], dtype=object)
        out = cls[inv.reshape(-1)]
    return out


def _positions(ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The row of each key (float; NaN: none) among ``ids`` (unique int64), NaN where it is none."""
    order = np.argsort(ids, kind="stable")
    known = ~np.isnan(keys)
    k = np.where(known, keys, 0).astype(np.int64)
    at = np.clip(np.searchsorted(ids[order], k), 0, max(len(ids) - 1, 0))
    hit = known & (ids[order][at] == k) if len(ids) else np.zeros(len(keys), dtype=bool)
    return np.where(hit, order[at] if len(ids) else 0, np.nan)


def _resolved(names: np.ndarray, ids: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Each op's class after its ancestors: the outermost named class on its chain wins."""
    own = op_classes(names)
    ppos = _positions(ids, parent)  # row of the parent, NaN for roots
    cls = own.copy()
    # Walk up one level per round: an op takes its ancestor's named class when that ancestor has one.
    anc = ppos.copy()
    for _ in range(64):
        live = ~np.isnan(anc)
        if not live.any():
            break
        rows = np.flatnonzero(live)
        a = anc[rows].astype(np.int64)
        named = np.isin(own[a], list(_NAMED))
        cls[rows[named]] = own[a[named]]
        anc[rows] = ppos[a]
    return cls


def _self_ns(ids: np.ndarray, parent: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Duration less the children's durations (never below 0)."""
    inner = np.zeros(len(ids), dtype=np.int64)
    rows = _positions(ids, parent)
    child = ~np.isnan(rows)
    np.add.at(inner, rows[child].astype(np.int64), dur[child])
    return np.maximum(dur - inner, 0)


def _step_columns() -> dict[str, list[Any]]:
    return {c: [] for c in STEP_COLUMNS}


def step_op_classes(cpu_ops: Any, steps: Any, span: tuple[int, int] | None = None) -> pa.Table:
    """One row per (step, class) with its time in ns (STEP_COLUMNS); classes with no time are left out.

    With ``span`` (the trace's [first, last) ns) the time outside every step is one more "step",
    step_id -1 and phase "outside": the ops there (sampling, stop checks, generate's loop) and framework
    for the rest of that time.

    ``steps`` (Arrow or pandas) needs step_id, kind, cpu_start_ns and cpu_end_ns (steps without them
    are skipped); ``cpu_ops`` (Arrow or pandas) op_id, parent_id, name, tid, ts_ns and dur_ns.
    """
    out = _step_columns()
    need = ("op_id", "parent_id", "name", "tid", "ts_ns", "dur_ns")
    if not arrays.rows(cpu_ops) or not arrays.rows(steps) or not all(arrays.has(cpu_ops, c) for c in need) \
            or not all(arrays.has(steps, c) for c in ("step_id", "kind", "cpu_start_ns", "cpu_end_ns")):
        return _step_table(out)
    start, start_ok = arrays.ints_or_null(steps, "cpu_start_ns")
    end, end_ok = arrays.ints_or_null(steps, "cpu_end_ns")
    keep = np.flatnonzero(start_ok & end_ok)
    keep = keep[np.argsort(start[keep], kind="quicksort")]  # as sort_values("cpu_start_ns")
    if arrays.has(steps, "captured"):
        cap = arrays.objects(steps, "captured")[keep]
        keep = keep[np.array([True if v is None else bool(v) for v in cap.tolist()], dtype=bool)]
    if not len(keep):
        return _step_table(out)
    ts, ts_ok = arrays.ints_or_null(cpu_ops, "ts_ns")
    ids, id_ok = arrays.ints_or_null(cpu_ops, "op_id")
    live = ts_ok & id_ok
    if arrays.has(cpu_ops, "captured"):
        live &= ~arrays.flags(cpu_ops, "captured")
    ops = np.flatnonzero(live)
    ts, ids = ts[ops], ids[ops]
    parent = arrays.floats(cpu_ops, "parent_id")[ops]
    dur = np.where(np.isnan(d := arrays.floats(cpu_ops, "dur_ns")[ops]), 0, d).astype(np.int64)
    starts, ends = start[keep], end[keep]
    idx = np.searchsorted(starts, ts, side="right") - 1
    inside = (idx >= 0) & (ts < ends[np.clip(idx, 0, None)])
    step = np.where(inside, idx, -1)
    if not (step >= 0).any():
        return _step_table(out)
    tid = arrays.floats(cpu_ops, "tid")[ops]
    cls = _resolved(arrays.objects(cpu_ops, "name")[ops], ids, parent)
    own = _self_ns(ids, parent, dur)
    in_steps = (step >= 0) & ~np.isnan(tid)
    tids, tcode = np.unique(tid[in_steps], return_inverse=True)
    busy = np.bincount(tcode.reshape(-1), weights=own[in_steps], minlength=len(tids))
    mine = tid == tids[int(np.argmax(busy))]  # the thread that ran the steps (groupby's first of a tie)
    per: dict[tuple[int, str], int] = {}
    for k, c, v in zip(step[mine].tolist(), cls[mine].tolist(), own[mine].tolist(), strict=True):
        per[(k, c)] = per.get((k, c), 0) + v
    ids_s = arrays.objects(steps, "step_id")[keep]
    kinds = [str(k) for k in arrays.objects(steps, "kind")[keep].tolist()]
    for i in range(len(keep)):
        _class_rows(out, int(ids_s[i]), kinds[i], i, int(ends[i] - starts[i]), per)
    if span is not None:
        lo, hi = span
        outside = (hi - lo) - int(np.clip(np.minimum(ends, hi) - np.maximum(starts, lo), 0, None).sum())
        _class_rows(out, -1, "outside", -1, outside, per)
    return _step_table(out)


def _class_rows(out: dict[str, list[Any]], step_id: int, phase: str, key: int, window: int,
                per: dict[tuple[int, str], int]) -> None:
    """One step's rows: each named class with time, then framework (the window no op covers)."""
    covered = 0
    for c in CLASSES[:-1]:
        v = per.get((key, c), 0)
        if v:
            for col, x in zip(STEP_COLUMNS, (step_id, phase, c, v), strict=True):
                out[col].append(x)
            covered += v
    for col, x in zip(STEP_COLUMNS, (step_id, phase, "framework", max(window - covered, 0)), strict=True):
        out[col].append(x)


def _step_table(out: dict[str, list[Any]]) -> pa.Table:
    return arrays.from_columns({"step_id": arrays.ints_column(out["step_id"]), "phase": arrays.texts(out["phase"]),
                                "op_class": arrays.texts(out["op_class"]), "time_ns": arrays.ints_column(out["time_ns"])})


def split(per_step: Any) -> pa.Table:
    """The op_class_split table (SPLIT_COLUMNS), Arrow: one row per (phase, class) in CLASSES order,
    phases in their first row's order; share of the phase's time (null where it has none)."""
    rows: dict[str, list[Any]] = {c: [] for c in SPLIT_COLUMNS}
    if arrays.rows(per_step):
        step = arrays.ints(per_step, "step_id")
        phase = [str(p) for p in arrays.objects(per_step, "phase").tolist()]
        cls = [str(c) for c in arrays.objects(per_step, "op_class").tolist()]
        ns = arrays.ints(per_step, "time_ns")
        g: dict[tuple[str, str], int] = {}
        total: dict[str, int] = {}
        steps: dict[str, set[int]] = {}
        for s, p, c, v in zip(step.tolist(), phase, cls, ns.tolist(), strict=True):
            g[(p, c)] = g.get((p, c), 0) + v
            total[p] = total.get(p, 0) + v
            if s >= 0:
                steps.setdefault(p, set()).add(s)
        for p in dict.fromkeys(phase):
            for c in CLASSES:
                v = g.get((p, c), 0)
                for col, x in zip(SPLIT_COLUMNS, (p, c, v, v / total[p] if total[p] else None,
                                                  len(steps.get(p, ()))), strict=True):
                    rows[col].append(x)
    return arrays.from_columns({"phase": arrays.texts(rows["phase"]), "op_class": arrays.texts(rows["op_class"]),
                                "time_ns": arrays.ints_column(rows["time_ns"]),
                                "share": arrays.floats_column(rows["share"]), "steps": arrays.ints_column(rows["steps"])})


def is_cpu_run(gpu_activity: object) -> bool:
    """No GPU activity at all: the split by operator class is the answer (there is no roofline)."""
    return gpu_activity is None or len(gpu_activity) == 0  # type: ignore[arg-type]
