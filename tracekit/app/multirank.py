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
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from tracekit.errors import UsageError
from tracekit.model import schema as _schema
from tracekit.store.rundir import MANIFEST, RunDir

RANKS_DIR = "ranks"
RANK_TABLES = ("rank_steps", "rank_skew", "comm_steps", "comm_phases", "comm_collectives", "comm_instances")


def rank_dirs(path: str | os.PathLike[str]) -> list[Path]:
    """``ranks/<k>/`` run directories under ``path``, ordered by k (empty if it is not multi-rank)."""
    d = Path(path) / RANKS_DIR
    if not d.is_dir():
        return []
    found = [p for p in d.iterdir() if p.name.isdigit() and (p / MANIFEST).is_file()]
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
    for name in _schema.TABLES:
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


@dataclass(frozen=True)
class MultirankResult:
    ranks: list[int]
    per_rank: dict[int, dict[str, Any]]  # rank -> the single-run analysis result
    tables: dict[str, pd.DataFrame]  # RANK_TABLES


def _default_analyse_one(path: Path) -> dict[str, Any]:
    # The single-run path of `tracekit analyze`, unchanged: a rank is an ordinary run.
    from tracekit.commands.analyze import analyse_run, open_or_ingest

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


def summary(result: MultirankResult) -> list[str]:
    """A few lines for the terminal: NCCL and exposed NCCL per rank and phase, skew per phase."""
    lines = [f"ranks: {', '.join(str(r) for r in result.ranks)}"]
    for r in result.tables["comm_phases"].to_dict("records"):
        share = r.get("exposed_share")
        lines.append(
            f"rank {r['rank']} {r['phase']}: {r['steps']} steps, time {r['time_ns'] / 1e6:.2f} ms, "
            f"NCCL {r['comm_ns'] / 1e6:.2f} ms, exposed {r['exposed_comm_ns'] / 1e6:.2f} ms"
            + ("" if share is None or pd.isna(share) else f" ({100 * share:.1f}% of the phase)")
            + _split_text(r)
        )
    for r in result.tables["rank_skew"].to_dict("records"):
        lines.append(
            f"skew {r['phase']}: {r['steps']} steps, p50 {r['skew_p50_ns'] / 1e3:.1f} us, "
            f"max {r['skew_max_ns'] / 1e3:.1f} us, stragglers {r['straggler_counts']}"
        )
    return lines


def _split_text(r: Mapping[Any, Any]) -> str:
    kernel = r.get("nccl_kernel_ns")
    if kernel is None or pd.isna(kernel) or not kernel:
        return ""
    text = f"; NCCL kernels: transfer {r['transfer_ns'] / 1e6:.2f} ms, wait {r['wait_ns'] / 1e6:.2f} ms"
    if r.get("unmatched_ns"):
        text += f", unmatched {r['unmatched_ns'] / 1e6:.2f} ms"
    return text


def analyze_command(target: Path) -> int:
    """What ``tracekit analyze`` runs on a multi-rank run directory: analyse, print, exit code."""
    import click

    run = RunDir.open(target)
    result = analyse_multirank(run)
    click.echo(f"{run.path}")
    for line in summary(result):
        click.echo(f"  {line}")
    for w in run.read_manifest().get("rank_analysis", {}).get("failed", []):
        click.echo(f"  warning: {w}")
    return 0
