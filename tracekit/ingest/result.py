"""What reading one trace produces: raw tables, metadata and exact event accounting.

Nothing is dropped silently: ``Counts`` says how many events were read, how many went to each
table, and how many were skipped and why; read == sum(events per table) + sum(skipped).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tracekit.errors import visible

# The tables a reader fills (tracekit.model.schema), in the order they are written.
TABLES_OUT = ("gpu_activity", "cpu_ops", "runtime", "annotations", "counters", "memory", "other_events")


@dataclass
class Counts:
    events_read: int = 0
    by_ph: Counter[str] = field(default_factory=Counter)
    events_by_table: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    warnings: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "events_read": self.events_read,
            "by_ph": dict(self.by_ph),
            "events_by_table": dict(self.events_by_table),
            "skipped": dict(self.skipped),
            "warnings": dict(self.warnings),
        }


@dataclass
class RawScan:
    """One reader's output for one file: raw tables (no rank column, not linked), metadata, counts."""

    tables: dict[str, pa.Table]
    meta: dict[str, Any]
    counts: Counts
    bytes_in: int
    truncated: str | None


@dataclass
class FileResult:
    path: str
    rank: int
    tables: dict[str, pa.Table]
    meta: dict[str, Any]
    counts: Counts
    bytes_in: int
    seconds: float
    truncated: str | None = None
    written: dict[str, int] | None = None  # rows of each table already written to the run (a chunked ingest)


def not_a_trace(r: FileResult) -> str | None:
    """Why a file that parsed is not a trace (no element is an event: all skipped, or none has a
    ``ph``), or None."""
    c = r.counts
    kept = sum(c.events_by_table.values())
    if kept and set(c.by_ph) != {"(none)"}:
        return None
    why = ", ".join(f"{n} {k}" for k, n in sorted(c.skipped.items())) if not kept else "none has a ph field"
    return f"{visible(r.path)}: not a trace: none of its {c.events_read} elements is a trace event ({why})"
