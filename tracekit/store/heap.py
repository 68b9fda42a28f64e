"""The process's heap while big tables are read, built and written.

``trim()`` gives the C heap's free pages back to the system (glibc only; elsewhere a no-op): freed
buffers otherwise stay resident and count in every later peak. Arrow allocates from the same heap
when tracekit is imported before pyarrow (tracekit/__init__.py chooses its system pool).
Measurements: docs/measurements/2026-12-02-analyze-memory.md.
"""

from __future__ import annotations


def trim() -> None:
    """Hand the C heap's free pages back to the system (glibc's malloc_trim; a no-op elsewhere)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
