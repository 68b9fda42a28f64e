"""``tracekit query "SQL"``: DuckDB over the tables of every run under a directory (tracekit.app.query)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from tracekit.app.query import run_query
from tracekit.errors import UsageError, visible
from tracekit.report.text import cell, say


def _table_output(result: Any, out: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=True, header_style="bold")
    for name in result.column_names:
        table.add_column(cell(name))
    for row in result.to_pylist():
        table.add_row(*(cell("" if v is None else (f"{v:.6g}" if isinstance(v, float) else v)) for v in row.values()))
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
    if out is not None:
        from tracekit.store.rundir import check_output

        check_output(out, "--out")
    notes: list[str] = []
    try:
        result = run_query(sql, runs_dir, notes)
    finally:  # what was skipped is said even when the query then fails
        for note in notes:
            say(f"warning: {visible(note)}", err=True)
    if fmt == "parquet":
        if out is None:
            raise UsageError("--format parquet needs --out FILE")
        import pyarrow.parquet as pq

        from tracekit.store.rundir import atomic_path

        with atomic_path(out) as tmp:
            pq.write_table(parquet_ready(result), tmp)
        say(f"wrote {visible(out)} ({result.num_rows} rows)", err=True)
        return
    if out is None:
        _write(result, fmt, sys.stdout, terminal=True)
        return
    from tracekit.store.rundir import atomic_open

    with atomic_open(out, "w") as fh:
        _write(result, fmt, fh, terminal=False)


def _visible_text(result: Any) -> Any:
    """The result with every text column's control characters made visible (column names too)."""
    import pyarrow as pa

    cols = []
    for col in result.columns:
        t = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            col = pa.array([None if v is None else visible(v) for v in col.to_pylist()], pa.string())
        cols.append(col)
    return pa.Table.from_arrays(cols, names=[visible(n) for n in result.column_names])


def _write(result: Any, fmt: str, fh: Any, *, terminal: bool) -> None:
    """``result`` as a table, CSV or JSON lines; on a terminal, control characters are shown, not sent."""
    if fmt == "table":
        _table_output(result, fh)
    elif fmt == "csv":
        if terminal:
            result = _visible_text(result)
        result.to_pandas().to_csv(fh, index=False)
    else:
        import json

        for row in result.to_pylist():  # json escapes control characters itself
            fh.write(json.dumps(_strict(row), default=str, allow_nan=False) + "\n")


def _strict(value: Any) -> Any:
    """``value`` with every NaN and infinity null: JSON has no such numbers (json.dumps would write them
    as the non-JSON ``NaN`` / ``Infinity``)."""
    import math

    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


def parquet_ready(result: Any) -> Any:
    """``result`` with the columns Parquet has no type for made ones it has: an INTERVAL column becomes a
    struct of months, days and nanoseconds (lossless)."""
    import pyarrow as pa

    cols, changed = [], False
    for col in result.columns:
        if pa.types.is_interval(col.type):
            flat = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            vals = flat.to_pylist()
            col = pa.StructArray.from_arrays(
                [pa.array([None if v is None else v.months for v in vals], pa.int32()),
                 pa.array([None if v is None else v.days for v in vals], pa.int32()),
                 pa.array([None if v is None else v.nanoseconds for v in vals], pa.int64())],
                names=["months", "days", "nanoseconds"], mask=pa.array([v is None for v in vals]))
            changed = True
        cols.append(col)
    return pa.Table.from_arrays(cols, names=result.column_names) if changed else result
