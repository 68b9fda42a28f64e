"""Warm-up marks: requests recorded like any other but left out of the timing means and of the run's
phase totals (run.json ``warmup_requests``), and ``tracekit.warmup()`` for a script with no handle on
its recording."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol


class Warmup:
    """Called, it has marked the next request; entered, it marks every request issued until the
    block exits instead. ``marked`` is the recording's set of warm-up request ids; ``issued`` says how
    many requests the recording has issued so far (the next one's id)."""

    def __init__(self, marked: set[int], issued: Callable[[], int]) -> None:
        self._marked = marked
        self._issued = issued
        self._next = issued()
        marked.add(self._next)

    def __enter__(self) -> Warmup:
        self._marked.discard(self._next)
        self._next = self._issued()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._marked.update(range(self._next, self._issued()))


class Marking(Protocol):
    def warmup(self) -> Warmup: ...


# The recordings open in this process, innermost last: what tracekit.warmup() marks.
ACTIVE: list[Marking] = []


def warmup() -> Any:
    """``tracekit.warmup()``: ``Recording.warmup()`` of the innermost open recording (a script under
    ``tracekit record --`` has no handle on it). Outside any recording it does nothing, so the
    script runs unchanged without tracekit."""
    return ACTIVE[-1].warmup() if ACTIVE else contextlib.nullcontext()
