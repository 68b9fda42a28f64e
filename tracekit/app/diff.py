"""Diff two runs, or two sets of repeated runs: the use case behind ``tracekit diff`` and ``tracekit.diff``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from tracekit.analysis.diff import diff_runs
from tracekit.analysis.noise import phase_changes
from tracekit.errors import TracekitError, UsageError
from tracekit.store.rundir import RunDir

TABLES = ("phases", "steps", "gpu_activity")
# The columns of the activity-long tables the diff reads (tracekit.analysis.diff.kernel_time, bound_time):
# only these are read, so a diff's memory is a few columns of the kernels, not the trace.
GPU_COLUMNS = ("ts_ns", "dur_ns", "name", "kind")


def load(run: RunDir) -> dict[str, pd.DataFrame]:
    tables = {t: run.read_df(t) for t in TABLES if run.has_table(t) and t != "gpu_activity"}
    if run.has_table("gpu_activity"):
        tables["gpu_activity"] = run.read_columns("gpu_activity", GPU_COLUMNS).to_pandas()
    if run.has_table("op_class_split"):  # a CPU run: host time by operator class
        tables["op_class_split"] = run.read_df("op_class_split")
    if run.has_table("kernel_bound"):  # the bound class of each kernel (analyze): only what the diff reads
        tables["kernel_bound"] = run.read_columns("kernel_bound", ("phase", "bound", "dur_ns")).to_pandas()
    # A sweep point keeps the host-timed steps in ``steps`` and the traced ones,
    # on the kernels' clock, in ``trace_steps``: kernels are placed in the latter.
    if run.has_table("trace_steps"):
        tables["steps"] = run.read_df("trace_steps")
    return tables


def side(path: str | Path | RunDir) -> list[RunDir]:
    """The runs of one side: a run directory, or a directory whose subdirectories are runs (the repeats
    of ``record --repeat N``, or runs put there by hand), in name order."""
    if isinstance(path, RunDir):
        return [path]
    p = Path(path)
    if (p / "run.json").is_file() or not p.is_dir():
        return [RunDir.open(p)]
    runs = sorted((d for d in p.iterdir() if (d / "run.json").is_file()), key=lambda d: d.name)
    if not runs:
        raise UsageError(f"{p}: neither a run directory (no run.json) nor a directory of runs")
    return [RunDir.open(d) for d in runs]


def needs_analysis(run: RunDir) -> bool:
    """A complete run that ``tracekit analyze`` has not been through, or whose analysis did not finish."""
    m = run.read_manifest()
    finished = run.has_table("phases") and (m.get("analysis") or {}).get("status", "complete") == "complete"
    return m.get("status") == "complete" and not finished


def analyse_missing(runs: list[RunDir], note: Callable[[str], None]) -> list[str]:
    """Analyse each run that needs it (``note`` says which, as the command to run by hand); returns
    one line per run that could not be analysed, with the exact command."""
    from tracekit.app.analyze import analyze

    failed = []
    for run in runs:
        if not needs_analysis(run):
            continue
        note(f"analyzing {run.path} first (tracekit analyze {run.path})")
        try:
            analyze(run.path)
        except (TracekitError, OSError, ValueError) as e:
            failed.append(f"{run.path}: analysis failed ({e}); run: tracekit analyze {run.path}")
    return failed


def diff(run_a: str | Path | RunDir, run_b: str | Path | RunDir) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """(the long diff table of tracekit.analysis.diff, {run id: tables neither recorded nor derived}).

    Each side may be a directory of runs: its first run is the one compared in detail (noise() compares
    all of them)."""
    a, b = side(run_a)[0], side(run_b)[0]
    ta, tb = load(a), load(b)
    missing = {r.run_id: [n for n in TABLES if n not in t] for r, t in ((a, ta), (b, tb))}
    return diff_runs(ta, tb), {k: v for k, v in missing.items() if v}


def noise(runs_a: list[RunDir], runs_b: list[RunDir], rounds: int = 2000) -> pd.DataFrame:
    """Per phase, mean step time B/A with its 95% bootstrap interval over the runs and steps of each side
    (tracekit.analysis.noise)."""
    def steps(run: RunDir) -> pd.DataFrame:
        for name in ("trace_steps", "steps"):
            if run.has_table(name):
                return run.read_df(name)
        return pd.DataFrame()

    return phase_changes([steps(r) for r in runs_a], [steps(r) for r in runs_b], rounds=rounds)
