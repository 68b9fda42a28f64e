"""``tracekit report RUN...``: a terminal summary (rich tables) and a self-contained HTML report.

The HTML goes to ``--html FILE``; by default ``RUN/report.html`` for one run and
``./report.html`` for several (a derived view: rewriting it is expected, so no
--force). ``--no-html`` prints the terminal summary only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracekit.errors import visible
from tracekit.store.rundir import RunDir, atomic_open


@click.command("report")
@click.argument("runs", metavar="RUN...", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the HTML report (default RUN/report.html, or ./report.html for several runs).")
@click.option("--no-html", is_flag=True, help="Terminal summary only.")
def command(runs: tuple[Path, ...], html_path: Path | None, no_html: bool) -> None:
    """Summarise runs in the terminal and as a self-contained HTML file."""
    from tracekit.report.terminal import render_terminal
    from tracekit.report.view import load_view

    dirs = [RunDir.open(p) for p in runs]
    for d in dirs:
        for what in d.unfinished():
            click.echo(f"warning: {visible(d.run_id)}: {visible(what)}", err=True)
    views = [load_view(d) for d in dirs]
    render_terminal(views, sys.stdout)
    if no_html:
        return
    from tracekit.report.html import build_html

    if html_path is None:
        html_path = dirs[0].path / "report.html" if len(dirs) == 1 else Path("report.html")
    text = build_html(views, title="tracekit report: " + ", ".join(v.run_id for v in views))
    with atomic_open(html_path, "w") as fh:
        fh.write(text)
    click.echo(f"wrote {visible(html_path)} ({len(text) / 1e3:.0f} kB; open it in a browser, no network needed)")
