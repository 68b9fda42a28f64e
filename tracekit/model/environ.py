"""tracekit's environment variables, read and checked in one place.

``check`` is the CLI's first step: a variable set to something tracekit cannot use is a one-line
usage error naming it and what it takes, never a traceback in the middle of the work.
"""

from __future__ import annotations

import math
import os

from tracekit.errors import UsageError, visible

PROGRESS_DELAY = "TRACEKIT_PROGRESS_DELAY"  # seconds before a progress bar shows (a number >= 0)
INGEST_ENGINE = "TRACEKIT_INGEST_ENGINE"  # native or duckdb
CACHE_DIR = "TRACEKIT_CACHE_DIR"  # where measured ceilings are kept (a folder)
NCU = "TRACEKIT_NCU"  # the Nsight Compute binary to run

ENGINES = ("native", "duckdb")


def progress_delay(default: float) -> float:
    """TRACEKIT_PROGRESS_DELAY in seconds (``default`` where unset); UsageError where it is not a number >= 0."""
    raw = os.environ.get(PROGRESS_DELAY)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise UsageError(f"{PROGRESS_DELAY}={visible(repr(raw))}: expected seconds, a number >= 0 (e.g. 2); "
                         "unset it for the default")
    return value


def check() -> None:
    """UsageError for the first tracekit variable set to a value tracekit cannot use."""
    progress_delay(0.0)
    engine = os.environ.get(INGEST_ENGINE)
    if engine is not None and engine.strip().lower() not in (*ENGINES, ""):
        raise UsageError(f"{INGEST_ENGINE}={visible(repr(engine))}: expected one of {', '.join(ENGINES)}")
    for name in (CACHE_DIR, NCU):
        value = os.environ.get(name)
        if value is not None and ("\x00" in value or len(value.encode("utf-8", "surrogateescape")) > 4096):
            raise UsageError(f"{name}: not a usable path ({visible(repr(value[:80]))})")
