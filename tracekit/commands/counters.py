"""``tracekit counters``: measure a run's kernels with Nsight Compute and classify them from the counters."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.report.text import say


@click.command("counters", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("run", type=click.Path(path_type=Path))
@click.option("--steps", default=None, metavar="A:B",
              help="Steps to profile (ids, A inclusive, B exclusive). Default 0:2: the first prefill and decode step.")
@click.option("--metrics", "metric_set", type=click.Choice(["one-pass", "sol", "flops"]), default="one-pass",
              show_default=True,
              help="one-pass: DRAM bytes and %, tensor pipe % (~25 ms per kernel); sol: Nsight Compute's "
                   "Speed Of Light inputs (~10 passes, save/restore); flops: adds FP32/FP16 instruction counts.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=1800.0, show_default=True,
              help="Seconds before ncu and the workload are stopped.")
@click.option("--ncu", "ncu_path", default=None, metavar="PATH", help="The ncu executable (default: found on PATH, "
              "in $CUDA_HOME/bin or under /opt/nvidia/nsight-compute).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Join this Nsight Compute CSV (ncu -i REPORT --csv --page raw --print-units base "
                   "--print-kernel-base mangled, recorded with tracekit's NVTX step ranges) instead of running ncu.")
def command(run: Path, steps: str | None, metric_set: str, timeout_s: float, ncu_path: str | None,
            csv_path: Path | None) -> int:
    """Measure a run's kernels with Nsight Compute and classify them from the counters.

    Re-runs the run's workload (its preset or script, from run.json) under ncu for a window of steps,
    joins each profiled kernel to the trace's kernel at the same position of the same step (names
    must agree; a step whose sequence differs is refused), and re-analyses the run: a measured
    kernel's class (compute, memory or latency) comes from its counters. Nothing is written unless
    counters joined.

    \b
    tracekit counters runs/chat                   # steps 0:2
    tracekit counters runs/chat --steps 0:8
    tracekit counters runs/chat --csv elsewhere.csv
    """
    from tracekit.collectors.ncu import CountersOptions, collect, estimate
    from tracekit.collectors.profiler import parse_trace_steps
    from tracekit.errors import UsageError

    if not (run / "run.json").is_file():
        raise UsageError(f"{run}: not a run directory (no run.json)")
    if timeout_s != timeout_s:  # NaN passes click's range check; the wait for ncu would never end
        raise UsageError("--timeout nan: give a number of seconds")
    window = parse_trace_steps(steps, "--steps") if steps else None
    opts = CountersOptions(steps=window, metric_set=metric_set, timeout_s=timeout_s, ncu=ncu_path, csv=csv_path)
    if csv_path is None:
        w = window or parse_trace_steps("0:2")
        assert w is not None
        n, secs = estimate(run, w)
        size = f" (~{n:,} kernels, ~{secs:,.0f} s of kernel replay)" if n is not None and secs is not None else ""
        say(f"counters: profiling steps {w} of {run} under ncu{size}", err=True)
    res = collect(run, opts)
    say(f"counters: {res.kernels:,} kernels read, {res.matched:,} joined to the trace (steps {res.steps}) "
               f"in {res.elapsed_s:,.1f} s; kept as {res.csv}")
    for line in res.lines:
        say(line)
    return 0
