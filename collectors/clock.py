"""The host clock onto the trace clock: the offset measured from tracekit's own annotations.

Each ``tracekit.clock_sync host_ns=<t>`` annotation is a (trace, host) pair; so is every step
annotation, whose host start was read just before it opened. The offset is the minimum over the
pairs (``tracekit.trace.chrome.clock_offset``). Where the trace recorded a step's annotation, its own
timestamps are the trace clock exactly; elsewhere (outside a --trace-steps window) the host's
timestamps move by the offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tracekit.collectors.hooks import StepRecord
from tracekit.ingest.own import Annotation
from tracekit.model.stepnames import parse_step
from tracekit.trace import chrome as chrome_trace

NO_SYNC = "no tracekit.clock_sync in the trace: tables use the host clock"


@dataclass(frozen=True)
class Alignment:
    """``offset_ns``: trace_ns = host_ns + offset_ns (0 where nothing could be measured, and
    ``problem`` says so); ``traced_steps``: step id -> its annotation in the trace; ``manifest``:
    run.json ``clock``."""

    offset_ns: int
    traced_steps: dict[int, Annotation]
    manifest: dict[str, Any]
    problem: str | None = None

    def start_of(self, step_id: int, host_ns: int | None) -> int | None:
        a = self.traced_steps.get(step_id)
        return a.ts_ns if a is not None else _plus(host_ns, self.offset_ns)

    def end_of(self, step_id: int, host_ns: int | None) -> int | None:
        a = self.traced_steps.get(step_id)
        return a.ts_ns + a.dur_ns if a is not None else _plus(host_ns, self.offset_ns)


def _plus(ns: int | None, offset: int) -> int | None:
    return None if ns is None else ns + offset


def align(annotations: Sequence[Annotation], steps: Sequence[StepRecord]) -> Alignment:
    """The offset from the clock syncs and the step annotations that match a logged step."""
    syncs = chrome_trace.clock_syncs(annotations)
    traced: dict[int, Annotation] = {}
    for a in annotations:
        label = parse_step(a.name)
        if label is not None:
            traced[label.step_id] = a
    by_id = {s.step_id: s for s in steps}
    step_syncs = [chrome_trace.ClockSync(a.ts_ns, by_id[i].cpu_start_ns) for i, a in traced.items() if i in by_id]
    offset = chrome_trace.clock_offset([*syncs, *step_syncs])
    clock: dict[str, Any] = {
        "trace_clock": "Kineto ts converted to int64 ns",
        "clock_syncs": len(syncs),
        "step_syncs": len(step_syncs),
    }
    problem = None
    if offset is None:
        # No marker (no trace, or a window never reached): tables stay on the host clock.
        offset = 0
        clock["source"] = "none: host clock used as the trace clock"
        problem = NO_SYNC
    else:
        clock["source"] = "tracekit.clock_sync and step annotations (minimum offset)"
        offs = sorted(s.offset_ns - offset for s in [*syncs, *step_syncs])
        clock["sync_excess_ns_p50"] = offs[len(offs) // 2]
    clock["offset_ns"] = offset  # trace_ns = host_ns + offset_ns
    return Alignment(offset, traced, clock, problem)
