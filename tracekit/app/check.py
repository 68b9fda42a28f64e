"""Check a trace or run: the use case behind ``tracekit check`` (tracekit.analysis.health).

``check(target)`` gives one Verdict per run analysed: a trace file is ingested and analysed into
``out`` (default: a temporary directory, removed afterwards: a check leaves nothing behind); a run
directory already analysed is checked from its stored tables, one not analysed yet is analysed
first (as ``tracekit analyze`` would); a multi-rank run directory is checked rank by rank, then across ranks (their clocks: health.rank_clocks).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.analysis import health
from tracekit.analysis.inputs import AnalysisOutput
from tracekit.app.analyze import analyse_run, open_or_ingest, read_raw
from tracekit.store.ranks import is_multirank, rank_dirs
from tracekit.store.rundir import STATUS_COMPLETE, RunDir

# The analysis' own tables the checks read back from a run directory.
DERIVED = ("steps", "step_bound", "phases", "kernel_bound")


@dataclass(frozen=True)
class Checked:
    label: str  # the trace or run directory (with its rank for a multi-rank run)
    verdict: health.Verdict


def check(target: Path, out: Path | None = None, force: bool = False, captures: list[str] | None = None,
          ceiling: str | None = None) -> list[Checked]:
    """One Checked per run analysed (one, or one per rank); see the module doc."""
    if target.is_dir() and is_multirank(target):
        dirs = rank_dirs(target)
        ranks = [Checked(f"{target} rank {d.name}", _check_run(open_or_ingest(d, None, False), ceiling)) for d in dirs]
        spans = {int(d.name): _gpu_span(RunDir.open(d)) for d in dirs}
        return [*ranks, Checked(f"{target} across ranks", health.Verdict((health.rank_clocks(spans),)))]
    if target.is_dir():
        return [Checked(str(target), _check_run(open_or_ingest(target, None, False, captures), ceiling, captures))]
    tmp = None
    if out is None:
        tmp = Path(tempfile.mkdtemp(prefix="tracekit-check-"))
        out = tmp / "run"
    try:
        run = open_or_ingest(target, out, force, captures)
        return [Checked(str(target), _verdict(analyse_run(run, None, ceiling)))]
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _check_run(run: RunDir, ceiling: str | None, captures: list[str] | None = None) -> health.Verdict:
    manifest = run.read_manifest()
    done = (manifest.get("analysis") or {}).get("status") == STATUS_COMPLETE
    if not done or ceiling or captures or not run.has_table("steps"):
        return _verdict(analyse_run(run, None, ceiling))
    tables: dict[str, Any] = read_raw(run)
    for name in DERIVED:
        if run.has_table(name):
            tables[name] = run.read_table(name)
    return health.check(tables, manifest=manifest, ceiling=(manifest.get("analysis") or {}).get("ceiling"))


def _verdict(result: AnalysisOutput) -> health.Verdict:
    v = result.check
    return v if isinstance(v, health.Verdict) else health.check(result.tables, ceiling=result.ceiling)


def _gpu_span(run: RunDir) -> tuple[float, float]:
    """[first start, last end) ns of a run's GPU activity (NaN, NaN: none)."""
    if not run.has_table("gpu_activity"):
        return (float("nan"), float("nan"))
    t = run.read_columns("gpu_activity", ("ts_ns", "dur_ns")).to_pandas()
    if t.empty:
        return (float("nan"), float("nan"))
    return float(t["ts_ns"].min()), float((t["ts_ns"] + t["dur_ns"].fillna(0)).max())
