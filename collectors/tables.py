"""The recorder's host logs as stored tables: ``requests_table`` and ``steps_table``.

Host timestamps (``time.time_ns``) move onto the trace clock by ``offset_ns`` (trace = host +
offset); durations (TTFT, TPOT, e2e) are clock-free and stay as ``RequestRecord.metrics`` gives them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from tracekit.collectors.hooks import RequestRecord, StepRecord
from tracekit.model import schema
from tracekit.model.stats import percentile


def shift(offset_ns: int) -> Callable[[int | None], int | None]:
    """Host ns to trace ns (None stays None)."""

    def tr(ns: int | None) -> int | None:
        return None if ns is None else ns + offset_ns

    return tr


def requests_table(records: Sequence[RequestRecord], offset_ns: int = 0, *, source: str = "tracekit",
                   itl: bool = False, extra: Mapping[str, Sequence[Any]] | None = None) -> pa.Table:
    """The ``requests`` table, one row per record in order: start/end on the trace clock, TTFT,
    TPOT, e2e and prefill share from ``metrics()``, ``source`` in every row. ``itl``: also the p50 /
    p90 / p99 of each request's inter-token gaps (``percentile``). ``extra``: further columns of
    the schema, one value per record."""
    tr = shift(offset_ns)
    metrics = [r.metrics() for r in records]
    cols: dict[str, Sequence[Any]] = {
        "request_id": [r.request_id for r in records],
        "name": [r.name for r in records],
        "batch": [r.batch for r in records],
        "input_tokens": [r.input_tokens for r in records],
        "output_tokens": [r.output_tokens for r in records],
        "start_ns": [tr(r.start_ns) for r in records],
        "end_ns": [tr(r.end_ns) for r in records],
        "ttft_ns": [m["ttft_ns"] for m in metrics],
        "tpot_ns": [m["tpot_ns"] for m in metrics],
        "e2e_ns": [m["e2e_ns"] for m in metrics],
        "prefill_share": [m["prefill_share"] for m in metrics],
        "source": [source] * len(records),
    }
    if itl:
        gaps = [[float(b - a) for a, b in zip(r.token_ns, r.token_ns[1:], strict=False)] for r in records]
        for q in (50, 90, 99):
            cols[f"itl_p{q}_ns"] = [percentile(g, q) for g in gaps]
    cols.update(extra or {})  # from_columns refuses a name outside the schema or a length that differs
    return schema.from_columns("requests", cols)


def steps_table(steps: Sequence[StepRecord], start_of: Callable[[StepRecord], int | None],
                end_of: Callable[[StepRecord], int | None]) -> pa.Table:
    """The ``steps`` table of one-request steps (a generate call's forwards), CPU start/end as given."""
    return schema.from_columns(
        "steps",
        {
            "step_id": [s.step_id for s in steps],
            "request_id": [s.request_id for s in steps],
            "kind": [s.kind for s in steps],
            "batch": [s.batch for s in steps],
            "q_len": [s.q_len for s in steps],
            "kv_len": [s.kv_len for s in steps],
            "tokens": [s.batch * s.q_len for s in steps],
            "source": ["tracekit"] * len(steps),
            "cpu_start_ns": [start_of(s) for s in steps],
            "cpu_end_ns": [end_of(s) for s in steps],
        },
    )
