"""A sweep directory: one run directory per point, sweep.json, and the files the report writes.

    <sweep>/
      sweep.json            the spec, the point order, the outcome of every point
      points/<point-id>/    one run directory per point
      summary.parquet, agent_steps.parquet, seed_comparison.parquet, report.md, report.html, plots/*.svg
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracekit.errors import CorruptRunError, UsageError, visible
from tracekit.store.rundir import read_json, write_json

SWEEP_MANIFEST = "sweep.json"
POINTS_DIR = "points"
SUMMARY = "summary.parquet"
AGENT_STEPS = "agent_steps.parquet"
SEED_TABLE = "seed_comparison.parquet"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
PLOTS_DIR = "plots"


def read_sweep(sweep_dir: Path) -> dict[str, Any]:
    """sweep.json ({} if absent), checked: an object with ``point_ids`` a list of text, ``outcomes`` an
    object and ``elapsed_s``/``previous_elapsed_s`` numbers where present; else CorruptRunError (one line)."""
    path = sweep_dir / SWEEP_MANIFEST
    if not path.is_file():
        return {}
    data = read_json(path, "sweep.json")
    ok = isinstance(data, dict) and (
        isinstance(data.get("point_ids", []), list) and all(isinstance(p, str) for p in data.get("point_ids", []))
        and isinstance(data.get("outcomes", {}), dict)
        and all(isinstance(data.get(k, 0), int | float) and not isinstance(data.get(k, 0), bool)
                for k in ("elapsed_s", "previous_elapsed_s")))
    if not ok:
        raise CorruptRunError(f"{visible(path)}: corrupt sweep.json; run the sweep again with --force")
    out: dict[str, Any] = data
    return out


def check_target(out_dir: Path, *, resume: bool, force: bool) -> None:
    """UsageError unless ``out_dir`` may take a sweep: absent or empty, or a sweep directory (its
    sweep.json, which tracekit writes first) for ``resume`` or ``force``. A folder of anything else
    (someone's files, a run directory, a dataset) is never continued, replaced or removed."""
    try:
        entries = list(out_dir.iterdir()) if out_dir.is_dir() else None
    except OSError:
        entries = None
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"{visible(out_dir)} exists and is not a directory; choose another --out")
    if not entries:
        return
    if not (resume or force):
        raise UsageError(f"{visible(out_dir)} already exists; pass --resume to continue it or --force to overwrite it")
    if not (out_dir / SWEEP_MANIFEST).is_file():
        what = "a run directory" if (out_dir / "run.json").exists() else f"not a sweep directory (no {SWEEP_MANIFEST})"
        raise UsageError(f"{visible(out_dir)} is {what}; --resume and --force only continue or replace a "
                         "sweep: choose another --out")


def write_sweep(sweep_dir: Path, data: dict[str, Any]) -> None:
    write_json(sweep_dir / SWEEP_MANIFEST, data)
