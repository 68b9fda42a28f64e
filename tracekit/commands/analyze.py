"""``tracekit analyze RUN_OR_TRACE``: split a run into requests, steps and phases (tracekit.app.analyze)."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.report.text import say


@click.command("analyze")
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Run directory to create when TARGET is a trace file (default: <trace-stem>.tracekit/ beside it).")
@click.option("--force", is_flag=True, help="Overwrite an existing run directory when ingesting.")
@click.option("--warmup-requests", "warmup_requests", type=click.IntRange(min=0), default=None, metavar="N",
              help="The first N requests are warm-ups: kept, but left out of the run's phase totals.")
@click.option("--capture", "captures", multiple=True, metavar="FILE",
              help="A graph-capture trace (or a folder of them) to merge: replayed CUDA/HIP graph kernels get the "
                   "captured ops' shapes. Repeatable. Default: a capture_traces/ folder beside the trace.")
@click.option("--ceiling", "ceiling", default=None, metavar="NAME|FILE",
              help="The ceiling classes are taken against: a GPU name (e.g. 'AMD Instinct MI300X': its "
                   "calibration, else its achievable rates, else its datasheet), a ceiling JSON file "
                   "(tracekit calibrate's), or measured / achievable / datasheet (that kind for the run's GPU). "
                   "Default: the best known for the GPU the trace names, or identifies from its deviceProperties.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar (shown on a terminal for work over ~2 s).")
def command(target: Path, out: Path | None, force: bool, warmup_requests: int | None, captures: tuple[str, ...],
            ceiling: str | None, quiet: bool) -> int:
    """Split a run or trace into requests, steps (prefill/decode) and phases."""
    from tracekit.app.analyze import MultirankResult, analyze
    from tracekit.model.progress import listening
    from tracekit.report.progress import Bar
    from tracekit.report.terminal import analyze_lines, multirank_lines
    from tracekit.report.text import visible

    with Bar(quiet=quiet) as bar, listening(bar):
        run, result = analyze(target, out, force, warmup_requests, captures=list(captures) if captures else None,
                              ceiling=ceiling)
    say(visible(run.path))
    if isinstance(result, MultirankResult):
        lines = multirank_lines(result) + [
            visible(f"warning: {w}") for w in run.read_manifest().get("rank_analysis", {}).get("failed", [])]
    else:
        lines = analyze_lines(result)
    for line in lines:
        say(f"  {line}")
    return 0
