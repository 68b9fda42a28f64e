"""Traces into a run directory: ingest (one or many files, cached) and a recorded run's own trace.

``ingest`` reads files in parallel processes (one big trace in chunks: tracekit.ingest.chunked) into
one run directory (run.json stays "incomplete" until every table is written) and serves a complete
earlier ingest of the same bytes from the cache (whose tables are checked first). With ``force``
the new run replaces the old one only once it is complete: a trace that fails leaves the old run as
it was (tracekit.store.rundir).
``ingest_into`` reads a run's own trace.json.gz into its raw tables on one clock with what the
recorder wrote. Both merge graph-capture traces (tracekit.ingest.capture): given ones, else those
found beside the trace; run.json ``ingest.captures`` says what matched.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa

from tracekit.errors import TraceFormatError, UsageError, visible
from tracekit.ingest import cache as ingest_cache
from tracekit.ingest import capture as _capture
from tracekit.ingest import chunked
from tracekit.ingest.framing import offset_ns
from tracekit.ingest.reader import read_file, set_rank
from tracekit.ingest.result import TABLES_OUT, Counts, FileResult, not_a_trace
from tracekit.model import schema as _schema
from tracekit.model.trackids import TRACEKIT_PID
from tracekit.store import heap
from tracekit.store.fsops import check_distinct
from tracekit.store.rundir import RunDir


def _expand(paths: Sequence[str | Path]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            # A folder of traces: its graph-capture traces are captures, not traces of their own.
            found = sorted(q for q in p.iterdir() if q.name.endswith((".json", ".json.gz"))
                           and not _capture.is_capture_file(q) and q.is_file())
            if not found:
                raise UsageError(f"{visible(p)}: no .json or .json.gz traces in this directory")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        elif p.exists():  # a pipe or device: opening one blocks, and a trace is read more than once
            raise UsageError(f"{visible(p)}: not a regular file")
        else:
            raise UsageError(f"{visible(p)}: no such file")
    if not out:
        raise UsageError("no trace given")
    check_distinct(out)  # one trace read as two ranks would double every count
    return out


def _worker(args: tuple[str, int | None, int, int | None]) -> FileResult | TraceFormatError:
    path, rank, idx, threads = args
    try:
        res = read_file(path, rank=rank, file_index=idx, threads=threads)
    except TraceFormatError as exc:
        return exc
    why = not_a_trace(res)
    return TraceFormatError(why) if why else res


def ingest(
    paths: Sequence[str | Path],
    out: str | Path,
    *,
    force: bool = False,
    jobs: int | None = None,
    use_cache: bool = True,
    captures: Sequence[str | Path] | None = None,
) -> Any:
    """Ingest traces into the run directory ``out``; return its RunDir.

    Several files become one dataset partitioned by ``rank`` (from
    distributedInfo.rank, else file order), read in parallel processes.
    run.json stays "incomplete" until every table is written. ``captures``: graph-capture
    traces to merge (None: those found beside the traces, tracekit.ingest.capture.find_captures).
    """
    files = _expand(paths)
    caps = capture_paths(files, captures)
    key = ingest_cache.cache_key([*files, *caps])
    if use_cache:
        hit = ingest_cache.lookup(out, key)
        if hit == ingest_cache.STALE:
            force = True  # an ingest of these very inputs whose tables were damaged: rebuilt in its place
        elif hit is not None:
            return hit
    if force:
        _not_inside(out, [*files, *caps])
    run = RunDir.create(out, force=force, source="ingest", inputs=[str(f) for f in files])
    try:
        return _ingest_files(run, files, key, jobs=jobs, captures=caps)
    except BaseException as exc:
        if run.staged:  # the run it would replace stays as it was
            run.discard()
            if isinstance(exc, TraceFormatError):
                raise TraceFormatError(f"{exc.message}; {visible(run.path)} kept as it was") from None
        else:
            run.release()  # the run stays, marked incomplete
        raise


def _not_inside(out: str | Path, inputs: Sequence[Path]) -> None:
    """UsageError where an input lies inside ``out``: replacing ``out`` would delete the trace being
    read (a recorded run's own trace.json.gz, the only copy of what was captured)."""
    root = Path(out).resolve()
    for f in inputs:
        if f.resolve().is_relative_to(root):
            raise UsageError(f"{visible(f)} is inside {visible(out)}, which --force would replace (the trace "
                             "with it): write the new run somewhere else")


def capture_paths(files: Sequence[Path], given: Sequence[str | Path] | None) -> list[Path]:
    """The capture traces to merge: ``given`` (each must exist; a folder means its .json/.json.gz files),
    else every one found beside the traces."""
    if given is not None:
        out: list[Path] = []
        for p in map(Path, given):
            if p.is_dir():  # a folder of captures, or one holding capture_traces/
                out += sorted(q for q in p.iterdir() if q.is_file() and q.name.endswith((".json", ".json.gz"))
                              and q.name != _capture.EXECUTION_DETAILS)
                out += _capture.find_captures(p)
            elif p.is_file():
                out.append(p)
            else:
                raise UsageError(f"--capture {visible(p)}: " + ("not a regular file or folder" if p.exists()
                                                                else "no such file"))
        return list(dict.fromkeys(out))
    found: list[Path] = []
    for f in files:
        found += _capture.find_captures(f)
    return list(dict.fromkeys(found))


def merge_captures(results: Sequence[FileResult], caps: Sequence[Path], first_file_index: int) -> list[dict[str, Any]]:
    """Merge graph captures into each result's tables (in place): the capture traces given, and those
    inside the trace itself (tracekit.ingest.capture.merge); one report per result that replays graphs."""
    reports: list[dict[str, Any]] = []
    for j, r in enumerate(results):
        # Each rank gets its own copy of the captured ops, under op ids of its own.
        files, warnings = _capture.read_captures(list(caps), first_file_index + j * len(caps)) if caps else ([], [])
        r.tables, rep = _capture.merge(r.tables, files)
        if not (caps or rep.graph_launches or rep.warnings):
            continue
        # Replayed activities that got their captured op are no longer without a launching op.
        key = "GPU activity without a launching CPU op"
        left = r.tables["gpu_activity"]["op_id"].null_count
        if key in r.counts.warnings:
            if left:
                r.counts.warnings[key] = left
            else:
                del r.counts.warnings[key]
        reports.append({"rank": r.rank, **rep.as_dict(), "warnings": warnings + rep.warnings})
    return reports


def _read_chunked(run: RunDir, path: Path) -> list[FileResult | TraceFormatError]:
    """One big trace read in chunks, its tables written into ``run`` (tracekit.ingest.chunked); empty
    where it is read whole instead (not big, or it replays CUDA graphs)."""
    if not chunked.wanted(path):
        return []
    try:
        res = chunked.read_into(run, path)
    except TraceFormatError as exc:
        return [exc]
    return [res] if res is not None else []


def _ingest_files(run: RunDir, files: list[Path], key: str, *, jobs: int | None,
                  captures: Sequence[Path] = ()) -> Any:
    t0 = time.perf_counter()
    multi = len(files) > 1
    n_jobs = max(1, min(jobs or os.cpu_count() or 1, len(files)))
    # Files in parallel: one DuckDB thread each, so processes x threads stays at the core count.
    tasks = [(str(f), None, i, 1 if n_jobs > 1 else None) for i, f in enumerate(files)]
    # One big trace: read in chunks, its tables written already (empty: read whole, below).
    results = _read_chunked(run, files[0]) if not multi and not captures else []
    if not results and n_jobs > 1:
        with ProcessPoolExecutor(n_jobs) as pool:
            results = list(pool.map(_worker, tasks))
    elif not results:
        results = [_worker(t) for t in tasks]
    good = [r for r in results if isinstance(r, FileResult)]
    errors = [r for r in results if isinstance(r, TraceFormatError)]
    for e in errors:
        run.add_warning(e.message)
    if not good:
        run.mark_incomplete("nothing usable was read")
        raise errors[0] if len(errors) == 1 else TraceFormatError(f"no usable events in {len(files)} traces: {errors[0].message}")
    if multi:
        # Ranks from distributedInfo when they are distinct, else file order.
        ranks = [r.rank for r in good]
        if len(set(ranks)) != len(ranks):
            for i, r in enumerate(good):
                r.rank = i
                r.tables = {k: set_rank(v, i) for k, v in r.tables.items()}
            run.add_warning("ranks from file order (distributedInfo.rank missing or repeated)")
    capture_reports = merge_captures(good, captures, len(files))
    done = good[0].written  # the tables a chunked read wrote already
    rows = {t: done[t] for t in TABLES_OUT} if done is not None else {t: sum(r.tables[t].num_rows for r in good) for t in TABLES_OUT}
    written: dict[str, Any] = {}
    for t in TABLES_OUT:
        if done is None:
            run.write_table(t, pa.concat_tables([r.tables[t] for r in good]) if len(good) > 1 else good[0].tables[t])
        written[t] = run.table_entry(t, rows[t])
        for r in good:  # written: let its memory go before the next table is encoded
            r.tables[t] = _schema.empty(t)
        heap.trim()  # and the Parquet encoder's buffers (freed, but kept by malloc)
    total = Counts()
    for r in good:
        total.events_read += r.counts.events_read
        total.by_ph.update(r.counts.by_ph)
        total.events_by_table.update(r.counts.events_by_table)
        total.skipped.update(r.counts.skipped)
        total.warnings.update(r.counts.warnings)
    seconds = time.perf_counter() - t0
    mb = sum(r.bytes_in for r in good) / 1e6
    info = {
        "cache_key": key,
        "tables": written,
        "files": [
            {"path": r.path, "rank": r.rank, "events": r.counts.events_read, "bytes": r.bytes_in,
             "seconds": round(r.seconds, 3), "truncated": r.truncated}
            for r in good
        ],
        "counts": {**total.as_dict(), "rows_by_table": rows},
        "seconds": round(seconds, 3),
        "mb_per_s": round(mb / seconds, 1) if seconds > 0 else None,
    }
    if capture_reports:
        info["captures"] = capture_reports
    trace_meta = {r.path: _trace_meta(r.meta) for r in good} if multi else _trace_meta(good[0].meta)
    run.update_manifest(ingest=info, trace_meta=trace_meta)
    for w, n in total.warnings.items():
        run.add_warning(f"{w}: {n}")
    for rep in capture_reports:
        for w in rep["warnings"]:
            run.add_warning(f"capture: {w}")
    truncated = [r.truncated for r in good if r.truncated]
    if truncated or errors:
        reason = truncated[0] if truncated else errors[0].message
        run.mark_incomplete(reason)
        if run.staged:  # ingest discards it: the run it would have replaced is kept instead
            raise TraceFormatError(reason)
        raise TraceFormatError(f"{reason} (tables hold the events read before it; run marked incomplete)")
    run.mark_complete()
    return run


_META_DROP = {"traceEvents"}


def _trace_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The top-level keys of the trace, as they were (deviceProperties, distributedInfo, ...)."""
    return {k: v for k, v in meta.items() if k not in _META_DROP}


# The recorder's tables and their time columns (collectors/recording.py writes them on
# Kineto's raw ``ts`` clock: trace ns without the trace's baseTimeNanoseconds).
RECORDER_CLOCK = {"steps": ("cpu_start_ns", "cpu_end_ns", "gpu_start_ns", "gpu_end_ns"),
                  "requests": ("start_ns", "end_ns"), "counters": ("ts_ns",)}


def ingest_into(run: RunDir, captures: Sequence[str | Path] | None = None) -> None:
    """Read the run's trace into its raw tables, on ONE clock with what the recorder wrote.

    Ingest puts every event on the trace clock including ``baseTimeNanoseconds``
    (epoch ns); a recorded run's steps, requests and counters are on Kineto's raw
    ``ts`` clock (run.json ``clock.offset_ns``), so they are shifted by the trace's
    base first, once (``clock.base_ns`` records it). The recorder's counters
    (NVML/GPM samples) are kept; the trace's own counter events are added beside
    them with source ``kineto``, never in their place. A sweep point takes the same
    path: its host tables carry ``clock.offset_ns`` too. Graph captures: ``captures``, else the
    run's own capture_traces/ (``record --compile`` writes it).
    """
    import pyarrow.compute as pc

    res = read_file(run.trace_path)
    if res.truncated:  # nothing is written from a trace that is not whole: the run stays as it was
        raise TraceFormatError(f"{res.truncated}; {visible(run.path)} not changed")
    reports = merge_captures([res], capture_paths([run.trace_path], captures), 1)
    if reports:
        ingest = dict(run.read_manifest().get("ingest") or {})
        ingest["captures"] = reports
        run.update_manifest(ingest=ingest)
        for rep in reports:
            for w in rep["warnings"]:
                run.add_warning(f"capture: {w}")
    base = offset_ns(res.meta)
    manifest = run.read_manifest()
    clock = dict(manifest.get("clock") or {})
    recorded = {name: run.read_table(name) for name in RECORDER_CLOCK if run.has_table(name)}
    if base and "offset_ns" in clock and "base_ns" not in clock:
        for name, table in recorded.items():
            for col in RECORDER_CLOCK[name]:
                if col in table.column_names:
                    i = table.schema.get_field_index(col)
                    table = table.set_column(i, col, pc.add(table.column(col), pa.scalar(base, table.schema.field(col).type)))
            recorded[name] = table
            run.write_table(name, table)
        clock["offset_ns"] = int(clock["offset_ns"]) + base
        clock["base_ns"] = base
        clock["trace_clock"] = "Kineto ts + baseTimeNanoseconds, int64 ns (every table; shifted at ingest)"
        run.update_manifest(clock=clock)
    written: dict[str, int] = {}
    for name, table in res.tables.items():
        if name == "counters" and "counters" in recorded:
            own = recorded["counters"]
            if "source" in own.column_names:  # a re-ingest: drop the trace rows added last time
                own = own.filter(pc.fill_null(pc.not_equal(own.column("source").cast(pa.string()), "kineto"), True))
            # The merged trace carries tracekit's own counter tracks (pid >= TRACEKIT_PID): the same
            # samples the recorder wrote, so keep only the trace's other counters beside them.
            dev = table.column("device")
            table = table.filter(pc.fill_null(pc.less(dev, pa.scalar(TRACEKIT_PID, dev.type)), True))
            table = pa.concat_tables([_schema.conform("counters", own), _schema.conform("counters", table)],
                                     promote_options="permissive")
        run.write_table(name, table)
        written[name] = table.num_rows
    previous = run.read_manifest().get("ingest")
    if isinstance(previous, dict) and isinstance(previous.get("tables"), dict):
        # An ingested run read again: its record of the raw tables follows (the cache and analyze check it).
        entries = dict(previous["tables"])
        entries.update({name: run.table_entry(name, n) for name, n in written.items()})
        run.update_manifest(ingest={**previous, "tables": entries})
