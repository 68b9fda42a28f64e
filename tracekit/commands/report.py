"""``tracekit report RUN...``: a terminal summary (rich tables) and a self-contained HTML report.

The HTML goes to ``--html FILE``; by default ``RUN/report.html`` for one run and
``./report.html`` for several (a derived view: rewriting it is expected, so no
--force). ``--no-html`` prints the terminal summary only.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import pandas as pd

from tracekit.store.rundir import RunDir, atomic_open

TABLES = ("phases", "steps", "requests", "counters", "kernel_bound")  # kernel_bound: the per-kernel roofline


def load_view(run: RunDir) -> Any:
    from tracekit.report.html import RunView

    return RunView(run.run_id, run.read_manifest(), {t: run.read_df(t) for t in TABLES if run.has_table(t)})


def _cell(v: Any) -> str:
    return "—" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)


def render_terminal(views: list[Any], out: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    from tracekit.report.html import ceiling_of, phase_rows, request_rows, verdicts, workload_text

    console = Console(file=out, width=140)
    for v in views:
        status = v.manifest.get("status", "unknown")
        console.print(f"[bold]run {v.run_id}[/bold] ({status})")
        console.print(f"  {workload_text(v.manifest)}", markup=False)
        if "phases" in v.tables:
            console.print(f"  {ceiling_of(v.df('phases')).text()}", markup=False)
        for line in verdicts(v.df("phases")):
            console.print(f"  - {line}", markup=False)
        for w in v.manifest.get("warnings") or []:
            console.print(f"  warning: {w}", markup=False)
        for title, (headers, rows) in (("phases: three-way split", phase_rows(v.df("phases"))),
                                       ("requests", request_rows(v.df("requests")))):
            if not rows:
                console.print(f"  {title}: not recorded")
                continue
            table = Table(title=title, header_style="bold")
            for h in headers:
                table.add_column(h, justify="left" if h in ("phase", "request") else "right")
            for r in rows:
                table.add_row(*[_unescape(c) for c in r])
            console.print(table)
        c = v.df("counters")
        if c.empty or "metric" not in c:
            console.print("  counters: not recorded")
        else:
            keys = [k for k in ("device", "source", "metric", "unit") if k in c]
            g = c.groupby(keys, dropna=False, observed=True)["value"].agg(["count", "mean", "max"]).reset_index()
            table = Table(title="counters", header_style="bold")
            for h in [*keys, "samples", "mean", "max"]:
                table.add_column(h)
            for r in g.itertuples(index=False):
                table.add_row(*[_cell(x) for x in r[: len(keys)]], str(r[-3]), f"{r[-2]:.4g}", f"{r[-1]:.4g}")
            console.print(table)


def _unescape(text: str) -> str:
    import html

    return html.unescape(text)


@click.command("report")
@click.argument("runs", metavar="RUN...", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the HTML report (default RUN/report.html, or ./report.html for several runs).")
@click.option("--no-html", is_flag=True, help="Terminal summary only.")
def command(runs: tuple[Path, ...], html_path: Path | None, no_html: bool) -> None:
    """Summarise runs in the terminal and as a self-contained HTML file."""
    dirs = [RunDir.open(p) for p in runs]
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
    click.echo(f"wrote {html_path} ({len(text) / 1e3:.0f} kB; open it in a browser, no network needed)")
