"""The process's heap while big tables are read, built and written.

``trim()`` gives the C heap's free pages back to the system (glibc only; elsewhere a no-op): freed
buffers otherwise stay resident and count in every later peak. ``lean_arrow()`` is a block in which
Arrow allocates from the C library's malloc instead of its default pool (mimalloc keeps what a table
frees in the heaps of the threads that read it, where ``trim`` cannot reach); the previous pool is
restored on leaving it. Arrays keep the pool they were allocated from, so tables outlive the block.
Measurements: docs/measurements/2026-12-02-analyze-memory.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


def trim() -> None:
    """Hand the C heap's free pages back to the system (glibc's malloc_trim; a no-op elsewhere)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


@contextmanager
def lean_arrow() -> Iterator[None]:
    """Arrow allocates from the system allocator inside the block (see the module doc)."""
    import pyarrow as pa

    previous = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(previous)
