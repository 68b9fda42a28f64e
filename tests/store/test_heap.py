"""tracekit.store.heap.trim: the C heap's free pages go back to the system."""

from __future__ import annotations

import resource
import sys

import numpy as np
import pytest

from tracekit.store import heap


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_trim_returns_freed_small_blocks() -> None:
    # 40 MB in 100 kB arrays (under glibc's mmap threshold: they come from the heap), every second
    # one kept so that the freed half cannot shrink the heap from its top.
    blocks = [np.ones(12_500) for _ in range(400)]
    keep = blocks[1::2]
    del blocks
    before = _rss_kb()
    heap.trim()
    assert before - _rss_kb() > 10_000  # at least 10 of the ~20 MB freed left the resident set
    assert all(float(b[0]) == 1.0 for b in keep)


def test_trim_is_safe_to_call_again() -> None:
    heap.trim()
    heap.trim()
