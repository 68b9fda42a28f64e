"""Analyze a run: the use case behind ``tracekit analyze``, the Python API and the sweep.

``analyze(target)`` takes a run directory (single or multi-rank) or a trace file. A trace file is
ingested into a new run directory first (default: beside the trace, ``<stem>.tracekit/``); a run
directory whose raw tables are missing has its trace.json.gz read. The passes
(tracekit.analysis.pipeline) are pure; this module does the I/O: it reads the tables and run.json,
writes steps, requests, phases, kernel_steps (the step of every GPU activity; gpu_activity is not
rewritten), gpu_timeline and the roofline's kernel_bound and step_bound, and records warnings in run.json.
Every table's columns and types are declared in tracekit.model.schema; the store refuses any other.

A run tracekit recorded keeps its recorder's steps and requests (host-timed, every step of the run):
on the first analysis they are copied to tables/recorded_steps and recorded_requests (the steps and
requests schemas, never rewritten) before steps/requests are replaced by the analysis' tables, and every
analysis reads them from there. The ceiling is resolved here (measured calibration preferred,
tracekit.store.calibration.resolve) so that the passes stay free of I/O. A multi-rank run directory
is analysed rank by rank, then across ranks: every table is merged into the top-level run (``rank``
column) and tracekit.analysis.ranks writes rank_steps (skew, stragglers), rank_skew, comm_steps,
comm_phases (NCCL time split into transfer / wait / unmatched), comm_collectives and comm_instances.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from tracekit.analysis import ranks as _ranks
from tracekit.analysis.steps import as_df
from tracekit.errors import TraceFormatError, TracekitError, UsageError
from tracekit.ingest import ingest, ingest_into
from tracekit.model import progress
from tracekit.model import schema as _schema
from tracekit.store import heap
from tracekit.store.calibration import resolve
from tracekit.store.ranks import RANKS_DIR, is_multirank, merge_tables, rank_dirs
from tracekit.store.rundir import STATUS_COMPLETE, RunDir

RAW = ("gpu_activity", "cpu_ops", "runtime", "annotations", "counters", "other_events", "ncu_counters")
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


def open_or_ingest(target: Path, out: Path | None, force: bool, captures: list[str] | None = None) -> RunDir:
    """The run directory to analyse: ``target`` itself (its trace read if it has no raw tables, or
    again when ``captures`` are given), or a new one a trace file is ingested into."""
    if target.is_dir():
        run = RunDir.open(target)
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


def recorded_tables(run: RunDir, manifest: dict[str, Any]) -> dict[str, pd.DataFrame]:
    """The recorder's own steps/requests tables, preserved across analyses (see the module doc)."""
    import pyarrow as pa

    out: dict[str, pd.DataFrame] = {}
    # Only a run never analysed can still hold the recorder's own steps as its steps table: an analysed
    # one's steps are derived (and re-derived now, so a damaged one is never read).
    steps_df = run.read_df("steps") if "analysis" not in manifest and run.has_table("steps") else None
    first = (
        steps_df is not None
        and len(steps_df) > 0
        and bool((steps_df["source"].astype(str) == "tracekit").all())
    )
    for name, keep in RECORDED.items():
        if run.has_table(keep):
            out[keep] = run.read_df(keep)  # checked as every table is: unreadable is a corrupt run
        elif first and run.has_table(name):
            df = run.read_df(name)
            run.write_table(keep, pa.Table.from_pandas(df, preserve_index=False))
            out[keep] = df
    return out


CEILING_KINDS = ("measured", "achievable", "datasheet")


def resolve_ceiling(manifest: dict[str, Any], override: str | None = None) -> tuple[Any, str | None]:
    """(Ceiling or None, why not / how found) for the run's GPU.

    ``override`` (``--ceiling``): a ceiling JSON file, a GPU name (its measured calibration, else its
    achievable rates, else its datasheet; unknown is an error), or one of CEILING_KINDS (that kind of
    ceiling for the run's GPU). Otherwise the GPU run.json or the trace names (measured calibration
    first, then achievable rates, then the datasheet); where that name is empty, generic ("AMD Radeon Graphics") or unknown, the
    GPU the trace's deviceProperties identify (tracekit.model.ceilings.identify), said in the note.
    """
    from tracekit.analysis.bound import gpu_name
    from tracekit.model.ceilings import GENERIC_NAMES, identify

    name = gpu_name(manifest)
    if override in CEILING_KINDS:  # that kind of ceiling for the GPU the run names or identifies
        found, why = resolve_ceiling(manifest)
        if found is None:
            return None, why
        return resolve(found.gpu, kind=override), why
    if override:
        path = Path(override)
        return (resolve(override, path=path) if path.is_file() else resolve(override)), None
    why = f"the trace names the GPU only {name!r}" if name else "no GPU named in run.json or the trace"
    if name and not GENERIC_NAMES.match(name):
        try:
            return resolve(name), None
        except TracekitError as exc:
            why = str(exc)
    props = device_properties(manifest)
    if props:
        ident, note = identify(props)
        if ident is not None:
            try:
                c = resolve(ident)
            except TracekitError as exc:
                return None, f"{why}; deviceProperties identify {ident} ({note}), which has no ceiling: {exc}"
            how = f"GPU {name or 'unnamed'!r} identified from the trace's deviceProperties as {ident}"
            return c, how + (f" ({note})" if note else "")
        why = f"{why}; deviceProperties: {note}"
    return None, why


def device_properties(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The first device's Kineto deviceProperties from run.json's trace_meta (one trace or per file)."""
    meta = manifest.get("trace_meta") or {}
    metas = [meta] if isinstance(meta, dict) and "deviceProperties" in meta else (
        [m for m in meta.values() if isinstance(m, dict)] if isinstance(meta, dict) else [])
    for m in metas:
        props = m.get("deviceProperties")
        if isinstance(props, list) and props and isinstance(props[0], dict):
            return props[0]
    return None


def read_raw(run: RunDir) -> dict[str, Any]:
    """The raw tables the passes read (RAW), each with the columns they use (RAW_COLUMNS: all where absent)."""
    return {name: run.read_columns(name, RAW_COLUMNS[name]) if name in RAW_COLUMNS else run.read_table(name)
            for name in RAW}


def as_frames(tables: dict[str, Any]) -> dict[str, Any]:
    """read_raw's tables with each one the pandas frame the passes read (tracekit.analysis.steps.as_df),
    made once so that its Arrow table can go; gpu_activity stays Arrow (the outputs take its list
    columns' text from it)."""
    return {name: as_df(t) if name in RAW and name != "gpu_activity" else t for name, t in tables.items()}


def analyse_run(run: RunDir, warmup_requests: int | None = None, ceiling_override: str | None = None) -> dict[str, Any]:
    """Run the default passes on a run directory and write their tables. Returns the passes' tables
    (the raw tables are let go before the outputs are written).

    ``warmup_requests``: the first N requests are warm-ups, left out of the run's phase totals
    (tracekit.analysis.warmup; requests the recorder marked are left out whatever N is).
    ``ceiling_override``: ``--ceiling`` (a GPU name or a ceiling file); default: resolve_ceiling's choice.

    The run changes as one step (RunDir.rewrite: a hard-linked copy swapped in when every table is
    written), so a failed or killed analysis leaves it as it was. Where it is written in place (no
    hard links), run.json's ``analysis.status`` is ``running`` from the first table written until the
    last (then ``complete``, with the rows of every table), so a killed analysis is never taken for a
    finished one (RunDir.unfinished).
    """
    with run.rewrite() as work:
        return _analyse_run(work, warmup_requests, ceiling_override)


_INT64_MAX = 2**63 - 1


def check_span(tables: dict[str, Any]) -> None:
    """TraceFormatError when the trace's events span more than int64 nanoseconds hold: every time is in
    range, but a span or a sum over it cannot be, so some timestamps are corrupt."""
    from tracekit.analysis.pipeline import trace_span

    span = trace_span(tables)
    if span is not None and span[1] - span[0] > _INT64_MAX:
        raise TraceFormatError(
            f"the trace's events span {span[1] - span[0]:.3g} ns (from {span[0]} to {span[1]} ns), more than "
            "int64 nanoseconds can hold: some timestamps are corrupt; remove the events far from the rest")


def _analyse_run(run: RunDir, warmup_requests: int | None, ceiling_override: str | None) -> dict[str, Any]:
    from tracekit.analysis.pipeline import DEFAULT_PASSES, run_passes

    run.check_ingested()  # the raw tables are the ones ingest wrote (never a mix of two runs)
    tables = read_raw(run)
    rank = run_rank(tables)
    tables = as_frames(tables)
    heap.trim()  # the Parquet reader's buffers and the Arrow tables let go
    manifest = run.read_manifest()
    tables["manifest"] = manifest
    if run.has_table("step_requests"):  # the requests each step served (record --serve / --assistant)
        tables["step_requests"] = run.read_table("step_requests")
    tables.update(recorded_tables(run, manifest))
    if warmup_requests is not None:
        tables["warmup_first"] = warmup_requests
    ceiling, why = resolve_ceiling(manifest, ceiling_override)
    if ceiling is not None:
        tables["ceiling"] = ceiling
    check_span(tables)
    result = run_passes(tables, DEFAULT_PASSES, between=heap.trim)
    result["ceiling"] = ceiling
    if ceiling is None and len(tables["gpu_activity"]):
        result["warnings"].append(f"no ceiling: {why}")
    elif ceiling is not None and why:
        result["warnings"].append(why)
    steps = result["steps"]
    info = {
        "passes": [p.name for p in DEFAULT_PASSES],
        "steps": len(steps),
        "steps_captured": int(steps["captured"].sum()) if "captured" in steps else len(steps),
        "requests": len(result["requests"]),
        "workload": result.get("workload"),
        "ceiling": ceiling.to_dict() if ceiling is not None else None,
        # kernels whose modelled rate is above every peak: their model over-counts (kernel_bound.over_peak)
        "kernels_over_peak": int(result["kernel_bound"]["over_peak"].sum())
        if result.get("kernel_bound") is not None and "over_peak" in result["kernel_bound"] else 0,
        # Request ids left out of the run-level phase rows (first N asked for, and those marked).
        "warmup_requests": list((result.get("warmup") or {}).get("requests") or []),
    }
    if result.get("check") is not None:  # tracekit.analysis.health's verdict (``tracekit check``)
        info["check"] = result["check"].to_dict()
    # The raw tables (and the passes' frames of them) are let go before the outputs are converted, one
    # at a time, each written and dropped: the largest output, kernel_bound, first, with gpu_activity
    # (its grid / block text) the only raw table still held.
    gpu = tables["gpu_activity"]
    del tables
    for name in RAW:
        result.pop(name, None)
    heap.trim()
    names = sorted((n for n in OUTPUTS if result.get(n) is not None), key=lambda n: n != "kernel_bound")
    mark_running(run, "analysis", info)
    rows: dict[str, int] = {}
    for i, name in enumerate(names):
        progress.report("analyzing: writing tables", i, len(names))
        table = _output_table(name, result[name], rank, gpu)
        run.write_table(name, table)
        rows[name] = table.num_rows
        del table
        if name == "kernel_bound":
            gpu = None
            heap.trim()
    for w in result["warnings"]:
        run.add_warning(f"analyze: {w}")
    run.update_manifest(analysis={**info, "status": STATUS_COMPLETE, "rows": {k: rows[k] for k in OUTPUTS if k in rows}})
    return result


def _output_table(name: str, df: Any, rank: int, gpu: pa.Table | None) -> pa.Table:
    """A pass's output as the Arrow table the store writes."""
    if name not in ("kernel_bound", "step_bound"):
        table = _schema.from_pandas(name, df) if isinstance(df, pd.DataFrame) else df
        return _schema.fill_rank(table, rank)
    # kernel_bound / step_bound: mixed object columns as text; the store fits them to their schemas.
    # kernel_bound carries gpu_activity's grid and block: their text comes from its list columns.
    frame = plain_frame(df, gpu)
    if name == "kernel_bound" and "name" in frame:
        frame.insert(list(frame.columns).index("name") + 1, "short_name", short_names(frame["name"]))
    return pa.Table.from_pandas(frame, preserve_index=False)


def short_names(names: pd.Series) -> list[str | None]:
    """Each kernel's short name (tracekit.model.kernelnames), computed once per distinct name."""
    from tracekit.model.kernelnames import short_name

    cache: dict[Any, str | None] = {}
    return [cache.setdefault(n, short_name(n) if isinstance(n, str) else None) if n is not None else None
            for n in names.tolist()]


def run_rank(tables: dict[str, Any]) -> int:
    """The rank of a single-rank run: the one its raw tables carry (ingest sets it), else 0."""
    import pyarrow.compute as pc

    for name in RAW:
        t = tables.get(name)
        if isinstance(t, pa.Table) and "rank" in t.column_names and t.num_rows:
            vals = pc.drop_null(t.column("rank"))
            if len(vals):
                return int(vals[0].as_py())
    return 0


def mark_running(run: RunDir, key: str, info: dict[str, Any]) -> None:
    """run.json ``key``: ``info`` with status ``running`` (before the first table of a derived set is written)."""
    run.update_manifest(**{key: {**info, "status": "running",
                                 "started_at": _dt.datetime.now(_dt.timezone.utc).isoformat()}})


def plain_frame(df: pd.DataFrame, source: pa.Table | None = None) -> pd.DataFrame:
    """Object columns of mixed Python values as strings, so Parquet accepts them.

    ``source``: a raw table whose list columns ``df`` carries as they are (the same array objects,
    row for row, as the passes' frame of it holds): their text is made from its Arrow columns."""
    out = df.copy(deep=False)
    for c in out.columns:
        # infer_dtype (C) says "string" where every non-null value is a str, "empty" where all are null
        if out[c].dtype == object and pd.api.types.infer_dtype(out[c], skipna=True) not in ("string", "empty"):
            values = out[c].to_numpy()
            text = _source_texts(values, source, c) if source is not None else None
            out[c] = text if text is not None else _as_text(values)
    return out


def _source_texts(values: Any, source: pa.Table, column: str) -> list[str | None] | None:
    """_as_text(values) where ``values`` are the very objects of ``column`` in the passes' frame of
    ``source`` (tracekit.analysis.steps.as_df), row for row: each distinct list of the Arrow column
    formatted once, as NumPy formats the array it becomes. None otherwise."""
    from tracekit.analysis.columns import object_ids

    if column not in source.column_names or not pa.types.is_list(source.schema.field(column).type):
        return None
    held = as_df(source)[column].to_numpy()
    if len(held) != len(values) or not np.array_equal(object_ids(held), object_ids(values)):
        return None
    return _list_texts(source.column(column).combine_chunks())


def _list_texts(arr: pa.ListArray) -> list[str | None] | None:
    """str() of the NumPy array each list of an integer / bool list column converts to (None for a
    null list), each distinct list once; None where the lists are not all one length > 0 without
    null values (to_pandas makes float arrays of lists with nulls)."""
    import pyarrow.compute as pc

    from tracekit.analysis.columns import combine_codes

    vt = arr.type.value_type
    if not (pa.types.is_integer(vt) or pa.types.is_boolean(vt)):
        return None
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    flat = arr.flatten()
    if flat.null_count:
        return None
    lens = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)[valid]
    out = np.full(len(arr), None, dtype=object)
    if not len(lens):
        return out.tolist()
    k = int(lens[0])
    if k == 0 or (lens != k).any():
        return None
    m = flat.to_numpy(zero_copy_only=False).reshape(-1, k)
    key = combine_codes(*(pd.factorize(m[:, j])[0] for j in range(k)))
    first = np.empty(int(key.max()) + 1, dtype=np.int64)
    first[key[::-1]] = np.arange(len(key) - 1, -1, -1)
    texts = np.array([str(m[i]) for i in first.tolist()], dtype=object)
    out[valid] = texts[key]
    result: list[str | None] = out.tolist()
    return result


def _as_text(values: Any) -> list[str | None]:
    """str() of each value (None for None / NaN). Values repeat (a kernel's grid and block are a few
    shapes over thousands of launches) and str() of a NumPy array is slow: each distinct one once."""
    import numpy as np

    fast = _array_texts(values)
    if fast is not None:
        return fast
    seen: dict[Any, str] = {}
    out: list[str | None] = []
    for v in values:
        if v is None or (isinstance(v, float) and v != v):
            out.append(None)
            continue
        # Only values whose text is fixed by the key (not floats: 0.0 == -0.0).
        if isinstance(v, np.ndarray) and v.dtype.kind in "iub":
            key: Any = (v.dtype.str, v.shape, v.tobytes())
        elif type(v) in (int, str):
            key = (type(v), v)
        else:
            out.append(str(v))
            continue
        text = seen.get(key)
        if text is None:
            text = seen[key] = str(v)
        out.append(text)
    return out


def _array_texts(values: Any) -> list[str | None] | None:
    """_as_text's result where every value is None, NaN or a 1-D integer / bool array of one dtype and
    length (a kernel's grid or block): the arrays stacked, each distinct row formatted once by NumPy
    (rows told apart by their columns' codes, a hash per column, not a sort). None where the values
    are anything else."""
    import numpy as np

    null = pd.isna(values)
    rest = values[~null]
    if not len(rest) or type(rest[0]) is not np.ndarray:
        return None
    dtype = rest[0].dtype
    if not all(type(v) is np.ndarray and v.dtype == dtype for v in rest):
        return None
    if not all(v is None or type(v) is float for v in values[null]):  # pd.NA, NaT: _as_text writes their str()
        return None
    if dtype.kind not in "iub" or rest[0].ndim != 1 or not rest[0].shape[0]:
        return None
    try:
        stacked = np.stack(list(rest))
    except ValueError:  # arrays of different lengths
        return None
    key = np.zeros(len(stacked), dtype=np.int64)
    for j in range(stacked.shape[1]):
        codes, uniq = pd.factorize(stacked[:, j])
        key, _ = pd.factorize(key * len(uniq) + codes)  # stays below rows²: no overflow
    n_rows = int(key.max()) + 1
    first = np.empty(n_rows, dtype=np.int64)
    first[key[::-1]] = np.arange(len(key) - 1, -1, -1)  # each row code's first row
    texts = np.array([str(stacked[i]) for i in first.tolist()] + [None], dtype=object)
    out = np.full(len(values), n_rows, dtype=np.int64)
    out[~null] = key
    result: list[str | None] = texts[out].tolist()
    return result


def analyse_trace_window(run: RunDir) -> dict[str, Any]:
    """A sweep point's analysis: its trace (a window of a few tokens) ingested onto the recorder's clock,
    the passes run, and phases, trace_steps and trace_requests written. The recorder's host-timed steps
    and requests stay as they are: they are the latency numbers, the window only the split."""
    from tracekit.analysis.pipeline import DEFAULT_PASSES, run_passes

    run.lock()
    try:
        ingest_into(run)
        tables = read_raw(run)
        tables["manifest"] = run.read_manifest()
        result = run_passes(tables, DEFAULT_PASSES)
        rank = run_rank(tables)
        for name, dest in (("phases", "phases"), ("steps", "trace_steps"), ("requests", "trace_requests")):
            df = result.get(name)
            if df is None:
                continue
            table = _schema.from_pandas(name, df) if isinstance(df, pd.DataFrame) else df
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
    or ceiling file (resolve_ceiling).
    """
    if target.is_dir() and out is not None and out.resolve() != target.resolve():
        raise UsageError(f"{target} is a run directory, analysed in place: --out {out} names the run directory "
                         "to create from a trace file")
    if target.is_dir() and is_multirank(target):
        run = RunDir.open(target)
        one = (None if warmup_requests is None and not captures and not ceiling else
               partial(_analyse_path, warmup_requests=warmup_requests, captures=captures, ceiling=ceiling))
        return run, analyse_multirank(run, one)
    run = open_or_ingest(target, out, force, captures)
    return run, analyse_run(run, warmup_requests, ceiling)


# --- multi-rank runs ---------------------------------------------------------------


RANK_TABLES = ("rank_steps", "rank_skew", "comm_steps", "comm_phases", "comm_collectives", "comm_instances")


@dataclass(frozen=True)
class MultirankResult:
    ranks: list[int]
    per_rank: dict[int, dict[str, Any]]  # rank -> the single-run analysis result
    tables: dict[str, pd.DataFrame]  # RANK_TABLES


def _analyse_path(path: Path, warmup_requests: int | None = None, captures: list[str] | None = None,
                  ceiling: str | None = None) -> dict[str, Any]:
    return analyse_run(open_or_ingest(path, None, False, captures), warmup_requests, ceiling)


def _default_analyse_one(path: Path) -> dict[str, Any]:
    # The single-run path of `tracekit analyze`, unchanged: a rank is an ordinary run.
    return analyse_run(open_or_ingest(path, None, False))


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
    run: RunDir, analyse_one: Callable[[Path], dict[str, Any]] | None = None
) -> MultirankResult:
    """Analyse every rank, merge, run the cross-rank passes; write every table into ``run``."""
    dirs = rank_dirs(run.path)
    if not dirs:
        raise UsageError(f"{run.path}: no {RANKS_DIR}/<k>/ run directories")
    one = analyse_one or _default_analyse_one
    per_rank: dict[int, dict[str, Any]] = {}
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


def _merge_ranks(run: RunDir, dirs: list[Path], per_rank: dict[int, dict[str, Any]], failed: list[str]) -> MultirankResult:
    mark_running(run, "rank_analysis", {"ranks": sorted(per_rank), "failed": failed, "tables": list(RANK_TABLES)})
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
