"""``tracekit export RUN``: the run's timeline for Perfetto, as Chrome JSON or native protobuf (tracekit.app.export)."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.app.export import export_from_trace, export_run, load_tables, resolve_window
from tracekit.errors import UsageError, visible
from tracekit.report.text import say
from tracekit.store.rundir import RunDir, check_output


@click.command("export")
@click.argument("run_path", metavar="RUN", type=click.Path(file_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["json", "proto"]), default="proto", show_default=True,
              help="proto: native Perfetto (.pftrace, smaller, faster to load); json: gzipped Chrome trace.")
@click.option("--window", default=None, metavar="STEP_A:STEP_B", help="Only steps A..B (inclusive) and what overlaps them.")
@click.option("--window-ms", default=None, metavar="A:B", help="Only this time range, in ms from the run's first event.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Output file (default: inside RUN, named after format and window).")
@click.option("--from-trace", is_flag=True,
              help="json only, no window: splice tracekit's tracks into the run's Kineto trace.json.gz "
                   "(every original event and field kept) instead of rebuilding the trace from tables.")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar (shown on a terminal for work over ~2 s).")
def command(
    run_path: Path, fmt: str, window: str | None, window_ms: str | None, out: Path | None, from_trace: bool, force: bool,
    quiet: bool,
) -> None:
    """Write a run's trace for Perfetto (ui.perfetto.dev), optionally windowed."""
    run = RunDir.open(run_path)
    tables = load_tables(run)
    win = resolve_window(tables, window, window_ms)
    if out is None:
        tag = f".steps-{window.replace(':', '-')}" if window else (f".ms-{window_ms.replace(':', '-')}" if window_ms else "")
        out = run.path / (f"trace.tracekit{tag}.pftrace" if fmt == "proto" else f"trace.tracekit{tag}.json.gz")
    check_output(out, "--out")
    if out.exists() and not force:
        raise UsageError(f"{visible(out)} exists; pass --force to overwrite it")
    if from_trace:
        if fmt != "json":
            raise UsageError(f"--from-trace and --format {fmt} conflict: --from-trace writes JSON (--format json)")
        if win is not None:
            given = f"--window {window}" if window else f"--window-ms {window_ms}"
            raise UsageError(f"--from-trace and {given} conflict: --from-trace keeps the whole trace")
    from tracekit.model.progress import listening
    from tracekit.report.progress import Bar

    with Bar(quiet=quiet) as bar, listening(bar):
        ts, counts = export_from_trace(run, out, tables) if from_trace else export_run(run, fmt, out, win, tables)
    size = out.stat().st_size
    detail = ", ".join(f"{v} {k}" for k, v in counts.items())
    say(f"wrote {visible(out)} ({size / 1e6:.2f} MB; {detail})")
    for note in ts.notes:
        say(f"  note: {visible(note)}")
    say("  open it at https://ui.perfetto.dev (Open trace file)")
