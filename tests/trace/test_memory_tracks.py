"""The memory counter tracks: step_memory columns at each step's end, the allocator after each event."""

from __future__ import annotations

from tracekit.model import schema
from tracekit.model.trackids import MEMORY_PID
from tracekit.trace.tracks import Window, build_tracks


def _tables() -> dict:
    step_memory = schema.from_columns("step_memory", {
        "step_id": [0, 1], "kind": ["prefill", "decode"], "ts_ns": [1_000, 2_000],
        "allocated_bytes": [500, None], "weights_bytes": [300, 300], "kv_cache_bytes": [100, 120],
        "transient_bytes": [100, None],
    })
    memory = schema.from_columns("memory", {
        "ts_ns": [900, 1_500, 2_500], "device_type": [1, 1, 0], "device": [0, 0, 0],
        "bytes": [64, -64, 32], "total_allocated_bytes": [1_064, 1_000, 32],
    })
    return {"step_memory": step_memory, "memory": memory}


def test_one_counter_track_per_column_and_per_allocator_device() -> None:
    ts = build_tracks(_tables(), include_trace=False)
    names = {t.name: t for t in ts.tracks.values() if t.kind == "counter"}
    assert set(names) == {"memory.allocated (bytes)", "memory.weights (bytes)", "memory.kv_cache (bytes)",
                          "memory.transient (bytes)", "allocator cuda:0 allocated (bytes)",
                          "allocator cpu allocated (bytes)"}
    assert all(t.pid == MEMORY_PID and t.process == "memory" for t in names.values())
    pts = {(p.track, p.ts_ns): p.value for p in ts.counters}
    assert pts[("memory/allocated_bytes", 1_000)] == 500
    assert ("memory/allocated_bytes", 2_000) not in pts  # null: no point, never a zero
    assert pts[("memory/kv_cache_bytes", 2_000)] == 120
    assert [pts[("memory/allocator/cuda:0", t)] for t in (900, 1_500)] == [1_064, 1_000]


def test_window_and_empty_tables() -> None:
    ts = build_tracks(_tables(), window=Window(1_200, 2_200), include_trace=False)
    assert {p.ts_ns for p in ts.counters} == {1_500, 2_000}
    empty = build_tracks({"step_memory": schema.empty("step_memory"), "memory": schema.empty("memory")},
                         include_trace=False)
    assert not [t for t in empty.tracks.values() if t.process == "memory"]
