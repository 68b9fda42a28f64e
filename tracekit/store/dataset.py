"""A hive-partitioned Parquet dataset of many runs and ranks.

    <root>/
      _tracekit_dataset.json                      marker: schema version, tables, parts written
      <table>/run_id=<id>/rank=<k>/part-<p>.parquet

The layout is the one DuckDB (``read_parquet('<root>/steps/**/*.parquet',
hive_partitioning=true)``), polars (``pl.scan_parquet(..., hive_partitioning=True)``),
pyarrow.dataset and Spark (``spark.read.parquet('<root>/steps')``) read
directly: the partition values live in the directory names, not in the
files, so ``run_id`` and ``rank`` come back as columns. Names starting with
``_`` are ignored by Spark and by the ``**/*.parquet`` glob, so the marker
never reads as data.

Every part is written atomically (temp name, rename) and one writer owns one
(run_id, rank, part) triple, so many processes or Ray tasks write into one
root at once without locks. ``--force`` builds the new dataset beside the old
one and swaps it in only when every trace was read.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tracekit.errors import CorruptRunError, RunExistsError, UsageError, visible
from tracekit.model import schema as _schema
from tracekit.store.fsops import make_dir_beside, mkdirs, replace_dir
from tracekit.store.rundir import DATASET_MARKER, read_json, write_json, write_table

MARKER = DATASET_MARKER
_TARGET = "_tracekit_replaces.json"  # in a staging dataset: the root it replaces when written
PARTITION_COLUMNS = ("run_id", "rank")
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_run_id(run_id: str) -> str:
    """A run id usable as a directory name and hive value ('/' and '=' would break the layout)."""
    cleaned = _SAFE.sub("-", run_id).strip(".-")
    return cleaned or "run"


# Partition values that readers turn into something else (Hive's, Spark's and DuckDB's null).
RESERVED = ("__HIVE_DEFAULT_PARTITION__",)


def check_run_ids(ids: Mapping[str, Iterable[str]], root: str | os.PathLike[str] | None = None) -> None:
    """UsageError where run ids cannot be kept apart in the dataset: ``ids`` maps each stored run id
    (``safe_run_id``) to the run ids given for it. Two different ids stored as one folder (``exp/1``,
    ``exp=1``, ``exp-1``), an id already stored in ``root``'s marker for another, and a reserved
    partition value are refused: each would mix or lose runs."""
    for safe, given in ids.items():
        names = sorted(set(given))
        if safe.upper() in RESERVED or any(n.upper() in RESERVED for n in names):
            raise UsageError(f"run id {visible(names[0])} is reserved (readers take it for a null); "
                             "pass another --run-id")
        if len(names) > 1:
            raise UsageError(f"run ids {visible(repr(names[0]))} and {visible(repr(names[1]))} are both stored "
                             f"as run_id={visible(safe)}; rename one of the traces or pass --run-id")
    if root is None or not is_dataset(root):
        return
    runs = read_marker(root).get("runs", {})
    for safe, given in ids.items():
        have = runs.get(safe, {}).get("run_id") if isinstance(runs.get(safe), dict) else None
        other = sorted(set(given) - {have}) if isinstance(have, str) else []
        if other:
            raise UsageError(f"run id {visible(repr(other[0]))} would be stored as run_id={visible(safe)}, which "
                             f"holds the run {visible(repr(have))}; pass another --run-id")


def is_dataset(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / MARKER).is_file()


def read_marker(root: str | os.PathLike[str]) -> dict[str, Any]:
    """The dataset's marker, checked: an object whose ``runs`` (if any) maps run ids to objects with a
    ``ranks`` list and a ``rows`` object, as ``record_parts`` writes it; else CorruptRunError (one line)."""
    path = Path(root) / MARKER
    data = read_json(path, "the dataset marker")
    runs = data.get("runs", {}) if isinstance(data, dict) else None
    if not isinstance(runs, dict) or not all(
            isinstance(e, dict) and isinstance(e.get("ranks", []), list) and isinstance(e.get("rows", {}), dict)
            for e in runs.values()):
        raise CorruptRunError(f"{visible(path)}: corrupt dataset marker; write the dataset again with --force")
    out: dict[str, Any] = data
    return out


def init_dataset(root: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Create (or reuse) a dataset root and its marker; returns the directory to write the parts into.

    Reusing a root adds runs to it. A non-empty directory that is not a dataset is refused: writing
    into it could mix our files with someone else's. ``force`` replaces the dataset only once the new
    one is written: the returned directory is then a staging directory beside ``root``, which
    ``finish_dataset`` swaps in (or drops); the old dataset stays as it was until then.
    """
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise RunExistsError(f"{visible(root)} exists and is not a directory")
    if root.exists() and any(root.iterdir()) and not is_dataset(root) and not force:
        raise RunExistsError(f"{visible(root)} exists and is not a tracekit dataset; pass --force to replace it")
    if not force and is_dataset(root):
        read_marker(root)  # parts are added to it: a marker that cannot take them is refused first
    target = root
    if force and root.exists() and any(root.iterdir()):
        if not is_dataset(root):
            raise RunExistsError(f"{visible(root)} is not a tracekit dataset; --force only replaces datasets")
        root = make_dir_beside(root, "dataset")
    mkdirs(root)
    if not is_dataset(root):
        write_json(root / MARKER, {"format": "tracekit-dataset", "schema_version": _schema.SCHEMA_VERSION,
                                   "partitioning": list(PARTITION_COLUMNS)})  # fmt: skip
    if root != target:
        write_json(root / _TARGET, {"target": str(target)})
    return root


def finish_dataset(written: Path, *, keep: bool) -> Path:
    """The dataset's final root. A staging directory from ``init_dataset(force=True)`` replaces the old
    dataset when ``keep`` (atomically where the system can swap directories), else it is removed
    and the old dataset stays. A dataset written in place is left as it is."""
    marker = written / _TARGET
    if not marker.is_file():
        return written
    target = Path(json.loads(marker.read_text())["target"])
    marker.unlink()
    if not keep:
        shutil.rmtree(written, ignore_errors=True)
        return target
    replace_dir(written, target, "dataset")
    return target


def part_path(root: Path, table: str, run_id: str, rank: int, part: str = "0") -> Path:
    return root / table / f"run_id={safe_run_id(run_id)}" / f"rank={int(rank)}" / f"part-{part}.parquet"


@dataclass(frozen=True)
class PartWritten:
    table: str
    run_id: str
    rank: int
    rows: int
    path: str


def write_run_tables(
    root: str | os.PathLike[str],
    run_id: str,
    tables: Mapping[str, pa.Table],
    *,
    rank: int | None = None,
    part: str = "0",
) -> list[PartWritten]:
    """Write one run's tables into the dataset, one file per (table, rank).

    A table whose ``rank`` column holds several ranks is split; nulls in it
    take ``rank`` (default 0: a single-GPU trace is rank 0). The partition
    columns are dropped from the files, as hive layout expects. Empty tables
    are written too (schema only), so every table directory exists and a
    query over it never fails for want of files.
    """
    root = Path(root)
    default_rank = 0 if rank is None else int(rank)
    written: list[PartWritten] = []
    # Every table checked against its schema before the first part is written (write_table checks again):
    # a run's tables all fit, or none of them is written.
    checked = {name: _schema.check(name, table) for name, table in tables.items()}
    for name, table in checked.items():
        if "rank" in table.column_names:
            col = table.column("rank")
            filled = pc.fill_null(col, pa.scalar(default_rank, col.type)) if col.null_count else col
            ranks = sorted({int(r) for r in pc.unique(filled).to_pylist()}) or [default_rank]
            for r in ranks:
                sub = table if len(ranks) == 1 else table.filter(pc.equal(filled, r))
                written.append(_write_part(root, name, run_id, r, part, sub))
        else:
            written.append(_write_part(root, name, run_id, default_rank, part, table))
    return written


def _write_part(root: Path, table: str, run_id: str, rank: int, part: str, rows: pa.Table) -> PartWritten:
    path = part_path(root, table, run_id, rank, part)
    try:
        write_table(path, rows, name=table, drop=PARTITION_COLUMNS)
    except BaseException:
        for d in (path.parent, path.parent.parent):  # the partition folders this write made, if empty
            with contextlib.suppress(OSError):
                d.rmdir()
        raise
    return PartWritten(table, safe_run_id(run_id), rank, rows.num_rows, str(path))


def record_parts(root: str | os.PathLike[str], parts: Iterable[PartWritten], *,
                 given: Mapping[str, str] | None = None, **extra: Any) -> None:
    """Add what was written to the marker (one writer: the driver, after its tasks); ``given`` maps a
    stored run id to the run id it was given as (kept, so that another id never lands on it)."""
    root = Path(root)
    marker = read_marker(root)
    runs = marker.setdefault("runs", {})
    for p in parts:
        entry = runs.setdefault(p.run_id, {"ranks": [], "rows": {}})
        if given and p.run_id in given:
            entry.setdefault("run_id", given[p.run_id])
        if p.rank not in entry["ranks"]:
            entry["ranks"] = sorted([*entry["ranks"], p.rank])
        entry["rows"][p.table] = entry["rows"].get(p.table, 0) + p.rows
    marker.update(extra)
    write_json(root / MARKER, marker)


def tables_in(root: str | os.PathLike[str]) -> list[str]:
    root = Path(root)
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def read_dataset(
    root: str | os.PathLike[str],
    table: str,
    *,
    run_ids: Iterable[str] | None = None,
    ranks: Iterable[int] | None = None,
) -> pa.Table:
    """One table across every run and rank, with ``run_id`` and ``rank`` columns.

    Partition pruning happens on the directory names: reading one rank of
    one run opens only its files. Columns come back in the table's schema
    order with ``run_id`` first.
    """
    root = Path(root)
    if not is_dataset(root):
        raise UsageError(f"{root} is not a tracekit dataset (no {MARKER})")
    tdir = root / table
    sch = _schema.schema(table) if table in _schema.SCHEMAS else None
    if not tdir.is_dir():
        if sch is None:
            raise UsageError(f"{root}: no table {table!r}; tables: {', '.join(tables_in(root))}")
        return _with_partitions(sch.empty_table(), sch)
    import pyarrow.dataset as ds  # here, not at the top: importing it imports pandas, which analyze and export avoid

    part = ds.partitioning(pa.schema([("run_id", pa.string()), ("rank", pa.int32())]), flavor="hive")
    dset = ds.dataset(tdir, format="parquet", partitioning=part, exclude_invalid_files=False)
    flt = None
    if run_ids is not None:
        flt = ds.field("run_id").isin([safe_run_id(r) for r in run_ids])
    if ranks is not None:
        rf = ds.field("rank").isin([int(r) for r in ranks])
        flt = rf if flt is None else flt & rf
    out = dset.to_table(filter=flt)
    return _with_partitions(out, sch)


def _with_partitions(table: pa.Table, sch: pa.Schema | None) -> pa.Table:
    if "run_id" not in table.column_names:
        table = table.append_column("run_id", pa.nulls(table.num_rows, pa.string()))
    if sch is None:
        return table
    body = [n for n in sch.names if n in table.column_names]
    cols = {n: table.column(n) for n in table.column_names}
    names = ["run_id", *body]
    arrays = [cols["run_id"].cast(pa.string()), *[cols[n].cast(sch.field(n).type) for n in body]]
    return pa.table(arrays, names=names)


def duckdb_source(root: str | os.PathLike[str], table: str) -> str:
    """The DuckDB table expression over one table of the dataset (for ``tracekit query``)."""
    glob = str(Path(root) / table / "**" / "*.parquet").replace("'", "''")
    # Explicit hive types: a run id like "0042" must stay text, not become an integer.
    return (
        f"read_parquet('{glob}', hive_partitioning = true, union_by_name = true, "
        "hive_types = {'run_id': VARCHAR, 'rank': INTEGER})"
    )
