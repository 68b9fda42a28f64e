"""``tracekit query "SQL"``: DuckDB over the tables of every run under a directory (tracekit.app.query)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from tracekit.app.query import run_query
from tracekit.errors import UsageError


def _table_output(result: Any, out: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=True, header_style="bold")
    for name in result.column_names:
        table.add_column(name)
    for row in result.to_pylist():
        table.add_row(*("" if v is None else (f"{v:.6g}" if isinstance(v, float) else str(v)) for v in row.values()))
    Console(file=out, width=200).print(table)
    out.write(f"{result.num_rows} row(s)\n")


@click.command("query")
@click.argument("sql")
@click.option("--runs", "runs_dir", type=click.Path(path_type=Path), default=Path("runs"), show_default=True,
              help="Directory holding run directories (searched recursively), one run, or a dataset (tracekit ingest --dataset).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "parquet"]), default="table", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the result here (required for parquet).")
def command(sql: str, runs_dir: Path, fmt: str, out: Path | None) -> None:
    """SQL over every run's tables; each table is a view with a run_id column."""
    result = run_query(sql, runs_dir)
    if fmt == "parquet":
        if out is None:
            raise UsageError("--format parquet needs --out FILE")
        import pyarrow.parquet as pq

        from tracekit.store.rundir import atomic_path

        with atomic_path(out) as tmp:
            pq.write_table(result, tmp)
        click.echo(f"wrote {out} ({result.num_rows} rows)", err=True)
        return
    fh = open(out, "w") if out is not None else sys.stdout  # noqa: SIM115
    try:
        if fmt == "table":
            _table_output(result, fh)
        elif fmt == "csv":
            result.to_pandas().to_csv(fh, index=False)
        else:
            import json

            for row in result.to_pylist():
                fh.write(json.dumps(row, default=str) + "\n")
    finally:
        if out is not None:
            fh.close()
