"""Analyze a run: the use case behind ``tracekit analyze``, the Python API and the sweep.

``analyze(target)`` takes a run directory (single or multi-rank) or a trace file. A trace file is
ingested into a new run directory first (default: beside the trace, ``<stem>.tracekit/``); a run
directory whose raw tables are missing has its trace.json.gz read. The passes
(tracekit.analysis.pipeline) are pure; this module does the I/O: it reads the run once into an
AnalysisInput (load_input: tables, run.json, the ceilings), hands it to ``run_passes``, and writes the
AnalysisOutput once (write_output): steps, requests, phases, kernel_steps (the step of every GPU activity; gpu_activity is not
rewritten), gpu_timeline and the roofline's kernel_bound and step_bound, and records warnings in run.json.
Every table's columns and types are declared in tracekit.model.schema; the store refuses any other.

A run tracekit recorded keeps its recorder's steps and requests (host-timed, every step of the run):
on the first analysis they are copied to tables/recorded_steps and recorded_requests (the steps and
requests schemas, never rewritten) before steps/requests are replaced by the analysis' tables, and every
analysis reads them from there. The ceilings are decided before the passes (tracekit.app.ceiling:
measured calibration preferred), so that the passes stay free of I/O. A multi-rank run directory
is analysed rank by rank, then across ranks: every table is merged into the top-level run (``rank``
column) and tracekit.analysis.ranks writes rank_steps (skew, stragglers), rank_skew, comm_steps,
comm_phases (NCCL time split into transfer / wait / unmatched), comm_collectives and comm_instances.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tracekit.analysis.inputs import PASSES, RAW, AnalysisInput, AnalysisOutput
from tracekit.app.ceiling import decide
from tracekit.errors import TraceFormatError, UsageError
from tracekit.ingest.run import ingest, ingest_into
from tracekit.model import progress
from tracekit.model import schema as _schema
from tracekit.store import heap
from tracekit.store.ranks import RANKS_DIR, is_multirank, merge_tables, rank_dirs
from tracekit.store.rundir import STATUS_COMPLETE, RunDir

if TYPE_CHECKING:
    import pandas as pd

OUTPUTS = ("steps", "requests", "phases", "kernel_steps", "gpu_timeline", "kernel_bound", "step_bound",
           "step_requests", "op_class_split")
RECORDED = {"steps": "recorded_steps", "requests": "recorded_requests"}
# Raw tables the passes read only in part: the columns they use (other_events: the profiler's overhead).
RAW_COLUMNS = {"other_events": ("rank", "ts_ns", "dur_ns", "cat")}


def trace_stem(path: Path) -> str:
    name = path.name
    for suf in (".json.gz", ".json", ".gz", ".pt.trace.json"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return path.stem


def open_or_ingest(target: Path, out: Path | None, force: bool, captures: list[str] | None = None, *,
                   check: bool = True) -> RunDir:
    """The run directory to analyse: ``target`` itself (its trace read if it has no raw tables, or
    again when ``captures`` are given), or a new one a trace file is ingested into. ``check``: whether
    an ingested run's tables are checked here (False: the caller reads them with RunDir.snapshot, which
    checks them)."""
    if target.is_dir():
        run = RunDir.open(target)
        if check:
            run.check_ingested()  # an ingested run's tables are the ones ingest wrote, or it is not analysed
        if captures or not any(run.has_table(t) for t in ("cpu_ops", "gpu_activity")):
            if not run.trace_path.is_file():
                raise UsageError(f"{target}: no {run.trace_path.name} to ingest" +
                                 (" with the captures" if captures else " and no raw tables"))
            with run.rewrite() as work:
                ingest_into(work, captures)
        return run
    if not target.is_file():
        raise UsageError(f"{target}: " + ("not a regular file or run directory" if target.exists()
                                          else "no such file or run directory"))
    dest = out if out is not None else target.parent / f"{trace_stem(target)}.tracekit"
    run_dir: RunDir = ingest([target], dest, force=force, captures=captures)
    return run_dir


def recorded_tables(run: RunDir, manifest: dict[str, Any], held: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """The recorder's own steps/requests tables, preserved across analyses (see the module doc):
    ``held`` (those already read) or, on a recorded run's first analysis, its steps/requests copied."""
    import pyarrow.compute as pc

    out = {keep: held[keep] for keep in RECORDED.values() if keep in held}
    if len(out) == len(RECORDED) or "analysis" in manifest or not run.has_table("steps"):
        return out
    # Only a run never analysed can still hold the recorder's own steps as its steps table: an analysed
    # one's steps are derived (and re-derived now, so a damaged one is never read).
    steps = run.read_table("steps")
    source = steps.column("source").cast(pa.string()) if "source" in steps.column_names else None
    first = source is not None and steps.num_rows > 0 and bool(
        pc.all(pc.fill_null(pc.equal(source, "tracekit"), False)).as_py())
    for name, keep in RECORDED.items():
        if keep not in out and first and run.has_table(name):
            table = steps if name == "steps" else run.read_table(name)
            run.write_table(keep, pa.Table.from_pandas(table.to_pandas(), preserve_index=False))
            out[keep] = table
    return out


def read_raw(run: RunDir) -> dict[str, Any]:
    """The raw tables the passes read (RAW), each with the columns they use (RAW_COLUMNS: all where absent)."""
    return {name: run.read_columns(name, RAW_COLUMNS[name]) if name in RAW_COLUMNS else run.read_table(name)
            for name in RAW}


def load_input(run: RunDir, warmup_requests: int | None = None, ceiling_override: str | None = None
               ) -> AnalysisInput:
    """The run's AnalysisInput, from one read of it (RunDir.snapshot): the raw tables, the recorder's
    steps/requests (recorded_tables), the requests each step served (``step_requests``, record --serve /
    --assistant), run.json, and the ceilings decided (tracekit.app.ceiling.decide)."""
    snap = run.snapshot(RAW, RAW_COLUMNS, optional=("step_requests", *RECORDED.values()))
    tables = {**snap.tables, **recorded_tables(run, snap.manifest, snap.tables)}
    return AnalysisInput(tables=tables, manifest=snap.manifest, ceilings=decide(snap.manifest, ceiling_override),
                         warmup_first=warmup_requests)


def analyse_run(run: RunDir, warmup_requests: int | None = None, ceiling_override: str | None = None
                ) -> AnalysisOutput:
    """Run the default passes on a run directory and write their tables. Returns the passes' tables
    (the raw tables are let go before the outputs are written).

    ``warmup_requests``: the first N requests are warm-ups, left out of the run's phase totals
    (tracekit.analysis.warmup; requests the recorder marked are left out whatever N is).
    ``ceiling_override``: ``--ceiling`` (a GPU name or a ceiling file); default: tracekit.app.ceiling.decide's choice.

    The run changes as one step (RunDir.rewrite: a hard-linked copy swapped in when every table is
    written), so a failed or killed analysis leaves it as it was. Where it is written in place (no
    hard links), run.json's ``analysis.status`` is ``running`` from the first table written until the
    last (then ``complete``, with the rows of every table), so a killed analysis is never taken for a
    finished one (RunDir.unfinished).
    """
    from tracekit.analysis.pipeline import run_passes  # the passes (and what they run on) load when they run
    from tracekit.app import windowed

    if windowed.should_window(run):  # a large run: window by window, in bounded memory
        try:
            return windowed.analyse_windowed(run, sys.modules[__name__], warmup_requests, ceiling_override)
        except windowed.NotLocal:
            pass  # steps that span windows (found from model ops): analysed whole
    with run.rewrite() as work:
        inp = load_input(work, warmup_requests, ceiling_override)
        check_span(inp.tables)
        out = run_passes(inp, between=heap.trim)
        # The raw tables (and the passes' frames of them) are let go before the outputs are written;
        # gpu_activity stays until kernel_bound is (its grid / block text comes from its list columns).
        manifest, rank, gpu = inp.manifest, run_rank(inp.tables), inp.table("gpu_activity")
        del inp
        heap.trim()
        write_output(work, out, manifest, rank, gpu)
        return out


_INT64_MAX = 2**63 - 1


def check_span(tables: Mapping[str, Any]) -> None:
    """TraceFormatError when the trace's events span more than int64 nanoseconds hold: every time is in
    range, but a span or a sum over it cannot be, so some timestamps are corrupt."""
    from tracekit.analysis.pipeline import trace_span

    span = trace_span(tables)
    if span is not None and span[1] - span[0] > _INT64_MAX:
        raise TraceFormatError(
            f"the trace's events span {span[1] - span[0]:.3g} ns (from {span[0]} to {span[1]} ns), more than "
            "int64 nanoseconds can hold: some timestamps are corrupt; remove the events far from the rest")


def write_output(run: RunDir, out: AnalysisOutput, manifest: Mapping[str, Any], rank: int,
                 gpu: pa.Table | None) -> None:
    """The passes' tables (OUTPUTS) written, each converted, written and let go in turn (kernel_bound,
    the largest, first; tracekit.analysis.frames.output_table), and run.json (``manifest``: as the analysis read it) with its ``analysis``
    block and the warnings: ``running`` before the first table, ``complete`` with every table's rows
    and the warnings after the last. ``gpu``: the raw gpu_activity (kernel_bound's grid / block text)."""
    from tracekit.analysis.frames import output_table

    info = analysis_info(out)
    manifest = dict(manifest)
    manifest["analysis"] = running(info)
    run.write_manifest(manifest)
    names = sorted((n for n in OUTPUTS if out.tables.get(n) is not None), key=lambda n: n != "kernel_bound")
    rows: dict[str, int] = {}
    for i, name in enumerate(names):
        progress.report("analyzing: writing tables", i, len(names))
        table = output_table(name, out.tables[name], rank, gpu)
        run.write_table(name, table)
        rows[name] = table.num_rows
        del table
        if name == "kernel_bound":
            gpu = None
            heap.trim()
    warnings = manifest.get("warnings") or []
    for w in (f"analyze: {w}" for w in out.warnings):
        if w not in warnings:
            warnings.append(w)
    if warnings:
        manifest["warnings"] = warnings
    manifest["analysis"] = {**info, "status": STATUS_COMPLETE, "rows": {k: rows[k] for k in OUTPUTS if k in rows}}
    run.write_manifest(manifest)


def analysis_info(out: AnalysisOutput) -> dict[str, Any]:
    """run.json's ``analysis`` block of an analysis (without its status and rows)."""
    steps = out.tables["steps"]
    kb = out.tables.get("kernel_bound")
    info: dict[str, Any] = {
        "passes": list(PASSES),
        "steps": len(steps),
        "steps_captured": int(steps["captured"].sum()) if "captured" in steps else len(steps),
        "requests": len(out.tables["requests"]),
        "workload": out.workload,
        "ceiling": out.ceiling.to_dict() if out.ceiling is not None else None,
        # kernels whose modelled rate is above every peak: their model over-counts (kernel_bound.over_peak)
        "kernels_over_peak": int(kb["over_peak"].sum()) if kb is not None and "over_peak" in kb else 0,
        # Request ids left out of the run-level phase rows (first N asked for, and those marked).
        "warmup_requests": list((out.warmup or {}).get("requests") or []),
    }
    if out.check is not None:  # tracekit.analysis.health's verdict (``tracekit check``)
        info["check"] = out.check.to_dict()
    return info


def run_rank(tables: Mapping[str, Any]) -> int:
    """The rank of a single-rank run: the one its raw tables carry (ingest sets it), else 0."""
    import pyarrow.compute as pc

    for name in RAW:
        t = tables.get(name)
        if isinstance(t, pa.Table) and "rank" in t.column_names and t.num_rows:
            vals = pc.drop_null(t.column("rank"))
            if len(vals):
                return int(vals[0].as_py())
    return 0


def running(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` with status ``running`` (run.json's block of a derived set before its first table is written)."""
    return {**info, "status": "running", "started_at": _dt.datetime.now(_dt.timezone.utc).isoformat()}


def mark_running(run: RunDir, key: str, info: dict[str, Any]) -> None:
    """run.json ``key``: ``running(info)``."""
    run.update_manifest(**{key: running(info)})


def analyse_trace_window(run: RunDir) -> AnalysisOutput:
    """A sweep point's analysis: its trace (a window of a few tokens) ingested onto the recorder's clock,
    the passes run, and phases, trace_steps and trace_requests written. The recorder's host-timed steps
    and requests stay as they are: they are the latency numbers, the window only the split."""
    from tracekit.analysis.pipeline import run_passes

    run.lock()
    try:
        ingest_into(run)
        snap = run.snapshot(RAW, RAW_COLUMNS)
        result = run_passes(AnalysisInput(tables=snap.tables, manifest=snap.manifest, ceilings=decide(snap.manifest)))
        rank = run_rank(snap.tables)
        for name, dest in (("phases", "phases"), ("steps", "trace_steps"), ("requests", "trace_requests")):
            df = result.tables.get(name)
            if df is None:
                continue
            table = _schema.from_pandas(name, df) if not isinstance(df, pa.Table) else df
            run.write_table(dest, _schema.fill_rank(table, rank))
    finally:
        run.release()
    return result


def analyze(target: Path, out: Path | None = None, force: bool = False, warmup_requests: int | None = None, *,
            captures: list[str] | None = None, ceiling: str | None = None) -> tuple[RunDir, Any]:
    """Analyze a run directory or trace file; (the run, the result).

    The result is the single-run analysis (a dict of tables) or, for a multi-rank run directory, a
    MultirankResult. ``warmup_requests``: see ``analyse_run`` (every rank alike); ``captures``:
    graph-capture traces to merge at ingest (default: found beside the trace); ``ceiling``: a GPU name
    or ceiling file (tracekit.app.ceiling.decide).
    """
    if target.is_dir() and out is not None and out.resolve() != target.resolve():
        raise UsageError(f"{target} is a run directory, analysed in place: --out {out} names the run directory "
                         "to create from a trace file")
    if target.is_dir() and is_multirank(target):
        run = RunDir.open(target)
        one = (None if warmup_requests is None and not captures and not ceiling else
               partial(_analyse_path, warmup_requests=warmup_requests, captures=captures, ceiling=ceiling))
        return run, analyse_multirank(run, one)
    run = open_or_ingest(target, out, force, captures, check=False)  # analyse_run's read checks it
    return run, analyse_run(run, warmup_requests, ceiling)


# --- multi-rank runs ---------------------------------------------------------------


RANK_TABLES = ("rank_steps", "rank_skew", "comm_steps", "comm_phases", "comm_collectives", "comm_instances")


@dataclass(frozen=True)
class MultirankResult:
    ranks: list[int]
    per_rank: dict[int, AnalysisOutput]  # rank -> the single-run analysis result
    tables: dict[str, pd.DataFrame]  # RANK_TABLES


def _analyse_path(path: Path, warmup_requests: int | None = None, captures: list[str] | None = None,
                  ceiling: str | None = None) -> AnalysisOutput:
    return analyse_run(open_or_ingest(path, None, False, captures, check=False), warmup_requests, ceiling)


def _default_analyse_one(path: Path) -> AnalysisOutput:
    # The single-run path of `tracekit analyze`, unchanged: a rank is an ordinary run.
    return analyse_run(open_or_ingest(path, None, False, check=False))


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
    run: RunDir, analyse_one: Callable[[Path], AnalysisOutput] | None = None
) -> MultirankResult:
    """Analyse every rank, merge, run the cross-rank passes; write every table into ``run``."""
    dirs = rank_dirs(run.path)
    if not dirs:
        raise UsageError(f"{run.path}: no {RANKS_DIR}/<k>/ run directories")
    one = analyse_one or _default_analyse_one
    per_rank: dict[int, AnalysisOutput] = {}
    failed: list[str] = []
    for d in dirs:
        try:
            per_rank[int(d.name)] = one(d)
        except UsageError as exc:
            # A rank without a trace (it failed early) must not hide the others' analysis.
            failed.append(f"rank {d.name}: {exc.message}")
    if not per_rank:
        raise UsageError(f"{run.path}: no rank could be analysed ({'; '.join(failed)})")
    with run.rewrite() as work:
        return _merge_ranks(work, dirs, per_rank, failed)


def _merge_ranks(run: RunDir, dirs: list[Path], per_rank: dict[int, AnalysisOutput], failed: list[str]) -> MultirankResult:
    mark_running(run, "rank_analysis", {"ranks": sorted(per_rank), "failed": failed, "tables": list(RANK_TABLES)})
    from tracekit.analysis import ranks as _ranks

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
            "status": STATUS_COMPLETE,
        }
    )
    return MultirankResult(sorted(per_rank), per_rank, frames)
