"""The timeline's content, independent of the file format: tracks, slices, counter points.

``TrackSet.slices`` is a list of ``Slice`` objects. The trace's own events (kernels, CPU ops, runtime
calls, annotations: hundreds of thousands of rows) are held as columnar blocks
(tracekit.trace.blocks) that the writers read directly; ``slices`` turns them into ``Slice`` objects
the first time it is read, after the slices of tracekit's own tracks, so every reader sees one list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Track:
    key: str
    name: str  # thread name (slice tracks) or counter name (counter tracks)
    process: str
    pid: int
    tid: int
    kind: str  # "slice" | "counter"
    sort_index: int = 0
    process_sort_index: int = 0
    unit: str = ""


@dataclass(frozen=True)
class Slice:
    track: str
    name: str
    ts_ns: int
    dur_ns: int
    cat: str
    args: dict[str, Any] = field(default_factory=dict)
    cname: str | None = None


@dataclass(frozen=True)
class CounterPoint:
    track: str
    ts_ns: int
    value: float


@dataclass(frozen=True)
class Window:
    """A closed time window in trace ns; events overlapping it are kept (clipped)."""

    start_ns: int
    end_ns: int


class Block(Protocol):
    """Columnar slices (tracekit.trace.blocks.TraceBlock): their count and their Slice objects."""

    n: int

    def slices(self) -> list[Slice]: ...


class TrackSet:
    """Tracks (by key, in the order they were added), slices, counter points and notes.

    ``blocks``: the trace's own slices, columnar, after ``slices`` in order (see the module doc)."""

    def __init__(self, tracks: dict[str, Track] | None = None, slices: list[Slice] | None = None,
                 counters: list[CounterPoint] | None = None, notes: list[str] | None = None) -> None:
        self.tracks: dict[str, Track] = tracks if tracks is not None else {}
        self._slices: list[Slice] = slices if slices is not None else []
        self.counters: list[CounterPoint] = counters if counters is not None else []
        self.notes: list[str] = notes if notes is not None else []
        self.blocks: list[Block] = []

    @property
    def slices(self) -> list[Slice]:
        if self.blocks:
            for b in self.blocks:
                self._slices.extend(b.slices())
            self.blocks = []
        return self._slices

    @slices.setter
    def slices(self, value: list[Slice]) -> None:
        self._slices = value
        self.blocks = []

    @property
    def own_slices(self) -> list[Slice]:
        """The slices held as objects (tracekit's own tracks while the trace's are still in blocks)."""
        return self._slices

    def slice_count(self) -> int:
        return len(self._slices) + sum(b.n for b in self.blocks)

    def add_track(self, track: Track) -> Track:
        return self.tracks.setdefault(track.key, track)

    def slices_on(self, key: str) -> list[Slice]:
        return [s for s in self.slices if s.track == key]

    def counters_on(self, key: str) -> list[CounterPoint]:
        return [c for c in self.counters if c.track == key]
