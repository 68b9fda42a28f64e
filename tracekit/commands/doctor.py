"""``tracekit doctor``: one screen saying what this machine can record and measure (tracekit.collectors.doctor)."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.report.text import say

MARK = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}


@click.command("doctor")
@click.option("--runs", "runs", type=click.Path(path_type=Path), default=Path("runs"), show_default=True,
              help="The runs folder to check for write access.")
@click.option("--probe-counters", is_flag=True,
              help="Run Nsight Compute once on a small kernel to see whether hardware counters can be read.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the checks to this file as JSON.")
def command(runs: Path, probe_counters: bool, json_out: Path | None) -> int:
    """Say what this machine can record and measure, and how to fix what is missing.

    Exit 0 when `tracekit record` can run here (on the CPU if there is no GPU), 1 when it cannot.
    """
    from tracekit.collectors.doctor import diagnose, to_json
    from tracekit.store.rundir import atomic_open

    d = diagnose(runs, probe_counters=probe_counters)
    say("tracekit doctor: what this machine can record and measure")
    width = max(len(c.name) for c in d.checks)
    for c in d.checks:
        say(f"  {MARK.get(c.status, c.status)}  {c.name:<{width}}  {c.detail}")
        if c.fix and c.status != "ok":
            say(f"  {'':4}  {'':<{width}}  fix: {c.fix}")
    gpus = [c.detail.split(",")[0] for c in d.checks if c.name.startswith("GPU ") and c.status == "ok"]
    if not d.can_record:
        say("recording cannot proceed: fix the FAIL lines above")
    elif gpus:
        say(f"recording can proceed, on {len(gpus)} GPU(s): {', '.join(dict.fromkeys(gpus))}")
    else:
        say("recording can proceed, on the CPU only (no GPU: no kernels, no GPU counters)")
    if json_out is not None:
        with atomic_open(json_out, "w") as fh:
            fh.write(to_json(d))
    return 0 if d.can_record else 1
