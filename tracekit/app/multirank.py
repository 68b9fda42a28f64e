"""Multi-rank run directories: merge per-rank tables, analyse each rank, then across ranks.

A tensor-parallel run (``tracekit.collectors.tp``) is a run directory with
one ordinary run per rank under ``ranks/<k>/`` and, at the top, every
rank's rows in one table with ``rank`` set. ``analyse_multirank(run)`` is
what ``tracekit analyze`` does on such a directory:

1. each rank's run is analysed exactly as a single-GPU run (its trace is
   ingested first if its raw tables are missing), so ``ranks/<k>/`` holds
   steps, requests, phases, kernel_steps, gpu_timeline like any run;
2. every table is merged again into the top-level run (``rank`` column);
3. ``tracekit.analysis.ranks.analyze_ranks`` runs over the merged steps and
   kernels, and its frames are written as top-level tables:

   ============== ================== ===========================================
   table          one row per        from
   ============== ================== ===========================================
   rank_steps     step_id            align_steps: skew, straggler, missing ranks
   rank_skew      phase              skew_summary (straggler_counts as JSON text)
   comm_steps     (rank, step)       comm_per_step: NCCL, exposed NCCL, compute
   comm_phases    (rank, phase)      comm_per_phase (+ ``outside`` rows), NCCL
                                     time split into transfer / wait / unmatched
   comm_collectives (rank, collective) comm_by_collective
   comm_instances (rank, NCCL kernel) comm_instances: matched across ranks
   ============== ================== ===========================================

The analysis itself is pure (tracekit.analysis.ranks); this module does the I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from tracekit.errors import UsageError
from tracekit.store.ranks import RANKS_DIR, merge_tables, rank_dirs
from tracekit.store.rundir import RunDir

RANK_TABLES = ("rank_steps", "rank_skew", "comm_steps", "comm_phases", "comm_collectives", "comm_instances")


@dataclass(frozen=True)
class MultirankResult:
    ranks: list[int]
    per_rank: dict[int, dict[str, Any]]  # rank -> the single-run analysis result
    tables: dict[str, pd.DataFrame]  # RANK_TABLES


def _default_analyse_one(path: Path) -> dict[str, Any]:
    # The single-run path of `tracekit analyze`, unchanged: a rank is an ordinary run.
    from tracekit.app.analyze import analyse_run, open_or_ingest

    return analyse_run(open_or_ingest(path, None, False))


def _arrow(name: str, df: pd.DataFrame) -> pa.Table:
    df = df.copy()
    if name == "rank_skew" and "straggler_counts" in df:
        # {rank: count} dicts: JSON text keeps the table flat for DuckDB / Spark.
        df["straggler_counts"] = [
            json.dumps({str(k): v for k, v in d.items()}) for d in df["straggler_counts"]
        ]
    for c in df.columns:
        if df[c].dtype == object:
            df[c] = df[c].astype("string")
    return pa.Table.from_pandas(df, preserve_index=False)


def analyse_multirank(
    run: RunDir, analyse_one: Callable[[Path], dict[str, Any]] | None = None
) -> MultirankResult:
    """Analyse every rank, merge, run the cross-rank passes; write every table into ``run``."""
    from tracekit.analysis import ranks as _ranks

    dirs = rank_dirs(run.path)
    if not dirs:
        raise UsageError(f"{run.path}: no {RANKS_DIR}/<k>/ run directories")
    one = analyse_one or _default_analyse_one
    per_rank: dict[int, dict[str, Any]] = {}
    failed: list[str] = []
    for d in dirs:
        try:
            per_rank[int(d.name)] = one(d)
        except UsageError as exc:
            # A rank without a trace (it failed early) must not hide the others' analysis.
            failed.append(f"rank {d.name}: {exc.message}")
    if not per_rank:
        raise UsageError(f"{run.path}: no rank could be analysed ({'; '.join(failed)})")
    rows = merge_tables(run, [d for d in dirs if int(d.name) in per_rank])
    steps = _ranks.gpu_windows(
        run.read_table("steps"), run.read_table("runtime"), run.read_table("gpu_activity")
    )
    res = _ranks.analyze_ranks(steps, run.read_table("gpu_activity"))
    frames = {
        "rank_steps": res.aligned_steps,
        "rank_skew": res.skew,
        "comm_steps": res.comm_steps,
        "comm_phases": res.comm_phases,
        "comm_collectives": res.collectives,
        "comm_instances": res.comm_instances,
    }
    for name, df in frames.items():
        run.write_table(name, _arrow(name, df))
    for w in failed:
        run.add_warning(f"analyze: {w}")
    run.update_manifest(
        rank_analysis={
            "ranks": sorted(per_rank),
            "failed": failed,
            "tables": list(RANK_TABLES),
            "rows": {**rows, **{k: len(v) for k, v in frames.items()}},
        }
    )
    return MultirankResult(sorted(per_rank), per_rank, frames)
