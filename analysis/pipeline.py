"""Analysis passes: pure functions from tables to tables, run in a declared order.

A pass names the tables (or ``table.column``) it needs and the tables it adds
or replaces. ``run_passes`` hands each pass a read-only view of what exists so
far and merges what it returns into a *new* dict: the caller's tables are never
modified, and a pass never sees a half-built table. Non-table inputs travel in
the same dict: ``manifest`` (run.json as a dict, for host-side timings) and
``warnings`` (a list of strings; what passes return under ``warnings`` is
appended, never replaced).

``DEFAULT_PASSES`` is what ``tracekit analyze`` runs: steps, requests, phases, bound, energy, cost, warmup,
opclass (CPU runs only), check.
The warmup pass (tracekit.analysis.warmup) reads the non-table input ``warmup_first`` (the first N
requests are warm-ups, ``--warmup-requests N``) besides run.json's marks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis import bound as _bound
from tracekit.analysis import cost as _cost
from tracekit.analysis import energy as _energy
from tracekit.analysis import health as _health
from tracekit.analysis import intervals
from tracekit.analysis import opclass as _opclass
from tracekit.analysis import phases as _phases
from tracekit.analysis import requests as _requests
from tracekit.analysis import steps as _steps
from tracekit.analysis import warmup as _warmup
from tracekit.model import progress
from tracekit.model import schema as _schema

Tables = dict[str, Any]
PassFn = Callable[[Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Pass:
    name: str
    fn: PassFn
    needs: tuple[str, ...] = ()
    adds: tuple[str, ...] = ()


class PassError(RuntimeError):
    pass


def _has(tables: Mapping[str, Any], need: str) -> bool:
    table, _, column = need.partition(".")
    if table not in tables:
        return False
    if not column:
        return True
    t = tables[table]
    cols = t.column_names if hasattr(t, "column_names") else list(getattr(t, "columns", []))
    return column in cols


def run_passes(tables: Mapping[str, Any], passes: Iterable[Pass],
               between: Callable[[], None] | None = None) -> Tables:
    """Run passes in order; return a new dict (inputs untouched).

    A raw table a pass needs but the run lacks is supplied empty (every table is
    valid when empty); a missing derived input or column is a bug in the pass
    order and raises PassError. ``between`` (optional) is called after each pass.
    """
    out: Tables = dict(tables)
    out["warnings"] = list(tables.get("warnings", []))
    passes = list(passes)
    for i, p in enumerate(passes):
        progress.report(f"analyzing: {p.name}", i, len(passes))
        for need in p.needs:
            t = need.partition(".")[0]
            if t not in out and t in _schema.SCHEMAS and not need.count("."):
                out[t] = _schema.empty(t)
            if not _has(out, need):
                raise PassError(f"pass {p.name!r} needs {need!r}, which no earlier pass provides")
        result = p.fn(MappingProxyType(out))
        extra = set(result) - set(p.adds) - {"warnings"}
        if extra:
            raise PassError(f"pass {p.name!r} returned undeclared tables {sorted(extra)}")
        new = dict(out)
        new.update({k: v for k, v in result.items() if k != "warnings"})
        new["warnings"] = out["warnings"] + list(result.get("warnings", []))
        out = new
        del result, new
        if between is not None:
            between()
    return out


# --- the default passes ---------------------------------------------------------


def _recorded_steps(t: Mapping[str, Any]) -> bool:
    """The recorder's own steps table came in as ``recorded_steps`` (a run tracekit recorded)."""
    r = t.get("recorded_steps")
    return r is not None and len(r) > 0


def _recorded(t: Mapping[str, Any]) -> bool:
    """A run tracekit recorded: its steps table, or at least its host timings (run.json
    ``timings.profiled``), which are the latency truth whatever part of the run the trace covers."""
    return _recorded_steps(t) or bool(_requests.timing_requests(t.get("manifest"), "profiled"))


def _steps_pass(t: Mapping[str, Any]) -> dict[str, Any]:
    d = _steps.detect(t["cpu_ops"], t["annotations"], t["runtime"], t["gpu_activity"])
    if _recorded_steps(t):
        d = _steps.merge_recorded(d, t["recorded_steps"], t["gpu_activity"], t["runtime"], t["cpu_ops"])
    return {"steps": d.steps, "kernel_steps": d.kernel_steps, "warnings": d.warnings, "workload": d.workload.as_dict()}


def _requests_pass(t: Mapping[str, Any]) -> dict[str, Any]:
    if _recorded(t):
        req, steps, ks, warn = _requests.from_recorded(
            t.get("recorded_requests"), t["steps"], t["kernel_steps"], t.get("manifest")
        )
    else:
        req, steps, ks, warn = _requests.build(
            t["steps"], t["kernel_steps"], t["annotations"], t["cpu_ops"], t.get("manifest"),
            runtime=t.get("runtime"), other_events=t.get("other_events"), workload=t.get("workload"),
        )
    return {"requests": req, "steps": steps, "kernel_steps": ks, "warnings": warn}


def trace_span(t: Mapping[str, Any]) -> tuple[int, int] | None:
    """[first, last) ns over every timed event of the raw tables; not the ops of graph-capture traces
    (``cpu_ops.captured``), which ran at capture time on another clock (steps.live_ops)."""
    lo, hi = np.inf, -np.inf
    for name in ("gpu_activity", "cpu_ops", "runtime", "annotations"):
        df = t.get(name)
        if df is None or len(df) == 0:
            continue
        df = _steps.as_df(df)
        if name == "cpu_ops":
            df = _steps.live_ops(df)
        ts = df["ts_ns"].dropna().astype("int64")
        if ts.empty:
            continue
        end = ts + df.loc[ts.index, "dur_ns"].fillna(0).astype("int64")
        lo, hi = min(lo, int(ts.min())), max(hi, int(end.max()))
    return None if lo == np.inf else (int(lo), int(hi))


def _phases_pass(t: Mapping[str, Any]) -> dict[str, Any]:
    span = trace_span(t)
    return {
        "phases": _phases.build(t["steps"], t["kernel_steps"], span),
        "gpu_timeline": _phases.device_timeline(t["kernel_steps"], span),
    }


STEPS = Pass("steps", _steps_pass, needs=("cpu_ops", "annotations", "runtime", "gpu_activity"),
             adds=("steps", "kernel_steps", "workload"))
REQUESTS = Pass("requests", _requests_pass, needs=("steps", "kernel_steps", "annotations", "cpu_ops"),
                adds=("requests", "steps", "kernel_steps"))
PHASES = Pass("phases", _phases_pass, needs=("steps", "kernel_steps"), adds=("phases", "gpu_timeline"))

def _captured_view(t: Mapping[str, Any]) -> Mapping[str, Any]:
    """``t`` with only the steps that have kernel capture: a step outside the trace's capture window has
    no GPU timeline, and its window must not count as idle."""
    steps = t["steps"]
    if "captured" in getattr(steps, "columns", ()) and not steps["captured"].all():
        view = dict(t)
        view["steps"] = steps[steps["captured"]].reset_index(drop=True)
        return MappingProxyType(view)
    return t


def _bound_pass(t: Mapping[str, Any]) -> dict[str, Any]:
    """The bound pass over the captured steps, plus the run-level ``outside`` row."""
    view = _captured_view(t)
    out = _bound.bound_pass(view)
    if "kernel_bound" in out:
        return _outside_row(t, _steps.as_df(view["steps"]), out)
    out = _outside_row(t, _steps.as_df(view["steps"]), {**_without_ceiling(view), "warnings": out.get("warnings", [])})
    # Without a ceiling modelled kernels have no class: the bound split is unknown, not zero.
    split = [_bound.TIME_COLUMNS[c] for c in (_bound.COMPUTE, _bound.MEMORY, _bound.LATENCY, _bound.OTHER)]
    for name in ("phases", "step_bound"):
        frame = out.get(name)
        if frame is not None:
            frame = frame.copy()
            for c in split:
                if c in frame:
                    frame[c] = pd.array([pd.NA] * len(frame), dtype="Int64")
            out[name] = frame
    return out


def _without_ceiling(t: Mapping[str, Any]) -> dict[str, Any]:
    """Where the GPU has no ceiling: every kernel's FLOPs and bytes, the phases' sums and rates all the
    same; a ceiling only decides the compute/memory classes, so compute_bound_ns, memory_bound_ns and
    other_ns stay null. Nothing if there is no GPU time to split."""
    gpu, cpu, steps = (_steps.as_df(t[k]) for k in ("gpu_activity", "cpu_ops", "steps"))
    if gpu.empty:
        return {}
    ks = _steps.as_df(t["kernel_steps"]) if t.get("kernel_steps") is not None else None
    phases = _steps.as_df(t["phases"]) if t.get("phases") is not None else None
    out = _bound.bound_tables(gpu, cpu, steps, None, phases=phases, kernel_steps=ks)
    return {"phases": out["phases"].drop(columns=["tokens"], errors="ignore"), "kernel_bound": out["kernels"],
            "step_bound": out["step_bound"]}


def _energy_pass(t: Mapping[str, Any]) -> dict[str, Any]:
    return _energy.energy_pass(_captured_view(t))


def _outside_row(t: Mapping[str, Any], steps: Any, out: dict[str, Any]) -> dict[str, Any]:
    """The run-level ``outside`` row, which the bound pass cannot match to steps: its time
    classes by the same sweep, over the trace span outside every (captured) step window,
    with the activities outside every step; the other columns from the phases pass. A trace
    with no steps is all outside: the row covers the whole trace."""
    after, kern = out.get("phases"), out.get("kernel_bound")
    before = t.get("phases")
    if before is None:
        return out
    if after is None or not len(after):  # no steps: the outside row is the whole trace
        after = _steps.as_df(before)
    mask = (after["phase"] == "outside").to_numpy()
    b = before[before["phase"] == "outside"]
    if not mask.any() or b.empty:
        return out
    after = after.copy()
    for c in b.columns:
        if c in after.columns and c != "phase":
            after.loc[mask, c] = after.loc[mask, c].where(after.loc[mask, c].notna(), b[c].to_numpy()[0])
    span = trace_span(t)
    if span is not None and kern is not None:
        w = intervals.step_windows(steps) if len(steps) else None
        inside = intervals.window_union(w) if w is not None and len(w) else intervals.EMPTY
        windows = intervals.complement(inside, *span)
        k = kern[pd.to_numeric(kern["step_id"], errors="coerce").isna()] if len(kern) else kern
        row = _bound.attribute_windows(windows, k, context=kern)
        for c in (*_bound.TIME_COLUMNS.values(), *_bound.IDLE_COLUMNS, "gpu_busy_ns", "time_ns"):
            if c in after.columns or not len(steps):  # no steps: the phases pass made no bound columns
                after.loc[mask, c] = row[c]
    return {**out, "phases": after}


# The compute / memory / latency / idle split of each phase (needs a ceiling: t["ceiling"] or the manifest's GPU;
# Nsight Compute counters, where `tracekit counters` measured them, decide the classes of what they measured).
BOUND = Pass("bound", _bound_pass,
             needs=("gpu_activity", "cpu_ops", "steps", "kernel_steps", "phases", "counters", "runtime",
                    "ncu_counters"),
             adds=("phases", "kernel_bound", "step_bound"))
# Energy per phase and GPM DRAM bandwidth, where the bound pass ran and counters exist.
ENERGY = Pass("energy", _energy_pass, needs=("gpu_activity", "steps", "phases", "counters"), adds=("phases",))
# Each step's cost split across the requests it served (step_requests), summed per request.
COST = Pass("cost", _cost.cost_pass, needs=("steps", "requests", "annotations", "cpu_ops", "counters"),
            adds=("requests", "step_requests"))
# Warm-up requests out of the run-level phase rows (their own rows stay); first-use outliers flagged.
WARMUP = Pass("warmup", _warmup.warmup_pass, needs=("phases", "requests"), adds=("phases", "warmup"))


def _opclass_pass(t: Mapping[str, Any]) -> dict[str, Any]:
    """A CPU run (no GPU activity): each phase's time by operator class (tracekit.analysis.opclass)."""
    if not _opclass.is_cpu_run(t.get("gpu_activity")):
        return {}
    per = _opclass.step_op_classes(_steps.as_df(t["cpu_ops"]), _steps.as_df(t["steps"]), trace_span(t))
    return {"op_class_split": _opclass.split(per)}


# On a CPU: where each phase's host time went, by operator class (no kernels, no roofline).
OPCLASS = Pass("opclass", _opclass_pass, needs=("cpu_ops", "steps", "gpu_activity"), adds=("op_class_split",))
# Is the trace fit to analyse: one verdict over everything above (tracekit.analysis.health; ``tracekit check``).
CHECK = Pass("check", lambda t: {"check": _health.check(t)},
             needs=("gpu_activity", "runtime", "cpu_ops", "steps", "phases", "other_events", "counters"),
             adds=("check",))
DEFAULT_PASSES: list[Pass] = [STEPS, REQUESTS, PHASES, BOUND, ENERGY, COST, WARMUP, OPCLASS, CHECK]


def to_frame(table: Any) -> pd.DataFrame:
    return _steps.as_df(table)
