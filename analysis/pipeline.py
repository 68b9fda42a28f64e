"""The analysis driver: ``run_passes(input) -> output``, the passes in their one order.

Each pass is a pure function whose signature names what it reads (tracekit.analysis.steps.steps_pass,
requests.requests_pass, phases.phases_pass, bound.bound_pass, energy.energy_pass, cost.cost_pass,
warmup.warmup_pass, opclass, health.check); this module hands each what it needs from the
AnalysisInput (tracekit.analysis.inputs) and from the passes before it, collects every warning in pass
order, and returns one AnalysisOutput. Nothing given is modified.

The order (PASSES): steps, requests, phases, bound, energy, cost, warmup, opclass (CPU runs only), check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.analysis import bound as _bound
from tracekit.analysis import cost as _cost
from tracekit.analysis import energy as _energy
from tracekit.analysis import health as _health
from tracekit.analysis import opclass as _opclass
from tracekit.analysis import phases as _phases
from tracekit.analysis import requests as _requests
from tracekit.analysis import steps as _steps
from tracekit.analysis import warmup as _warmup
from tracekit.analysis.frames import as_df
from tracekit.analysis.inputs import PASSES, RAW, AnalysisInput, AnalysisOutput
from tracekit.model import progress


def run_passes(inp: AnalysisInput, between: Callable[[], None] | None = None) -> AnalysisOutput:
    """Every pass over ``inp``, in PASSES order; ``between`` (optional) is called after each pass.

    The output's tables: steps, kernel_steps, requests, phases, gpu_timeline, and where their passes
    made them kernel_bound, step_bound, step_requests, op_class_split. Its warnings: the passes' in
    order, then the ceiling's note (no ceiling and why, or how it was found)."""
    t, m = inp.table, inp.manifest
    span = trace_span(inp.tables)
    warnings: list[str] = []
    made: dict[str, Any] = {}
    done = _Progress(between)

    done.start("steps")
    found = _steps.steps_pass(t("cpu_ops"), t("annotations"), t("runtime"), t("gpu_activity"), t("recorded_steps"))
    warnings += found.warnings
    workload = found.workload.as_dict()
    done.start("requests")
    requests, steps, kernel_steps, warn = _requests.requests_pass(
        found.steps, found.kernel_steps, t("annotations"), t("cpu_ops"), t("runtime"), t("other_events"),
        manifest=m, workload=workload, recorded_steps=t("recorded_steps"), recorded_requests=t("recorded_requests"))
    del found
    warnings += warn
    made.update(requests=requests, steps=steps, kernel_steps=kernel_steps)
    done.start("phases")
    made["phases"], made["gpu_timeline"] = _phases.phases_pass(steps, kernel_steps, span)
    done.start("bound")
    bound = _bound.bound_pass(t("gpu_activity"), t("cpu_ops"), steps, kernel_steps, made["phases"], t("runtime"),
                              t("ncu_counters"), ceilings=inp.ceilings, manifest=m, span=span, options=inp.bound)
    warnings += bound.pop("warnings", [])
    made.update(bound)
    del bound
    done.start("energy")
    phases = _energy.energy_pass(t("gpu_activity"), _bound.captured_steps(steps), made["phases"], t("counters"),
                                 bound_ran=made.get("kernel_bound") is not None, ceiling=inp.ceiling)
    if phases is not None:
        made["phases"] = phases
    done.start("cost")
    cost = _cost.cost_pass(steps, made["requests"], t("step_requests"), t("annotations"), t("cpu_ops"),
                           made.get("step_bound"), t("counters"), t("gpu_activity"), manifest=m)
    warnings += cost.pop("warnings", [])
    made.update(cost)
    done.start("warmup")
    warm = _warmup.warmup_pass(made["requests"], made["phases"], manifest=m, warmup_first=inp.warmup_first)
    warnings += warm["warnings"]
    if "phases" in warm:
        made["phases"] = warm["phases"]
    done.start("opclass")
    split = opclass_pass(t("cpu_ops"), steps, t("gpu_activity"), span)
    if split is not None:
        made["op_class_split"] = split
    done.start("check")
    verdict = _health.check({**{n: t(n) for n in RAW}, **made}, manifest=m, ceiling=inp.ceiling)
    done.end()
    return AnalysisOutput(tables=made, warnings=(*warnings, *ceiling_warnings(inp)), workload=workload,
                          warmup=warm["warmup"], check=verdict, ceiling=inp.ceiling, manifest=m)


class _Progress:
    """The progress line before each pass, ``between`` after each."""

    def __init__(self, between: Callable[[], None] | None) -> None:
        self.between, self.i = between, -1

    def start(self, name: str) -> None:
        self.end()
        self.i += 1
        progress.report(f"analyzing: {name}", self.i, len(PASSES))

    def end(self) -> None:
        if self.i >= 0 and self.between is not None:
            self.between()


def ceiling_warnings(inp: AnalysisInput) -> list[str]:
    """The ceiling's note as a warning: why there is none (where the trace has GPU activity), or how
    it was found where that was not the GPU run.json names."""
    c = inp.ceilings
    if c.ceiling is None and c.note and len(inp.table("gpu_activity")):
        return [f"no ceiling: {c.note}"]
    if c.ceiling is not None and c.note:
        return [c.note]
    return []


def trace_span(tables: Mapping[str, Any]) -> tuple[int, int] | None:
    """[first, last) ns over every timed event of the raw tables; not the ops of graph-capture traces
    (``cpu_ops.captured``), which ran at capture time on another clock (steps.live_ops). An event's
    end is ts_ns + dur_ns (a missing duration: 0); events without a start are not counted."""
    lo, hi = np.inf, -np.inf
    for name in ("gpu_activity", "cpu_ops", "runtime", "annotations"):
        t = tables.get(name)
        if t is None or len(t) == 0:
            continue
        got = _arrow_span(t, live=name == "cpu_ops") if isinstance(t, pa.Table) else False
        if got is False:
            got = _frame_span(t, live=name == "cpu_ops")
        if got is not None:
            lo, hi = min(lo, got[0]), max(hi, got[1])
    return None if lo == np.inf else (int(lo), int(hi))


def _arrow_span(t: pa.Table, live: bool) -> tuple[int, int] | Literal[False] | None:
    """(first start, last end) of an Arrow table's rows (None: no row has a start), read from its
    columns; False where its ts_ns / dur_ns are not integer columns (``_frame_span`` decides then)."""
    names = t.column_names
    if "ts_ns" not in names or not pa.types.is_integer(t.schema.field("ts_ns").type) or (
            "dur_ns" in names and not pa.types.is_integer(t.schema.field("dur_ns").type)):
        return False
    ts = t.column("ts_ns").cast(pa.int64())
    keep = pc.is_valid(ts)
    if live and "captured" in names:
        keep = pc.and_(keep, pc.invert(pc.fill_null(t.column("captured").cast(pa.bool_()), False)))
    ts = ts.filter(keep)
    if not len(ts):
        return None
    dur = (t.column("dur_ns").cast(pa.int64()).filter(keep).fill_null(0) if "dur_ns" in names
           else pa.chunked_array([pa.array([0] * len(ts), pa.int64())]))
    first = pc.min(ts).as_py()
    last = pc.max(pc.add(ts, dur)).as_py()  # int64 addition, wrapping as NumPy's does
    return int(first), int(last)


def _frame_span(t: Any, live: bool) -> tuple[int, int] | None:
    """``_arrow_span`` of a table given as a pandas frame (or a table whose times are not integers)."""
    df = as_df(t)
    if live:
        df = _steps.live_ops(df)
    ts = df["ts_ns"].dropna().astype("int64")
    if ts.empty:
        return None
    end = ts + df.loc[ts.index, "dur_ns"].fillna(0).astype("int64")
    return int(ts.min()), int(end.max())


def opclass_pass(cpu_ops: Any, steps: Any, gpu_activity: Any, span: tuple[int, int] | None) -> Any:
    """A CPU run (no GPU activity): each phase's host time by operator class (tracekit.analysis.opclass);
    None for a GPU run."""
    if not _opclass.is_cpu_run(gpu_activity):
        return None
    return _opclass.split(_opclass.step_op_classes(cpu_ops, steps, span))
