"""``tracekit diff A B``: per phase and per kernel class, what changed from A to B, and whether it is noise."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import click

from tracekit.errors import UsageError, visible
from tracekit.report.text import say
from tracekit.store.rundir import atomic_path, check_output


@click.command("diff")
@click.argument("run_a", metavar="A", type=click.Path(file_okay=False, path_type=Path))
@click.argument("run_b", metavar="B", type=click.Path(file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the diff table (.parquet or .csv).")
@click.option("--no-analyze", is_flag=True,
              help="Do not analyse runs that need it (say which command would).")
def command(run_a: Path, run_b: Path, out: Path | None, no_analyze: bool) -> None:
    """What changed between two runs, per phase and per kernel class.

    A and B are each a run directory or a directory of runs (record --repeat N writes one): each
    phase's change in mean step time comes with a 95% bootstrap interval over the steps and runs of
    each side, and "within noise" where the interval holds no change. Runs not yet analysed are
    analysed first.
    """
    from tracekit.app.diff import analyse_missing, diff, needs_analysis, noise, side
    from tracekit.report.terminal import render_diff, render_noise

    if out is not None and out.suffix not in (".parquet", ".csv"):
        raise UsageError(f"--out {out}: use a .parquet or .csv file name")
    if out is not None:
        check_output(out, "--out")
    runs_a, runs_b = side(run_a), side(run_b)
    every = list({r.path.resolve(): r for r in runs_a + runs_b}.values())

    def note(line: str) -> None:
        say(visible(line), err=True)

    if no_analyze:
        for r in every:
            if needs_analysis(r):
                note(f"note: {r.path} is not analysed: run tracekit analyze {r.path}")
    else:
        for line in analyse_missing(every, note):
            note(f"warning: {line}")
    for r in every:
        for what in r.unfinished():
            note(f"warning: {r.run_id}: {what}")
    a, b = runs_a[0], runs_b[0]
    render_noise(noise(runs_a, runs_b), name_of(run_a, runs_a), name_of(run_b, runs_b), sys.stdout)
    df, missing = diff(a, b)
    for run_id, names in missing.items():
        note(f"note: {run_id}: not recorded: {', '.join(names)}")
    render_diff(df, a.run_id, b.run_id, sys.stdout)
    if out is not None:
        with atomic_path(out) as tmp:
            if out.suffix == ".csv":
                df.to_csv(tmp, index=False)
            else:
                df.to_parquet(tmp, index=False)
        note(f"wrote {out} ({len(df)} rows)")


def name_of(path: Path, runs: Sequence[object]) -> str:
    return str(path) if len(runs) == 1 else f"{path} ({len(runs)} runs)"
