"""The ops of graph-capture traces (``cpu_ops.captured``) ran at capture time, on another clock: the
exported trace leaves them out, and ``--window-ms`` counts from the run's own first event."""

from __future__ import annotations

import pyarrow as pa

from tracekit.app.export import resolve_window
from tracekit.trace.blocks import cpu_block
from tracekit.trace.trackset import TrackSet

S = 1_000_000_000


def _ops(captured: list[bool | None]) -> pa.Table:
    n = len(captured)
    return pa.table({
        "ts_ns": pa.array([100 * S - 6 * S if c else 100 * S + i for i, c in enumerate(captured)], pa.int64()),
        "dur_ns": pa.array([10] * n, pa.int64()),
        "name": pa.array([f"aten::op{i}" for i in range(n)]),
        "cat": pa.array(["cpu_op"] * n),
        "pid": pa.array([1] * n, pa.int64()),
        "tid": pa.array([1] * n, pa.int64()),
        "captured": pa.array(captured, pa.bool_()),
    })


def test_captured_ops_are_not_slices_of_the_exported_trace() -> None:
    block = cpu_block(TrackSet(), _ops([False, True, None, True]), "cpu_op", None)
    assert block is not None and block.n == 2
    assert [block.names[i] for i in block.name] == ["aten::op0", "aten::op2"]
    assert int(block.ts.min()) == 100 * S  # nothing from the capture's clock, 6 s earlier


def test_window_ms_counts_from_the_runs_own_first_event() -> None:
    w = resolve_window({"cpu_ops": _ops([True, False])}, None, "0:1")
    assert w is not None and w.start_ns == 100 * S + 1 and w.end_ns == 100 * S + 1 + 1_000_000
