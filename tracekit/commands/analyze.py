"""``tracekit analyze RUN_OR_TRACE``: split a run into requests, steps and phases (tracekit.app.analyze)."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.errors import UsageError
from tracekit.report.text import say


@click.command("analyze")
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Run directory to create when TARGET is a trace file (default: <trace-stem>.tracekit/ beside it); "
                   "the dataset to write when TARGET is a directory of traces.")
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
@click.option("--engine", type=click.Choice(["process", "serial", "ray"]), default=None,
              help="For a dataset or a directory of traces/runs (one task per run, tables into the dataset): "
                   "a local process pool (default), one process, or Ray tasks.")
@click.option("--address", default=None, help="With --engine ray: the cluster to join (e.g. ray://head:10001; "
                                               "default: RAY_ADDRESS, else a local Ray runtime).")
@click.option("--jobs", type=int, default=None, help="Runs analysed at once (default: CPU count; with --engine ray, the local runtime's CPUs).")
@click.option("--task-memory", "task_memory", default=None, metavar="SIZE",
              help="With --engine ray: memory each run's task reserves (e.g. 2GB); Ray runs no more at once "
                   "on a node than its memory holds.")
@click.option("--runtime-env", "runtime_env", default=None, metavar="JSON|FILE",
              help="With --engine ray: the Ray runtime_env of the tasks (e.g. '{\"pip\": [\"tracekit-llm\"]}').")
def command(target: Path, out: Path | None, force: bool, warmup_requests: int | None, captures: tuple[str, ...],
            ceiling: str | None, quiet: bool, engine: str | None, address: str | None, jobs: int | None,
            task_memory: str | None, runtime_env: str | None) -> int:
    """Split a run or trace into requests, steps (prefill/decode) and phases.

    A dataset, or a directory of traces and runs, is a fleet: each run is analysed in a task of its own and
    its tables written into the dataset (--out for a directory); exit 1 when any run failed.
    """
    from tracekit.app.fleet import is_fleet_target

    if engine is not None or is_fleet_target(target):
        from tracekit.commands import analyze_fleet

        if force or captures:
            raise UsageError("--force and --capture are for one run, not a fleet")
        return analyze_fleet.run(target, out, engine=engine or "process", address=address, jobs=jobs,
                                 task_memory=task_memory, runtime_env=runtime_env,
                                 warmup_requests=warmup_requests, ceiling=ceiling)
    if address or jobs or task_memory or runtime_env:
        raise UsageError("--address, --jobs, --task-memory and --runtime-env are for a fleet "
                               "(a dataset or a directory of traces)")
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
