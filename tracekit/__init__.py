"""tracekit: where did the time of this LLM request go?

The core package owns every file format (run directory, tables, traces). The
capture side lives in ``tracekit.collectors`` and the pure analysis passes in
``tracekit.analysis``. ``tracekit.record`` is imported lazily so that
``import tracekit`` never pulls in torch.
"""

from __future__ import annotations

import os
import sys
from typing import Any

# Arrow memory from the C library's malloc unless the user chose otherwise. pyarrow's default pool
# (mimalloc in the wheels) keeps freed pages resident: ingesting the 84 MB H200 trace peaked at
# 195 MB RSS with it, 165 MB with the system pool, at the same speed (docs/ingest.md). pyarrow reads
# this variable once, when it is imported, so it only applies if tracekit comes first.
if "pyarrow" not in sys.modules:
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

__version__ = "0.1.0"

__all__ = ["__version__", "record"]


def record(*args: Any, **kwargs: Any) -> Any:
    """Record a block of user code: ``with tracekit.record("name") as run: ...``.

    See ``tracekit.collectors.session.record`` for the arguments.
    """
    from tracekit.collectors.session import record as _record

    return _record(*args, **kwargs)
