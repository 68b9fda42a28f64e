"""``tracekit analyze RUN_OR_TRACE``: split a run into requests, steps and phases.

A trace file is ingested into a new run directory first (default: beside the
trace, ``<stem>.tracekit/``); a run directory whose raw tables are missing has
its trace.json.gz read. The passes (tracekit.analysis.pipeline) are pure; this
module does the I/O: it reads the tables and run.json, writes tables/steps,
requests, phases, kernel_steps (the step of every GPU activity; gpu_activity is
not rewritten) and gpu_timeline, records warnings in run.json and prints a summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pandas as pd

from tracekit import schema
from tracekit.errors import UsageError
from tracekit.rundir import RunDir

RAW = ("gpu_activity", "cpu_ops", "runtime", "annotations", "counters")
OUTPUTS = ("steps", "requests", "phases", "kernel_steps", "gpu_timeline")


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
            from tracekit.ingest import read_trace_tables

            for name, table in read_trace_tables(run.trace_path).items():
                run.write_table(name, table)
        return run
    if not target.is_file():
        raise UsageError(f"{target}: no such file or run directory")
    from tracekit.ingest import ingest

    dest = out if out is not None else target.parent / f"{_trace_stem(target)}.tracekit"
    run_dir: RunDir = ingest([target], dest, force=force)
    return run_dir


def analyse_run(run: RunDir) -> dict[str, Any]:
    """Run the default passes on a run directory and write their tables. Returns the tables."""
    from tracekit.analysis.pipeline import DEFAULT_PASSES, run_passes

    tables: dict[str, Any] = {name: run.read_table(name) for name in RAW}
    tables["manifest"] = run.read_manifest()
    result = run_passes(tables, DEFAULT_PASSES)
    for name in OUTPUTS:
        df = result.get(name)
        if df is None:
            continue
        table = schema.from_pandas(name, df) if isinstance(df, pd.DataFrame) else df
        run.write_table(name, table)
    for w in result["warnings"]:
        run.add_warning(f"analyze: {w}")
    run.update_manifest(analysis={
        "passes": [p.name for p in DEFAULT_PASSES],
        "steps": len(result["steps"]),
        "requests": len(result["requests"]),
    })
    return result


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
        lines.append("steps: " + ", ".join(parts))
    for r in result["requests"].to_dict("records"):
        share = r["prefill_share"]
        lines.append(
            f"request {r['request_id']} {r['name']} [{r['source']}]: batch {r['batch']}, "
            f"{r['input_tokens']} in / {r['output_tokens']} out, TTFT {_ms(r['ttft_ns'])}, "
            f"TPOT {_ms(r['tpot_ns'])}, e2e {_ms(r['e2e_ns'])}, prefill share "
            + ("-" if share is None or pd.isna(share) else f"{100 * share:.1f}%")
            + (f" (host TTFT {_ms(r['host_ttft_ns'])}, TPOT {_ms(r['host_tpot_ns'])})"
               if r.get("host_ttft_ns") is not None and not pd.isna(r["host_ttft_ns"]) else "")
        )
    ph = result["phases"]
    for r in ph[ph["request_id"].isna()].to_dict("records"):
        lines.append(
            f"phase {r['phase']}: {r['steps']} steps, time {_ms(r['time_ns'])}, GPU busy {_ms(r['gpu_busy_ns'])}, "
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
    run = open_or_ingest(target, out, force)
    result = analyse_run(run)
    click.echo(f"{run.path}")
    for line in summary(result):
        click.echo(f"  {line}")
    return 0
