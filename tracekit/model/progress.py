"""Progress of long work, reported to whoever listens (a terminal bar), never printed here.

Long stages (ingest's scan, analyze's passes, export's writing) call ``report(stage, done, total)``;
a listener installed with ``listening(fn)`` receives the calls. Without one a report costs a
context-variable lookup. ``done`` and ``total`` are in any one unit per stage (bytes, passes, events).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Listener = Callable[[str, float, float], None]
_LISTENER: ContextVar[Listener | None] = ContextVar("tracekit_progress", default=None)


def report(stage: str, done: float, total: float) -> None:
    """Tell the listener, if any, that ``done`` of ``total`` of ``stage`` is done."""
    fn = _LISTENER.get()
    if fn is not None:
        fn(stage, done, total)


def active() -> bool:
    """Whether anyone listens (to skip work done only to report)."""
    return _LISTENER.get() is not None


@contextmanager
def listening(fn: Listener | None) -> Iterator[None]:
    """Send the reports made inside the block to ``fn`` (None: to nobody)."""
    token = _LISTENER.set(fn)
    try:
        yield
    finally:
        _LISTENER.reset(token)
