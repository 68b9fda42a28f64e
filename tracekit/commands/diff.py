"""``tracekit diff RUN_A RUN_B``: per phase and per kernel class, what changed from A to B."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import pandas as pd

from tracekit.errors import UsageError
from tracekit.store.rundir import RunDir, atomic_path

TABLES = ("phases", "steps", "gpu_activity")


def load(run: RunDir) -> dict[str, pd.DataFrame]:
    tables = {t: run.read_df(t) for t in TABLES if run.has_table(t)}
    # A sweep point keeps the host-timed steps in ``steps`` and the traced ones,
    # on the kernels' clock, in ``trace_steps``: kernels are placed in the latter.
    if run.has_table("trace_steps"):
        tables["steps"] = run.read_df("trace_steps")
    return tables


def _fmt(v: Any, metric: str) -> str:
    if v is None or pd.isna(v):
        return "—"
    if metric.endswith("_ns"):
        return f"{v / 1e6:,.2f} ms"
    return f"{v:,.0f}"


def _pct(v: Any) -> str:
    return "—" if v is None or pd.isna(v) else f"{100 * v:.1f}%"


def render(df: pd.DataFrame, name_a: str, name_b: str, out: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, width=160)
    for scope, title in (("phase", "per phase"), ("kernel_class", "per kernel class (GPU kernel time)")):
        part = df[df["scope"] == scope]
        if scope == "kernel_class":
            part = part[part["metric"] == "time_ns"]
        table = Table(title=f"{title}: A = {name_a}, B = {name_b}", header_style="bold")
        for col in ("phase", "class" if scope == "kernel_class" else "", "metric", "A", "B", "Δ (B−A)", "B/A", "share A", "share B"):
            if col:
                table.add_column(col, justify="right" if col not in ("phase", "class", "metric") else "left")
        if part.empty:
            console.print(f"{title}: not recorded in either run")
            continue
        for r in part.to_dict("records"):
            m = str(r["metric"])
            ratio = r["ratio"]
            cells = [str(r["phase"])] + ([str(r["key"])] if scope == "kernel_class" else []) + [
                m, _fmt(r["a"], m), _fmt(r["b"], m), _fmt(r["delta"], m),
                "—" if ratio is None or pd.isna(ratio) else f"{ratio:.2f}×", _pct(r["share_a"]), _pct(r["share_b"])]
            table.add_row(*cells)
        console.print(table)


@click.command("diff")
@click.argument("run_a", metavar="RUN_A", type=click.Path(file_okay=False, path_type=Path))
@click.argument("run_b", metavar="RUN_B", type=click.Path(file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the diff table (.parquet or .csv).")
def command(run_a: Path, run_b: Path, out: Path | None) -> None:
    """What changed between two runs, per phase and per kernel class."""
    from tracekit.analysis.diff import diff_runs

    if out is not None and out.suffix not in (".parquet", ".csv"):
        raise UsageError(f"--out {out}: use a .parquet or .csv file name")
    a, b = RunDir.open(run_a), RunDir.open(run_b)
    ta, tb = load(a), load(b)
    for run, t in ((a, ta), (b, tb)):
        missing = [name for name in TABLES if name not in t]
        if missing:
            click.echo(f"note: {run.run_id}: not recorded: {', '.join(missing)}", err=True)
    df = diff_runs(ta, tb)
    render(df, a.run_id, b.run_id, sys.stdout)
    if out is not None:
        with atomic_path(out) as tmp:
            if out.suffix == ".csv":
                df.to_csv(tmp, index=False)
            else:
                df.to_parquet(tmp, index=False)
        click.echo(f"wrote {out} ({len(df)} rows)", err=True)
