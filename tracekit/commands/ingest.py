"""``tracekit ingest TRACE... --out DIR``: torch.profiler traces -> Parquet tables."""

from __future__ import annotations

import time

import click

from tracekit.errors import UsageError


@click.command("ingest")
@click.argument("traces", nargs=-1, required=True)
@click.option("--out", "out", required=True, help="Run directory to write (run.json + tables/).")
@click.option("--force", is_flag=True, help="Overwrite an existing run directory.")
@click.option("--jobs", type=int, default=None, help="Files read in parallel (default: CPU count).")
@click.option("--no-cache", "no_cache", is_flag=True, help="Re-read even if the inputs are unchanged.")
def command(traces: tuple[str, ...], out: str, force: bool, jobs: int | None, no_cache: bool) -> int:
    """Read torch.profiler / Kineto traces (.json, .json.gz, or a directory of per-rank traces)."""
    from tracekit.ingest import ingest

    if jobs is not None and jobs < 1:
        raise UsageError("--jobs must be at least 1")
    t0 = time.perf_counter()
    run = ingest(list(traces), out, force=force, jobs=jobs, use_cache=not no_cache)
    wall = time.perf_counter() - t0
    m = run.read_manifest()
    info = m.get("ingest", {})
    counts = info.get("counts", {})
    cached = wall < 0.5 * float(info.get("seconds") or 0) or (info.get("seconds") and wall < 0.05)
    mb = sum(f.get("bytes", 0) for f in info.get("files", [])) / 1e6
    click.echo(f"{run.path}: {counts.get('events_read', 0)} events from {len(info.get('files', []))} file(s)"
               + (" (cached)" if cached else f", {mb:.1f} MB in {wall:.2f} s ({mb / wall if wall else 0:.0f} MB/s)"))
    rows = counts.get("rows_by_table", {})
    click.echo("  rows: " + ", ".join(f"{k} {v}" for k, v in rows.items()))
    skipped = counts.get("skipped", {})
    if skipped:
        click.echo("  skipped: " + ", ".join(f"{k} {v}" for k, v in skipped.items()))
    for w in m.get("warnings", []):
        click.echo(f"  warning: {w}")
    return 0
