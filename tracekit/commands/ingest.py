"""``tracekit ingest TRACE... --out DIR``: torch.profiler traces -> Parquet tables."""

from __future__ import annotations

import time

import click

from tracekit.errors import UsageError
from tracekit.report.text import say


@click.command("ingest")
@click.argument("traces", nargs=-1, required=True)
@click.option("--out", "out", required=True, help="Run directory to write (run.json + tables/).")
@click.option("--force", is_flag=True, help="Overwrite an existing run directory.")
@click.option("--jobs", type=int, default=None, help="Files read in parallel (default: CPU count).")
@click.option("--no-cache", "no_cache", is_flag=True, help="Re-read even if the inputs are unchanged.")
@click.option("--engine", type=click.Choice(["process", "serial", "ray"]), default="process", show_default=True,
              help="Where files are read: a local process pool, one process, or Ray tasks (ray writes a --dataset).")
@click.option("--address", default=None, help="Ray cluster to join (e.g. ray://head:10001); default: a local Ray runtime.")
@click.option("--dataset", is_flag=True,
              help="Write a hive-partitioned dataset (<table>/run_id=/rank=/) at --out instead of one run directory.")
@click.option("--run-id", "run_id", default=None, help="With --dataset: the run id of every file (default: from paths).")
@click.option("--capture", "captures", multiple=True, metavar="FILE",
              help="A graph-capture trace (vLLM graph_capture_*, SGLang bs_<n>_rank<r>, or a folder of them): its "
                   "ops give the kernels CUDA/HIP graphs replay their shapes. Repeatable. Default: a "
                   "capture_traces/ folder beside the trace.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar (shown on a terminal for work over ~2 s).")
def command(traces: tuple[str, ...], out: str, force: bool, jobs: int | None, no_cache: bool, engine: str,
            address: str | None, dataset: bool, run_id: str | None, captures: tuple[str, ...], quiet: bool) -> int:
    """Read torch.profiler / Kineto traces (.json, .json.gz, or a directory of per-rank traces)."""
    from tracekit.ingest.run import ingest

    if jobs is not None and jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if address and engine != "ray":
        raise UsageError(f"--address {address} and --engine {engine} conflict: --address is for --engine ray")
    if run_id and not (dataset or engine == "ray"):
        raise UsageError(f"--run-id {run_id} needs --dataset (or --engine ray): a run directory takes its id from --out")
    if captures and (dataset or engine == "ray"):
        raise UsageError("--capture is for one run directory, not --dataset")
    if dataset or engine == "ray":
        # One task per trace file into a partitioned dataset (tracekit.ingest.ray_engine); Ray only does this.
        from tracekit.ingest.ray_engine import ingest_command

        return ingest_command(list(traces), out, engine=engine, address=address, jobs=jobs, force=force,
                              run_id=run_id)
    if engine == "serial":
        jobs = 1
    from tracekit.model.progress import listening
    from tracekit.report.progress import Bar

    t0 = time.perf_counter()
    with Bar(quiet=quiet) as bar, listening(bar):  # reports where the trace is read in this process
        run = ingest(list(traces), out, force=force, jobs=jobs, use_cache=not no_cache,
                     captures=list(captures) if captures else None)
    wall = time.perf_counter() - t0
    m = run.read_manifest()
    info = m.get("ingest", {})
    counts = info.get("counts", {})
    cached = run.cached
    mb = sum(f.get("bytes", 0) for f in info.get("files", [])) / 1e6
    from tracekit.report.text import visible

    say(f"{visible(run.path)}: {counts.get('events_read', 0)} events from {len(info.get('files', []))} file(s)"
               + (" (cached)" if cached else f", {mb:.1f} MB in {wall:.2f} s ({mb / wall if wall else 0:.0f} MB/s)"))
    rows = counts.get("rows_by_table", {})
    say("  rows: " + ", ".join(f"{k} {v}" for k, v in rows.items()))
    skipped = counts.get("skipped", {})
    if skipped:
        say("  skipped: " + visible(", ".join(f"{k} {v}" for k, v in skipped.items())))
    for rep in info.get("captures", []):
        if rep.get("graph_launches"):
            say(f"  graphs: {rep['graph_launches_matched']} of {rep['graph_launches']} replays matched to "
                       f"{len(rep.get('files', []))} capture file(s); {rep['activities_matched']} of "
                       f"{rep['activities_replayed']} replayed activities have their captured op")
    for w in m.get("warnings", []):
        say(f"  warning: {visible(w)}")
    return 0
