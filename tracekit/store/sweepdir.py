"""A sweep directory: one run directory per point, sweep.json, and the files the report writes.

    <sweep>/
      sweep.json            the spec, the point order, the outcome of every point
      points/<point-id>/    one run directory per point
      summary.parquet, agent_steps.parquet, seed_comparison.parquet, report.md, report.html, plots/*.png
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracekit.store.rundir import write_json

SWEEP_MANIFEST = "sweep.json"
POINTS_DIR = "points"
SUMMARY = "summary.parquet"
AGENT_STEPS = "agent_steps.parquet"
SEED_TABLE = "seed_comparison.parquet"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
PLOTS_DIR = "plots"


def read_sweep(sweep_dir: Path) -> dict[str, Any]:
    path = sweep_dir / SWEEP_MANIFEST
    if not path.is_file():
        return {}
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def write_sweep(sweep_dir: Path, data: dict[str, Any]) -> None:
    write_json(sweep_dir / SWEEP_MANIFEST, data)
