"""``tracekit report RUN...``: a terminal summary (rich tables) and a self-contained HTML report.

The HTML goes to ``--html FILE``; by default ``RUN/report.html`` for one run and
``./report.html`` for several (a derived view: rewriting it is expected, so no
--force). ``--no-html`` prints the terminal summary only.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import click

from tracekit.errors import visible
from tracekit.report.text import say
from tracekit.store.rundir import RunDir, atomic_open, check_output


@click.command("report")
@click.argument("runs", metavar="RUN...", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the HTML report (default RUN/report.html, or ./report.html for several runs).")
@click.option("--no-html", is_flag=True, help="Terminal summary only.")
@click.option("--warmup-requests", "warmup_requests", type=click.IntRange(min=0), default=None, metavar="N",
              help="Leave each run's first N requests out of its phase totals (warm-ups; default: as analysed).")
def command(runs: tuple[Path, ...], html_path: Path | None, no_html: bool, warmup_requests: int | None) -> None:
    """Summarise runs in the terminal and as a self-contained HTML file.

    A dataset (tracekit analyze DIR --out DATASET): one row per (run, rank) of its analysed runs.
    """
    from tracekit.report.terminal import render_terminal
    from tracekit.report.view import load_view

    if html_path is not None and not no_html:
        check_output(html_path, "--html")
    from tracekit.store.dataset import is_dataset

    if any(is_dataset(p) for p in runs):
        _fleet(runs, html_path, no_html)
        return
    dirs = [RunDir.open(p) for p in runs]
    for d in dirs:
        for what in d.unfinished():
            say(f"warning: {visible(d.run_id)}: {visible(what)}", err=True)
    views = [load_view(d, warmup_requests) for d in dirs]
    # Libraries' warnings (matplotlib's, pandas') are not the report's output: caught, counted in one line.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        render_terminal(views, sys.stdout)
        if no_html:
            _say_caught(caught)
            return
        from tracekit.report.html import build_html

        if html_path is None:
            html_path = dirs[0].path / "report.html" if len(dirs) == 1 else Path("report.html")
        text = build_html(views, title="tracekit report: " + ", ".join(v.run_id for v in views))
    with atomic_open(html_path, "w") as fh:
        fh.write(text)
    say(f"wrote {visible(html_path)} ({len(text) / 1e3:.0f} kB; open it in a browser, no network needed)")
    _say_caught(caught)


def _fleet(runs: tuple[Path, ...], html_path: Path | None, no_html: bool) -> None:
    """A dataset's runs, one row per (run, rank), in the terminal and (``--html``) as an HTML table."""
    from tracekit.errors import UsageError
    from tracekit.report.fleet import fleet_html, fleet_rows, render_fleet

    if len(runs) != 1:
        raise UsageError("give one dataset (its runs are compared in one table), not a dataset and other runs")
    notes: list[str] = []
    rows = fleet_rows(runs[0], notes)
    for n in notes:
        say(f"warning: {visible(n)}", err=True)
    render_fleet(rows, sys.stdout)
    if no_html or html_path is None:
        return
    with atomic_open(html_path, "w") as fh:
        fh.write(fleet_html(rows, f"tracekit fleet: {runs[0].name}"))
    say(f"wrote {visible(html_path)}")


def _say_caught(caught: list[warnings.WarningMessage]) -> None:
    if caught:
        first = str(caught[0].message).strip().splitlines()[0][:120]
        say(f"({len(caught)} library warning(s) while drawing, not shown; the first: {first})", err=True)
