"""``tracekit analyze RUN_OR_TRACE``: split a run into requests, steps and phases (tracekit.app.analyze)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("analyze")
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Run directory to create when TARGET is a trace file (default: <trace-stem>.tracekit/ beside it).")
@click.option("--force", is_flag=True, help="Overwrite an existing run directory when ingesting.")
def command(target: Path, out: Path | None, force: bool) -> int:
    """Split a run or trace into requests, steps (prefill/decode) and phases."""
    from tracekit.app.analyze import MultirankResult, analyze
    from tracekit.report.terminal import analyze_lines, multirank_lines
    from tracekit.report.text import visible

    run, result = analyze(target, out, force)
    click.echo(visible(run.path))
    if isinstance(result, MultirankResult):
        lines = multirank_lines(result) + [
            visible(f"warning: {w}") for w in run.read_manifest().get("rank_analysis", {}).get("failed", [])]
    else:
        lines = analyze_lines(result)
    for line in lines:
        click.echo(f"  {line}")
    return 0
