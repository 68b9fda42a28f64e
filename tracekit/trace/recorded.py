"""The tracks ``tracekit record`` merges into the trace it writes: the builder ``tracekit export`` uses.

The bound track is left out: nothing is classified at record time (the roofline pass runs in
``tracekit analyze``), so it would be a row of "not classified" slices.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from tracekit.trace.tracks import build_tracks, chrome_event_dicts


def record_track_events(steps: pa.Table, requests: pa.Table, counters: pa.Table,
                        step_memory: pa.Table | None = None) -> list[dict[str, Any]]:
    """Trace-event dicts of the requests, steps, counters (and step_memory) tracks, no bound track."""
    tables = {"steps": steps, "requests": requests, "counters": counters}
    if step_memory is not None:
        tables["step_memory"] = step_memory
    ts = build_tracks(tables, include_trace=False)
    bound = {k for k in ts.tracks if k.startswith("tracekit/bound")}
    ts.tracks = {k: t for k, t in ts.tracks.items() if k not in bound}
    ts.slices = [sl for sl in ts.slices if sl.track not in bound]
    return chrome_event_dicts(ts)
