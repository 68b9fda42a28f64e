"""The Python API for offline analysis: ``tracekit.open``, ``Run``, ``Dataset``, ``tracekit.diff``.

A ``Run`` is a run directory seen from a notebook: its tables as pandas DataFrames by name
(``run.steps``, ``run.phases``, ``run.kernels`` ...), SQL over them (``run.sql``), and the verbs
``analyze``, ``export`` and ``report`` that the CLI runs on it. A ``Dataset`` is the hive-partitioned
Parquet that ``tracekit ingest --dataset`` writes: the same tables across many runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from tracekit.errors import UsageError

# Attribute names that read a table under another name.
ALIASES = {"kernels": "kernel_bound"}
PathLike = str | os.PathLike[str]


class Run:
    """One run directory. Tables load on access and are not cached: a re-analysis shows at once."""

    def __init__(self, path: PathLike) -> None:
        from tracekit.store.rundir import RunDir

        self._dir = RunDir.open(path)

    @property
    def path(self) -> Path:
        return self._dir.path

    @property
    def id(self) -> str:
        return self._dir.run_id

    @property
    def manifest(self) -> dict[str, Any]:
        """run.json as a dict."""
        return self._dir.read_manifest()

    @property
    def status(self) -> str:
        return self._dir.status

    def tables(self) -> list[str]:
        """The names of the tables this run holds."""
        return self._dir.tables()

    def whatif(self, **changes: Any) -> Any:
        """This run projected under a change: see ``tracekit.whatif``."""
        return whatif(self, **changes)

    def table(self, name: str) -> pd.DataFrame:
        """A table as a DataFrame (``kernels`` is ``kernel_bound``); an empty one of the right columns if
        the run lacks a table tracekit knows, UsageError for a name it does not."""
        from tracekit.model import schema

        name = ALIASES.get(name, name)
        if not self._dir.has_table(name) and name not in schema.SCHEMAS:
            raise UsageError(f"{self.id}: no table {name!r} (it has: {', '.join(self.tables()) or 'none'})")
        df: pd.DataFrame = self._dir.read_df(name)
        return df

    def __getattr__(self, name: str) -> pd.DataFrame:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self.table(name)
        except UsageError as exc:
            raise AttributeError(exc.message) from None

    def sql(self, query: str) -> pd.DataFrame:
        """DuckDB SQL over this run's tables (each table a view by its name, with a run_id column)."""
        from tracekit.app.query import run_query

        result: pd.DataFrame = run_query(query, self.path).to_pandas()
        return result

    def analyze(self, *, warmup_requests: int | None = None) -> Run:
        """Split the run into steps, requests and phases and attribute their time (``tracekit analyze``);
        ``warmup_requests``: the first N requests are warm-ups, left out of the phase totals."""
        from tracekit.app.analyze import analyze

        analyze(self.path, warmup_requests=warmup_requests)
        return self

    def export(self, out: PathLike | None = None, *, format: str = "proto", window: str | None = None,
               window_ms: str | None = None) -> Path:
        """Write the run's Perfetto trace (``tracekit export``); returns its path."""
        from tracekit.app.export import export_run, load_tables, resolve_window

        if format not in ("proto", "json"):
            raise UsageError(f"format {format!r}: use 'proto' or 'json'")
        tables = load_tables(self._dir)
        win = resolve_window(tables, window, window_ms)
        target = Path(out) if out is not None else self.path / (
            "trace.tracekit.pftrace" if format == "proto" else "trace.tracekit.json.gz")
        export_run(self._dir, format, target, win, tables)
        return target

    def report(self, html: PathLike | None = None, *, warmup_requests: int | None = None) -> Path:
        """Write the self-contained HTML report (``tracekit report``); returns its path.
        ``warmup_requests``: leave the first N requests out of the phase totals."""
        import warnings

        from tracekit.report.html import build_html
        from tracekit.report.view import load_view
        from tracekit.store.rundir import atomic_open

        target = Path(html) if html is not None else self.path / "report.html"
        with warnings.catch_warnings():  # plotting libraries' warnings are not the report's output
            warnings.simplefilter("ignore")
            text = build_html([load_view(self._dir, warmup_requests)], title=f"tracekit report: {self.id}")
        with atomic_open(target, "w") as fh:
            fh.write(text)
        return target

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}, status={self.status!r}, tables={len(self.tables())})"


class Dataset:
    """A hive-partitioned dataset (``tracekit ingest --dataset``): tables across runs and ranks."""

    def __init__(self, path: PathLike) -> None:
        from tracekit.store.dataset import is_dataset

        self.path = Path(path)
        if not is_dataset(self.path):
            raise UsageError(f"{self.path} is not a tracekit dataset")

    def tables(self) -> list[str]:
        from tracekit.store.dataset import tables_in

        return list(tables_in(self.path))

    def table(self, name: str) -> pd.DataFrame:
        """A table across every run and rank (run_id and rank columns)."""
        from tracekit.store.dataset import read_dataset

        df: pd.DataFrame = read_dataset(self.path, ALIASES.get(name, name)).to_pandas()
        return df

    def __getattr__(self, name: str) -> pd.DataFrame:
        if name.startswith("_") or name == "path":
            raise AttributeError(name)
        return self.table(name)

    def sql(self, query: str) -> pd.DataFrame:
        from tracekit.app.query import run_query

        result: pd.DataFrame = run_query(query, self.path).to_pandas()
        return result

    def __repr__(self) -> str:
        return f"Dataset({str(self.path)!r})"


def open_run(path: PathLike, *, out: PathLike | None = None, force: bool = False) -> Run | Dataset:
    """A run directory, a dataset, or a trace file (ingested into ``out``, default ``<stem>.tracekit/``
    beside it, served from the cache when already ingested)."""
    from tracekit.store.dataset import is_dataset

    p = Path(path)
    if p.is_dir():
        return Dataset(p) if is_dataset(p) else Run(p)
    if not p.is_file():
        raise UsageError(f"{p}: no such file or run directory")
    from tracekit.app.analyze import open_or_ingest

    return Run(open_or_ingest(p, Path(out) if out is not None else None, force).path)


def ingest_traces(paths: PathLike | list[PathLike], out: PathLike, *, force: bool = False) -> Run:
    """``tracekit ingest``: traces (one path or a list, several files being one rank each) into the run
    directory ``out``, served from the ingest cache when the same bytes were ingested before."""
    from tracekit.ingest.run import ingest

    files = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    return Run(ingest([Path(p) for p in files], Path(out), force=force).path)


def whatif(run: PathLike | Run, **changes: Any) -> Any:
    """The run projected under a change (tracekit.analysis.whatif.Projection; ``.to_dict()`` is
    ``tracekit whatif --json``'s object). Keywords: graphs, batch, input_tokens, output_tokens, gpu,
    quant, no_profiler (and fuse, use_run_timers); they combine."""
    from tracekit.app.whatif_load import whatif as project

    return project(run.path if isinstance(run, Run) else Path(run), **changes)


def diff(a: PathLike | Run, b: PathLike | Run) -> pd.DataFrame:
    """What changed from run A to run B, per phase and kernel class (the table ``tracekit diff`` prints)."""
    from tracekit.app.diff import diff as diff_runs

    df, _ = diff_runs(a.path if isinstance(a, Run) else Path(a), b.path if isinstance(b, Run) else Path(b))
    return df
