"""The sweep's summary tables: one row per point, the agent loop's steps, the comparison with the seed study.

Reads the point run directories of a sweep directory (tracekit.store.sweepdir) and writes
summary.parquet, agent_steps.parquet and seed_comparison.parquet; tracekit.report.sweep draws and
writes the reports from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from tracekit.analysis import sweep as sweep_analysis
from tracekit.model.pricing import Pricing
from tracekit.store.reference import seed_study
from tracekit.store.rundir import RunDir, write_table
from tracekit.store.sweepdir import AGENT_STEPS, POINTS_DIR, SEED_TABLE, SUMMARY, read_sweep


def load_points(sweep_dir: Path, point_ids: list[str]) -> list[sweep_analysis.PointData]:
    out = []
    for pid in point_ids:
        run = RunDir(sweep_dir / POINTS_DIR / pid)
        m = run.read_manifest()
        status = (
            "complete" if m.get("status") == "complete" else ("failed" if m.get("failed") else "incomplete")
        )
        if not m:
            status, m = "failed", {"error": "not run"}
        out.append(
            sweep_analysis.PointData(
                point=m.get("point", {"id": pid}),
                status=status,
                manifest=m,
                requests=run.read_df("requests") if status == "complete" else None,
                phases=run.read_df("phases") if status == "complete" else None,
                run_dir=str(Path(POINTS_DIR) / pid),
            )
        )
    return out


@dataclass(frozen=True)
class SweepTables:
    meta: dict[str, Any]  # sweep.json
    summary: pd.DataFrame
    agent: pd.DataFrame
    seed: pd.DataFrame


def summarize(sweep_dir: Path, pricing: Pricing) -> SweepTables:
    """Summary, agent steps and seed comparison from the point run directories; written as Parquet."""
    meta = read_sweep(sweep_dir)
    points = load_points(sweep_dir, list(meta.get("point_ids", [])))
    summary = sweep_analysis.summarize(
        points, input_price=pricing.input_per_mtok, output_price=pricing.output_per_mtok,
        gpu_per_hour=pricing.gpu_per_hour,
    )
    agent = sweep_analysis.agent_steps(points)
    seed = sweep_analysis.seed_comparison(summary, seed_study())
    write_table(sweep_dir / SUMMARY, pa.Table.from_pandas(summary, preserve_index=False))
    write_table(sweep_dir / AGENT_STEPS, pa.Table.from_pandas(agent, preserve_index=False))
    write_table(sweep_dir / SEED_TABLE, pa.Table.from_pandas(seed, preserve_index=False))
    return SweepTables(meta, summary, agent, seed)
