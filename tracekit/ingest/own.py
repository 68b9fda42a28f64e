"""tracekit's own CPU-side annotations (clock syncs, steps, requests) read back from a raw trace.

``find_annotations`` reads the whole trace; ``own_annotations`` reads those events alone (a byte
search for their names, tracekit.ingest.named) and falls back to the full read where the search
cannot stand in for it. Both give the same list: one ``Annotation`` per (name, ts), sorted by ts,
on the trace's ``ts`` clock without its baseTimeNanoseconds. Only CPU-side ones: Kineto mirrors CPU
annotations onto the GPU timeline (gpu_user_annotation), and only the CPU one is opened at the host
time it names. A trace that cannot be read has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tracekit.errors import TraceFormatError
from tracekit.ingest.framing import offset_ns
from tracekit.ingest.named import read_named
from tracekit.ingest.reader import read_raw
from tracekit.ingest.result import RawScan

OWN_PREFIXES = ("tracekit.clock_sync ", "tracekit.step ", "tracekit.request ")


@dataclass(frozen=True)
class Annotation:
    """One of tracekit's CPU-side annotations as Kineto recorded it (ns on the trace's ``ts`` clock,
    without its baseTimeNanoseconds)."""

    name: str
    ts_ns: int
    dur_ns: int


def find_annotations(path: str | Path) -> list[Annotation]:
    """tracekit's own annotations in a trace, from a read of every event."""
    try:
        res = read_raw(path)
    except TraceFormatError:
        return []
    return _own(res)


def own_annotations(raw: str | Path) -> list[Annotation]:
    """What ``find_annotations`` gives, read from tracekit's events alone where the byte search can."""
    res = read_named(raw, "tracekit.")
    if res is None:
        return find_annotations(raw)
    return _own(res)


def _own(res: RawScan) -> list[Annotation]:
    t = res.tables.get("annotations")
    if t is None or t.num_rows == 0:
        return []
    base = offset_ns(res.meta)
    found: dict[tuple[str, int], Annotation] = {}
    cols = (t.column(c).to_pylist() for c in ("name", "cat", "ts_ns", "dur_ns"))
    for name, cat, t0, d in zip(*cols, strict=True):
        if not name or not name.startswith(OWN_PREFIXES) or cat == "gpu_user_annotation" or t0 is None:
            continue
        a = Annotation(name, int(t0) - base, int(d or 0))
        found[(a.name, a.ts_ns)] = a
    return sorted(found.values(), key=lambda a: a.ts_ns)
