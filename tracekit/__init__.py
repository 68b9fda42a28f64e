"""tracekit: where did the time of this LLM request go?

The core package owns every file format (run directory, tables, traces). The
capture side lives in ``tracekit.collectors`` and the pure analysis passes in
``tracekit.analysis``. ``tracekit.record`` is imported lazily so that
``import tracekit`` never pulls in torch.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "record"]


def record(*args: Any, **kwargs: Any) -> Any:
    """Record a block of user code: ``with tracekit.record("name") as run: ...``.

    See ``tracekit.collectors.session.record`` for the arguments.
    """
    from tracekit.collectors.session import record as _record

    return _record(*args, **kwargs)
