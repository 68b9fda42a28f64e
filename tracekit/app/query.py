"""SQL over runs: DuckDB over the tables of every run under a directory, or of a dataset.

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

from pathlib import Path
from typing import Any

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
