"""SQL over runs: DuckDB over the tables of every run under a directory, or of a dataset.

Each table name (steps, requests, phases, gpu_activity, ...) is a view over
that table's Parquet files in all runs, with a ``run_id`` column (the run
directory's name), so one query compares many runs:

    tracekit query "select run_id, kind, count(*) from steps group by all order by all"

A run that lacks a table contributes no rows to its view; a table no run has is
still a view (empty, with the schema's columns), so queries never fail on an
absent table. Views union by column name: runs written by an older schema
version get nulls for columns they lack. Views are made for the tables the query
names.

The query sees those views and nothing else: DuckDB runs without file access (no COPY ... TO,
ATTACH, read_csv, extension download) and with its settings locked. An empty query is a usage error.

Nothing a file or folder is called becomes SQL: every file is handed to DuckDB as a
registered Arrow dataset under a generated name (no path is ever parsed as SQL or
expanded as a glob), run ids are quoted string literals, and a table file whose name
is not a plain identifier is skipped with a note. A run whose run.json or tables
cannot be read is skipped with a note, and so is a run whose table turns out corrupt
while the query reads it (the query is then run again without it); runs that say
they are unfinished (incomplete, analysis interrupted) are queried, with a note.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tracekit.errors import TracekitError, UsageError, address_space_failure, visible
from tracekit.model import schema as _schema
from tracekit.store.rundir import MANIFEST, TABLES_DIR, RunDir

PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_STREAM = re.compile(r"stream registered as '(__t\d+)'")
_STATEMENT = re.compile(r"[^\s;]")  # SQL that is only blanks and semicolons asks nothing


def find_runs(root: Path) -> list[Path]:
    """Run directories under ``root`` (itself, or any depth below), sorted. Hidden directories
    (a run being replaced is built in one) are not searched."""
    if not root.is_dir():
        raise UsageError(f"no runs found: {visible(root)} is not a directory")
    if (root / MANIFEST).is_file():
        return [root]
    return sorted(p.parent for p in root.rglob(MANIFEST)
                  if not any(part.startswith(".") for part in p.parent.relative_to(root).parts))


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _plain_schema(schema: Any) -> Any:
    # DuckDB reads dictionary columns as enums; plain strings keep views uniform.
    import pyarrow as pa

    return pa.schema([pa.field(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type)
                      for f in schema])


def _plain(table: Any) -> Any:
    import pyarrow as pa

    cols = [c.cast(pa.string()) if pa.types.is_dictionary(c.type) else c for c in table.columns]
    return pa.Table.from_arrays(cols, names=table.column_names)


def _mentioned(sql: str, names: set[str]) -> set[str]:
    words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", sql)}
    return {n for n in names if n.lower() in words}


class _Catalog:
    """A connection and what is registered in it: generated name -> (the run, or None in a dataset; files)."""

    def __init__(self) -> None:
        import duckdb

        # The query reads the registered tables and nothing else: no file (COPY ... TO, ATTACH, EXPORT
        # DATABASE would write past --out, onto a run's own files; read_csv would read any file), no
        # extension download, no setting changed back.
        self.con = duckdb.connect(":memory:", config={
            "enable_external_access": False, "autoinstall_known_extensions": False,
            "autoload_known_extensions": False, "lock_configuration": True})
        # short_name(name): a kernel's function name without namespaces, template arguments and parameters
        # (kernel_bound stores it as a column; gpu_activity's names get it through this function).
        from tracekit.model.kernelnames import short_name

        self.con.create_function("short_name", short_name, ["VARCHAR"], "VARCHAR",  # type: ignore[call-overload]
                                 null_handling="special")
        self.streams: dict[str, tuple[Path | None, list[Path]]] = {}

    def register(self, run: Path | None, files: list[Path], **dataset_args: Any) -> str:
        import pyarrow.dataset as ds
        import pyarrow.parquet as pq

        schema = dataset_args.pop("schema", None) or pq.read_schema(files[0])
        name = f"__t{len(self.streams)}"
        self.con.register(name, ds.dataset([str(f) for f in files], format="parquet",
                                           schema=_plain_schema(schema), **dataset_args))
        self.streams[name] = (run, files)
        return name


def _readable(path: Path, reserved: tuple[str, ...] = ()) -> str | None:
    """Why a Parquet file cannot be queried (its footer; no columns, a column name twice, or one of
    ``reserved``: the columns its view adds), or None."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
    except MemoryError:  # out of memory is not a damaged table: said as itself
        raise
    except (OSError, ValueError, pa.ArrowException) as exc:
        no_threads = address_space_failure(exc)  # the address-space limit, not the table
        if no_threads is not None:
            raise no_threads from None
        return str(exc).strip().split("\n", 1)[0][:200] or type(exc).__name__
    if not names:
        return "no columns"
    twice = sorted({n for n in names if names.count(n) > 1 or n in reserved})
    if twice:
        return f"column {twice[0]!r} " + ("is the view's own" if twice[0] in reserved else "appears more than once")
    return None


def connect(runs: list[Path], sql: str | None = None, notes: list[str] | None = None) -> Any:
    """A DuckDB connection with one view per table across ``runs`` (the tables ``sql`` names, or all)."""
    return _connect_runs(runs, sql, [] if notes is None else notes).con


def _connect_runs(runs: list[Path], sql: str | None, notes: list[str]) -> _Catalog:
    cat = _Catalog()
    con = cat.con
    names = set(_schema.TABLES)
    for r in runs:
        for p in (r / TABLES_DIR).glob("*.parquet"):
            if PLAIN_NAME.fullmatch(p.stem):
                names.add(p.stem)
            else:
                notes.append(f"{visible(r.name)}: skipped table file {visible(p.name)!r}: not a plain table name")
    wanted = _mentioned(sql, names) if sql is not None else names
    bad: set[Path] = set()
    for name in sorted(wanted):
        parts = []
        for r in runs:
            path = r / TABLES_DIR / f"{name}.parquet"
            if r in bad or not path.is_file():
                continue
            why = _readable(path, reserved=("run_id",))
            if why is not None:
                notes.append(f"{visible(r.name)}: skipped: table {name} unreadable ({visible(why)})")
                bad.add(r)
                continue
            stream = cat.register(r, [path])
            parts.append(f"select {_sql_str(r.name)} as run_id, * from {stream}")
        if parts:
            con.execute(f"create view {_ident(name)} as " + " union all by name ".join(parts))
        elif name in _schema.SCHEMAS:
            # Empty but typed: the schema's columns, so `select kind from steps` works on zero runs with steps.
            con.register(f"__empty_{name}", _plain(_schema.empty(name)))
            con.execute(f"create view {_ident(name)} as select cast(null as varchar) as run_id, * "
                        f"from {_ident('__empty_' + name)}")
    if bad:  # a run is all or nothing: drop its other tables too
        return _connect_runs([r for r in runs if r not in bad], sql, notes)
    return cat


def connect_dataset(root: Path, sql: str | None = None, notes: list[str] | None = None) -> Any:
    """A DuckDB connection with one view per table of a hive-partitioned dataset (run_id, rank columns)."""
    return _connect_dataset(root, sql, [] if notes is None else notes, set()).con


def _connect_dataset(root: Path, sql: str | None, notes: list[str], excluded: set[Path]) -> _Catalog:
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from tracekit.store import dataset as _ds

    cat = _Catalog()
    con = cat.con
    present = set()
    for name in _ds.tables_in(root):
        if PLAIN_NAME.fullmatch(name):
            present.add(name)
        else:
            notes.append(f"{visible(root.name)}: skipped table folder {visible(name)!r}: not a plain table name")
    wanted = _mentioned(sql, present | set(_schema.TABLES)) if sql is not None else present | set(_schema.TABLES)
    part = ds.partitioning(pa.schema([("run_id", pa.string()), ("rank", pa.int32())]), flavor="hive")
    for name in sorted(wanted):
        files = sorted(p for p in (root / name).rglob("*.parquet")
                       if not p.name.startswith((".", "_")) and p not in excluded) if name in present else []
        good = []
        for f in files:
            why = _readable(f)
            if why is None:
                good.append(f)
            else:
                notes.append(f"{visible(root.name)}: skipped {visible(f.relative_to(root))} ({visible(why)})")
        if good:
            schema = pa.unify_schemas([pq.read_schema(f) for f in good], promote_options="permissive")
            schema = pa.schema([f for f in schema if f.name not in ("run_id", "rank")]
                               + [pa.field("run_id", pa.string()), pa.field("rank", pa.int32())])
            stream = cat.register(None, good, schema=schema, partitioning=part, partition_base_dir=str(root / name))
            cols = ", ".join(["run_id", "rank", *(_ident(f.name) for f in schema if f.name not in ("run_id", "rank"))])
            con.execute(f"create view {_ident(name)} as select {cols} from {stream}")
        elif name in _schema.SCHEMAS:
            empty = _schema.empty(name)
            con.register(f"__empty_{name}", _plain(empty.drop_columns([c for c in ("rank",) if c in empty.column_names])))
            con.execute(f"create view {_ident(name)} as select cast(null as varchar) as run_id, "
                        f"cast(null as integer) as rank, * from {_ident('__empty_' + name)}")
    return cat


def _usable_runs(runs: list[Path], notes: list[str]) -> list[Path]:
    """Runs whose run.json reads; a note for each skipped one and each that says it is unfinished."""
    out = []
    for r in runs:
        try:
            what = RunDir.open(r).unfinished()
        except TracekitError as exc:
            notes.append(f"{visible(r.name)}: skipped ({exc.message})")
            continue
        notes.extend(f"{visible(r.name)}: {w}" for w in what)
        out.append(r)
    return out


def run_query(sql: str, runs_dir: Path, notes: list[str] | None = None) -> Any:
    """The query's result as a pyarrow Table. ``notes`` (when given) receives one line per run or
    file that was skipped or that says it is unfinished."""
    import duckdb

    from tracekit.store.dataset import is_dataset

    notes = notes if notes is not None else []
    if not _STATEMENT.search(sql):
        raise UsageError("the query is empty: give a SQL statement, e.g. \"select kind, count(*) from steps group by kind\"")
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as exc:  # a byte of the command line that was not UTF-8
        raise UsageError(f"the query is not UTF-8 text (character {exc.start + 1} is {visible(sql[exc.start])}): "
                         "write it in UTF-8") from None
    _one_result(sql)
    dataset = is_dataset(runs_dir)
    runs: list[Path] = []
    excluded: set[Path] = set()
    if not dataset:
        runs = _usable_runs(find_runs(runs_dir), notes)
        if not runs:
            raise UsageError(f"no runs found under {visible(runs_dir)} (a run is a directory with {MANIFEST})")
    while True:
        cat = _connect_dataset(runs_dir, sql, notes, excluded) if dataset else _connect_runs(runs, sql, notes)
        try:
            return unique_columns(_execute(cat.con, sql), notes)
        except duckdb.InterruptException:  # Ctrl-C while DuckDB ran: an interrupt, not a bad query
            raise KeyboardInterrupt from None
        except RuntimeError as exc:  # a signal's exception (SIGTERM) that DuckDB reported as its own
            if "interrupted" in str(exc).lower():
                raise KeyboardInterrupt from None
            raise
        except duckdb.Error as exc:
            no_threads = address_space_failure(exc)
            if no_threads is not None:
                raise no_threads from None
            msg = " ".join(str(exc).split())
            m = _STREAM.search(msg)
            if m is None or m.group(1) not in cat.streams:
                raise TracekitError(f"bad query: {msg}", exit_code=2) from None
            # A table whose footer read but whose data is corrupt: skip that run (or file), run the query again.
            run, files = cat.streams[m.group(1)]
            why = visible(msg[m.end():].strip(" :.")[:200])
            if run is not None:
                notes.append(f"{visible(run.name)}: skipped: table {files[0].stem} unreadable ({why})")
                runs = [r for r in runs if r != run]
                if not runs:
                    raise UsageError(f"no readable runs under {visible(runs_dir)}") from None
            else:
                bad = [f for f in files if _corrupt(f)] or files
                notes.extend(f"{visible(runs_dir.name)}: skipped {visible(f.relative_to(runs_dir))} ({why})" for f in bad)
                excluded.update(bad)


# Statements that return rows: before the last one of a script, their rows would never be shown.
_ROWS = ("SELECT", "EXPLAIN", "PRAGMA", "CALL", "EXECUTE", "RELATION", "LOGICAL_PLAN", "ANALYZE")


def _one_result(sql: str) -> None:
    """UsageError where a script of several statements would drop the rows of one of them: no statement
    but the last may return rows (SELECT, EXPLAIN, PRAGMA, CALL, ...). A script that does not parse, and
    statements DuckDB refuses anyway (ATTACH, COPY: no file access), are left to DuckDB's own message."""
    import duckdb

    try:
        stmts = duckdb.extract_statements(sql)
    except duckdb.Error:
        return
    for i, st in enumerate(stmts[:-1]):
        kind = str(getattr(st.type, "name", st.type)).rsplit(".", 1)[-1]
        if kind in _ROWS:
            raise UsageError(f"the query holds {len(stmts)} statements and statement {i + 1} ({kind}) returns rows "
                             "that would not be shown: give one query (statements before the last may create, "
                             "insert or set, not select)")


def unique_columns(table: Any, notes: list[str]) -> Any:
    """``table`` with every column name unique: a second ``a`` becomes ``a_2`` (a third ``a_3``, skipping
    names taken), with a note for each renamed column; the table as it is when all are unique."""
    names = list(table.column_names)
    if len(set(names)) == len(names):
        return table
    taken = set(names)
    seen: set[str] = set()
    out = []
    for n in names:
        if n not in seen:
            seen.add(n)
            out.append(n)
            continue
        k = 2
        while f"{n}_{k}" in taken:
            k += 1
        new = f"{n}_{k}"
        taken.add(new)
        notes.append(f"the result has two columns named {visible(n)!r}: the second is {visible(new)!r}")
        out.append(new)
    return table.rename_columns(out)


def _corrupt(path: Path) -> bool:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pq.read_table(path)
    except MemoryError:  # out of memory is not a damaged table: said as itself
        raise
    except (OSError, ValueError, pa.ArrowException):
        return True
    return False


def _execute(con: Any, sql: str) -> Any:
    import pyarrow as pa

    rel = con.sql(sql)
    if rel is None:  # a statement without a result (SET, CREATE VIEW ...)
        return pa.table({})
    # DuckDB 2 renamed arrow() to to_arrow_table(); accept both.
    fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
    return fetch()
