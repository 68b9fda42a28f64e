"""``tracekit analyze RUN_OR_TRACE``: split a run into requests, steps and phases.

A trace file is ingested into a new run directory first (default: beside the
trace, ``<stem>.tracekit/``); a run directory whose raw tables are missing has
its trace.json.gz read. The passes (tracekit.analysis.pipeline) are pure; this
module does the I/O: it reads the tables and run.json, writes tables/steps,
requests, phases, kernel_steps (the step of every GPU activity; gpu_activity is
not rewritten), gpu_timeline and the roofline's kernel_bound and step_bound
(schema-less: their columns follow analysis/bound.py), records warnings in
run.json and prints a summary.

A run tracekit recorded keeps its recorder's steps and requests (host-timed,
every step of the run): on the first analysis they are copied to
tables/recorded_steps and recorded_requests (schema-less copies, never
rewritten) before steps/requests are replaced by the analysis' tables, and
every analysis reads them from there. The ceiling of the bound pass is resolved
here (measured calibration preferred, tracekit.model.ceilings.resolve) so that the
pass itself stays free of I/O.

One clock: ingesting a recorded run's trace shifts the recorder's steps, requests
and counters onto the ingested trace clock (Kineto ts + baseTimeNanoseconds) and
keeps its NVML/GPM counters (ingest_into). A multi-rank run directory
(tracekit.app.multirank) is analysed rank by rank, then across ranks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pandas as pd

from tracekit.errors import TracekitError, UsageError
from tracekit.model import schema
from tracekit.store.rundir import RunDir

RAW = ("gpu_activity", "cpu_ops", "runtime", "annotations", "counters", "other_events")
OUTPUTS = ("steps", "requests", "phases", "kernel_steps", "gpu_timeline", "kernel_bound", "step_bound")
RECORDED = {"steps": "recorded_steps", "requests": "recorded_requests"}


def _trace_stem(path: Path) -> str:
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
    from tracekit.ingest import ingest

    dest = out if out is not None else target.parent / f"{_trace_stem(target)}.tracekit"
    run_dir: RunDir = ingest([target], dest, force=force)
    return run_dir


# The recorder's tables and their time columns (collectors/session.py writes them on
# Kineto's raw ``ts`` clock: trace ns without the trace's baseTimeNanoseconds).
RECORDER_CLOCK = {"steps": ("cpu_start_ns", "cpu_end_ns", "gpu_start_ns", "gpu_end_ns"),
                  "requests": ("start_ns", "end_ns"), "counters": ("ts_ns",)}


def ingest_into(run: RunDir) -> None:
    """Read the run's trace into its raw tables, on ONE clock with what the recorder wrote.

    Ingest puts every event on the trace clock including ``baseTimeNanoseconds``
    (epoch ns); a recorded run's steps, requests and counters are on Kineto's raw
    ``ts`` clock (run.json ``clock.offset_ns``), so they are shifted by the trace's
    base first, once (``clock.base_ns`` records it). The recorder's counters
    (NVML/GPM samples) are kept; the trace's own counter events are added beside
    them with source ``kineto``, never in their place. A sweep point takes the same
    path (collectors/sweep_runner.py): its host tables carry ``clock.offset_ns`` too.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from tracekit.ingest import read_file
    from tracekit.ingest.duckdb_reader import _offset_ns

    res = read_file(run.trace_path)
    base = _offset_ns(res.meta)
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
    for name, table in res.tables.items():
        if name == "counters" and "counters" in recorded:
            own = recorded["counters"]
            if "source" in own.column_names:  # a re-ingest: drop the trace rows added last time
                own = own.filter(pc.fill_null(pc.not_equal(own.column("source").cast(pa.string()), "kineto"), True))
            # The merged trace carries tracekit's own counter tracks (pid >= TRACEKIT_PID): the same
            # samples the recorder wrote, so keep only the trace's other counters beside them.
            from tracekit.trace.tracks import TRACEKIT_PID

            dev = table.column("device")
            table = table.filter(pc.fill_null(pc.less(dev, pa.scalar(TRACEKIT_PID, dev.type)), True))
            table = pa.concat_tables([schema.conform("counters", own), schema.conform("counters", table)],
                                     promote_options="permissive")
        run.write_table(name, table)


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
    from tracekit.model.ceilings import resolve

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
        if name in schema.SCHEMAS:
            table = schema.from_pandas(name, df) if isinstance(df, pd.DataFrame) else df
        else:  # kernel_bound / step_bound: schema-less, columns as analysis/bound.py makes them
            table = pa.Table.from_pandas(_plain(df), preserve_index=False)
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


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    """Object columns of mixed Python values as strings, so Parquet accepts them."""
    out = df.copy()
    for c in out.columns:
        if out[c].dtype == object:
            vals = out[c].dropna()
            if len(vals) and not all(isinstance(v, str) for v in vals):
                out[c] = out[c].map(lambda v: None if v is None or (isinstance(v, float) and pd.isna(v)) else str(v))
    return out


def _ms(v: Any) -> str:
    return "-" if v is None or pd.isna(v) else f"{float(v) / 1e6:.2f} ms"


def summary(result: dict[str, Any]) -> list[str]:
    lines = []
    steps: pd.DataFrame = result["steps"]
    if steps.empty:
        lines.append("steps: none found (GPU timeline only)")
    else:
        by = steps.groupby(["kind", "source"]).size().reset_index(name="n")
        parts = [f"{n} {k} ({s})" for k, s, n in zip(by["kind"], by["source"], by["n"], strict=True)]
        line = "steps: " + ", ".join(parts)
        if "captured" in steps and not steps["captured"].all():
            line += (f"; {int(steps['captured'].sum())} with kernel capture (the GPU columns cover only"
                     " these; the others have none, which is not idle time)")
        ran = (result.get("manifest") or {}).get("steps")
        if isinstance(ran, int) and ran > len(steps):
            line += f"; the run had {ran} steps, the trace and the recorder's tables here hold {len(steps)}"
        lines.append(line)
    for r in result["requests"].to_dict("records"):
        share = r["prefill_share"]
        host = r.get("host_ttft_ns") is not None and not pd.isna(r["host_ttft_ns"])
        label = "without the profiler" if r["source"] == "tracekit_host" else "host"
        lines.append(
            f"request {r['request_id']} {r['name']} [{r['source']}]: batch {r['batch']}, "
            f"{r['input_tokens']} in / {r['output_tokens']} out, TTFT {_ms(r['ttft_ns'])}, "
            f"TPOT {_ms(r['tpot_ns'])}, ITL p50 {_ms(r['itl_p50_ns'])} p99 {_ms(r['itl_p99_ns'])}, "
            f"e2e {_ms(r['e2e_ns'])}, prefill share "
            + ("-" if share is None or pd.isna(share) else f"{100 * share:.1f}%")
            + (f" ({label}: TTFT {_ms(r['host_ttft_ns'])}, TPOT {_ms(r['host_tpot_ns'])})" if host else "")
        )
    ceiling = result.get("ceiling")
    if ceiling is not None:
        lines.append(f"ceiling: {ceiling.describe()}")
    ph = result["phases"]
    for r in ph[ph["request_id"].isna()].to_dict("records"):
        lines.append(
            f"phase {r['phase']}: {r['steps']} steps ({r['steps_captured']} captured), time {_ms(r['time_ns'])}, GPU busy {_ms(r['gpu_busy_ns'])}, "
            f"idle {_ms(r['idle_ns'])}, memcpy {_ms(r['memcpy_ns'])}, comm {_ms(r['comm_ns'])}"
        )
    ks = result["kernel_steps"]
    if len(ks):
        lines.append(f"GPU activities: {len(ks)}, outside every step: {int(ks['step_id'].isna().sum())}")
    for w in result["warnings"]:
        lines.append(f"warning: {w}")
    return lines


@click.command("analyze")
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Run directory to create when TARGET is a trace file (default: <trace-stem>.tracekit/ beside it).")
@click.option("--force", is_flag=True, help="Overwrite an existing run directory when ingesting.")
def command(target: Path, out: Path | None, force: bool) -> int:
    """Split a run or trace into requests, steps (prefill/decode) and phases."""
    from tracekit.app.multirank import analyze_command, is_multirank

    if target.is_dir() and is_multirank(target):
        return analyze_command(target)
    run = open_or_ingest(target, out, force)
    result = analyse_run(run)
    click.echo(f"{run.path}")
    for line in summary(result):
        click.echo(f"  {line}")
    return 0
