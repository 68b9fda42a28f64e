"""Where host time went on a CPU run: each phase's time by operator class (pure: frames in, frames out).

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

import numpy as np
import pandas as pd

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


def op_classes(names: pd.Series) -> np.ndarray:
    """The class each op name belongs to by itself (its ancestors not yet considered)."""
    out = np.full(len(names), "elementwise", dtype=object)
    values = names.astype(str).to_numpy(dtype=object)
    uniq, inv = np.unique(values, return_inverse=True)
    cls = np.array([next((c for c, rx in _RULES if rx.search(n)), "elementwise") for n in uniq], dtype=object)
    if len(uniq):
        out = cls[inv]
    return out


def _resolved(ops: pd.DataFrame) -> np.ndarray:
    """Each op's class after its ancestors: the outermost named class on its chain wins."""
    own = op_classes(ops["name"])
    ids = ops["op_id"].to_numpy(dtype=np.int64)
    parent = pd.to_numeric(ops["parent_id"], errors="coerce").to_numpy(dtype=float)
    pos = pd.Series(np.arange(len(ids)), index=ids)
    ppos = pd.Series(parent).map(pos).to_numpy(dtype=float)  # row of the parent, NaN for roots
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


def _self_ns(ops: pd.DataFrame) -> np.ndarray:
    """Duration less the children's durations (never below 0)."""
    dur = pd.to_numeric(ops["dur_ns"], errors="coerce").fillna(0).to_numpy(dtype=np.int64)
    child = pd.Series(dur).groupby(pd.to_numeric(ops["parent_id"], errors="coerce").to_numpy()).sum()
    inner = pd.Series(ops["op_id"].to_numpy()).map(child).fillna(0).to_numpy(dtype=np.int64)
    return np.maximum(dur - inner, 0)


def step_op_classes(cpu_ops: pd.DataFrame, steps: pd.DataFrame, span: tuple[int, int] | None = None) -> pd.DataFrame:
    """One row per (step, class) with its time in ns; classes with no time are left out.

    With ``span`` (the trace's [first, last) ns) the time outside every step is one more "step",
    step_id -1 and phase "outside": the ops there (sampling, stop checks, generate's loop) and framework
    for the rest of that time.

    ``steps`` needs step_id, kind, cpu_start_ns and cpu_end_ns (steps without them are skipped);
    ``cpu_ops`` op_id, parent_id, name, tid, ts_ns and dur_ns.
    """
    need = {"op_id", "parent_id", "name", "tid", "ts_ns", "dur_ns"}
    if cpu_ops is None or steps is None or cpu_ops.empty or steps.empty or not need <= set(cpu_ops) \
            or not {"step_id", "kind", "cpu_start_ns", "cpu_end_ns"} <= set(steps):
        return pd.DataFrame(columns=STEP_COLUMNS)
    s = steps.dropna(subset=["cpu_start_ns", "cpu_end_ns"]).sort_values("cpu_start_ns")
    if "captured" in s:
        s = s[s["captured"].fillna(True).astype(bool)]
    if s.empty:
        return pd.DataFrame(columns=STEP_COLUMNS)
    ops = cpu_ops.dropna(subset=["ts_ns", "op_id"])
    if "captured" in ops:
        ops = ops[~ops["captured"].fillna(False).astype(bool)]
    ops = ops.reset_index(drop=True)
    starts = s["cpu_start_ns"].to_numpy(dtype=np.int64)
    ends = s["cpu_end_ns"].to_numpy(dtype=np.int64)
    ts = ops["ts_ns"].to_numpy(dtype=np.int64)
    idx = np.searchsorted(starts, ts, side="right") - 1
    inside = (idx >= 0) & (ts < ends[np.clip(idx, 0, None)])
    frame = pd.DataFrame({"step": np.where(inside, idx, -1), "tid": ops["tid"].to_numpy(),
                          "cls": _resolved(ops), "self": _self_ns(ops)})
    if not (frame["step"] >= 0).any():
        return pd.DataFrame(columns=STEP_COLUMNS)
    tid = frame[frame["step"] >= 0].groupby("tid")["self"].sum().idxmax()  # the thread that ran the steps
    frame = frame[frame["tid"] == tid]
    per = frame.groupby(["step", "cls"])["self"].sum()
    rows = []
    ids, kinds = s["step_id"].to_numpy(), s["kind"].astype(str).to_numpy()
    for i in range(len(s)):
        window = int(ends[i] - starts[i])
        covered = 0
        for c in CLASSES[:-1]:
            v = int(per.get((i, c), 0))
            if v:
                rows.append((int(ids[i]), kinds[i], c, v))
                covered += v
        rows.append((int(ids[i]), kinds[i], "framework", max(window - covered, 0)))
    if span is not None:
        lo, hi = span
        outside = (hi - lo) - int(np.clip(np.minimum(ends, hi) - np.maximum(starts, lo), 0, None).sum())
        covered = 0
        for c in CLASSES[:-1]:
            v = int(per.get((-1, c), 0))
            if v:
                rows.append((-1, "outside", c, v))
                covered += v
        rows.append((-1, "outside", "framework", max(outside - covered, 0)))
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def split(per_step: pd.DataFrame) -> pd.DataFrame:
    """The op_class_split table: one row per (phase, class) in CLASSES order; share of the phase's time."""
    if per_step is None or per_step.empty:
        return pd.DataFrame(columns=SPLIT_COLUMNS)
    g = per_step.groupby(["phase", "op_class"], sort=False)["time_ns"].sum()
    nsteps = per_step[per_step["step_id"] >= 0].groupby("phase")["step_id"].nunique()
    total = per_step.groupby("phase")["time_ns"].sum()
    rows = []
    for phase in dict.fromkeys(per_step["phase"]):
        for c in CLASSES:
            v = int(g.get((phase, c), 0))
            rows.append({"phase": phase, "op_class": c, "time_ns": v,
                         "share": v / total[phase] if total[phase] else None,
                         "steps": int(nsteps.get(phase, 0))})
    out = pd.DataFrame(rows, columns=SPLIT_COLUMNS)
    out["share"] = out["share"].astype("float64")
    return out


def is_cpu_run(gpu_activity: object) -> bool:
    """No GPU activity at all: the split by operator class is the answer (there is no roofline)."""
    return gpu_activity is None or len(gpu_activity) == 0  # type: ignore[arg-type]
