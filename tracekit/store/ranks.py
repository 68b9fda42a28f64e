"""The multi-rank run layout: one ordinary run per rank under ``ranks/<k>/``, merged at the top.

A tensor-parallel run is a run directory whose ``ranks/<k>/`` each hold a complete run of rank k;
``merge_tables`` puts every rank's rows into the top-level tables with ``rank`` set.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from tracekit.model import schema as _schema
from tracekit.store.rundir import MANIFEST, RunDir

RANKS_DIR = "ranks"

# The tables a rank's own run holds (ingest, record, the single-run analysis) that ``merge_tables``
# puts at the top; the cross-rank tables (rank_steps, comm_*) are written there by the analysis.
MERGED = ("gpu_activity", "cpu_ops", "runtime", "annotations", "counters", "memory", "other_events", "steps",
          "requests", "step_requests", "kernel_steps", "gpu_timeline", "phases", "ncu_counters")


_RANK_LIMIT = 2**31  # the rank column is int32


def rank_of(name: str) -> int | None:
    """The rank a ``ranks/<name>/`` directory holds: ``name`` is k written plainly ("3", never "03",
    "٣" or 30 digits), k < 2**31; else None (not a rank directory)."""
    if not (name.isascii() and name.isdigit() and len(name) <= 10) or (len(name) > 1 and name[0] == "0"):
        return None
    k = int(name)
    return k if k < _RANK_LIMIT else None


def rank_dirs(path: str | os.PathLike[str]) -> list[Path]:
    """``ranks/<k>/`` run directories under ``path``, ordered by k (empty if it is not multi-rank);
    a directory whose name is not a rank (``rank_of``) is not one of them."""
    d = Path(path) / RANKS_DIR
    if not d.is_dir():
        return []
    found = [p for p in d.iterdir() if rank_of(p.name) is not None and (p / MANIFEST).is_file()]
    return sorted(found, key=lambda p: int(p.name))


def is_multirank(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / MANIFEST).is_file() and bool(rank_dirs(path))


def merge_tables(run: RunDir, dirs: list[Path] | None = None) -> dict[str, int]:
    """Concatenate every rank's tables into ``run``'s tables with ``rank`` set; returns rows per table.

    The rank is the directory's number, whatever the trace said: a rank
    directory is written by exactly that rank.
    """
    dirs = rank_dirs(run.path) if dirs is None else dirs
    rows: dict[str, int] = {}
    for name in MERGED:
        parts = []
        for d in dirs:
            rd = RunDir(d)
            if not rd.has_table(name):
                continue
            t = _schema.conform(name, rd.read_table(name))
            idx = t.schema.get_field_index("rank")
            col = pa.array([int(d.name)] * t.num_rows, pa.int32())
            t = t.set_column(idx, t.schema.field(idx), col) if idx >= 0 else t.append_column("rank", col)
            parts.append(t)
        if parts:
            merged = pa.concat_tables(parts, promote_options="permissive")
            run.write_table(name, merged)
            rows[name] = merged.num_rows
    return rows
