"""``tracekit query "SQL"``: DuckDB over the tables of every run under a directory.

Each table name (steps, requests, phases, gpu_activity, ...) is a view over
that table's Parquet files in all runs, with a ``run_id`` column (the run
directory's name), so one query compares many runs:

    tracekit query "select run_id, kind, count(*) from steps group by all order by all"

A run that lacks a table contributes no rows to its view; a table no run has is
still a view (empty, with the schema's columns), so queries never fail on an
absent table. Views union by column name: runs written by an older schema
version get nulls for columns they lack.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from tracekit.errors import TracekitError, UsageError
from tracekit.model import schema as _schema
from tracekit.store.rundir import MANIFEST, TABLES_DIR


def find_runs(root: Path) -> list[Path]:
    """Run directories under ``root`` (itself, or any depth below), sorted."""
    if not root.is_dir():
        raise UsageError(f"no runs found: {root} is not a directory")
    if (root / MANIFEST).is_file():
        return [root]
    return sorted(p.parent for p in root.rglob(MANIFEST))


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def connect(runs: list[Path]) -> Any:
    """A DuckDB connection with one view per table across ``runs``."""
    import duckdb

    con = duckdb.connect(":memory:")
    names = set(_schema.TABLES)
    for r in runs:
        names.update(p.stem for p in (r / TABLES_DIR).glob("*.parquet"))
    for name in sorted(names):
        files = [(r.name, r / TABLES_DIR / f"{name}.parquet") for r in runs if (r / TABLES_DIR / f"{name}.parquet").is_file()]
        if files:
            parts = [
                f"select {_sql_str(run_id)} as run_id, * from read_parquet({_sql_str(str(path))})" for run_id, path in files
            ]
            con.execute(f'create view "{name}" as ' + " union all by name ".join(parts))
        elif name in _schema.SCHEMAS:
            # Empty but typed: the schema's columns, so `select kind from steps` works on zero runs with steps.
            empty = _schema.empty(name)
            con.register(f"__empty_{name}", _plain(empty))
            con.execute(f'create view "{name}" as select cast(null as varchar) as run_id, * from "__empty_{name}"')
    return con


def _plain(table: Any) -> Any:
    # DuckDB reads dictionary columns as enums; plain strings keep views uniform.
    import pyarrow as pa

    cols = [c.cast(pa.string()) if pa.types.is_dictionary(c.type) else c for c in table.columns]
    return pa.Table.from_arrays(cols, names=table.column_names)


def connect_dataset(root: Path) -> Any:
    """A DuckDB connection with one view per table of a hive-partitioned dataset (run_id, rank columns)."""
    import duckdb

    from tracekit.store import dataset as _ds

    con = duckdb.connect(":memory:")
    present = set(_ds.tables_in(root))
    for name in sorted(present | set(_schema.TABLES)):
        if name in present and any((root / name).rglob("*.parquet")):
            con.execute(f'create view "{name}" as select * from {_ds.duckdb_source(root, name)}')
        elif name in _schema.SCHEMAS:
            empty = _schema.empty(name)
            con.register(f"__empty_{name}", _plain(empty.drop_columns([c for c in ("rank",) if c in empty.column_names])))
            con.execute(f'create view "{name}" as select cast(null as varchar) as run_id, cast(null as integer) as rank, '
                        f'* from "__empty_{name}"')
    return con


def run_query(sql: str, runs_dir: Path) -> Any:
    """The query's result as a pyarrow Table."""
    import duckdb

    from tracekit.store.dataset import is_dataset

    if is_dataset(runs_dir):
        con = connect_dataset(runs_dir)
    else:
        runs = find_runs(runs_dir)
        if not runs:
            raise UsageError(f"no runs found under {runs_dir} (a run is a directory with {MANIFEST})")
        con = connect(runs)
    try:
        rel = con.sql(sql)
    except duckdb.Error as exc:
        msg = " ".join(str(exc).split())
        raise TracekitError(f"bad query: {msg}", exit_code=2) from None
    if rel is None:  # a statement without a result (SET, CREATE VIEW ...)
        import pyarrow as pa

        return pa.table({})
    try:
        # DuckDB 2 renamed arrow() to to_arrow_table(); accept both.
        fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
        return fetch()
    except duckdb.Error as exc:
        msg = " ".join(str(exc).split())
        raise TracekitError(f"bad query: {msg}", exit_code=2) from None


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
