"""``tracekit diff RUN_A RUN_B``: per phase and per kernel class, what changed from A to B."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracekit.errors import UsageError, visible
from tracekit.report.text import say
from tracekit.store.rundir import RunDir, atomic_path, check_output


@click.command("diff")
@click.argument("run_a", metavar="RUN_A", type=click.Path(file_okay=False, path_type=Path))
@click.argument("run_b", metavar="RUN_B", type=click.Path(file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the diff table (.parquet or .csv).")
def command(run_a: Path, run_b: Path, out: Path | None) -> None:
    """What changed between two runs, per phase and per kernel class."""
    from tracekit.app.diff import diff
    from tracekit.report.terminal import render_diff

    if out is not None and out.suffix not in (".parquet", ".csv"):
        raise UsageError(f"--out {out}: use a .parquet or .csv file name")
    if out is not None:
        check_output(out, "--out")
    a, b = RunDir.open(run_a), RunDir.open(run_b)
    for r in (a, b) if a.path != b.path else (a,):
        for what in r.unfinished():
            say(f"warning: {visible(r.run_id)}: {visible(what)}", err=True)
    df, missing = diff(a, b)
    for run_id, names in missing.items():
        say(f"note: {visible(run_id)}: not recorded: {', '.join(names)}", err=True)
    render_diff(df, a.run_id, b.run_id, sys.stdout)
    if out is not None:
        with atomic_path(out) as tmp:
            if out.suffix == ".csv":
                df.to_csv(tmp, index=False)
            else:
                df.to_parquet(tmp, index=False)
        say(f"wrote {visible(out)} ({len(df)} rows)", err=True)
