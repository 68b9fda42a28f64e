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
from typing import Any

import numpy as np

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
    (``cpu_ops.captured``), which ran at capture time on another clock (steps.live_ops)."""
    lo, hi = np.inf, -np.inf
    for name in ("gpu_activity", "cpu_ops", "runtime", "annotations"):
        df = tables.get(name)
        if df is None or len(df) == 0:
            continue
        df = as_df(df)
        if name == "cpu_ops":
            df = _steps.live_ops(df)
        ts = df["ts_ns"].dropna().astype("int64")
        if ts.empty:
            continue
        end = ts + df.loc[ts.index, "dur_ns"].fillna(0).astype("int64")
        lo, hi = min(lo, int(ts.min())), max(hi, int(end.max()))
    return None if lo == np.inf else (int(lo), int(hi))


def opclass_pass(cpu_ops: Any, steps: Any, gpu_activity: Any, span: tuple[int, int] | None) -> Any:
    """A CPU run (no GPU activity): each phase's host time by operator class (tracekit.analysis.opclass);
    None for a GPU run."""
    if not _opclass.is_cpu_run(gpu_activity):
        return None
    return _opclass.split(_opclass.step_op_classes(as_df(cpu_ops), as_df(steps), span))
