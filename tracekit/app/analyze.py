"""Analyze a run: the use case behind ``tracekit analyze``, the Python API and the sweep.

``analyze(target)`` takes a run directory (single or multi-rank) or a trace file. A trace file is
ingested into a new run directory first (default: beside the trace, ``<stem>.tracekit/``); a run
directory whose raw tables are missing has its trace.json.gz read. The passes
(tracekit.analysis.pipeline) are pure; this module does the I/O: it reads the tables and run.json,
writes steps, requests, phases, kernel_steps (the step of every GPU activity; gpu_activity is not
rewritten), gpu_timeline and the roofline's kernel_bound and step_bound (schema-less: their columns
follow analysis/bound.py), and records warnings in run.json.

A run tracekit recorded keeps its recorder's steps and requests (host-timed, every step of the run):
on the first analysis they are copied to tables/recorded_steps and recorded_requests (schema-less
copies, never rewritten) before steps/requests are replaced by the analysis' tables, and every
analysis reads them from there. The ceiling is resolved here (measured calibration preferred,
tracekit.store.calibration.resolve) so that the passes stay free of I/O. A multi-rank run directory
is analysed rank by rank, then across ranks (tracekit.app.multirank).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from tracekit.errors import TracekitError, UsageError
from tracekit.ingest import ingest, ingest_into
from tracekit.model import schema as _schema
from tracekit.store.calibration import resolve
from tracekit.store.ranks import is_multirank
from tracekit.store.rundir import RunDir

RAW = ("gpu_activity", "cpu_ops", "runtime", "annotations", "counters", "other_events")
OUTPUTS = ("steps", "requests", "phases", "kernel_steps", "gpu_timeline", "kernel_bound", "step_bound")
RECORDED = {"steps": "recorded_steps", "requests": "recorded_requests"}


def trace_stem(path: Path) -> str:
    name = path.name
    for suf in (".json.gz", ".json", ".gz", ".pt.trace.json"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return path.stem


def open_or_ingest(target: Path, out: Path | None, force: bool) -> RunDir:
    if target.is_dir():
        run = RunDir.open(target)
        if not any(run.has_table(t) for t in ("cpu_ops", "gpu_activity")):
            if not run.trace_path.is_file():
                raise UsageError(f"{target}: no raw tables and no {run.trace_path.name} to ingest")
            ingest_into(run)
        return run
    if not target.is_file():
        raise UsageError(f"{target}: no such file or run directory")
    dest = out if out is not None else target.parent / f"{trace_stem(target)}.tracekit"
    run_dir: RunDir = ingest([target], dest, force=force)
    return run_dir


def recorded_tables(run: RunDir, manifest: dict[str, Any]) -> dict[str, pd.DataFrame]:
    """The recorder's own steps/requests tables, preserved across analyses (see the module doc)."""
    import pyarrow as pa

    out: dict[str, pd.DataFrame] = {}
    steps_df = run.read_df("steps") if run.has_table("steps") else None
    first = (
        "analysis" not in manifest
        and steps_df is not None
        and len(steps_df) > 0
        and bool((steps_df["source"].astype(str) == "tracekit").all())
    )
    for name, keep in RECORDED.items():
        if run.has_table(keep):
            out[keep] = pd.read_parquet(run.table_path(keep))
        elif first and run.has_table(name):
            df = run.read_df(name)
            run.write_table(keep, pa.Table.from_pandas(df, preserve_index=False))
            out[keep] = df
    return out


def resolve_ceiling(manifest: dict[str, Any]) -> tuple[Any, str | None]:
    """(Ceiling or None, why not) for the run's GPU: measured calibration first, else the datasheet."""
    from tracekit.analysis.bound import gpu_name

    name = gpu_name(manifest)
    if not name:
        return None, "no GPU named in run.json or the trace"
    try:
        return resolve(name), None
    except TracekitError as exc:
        return None, str(exc)


def analyse_run(run: RunDir) -> dict[str, Any]:
    """Run the default passes on a run directory and write their tables. Returns the tables."""
    import pyarrow as pa

    from tracekit.analysis.pipeline import DEFAULT_PASSES, run_passes

    tables: dict[str, Any] = {name: run.read_table(name) for name in RAW}
    manifest = run.read_manifest()
    tables["manifest"] = manifest
    tables.update(recorded_tables(run, manifest))
    ceiling, why = resolve_ceiling(manifest)
    if ceiling is not None:
        tables["ceiling"] = ceiling
    result = run_passes(tables, DEFAULT_PASSES)
    result["ceiling"] = ceiling
    if ceiling is None and len(tables["gpu_activity"]):
        result["warnings"].append(f"no ceiling: {why}")
    for name in OUTPUTS:
        df = result.get(name)
        if df is None:
            continue
        if name in _schema.SCHEMAS:
            table = _schema.from_pandas(name, df) if isinstance(df, pd.DataFrame) else df
        else:  # kernel_bound / step_bound: schema-less, columns as analysis/bound.py makes them
            table = pa.Table.from_pandas(plain_frame(df), preserve_index=False)
        run.write_table(name, table)
    for w in result["warnings"]:
        run.add_warning(f"analyze: {w}")
    steps = result["steps"]
    run.update_manifest(analysis={
        "passes": [p.name for p in DEFAULT_PASSES],
        "steps": len(steps),
        "steps_captured": int(steps["captured"].sum()) if "captured" in steps else len(steps),
        "requests": len(result["requests"]),
        "ceiling": ceiling.to_dict() if ceiling is not None else None,
    })
    return result


def plain_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Object columns of mixed Python values as strings, so Parquet accepts them."""
    out = df.copy()
    for c in out.columns:
        if out[c].dtype == object:
            vals = out[c].dropna()
            if len(vals) and not all(isinstance(v, str) for v in vals):
                out[c] = out[c].map(lambda v: None if v is None or (isinstance(v, float) and pd.isna(v)) else str(v))
    return out


def analyze(target: Path, out: Path | None = None, force: bool = False) -> tuple[RunDir, Any]:
    """Analyze a run directory or trace file; (the run, the result).

    The result is the single-run analysis (a dict of tables) or, for a multi-rank run directory, a
    tracekit.app.multirank.MultirankResult.
    """
    if target.is_dir() and is_multirank(target):
        from tracekit.app.multirank import analyse_multirank

        run = RunDir.open(target)
        return run, analyse_multirank(run)
    run = open_or_ingest(target, out, force)
    return run, analyse_run(run)
