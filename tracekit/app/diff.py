"""Diff two runs: the use case behind ``tracekit diff`` and ``tracekit.diff``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tracekit.analysis.diff import diff_runs
from tracekit.store.rundir import RunDir

TABLES = ("phases", "steps", "gpu_activity")


def load(run: RunDir) -> dict[str, pd.DataFrame]:
    tables = {t: run.read_df(t) for t in TABLES if run.has_table(t)}
    if run.has_table("kernel_bound"):  # the bound class of each kernel (analyze): only what the diff reads
        tables["kernel_bound"] = run.read_columns("kernel_bound", ("phase", "bound", "dur_ns")).to_pandas()
    # A sweep point keeps the host-timed steps in ``steps`` and the traced ones,
    # on the kernels' clock, in ``trace_steps``: kernels are placed in the latter.
    if run.has_table("trace_steps"):
        tables["steps"] = run.read_df("trace_steps")
    return tables


def diff(run_a: str | Path | RunDir, run_b: str | Path | RunDir) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """(the long diff table of tracekit.analysis.diff, {run id: tables neither recorded nor derived})."""
    a = run_a if isinstance(run_a, RunDir) else RunDir.open(run_a)
    b = run_b if isinstance(run_b, RunDir) else RunDir.open(run_b)
    ta, tb = load(a), load(b)
    missing = {r.run_id: [n for n in TABLES if n not in t] for r, t in ((a, ta), (b, tb))}
    return diff_runs(ta, tb), {k: v for k, v in missing.items() if v}
