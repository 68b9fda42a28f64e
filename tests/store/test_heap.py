"""tracekit.store.heap: Arrow on the system allocator inside the block, the previous pool after it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tracekit.store import heap


def test_lean_arrow_allocates_from_the_system_pool_and_restores_the_previous() -> None:
    before = pa.default_memory_pool().backend_name
    with heap.lean_arrow():
        assert pa.default_memory_pool().backend_name == "system"
        table = pa.table({"x": pa.array(range(100_000))})
        inside = pa.system_memory_pool().bytes_allocated()
        assert inside >= 800_000  # the column's buffer came from the system pool
    assert pa.default_memory_pool().backend_name == before
    assert table.column("x")[99_999].as_py() == 99_999  # a table outlives the block
    del table
    assert pa.system_memory_pool().bytes_allocated() <= inside - 800_000


def test_lean_arrow_restores_the_pool_when_the_block_raises() -> None:
    before = pa.default_memory_pool().backend_name
    with pytest.raises(RuntimeError), heap.lean_arrow():
        raise RuntimeError("boom")
    assert pa.default_memory_pool().backend_name == before


def test_trim_is_safe_to_call() -> None:
    heap.trim()
    heap.trim()
