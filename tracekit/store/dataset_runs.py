"""One run's tables in a dataset (tracekit.store.dataset): read them back, replace them, record its status.

``replace_run_tables`` writes a run's tables as ``<table>/run_id=<id>/rank=<k>/part-0.parquet`` and then
removes that run's other part files of the same tables (an earlier analysis, or an ingest of several
files), so a run analysed again never counts twice. One writer owns one run id, so tasks of a fleet write
into one root at once without locks. ``record_status`` (the driver's, after its tasks) keeps each run's
last analysis in the marker: ``runs[<id>]["analysis"]`` = status ("complete" / "failed"), the one-line
error, seconds and the task's peak RSS.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from tracekit.store import dataset as _ds
from tracekit.store.rundir import write_json

STATUS_KEY = "analysis"
META_DIR = "_runs"  # <root>/_runs/<run id>/<name>.json: a run's run.json fields (no reader sees "_" folders)
META_KEYS = ("environment", "trace_meta", "workload", "model", "tp")  # what an analysis of the tables reads


def run_tables(root: str | os.PathLike[str], run_id: str, names: Iterable[str]) -> dict[str, pa.Table]:
    """The tables ``names`` of one run (every rank; the ``rank`` column kept, ``run_id`` dropped); a table
    the run lacks is left out."""
    out: dict[str, pa.Table] = {}
    root = Path(root)
    for name in names:
        if not (root / name / f"run_id={_ds.safe_run_id(run_id)}").is_dir():
            continue
        t = _ds.read_dataset(root, name, run_ids=[run_id])
        out[name] = t.drop_columns(["run_id"])
    return out


def replace_run_tables(root: str | os.PathLike[str], run_id: str,
                       tables: Mapping[str, pa.Table]) -> list[_ds.PartWritten]:
    """Write ``tables`` as the run's only parts of those tables (the others removed once every one is written)."""
    written = _ds.write_run_tables(root, run_id, tables, part="0")
    keep = {Path(p.path) for p in written}
    root = Path(root)
    for name in tables:
        base = root / name / f"run_id={_ds.safe_run_id(run_id)}"
        if not base.is_dir():
            continue
        for f in base.glob("rank=*/*.parquet"):
            if f not in keep:
                f.unlink()
        for d in base.glob("rank=*"):
            with contextlib.suppress(OSError):
                d.rmdir()  # a rank this analysis no longer has
    return written


def record_status(root: str | os.PathLike[str], statuses: Mapping[str, Mapping[str, Any]], *,
                  parts: Iterable[_ds.PartWritten] = (), given: Mapping[str, str] | None = None,
                  **extra: Any) -> None:
    """Add ``parts`` to the marker (rows per table summed afresh for each table a run rewrote) and set
    each run's analysis status (run id -> {status, error, seconds, peak_rss_bytes, ...})."""
    root = Path(root)
    parts = list(parts)
    marker = _ds.read_marker(root)
    runs = marker.setdefault("runs", {})
    for run_id in {p.run_id for p in parts}:  # rewritten tables: their rows are counted again below
        entry = runs.get(run_id)
        if isinstance(entry, dict):
            for p in parts:
                if p.run_id == run_id:
                    entry.get("rows", {}).pop(p.table, None)
    write_json(root / _ds.MARKER, marker)
    _ds.record_parts(root, parts, given=given)
    marker = _ds.read_marker(root)
    runs = marker.setdefault("runs", {})
    for run_id, status in statuses.items():
        entry = runs.setdefault(_ds.safe_run_id(run_id), {"ranks": [], "rows": {}})
        if given and run_id in given:
            entry.setdefault("run_id", given[run_id])
        entry[STATUS_KEY] = dict(status)
    marker.update(extra)
    write_json(root / _ds.MARKER, marker)


def write_run_meta(root: str | os.PathLike[str], run_id: str, name: str, manifest: Mapping[str, Any]) -> None:
    """Keep the run.json fields analysis reads beside the run's tables (``name``: run, or trace-<part>)."""
    keep = {k: manifest[k] for k in META_KEYS if k in manifest}
    if keep:
        write_json(Path(root) / META_DIR / _ds.safe_run_id(run_id) / f"{name}.json", keep)


def run_meta(root: str | os.PathLike[str], run_id: str) -> dict[str, Any]:
    """The run.json fields kept for ``run_id``: its run's (a fleet's analysis), else its trace files'
    (ingest), the trace_meta of several files keyed by file; {} when none was kept or it is unreadable."""
    d = Path(root) / META_DIR / _ds.safe_run_id(run_id)
    docs: dict[str, Any] = {}
    for f in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            docs[f.stem] = doc
    if "run" in docs:
        return {k: v for k, v in docs["run"].items() if k in META_KEYS}
    metas = {k: v.get("trace_meta") for k, v in docs.items() if isinstance(v.get("trace_meta"), dict)}
    if not metas:
        return {}
    return {"trace_meta": next(iter(metas.values())) if len(metas) == 1 else metas}


def run_statuses(root: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Each run's last analysis status from the marker (runs never analysed are left out)."""
    runs = _ds.read_marker(root).get("runs", {})
    return {k: v[STATUS_KEY] for k, v in runs.items() if isinstance(v.get(STATUS_KEY), dict)}
