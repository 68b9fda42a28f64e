"""The run directory: the unit everything reads and writes.

    runs/<run-id>/
      run.json          manifest (status, versions, environment, workload, timings, warnings)
      trace.json.gz     the Kineto trace merged with tracekit's tracks
      tables/*.parquet  one file per table

Every write is atomic (temp name, then rename; tracekit.store.fsops). A run starts with status
``incomplete`` and only ``mark_complete`` sets ``complete``: an interrupted record leaves a run that
says so, with whatever was captured. One process writes a run at a time (tracekit.store.lock). A run
that replaces another (``--force``) is built beside it and swapped in only when complete, so a
failure leaves the old run as it was. run.json is checked on every read: a file tracekit could not
have written (truncated, not an object, fields of the wrong type) is a one-line CorruptRunError.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.errors import CorruptRunError, RunExistsError, StoreWriteError, UsageError, visible
from tracekit.model import schema as _schema
from tracekit.model.version import VERSION
from tracekit.store import lock as _lock
from tracekit.store.fsops import (
    atomic_open,
    atomic_path,
    exchange,
    file_digest,
    link_tree,
    make_dir_beside,
    mkdirs,
    resolved,
    staging_leftover,
    write_error,
)

__all__ = ["MANIFEST", "STATUS_COMPLETE", "STATUS_INCOMPLETE", "TABLES_DIR", "TRACE", "RunDir", "atomic_open",
           "atomic_path", "check_manifest", "check_output", "default_run_id", "write_json", "write_parquet", "write_table"]

MANIFEST = "run.json"
TRACE = "trace.json.gz"
TABLES_DIR = "tables"

STATUS_INCOMPLETE = "incomplete"
STATUS_COMPLETE = "complete"

# run.json fields that hold an object wherever tracekit writes them: anything else is a corrupt run.json.
_OBJECT_FIELDS = ("ingest", "analysis", "trace_meta", "workload", "environment", "timings", "clock", "nvml", "tp",
                  "rank_analysis", "compiled", "step_boundaries", "point", "kv", "agent", "repeats")
_TEXT_FIELDS = ("status", "run_id", "incomplete_reason", "created_at", "completed_at")
_LIST_FIELDS = ("warnings", "inputs", "command")


def write_json(path: Path, obj: Any) -> None:
    with atomic_open(path, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=False, default=_json_default)
        fh.write("\n")


def read_json(path: Path, what: str) -> Any:
    """The JSON document in ``path``, or None where the file is not JSON (or nests past the recursion
    limit); a file that cannot be read is a CorruptRunError naming ``what``."""
    try:
        return json.loads(path.read_bytes())
    except OSError as exc:
        raise CorruptRunError(f"{visible(path)}: cannot read {what} ({exc.strerror})") from None
    except (ValueError, RecursionError):
        return None


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if isinstance(o, set | frozenset | tuple):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_parquet(table: pa.Table, path: str | os.PathLike[str]) -> None:
    """Every Parquet file tracekit writes: zstd, dictionary pages only for dictionary-typed columns.

    On int64 timestamps, durations and ids, dictionary encoding only costs time and bytes
    (docs/measurements/2026-12-07-docstring-figures.md).
    """
    dictionary = [f.name for f in table.schema if pa.types.is_dictionary(f.type)]
    pq.write_table(table, path, compression="zstd", use_dictionary=dictionary or False)


def write_table(path: Path, table: pa.Table, *, name: str | None = None, drop: Sequence[str] = ()) -> None:
    """Store ``table`` as the table ``name`` (default: the file's stem) at ``path``, atomically.

    The one place a stored table is written (run directories, dataset parts, sweep files): the table
    is first made exactly its declared schema (tracekit.model.schema.check: SchemaError for an
    undeclared table, an unknown column or a column of the wrong type), then ``drop`` columns are left
    out (a dataset's partition columns, which live in its directory names).
    """
    table = _schema.check(path.name.removesuffix(".parquet") if name is None else name, table)
    if drop:
        table = table.drop_columns([c for c in drop if c in table.column_names])
    with atomic_path(path) as tmp:
        write_parquet(table, tmp)


DATASET_MARKER = "_tracekit_dataset.json"  # the marker of a dataset root (tracekit.store.dataset)


def check_output(path: Path, opt: str) -> None:
    """UsageError where a verb's output file ``path`` is one a run directory keeps (its run.json,
    trace.json.gz, lock or anything under tables/), or anything inside a dataset (its marker, its
    parts): writing there would destroy that run or dataset."""
    p = Path(os.path.abspath(path))
    with contextlib.suppress(OSError):
        p = p.parent.resolve() / p.name
    for root in (p, *p.parents):
        if root != p and (root / DATASET_MARKER).is_file():
            raise UsageError(f"{opt} {visible(path)}: inside the dataset {visible(root)}; "
                             "write the output somewhere else")
    for run in p.parents:
        if not (run / MANIFEST).is_file():
            continue
        rel = p.relative_to(run).parts
        if rel[0] == TABLES_DIR or (len(rel) == 1 and rel[0] in (MANIFEST, TRACE, _lock.LOCK_FILE)):
            raise UsageError(f"{opt} {visible(path)}: a file of the run directory {visible(run)}; "
                             "write the output somewhere else")


def default_run_id(label: str) -> str:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in label) or "run"
    return f"{stamp}-{safe}"


def _staging_tag(target: Path) -> str:
    """The staging directories of ``target`` are ``.tracekit-new-<tag>-*`` beside it (bounded length)."""
    return "new-" + hashlib.blake2b(target.name.encode("utf-8", "surrogateescape"), digest_size=6).hexdigest()


def check_manifest(data: Any, where: Path) -> dict[str, Any]:
    """``data`` if it is a run.json tracekit could have written, else CorruptRunError (one line): an object,
    its sections of the kind tracekit writes, and the numbers the analysis reads numbers (``_bad_number``)."""
    if not isinstance(data, dict):
        raise CorruptRunError(f"{where}: corrupt run.json (a JSON {type(data).__name__}, not an object); "
                              "re-ingest with --force")
    for key, kind, name in ((k, dict, "an object") for k in _OBJECT_FIELDS):
        if key in data and data[key] is not None and not isinstance(data[key], kind):
            raise CorruptRunError(f"{where}: corrupt run.json ({key!r} is not {name}); re-ingest with --force")
    for key in _TEXT_FIELDS:
        if key in data and data[key] is not None and not isinstance(data[key], str):
            raise CorruptRunError(f"{where}: corrupt run.json ({key!r} is not text); re-ingest with --force")
    for key in _LIST_FIELDS:
        if key in data and data[key] is not None and not isinstance(data[key], list):
            raise CorruptRunError(f"{where}: corrupt run.json ({key!r} is not a list); re-ingest with --force")
    if any(not isinstance(w, str) for w in data.get("warnings") or []):
        raise CorruptRunError(f"{where}: corrupt run.json (a warning that is not text); re-ingest with --force")
    bad = _bad_number(data)
    if bad is not None:
        raise CorruptRunError(f"{where}: corrupt run.json ({visible(bad)[:200]} is not a number tracekit "
                              "writes); re-record or re-ingest with --force")
    return data


# Numbers the analysis reads from run.json. Per request of each ``timings`` block (the recorder's host
# timers): counts and ids are whole numbers, times and shares finite numbers. In ``model.config`` (and
# its ``text_config``): the sizes the cost model and the model check multiply. Each may be null. The
# warm-up request ids (the recorder's, and those analyze left out): a list of whole numbers.
_REQUEST_COUNTS = ("request_id", "batch", "input_tokens", "output_tokens")
_REQUEST_TIMES = ("ttft_ns", "tpot_ns", "e2e_ns", "start_ns", "end_ns", "prefill_share")
_CONFIG_SIZES = ("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size", "num_key_value_heads",
                 "head_dim", "intermediate_size", "num_local_experts", "n_routed_experts", "kv_lora_rank",
                 "qk_rope_head_dim")
_COUNT_LIMIT = 2**31  # a count or id past this is no run's (products of them stay inside int64)


def _is_count(v: Any, least: int = 0) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool) and least <= v <= _COUNT_LIMIT)


def _is_finite(v: Any) -> bool:
    import math

    return v is None or (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v))


def _bad_number(data: dict[str, Any]) -> str | None:
    """The first field of ``data`` (a run.json) that should hold a number and does not, as a path; or None."""
    blocks = [("timings", data.get("timings"))]
    while blocks:
        path, block = blocks.pop()
        if not isinstance(block, dict):
            continue
        blocks += [(f"{path}.{k}", v) for k, v in block.items() if isinstance(v, dict)]
        reqs = block.get("requests")
        if not isinstance(reqs, list):
            continue
        for i, r in enumerate(reqs):
            if not isinstance(r, dict):
                return f"{path}.requests[{i}]"
            itl = r.get("itl_ns")
            for key, ok in [*((k, _is_count(r.get(k))) for k in _REQUEST_COUNTS),
                            *((k, _is_finite(r.get(k))) for k in _REQUEST_TIMES),
                            ("itl_ns", itl is None or (isinstance(itl, dict) and all(map(_is_finite, itl.values()))))]:
                if not ok:
                    return f"{path}.requests[{i}].{key}"
    analysis = data.get("analysis")
    for path, ids in (("warmup_requests", data.get("warmup_requests")),
                      ("analysis.warmup_requests", analysis.get("warmup_requests") if isinstance(analysis, dict) else None)):
        if ids is not None and not (isinstance(ids, list) and all(i is not None and _is_count(i) for i in ids)):
            return path
    model = data.get("model")
    config = model.get("config") if isinstance(model, dict) else None
    for path, c in (("model.config", config),
                    ("model.config.text_config", config.get("text_config") if isinstance(config, dict) else None)):
        if c is None:
            continue
        if not isinstance(c, dict):
            return path
        for key in _CONFIG_SIZES:
            if not _is_count(c.get(key), least=1 if key == "num_attention_heads" else 0):
                return f"{path}.{key}"
    if isinstance(model, dict) and not (_is_finite(model.get("parameters")) and (model.get("parameters") or 0) >= 0):
        return "model.parameters"
    return None


@dataclass(frozen=True)
class Snapshot:
    """What one read of a run directory gave (RunDir.snapshot): run.json and the tables read."""

    manifest: dict[str, Any]
    tables: dict[str, pa.Table]


class RunDir:
    """A run directory on disk. Cheap to construct; reads lazily.

    Writers: ``create`` takes the run's write lock (tracekit.store.lock) and returns the run to write;
    ``mark_complete``, ``mark_incomplete`` and ``discard`` end the write and drop the lock. A run that
    replaces another (``force``) is built in a staging directory beside it and swapped in by
    ``mark_complete``; until then ``path`` is the staging directory and the old run is untouched.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._target: Path | None = None  # where a staged run goes when complete
        self._locked: Path | None = None  # the run directory whose write lock this writer holds
        self._depth = 0  # lock() calls not yet released (create counts as one)
        self.cached = False  # True when ingest served this run from its cache (nothing was read)

    # --- paths ---------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    @property
    def trace_path(self) -> Path:
        return self.path / TRACE

    @property
    def tables_dir(self) -> Path:
        return self.path / TABLES_DIR

    def table_path(self, name: str) -> Path:
        return self.tables_dir / f"{name}.parquet"

    @property
    def run_id(self) -> str:
        return (self._target or self.path).name

    @property
    def staged(self) -> bool:
        """True while this run is being built beside the run it will replace."""
        return self._target is not None

    @property
    def final_path(self) -> Path:
        """Where the run lives once complete (``path`` unless staged)."""
        return self._target or self.path

    # --- lifecycle -------------------------------------------------------
    @classmethod
    def create(cls, path: str | os.PathLike[str], *, force: bool = False, **manifest: Any) -> RunDir:
        """Create a new run directory marked incomplete, holding its write lock.

        An existing run is never overwritten unless ``force``, and then only when the new run is
        complete: it is built in a staging directory beside the old one (``path`` of the returned
        RunDir) and swapped in by ``mark_complete``. ``force`` replaces only a run directory (one
        with run.json): any other non-empty directory is refused.
        """
        target = resolved(Path(path))  # a link to a run stays a link: the run it points to is written
        try:  # Arrow writes tables only to UTF-8 paths: refused before anything is made
            os.path.abspath(target).encode("utf-8")
        except UnicodeEncodeError:
            raise UsageError(f"{visible(target)}: the path is not UTF-8 text; choose another --out") from None
        if target.exists() and not target.is_dir():
            raise RunExistsError(f"{visible(target)} exists and is not a directory; choose another --out")
        _lock.acquire(target)
        try:
            _clean_staging(target)
            entries = [p for p in target.iterdir() if p.name != _lock.LOCK_FILE]
            run = cls(target)
            if entries:
                if not force:
                    raise RunExistsError(f"{visible(target)} already exists; pass --force to overwrite it")
                if not (target / MANIFEST).is_file():
                    raise RunExistsError(f"{visible(target)} is not a tracekit run directory (no {MANIFEST}); "
                                         "--force only replaces runs")
                run = cls(make_dir_beside(target, _staging_tag(target)))
                run._target = target
            mkdirs(run.tables_dir)
            now = _dt.datetime.now(_dt.timezone.utc).isoformat()
            base = {
                "tracekit_version": VERSION,
                "schema_version": _schema.SCHEMA_VERSION,
                "run_id": target.name,
                "status": STATUS_INCOMPLETE,
                "created_at": now,
                "warnings": [],
            }
            base.update(manifest)
            run.write_manifest(base)
        except BaseException:
            if run.staged:
                shutil.rmtree(run.path, ignore_errors=True)
            _lock.release(target)
            raise
        run._locked, run._depth = target, 1
        return run

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> RunDir:
        """An existing run; its run.json is read and checked (CorruptRunError if it is not one tracekit wrote)."""
        run = cls(path)
        try:
            is_run = run.manifest_path.is_file()
        except OSError:
            is_run = False
        if not is_run:
            raise UsageError(f"{visible(run.path)} is not a tracekit run directory (no {MANIFEST})")
        run.read_manifest()
        return run

    def lock(self) -> None:
        """Take this run's write lock (for writes to an existing run: analysis); ``release`` drops it.
        Nested calls (and a lock already held since ``create``) are counted."""
        if self._locked is None:
            _lock.acquire(self.final_path)
            self._locked = self.final_path
        self._depth += 1

    def release(self) -> None:
        """Undo one ``lock`` (the last one drops the lock)."""
        if self._locked is None:
            return
        self._depth -= 1
        if self._depth <= 0:
            _lock.release(self._locked)
            self._locked, self._depth = None, 0

    @contextmanager
    def rewrite(self) -> Iterator[RunDir]:
        """Change a run as one step: yields the RunDir to write (a hard-linked copy beside this one),
        swapped into place when the block ends without an error; on any error, or a kill, the run is
        exactly as it was. Holds the run's write lock. Where the file system has no hard links, or the
        run is being created (not complete yet), the block writes in place."""
        self.lock()
        try:
            if self.staged or self.read_manifest().get("status") != STATUS_COMPLETE:
                yield self
                return
            real = resolved(self.path)  # a run reached through a link is swapped where the link points
            _clean_staging(real)
            copy = link_tree(real, _staging_tag(real))
            if copy is None:
                yield self
                return
            work = RunDir(copy)
            work._target = real
            try:
                yield work
            except BaseException:
                shutil.rmtree(copy, ignore_errors=True)
                raise
            work._publish()
        finally:
            self.release()

    def _end_write(self) -> None:
        if self._locked is not None:
            _lock.release(self._locked)
        self._locked, self._depth = None, 0

    def _publish(self) -> None:
        """Swap a complete staged run into place; the old run is removed after the swap."""
        if self._target is None:
            return
        target, staging = self._target, self.path
        if exchange(staging, target):
            old = staging
        else:  # no atomic exchange here: rename the old run aside, the new one in, then drop the old
            old = make_dir_beside(target, _staging_tag(target))
            try:
                os.replace(target, old / "run")
                os.replace(staging, target)
            except OSError as exc:
                raise write_error(target, exc) from None
        shutil.rmtree(old, ignore_errors=True)
        self.path, self._target = target, None

    def discard(self) -> None:
        """Give up a staged run (the run it would have replaced stays as it was); drop the lock."""
        if self._target is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path, self._target = self._target, None
        self._end_write()

    # --- manifest -------------------------------------------------------
    def read_manifest(self) -> dict[str, Any]:
        """run.json as a dict ({} if absent); CorruptRunError (one line) if it is not a run.json."""
        try:
            with open(self.manifest_path, "rb") as fh:
                raw = fh.read()
        except FileNotFoundError:
            return {}
        except IsADirectoryError:
            raise CorruptRunError(f"{visible(self.manifest_path)}: run.json is a directory") from None
        except OSError as exc:
            raise CorruptRunError(f"{visible(self.manifest_path)}: cannot read run.json ({exc.strerror})") from None
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            why = "nested too deep" if isinstance(exc, RecursionError) else (
                "empty" if not raw.strip() else "not valid JSON")
            raise CorruptRunError(f"{visible(self.manifest_path)}: corrupt run.json ({why}); "
                                  "re-ingest with --force") from None
        return check_manifest(data, self.manifest_path)

    def write_manifest(self, data: dict[str, Any]) -> None:
        write_json(self.manifest_path, data)

    def update_manifest(self, **fields: Any) -> dict[str, Any]:
        data = self.read_manifest()
        data.update(fields)
        self.write_manifest(data)
        return data

    def add_warning(self, message: str) -> None:
        data = self.read_manifest()
        warnings = data["warnings"] = data.get("warnings") or []
        if message not in warnings:
            warnings.append(message)
        self.write_manifest(data)

    def mark_complete(self) -> None:
        """Mark the run complete; a staged run is swapped into place. Ends the write (drops the lock)."""
        try:
            self.update_manifest(status=STATUS_COMPLETE,
                                 completed_at=_dt.datetime.now(_dt.timezone.utc).isoformat())
            self._publish()
        finally:
            self._end_write()

    def mark_incomplete(self, reason: str) -> None:
        """Mark the run incomplete with ``reason``. Ends the write (drops the lock); a staged run stays
        where it is (``path``: what was captured is kept) and the run it would have replaced is untouched."""
        try:
            self.update_manifest(status=STATUS_INCOMPLETE, incomplete_reason=reason)
        finally:
            self._end_write()

    @property
    def status(self) -> str:
        return str(self.read_manifest().get("status", STATUS_INCOMPLETE))

    def unfinished(self) -> list[str]:
        """What this run says is not finished: the run itself (status), its analysis. Empty when whole."""
        m = self.read_manifest()
        out = []
        if m.get("status") != STATUS_COMPLETE:
            reason = m.get("incomplete_reason")
            out.append("run incomplete" + (f" ({reason})" if reason else ""))
        for key in ("analysis", "rank_analysis"):
            info = m.get(key)
            if isinstance(info, dict) and info.get("status", STATUS_COMPLETE) != STATUS_COMPLETE:
                out.append(f"{key.replace('_', ' ')} not finished (interrupted or still running: "
                           "run tracekit analyze again)")
        return out

    # --- tables ----------------------------------------------------------
    def write_table(self, name: str, table: pa.Table) -> Path:
        """Write the table ``name`` (declared in tracekit.model.schema, else SchemaError; see ``write_table``)."""
        path = self.table_path(name)
        write_table(path, table, name=name)
        return path

    def has_table(self, name: str) -> bool:
        return self.table_path(name).is_file()

    def read_table(self, name: str) -> pa.Table:
        """The named table; an empty one of the right schema if it was never written.

        A table that cannot be read (truncated, not Parquet, a column name twice, a column that does not
        cast to its declared type) is a CorruptRunError naming the run and the file where the user has it
        (never a staging copy's).
        """
        path = self.table_path(name)
        shown = visible(self.final_path / TABLES_DIR / path.name)
        if not path.is_file():
            if path.exists():
                raise CorruptRunError(f"{visible(self.run_id)}: table {name} is not a file ({shown}); "
                                      "re-ingest or re-analyze the run")
            return _schema.empty(name)
        try:
            table = pq.ParquetFile(path).read()  # not pq.read_table: that imports pyarrow.dataset
            check_unique_columns(table.column_names)
            return _fit(name, table) if name in _schema.SCHEMAS else table
        except MemoryError:  # out of memory is not a damaged table: said as itself
            raise
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise self.unreadable(name, exc) from None

    def read_columns(self, name: str, columns: Sequence[str], *, fit: bool = True) -> pa.Table:
        """The named table's ``columns`` (those it has), without reading the others: as stored where the
        file holds its declared schema (or ``fit`` is False), else from ``read_table``'s fitted table.
        Absent, not a file or unreadable: as ``read_table``."""
        path = self.table_path(name)
        if not path.is_file():
            full = self.read_table(name)
            return full.select([c for c in columns if c in full.column_names])
        try:
            pf = pq.ParquetFile(path)
            have = pf.schema_arrow
            check_unique_columns(have.names)
            if fit and name in _schema.SCHEMAS and not all(
                    have.get_field_index(f.name) >= 0 and have.field(f.name).type == f.type for f in _schema.schema(name)):
                full = self.read_table(name)
                return full.select([c for c in columns if c in full.column_names])
            return pf.read(columns=[c for c in columns if c in have.names])
        except MemoryError:  # out of memory is not a damaged table: said as itself
            raise
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise self.unreadable(name, exc) from None

    def unreadable(self, name: str, exc: BaseException) -> CorruptRunError:
        """The one-line error for table ``name`` whose file could not be read (``exc``: why)."""
        shown = visible(self.final_path / TABLES_DIR / self.table_path(name).name)
        return CorruptRunError(f"{visible(self.run_id)}: table {name} is unreadable ({shown}: "
                               f"{_first_line(exc)}); re-ingest or re-analyze the run")

    def snapshot(self, tables: Sequence[str], columns: Mapping[str, Sequence[str]] | None = None,
                 optional: Sequence[str] = ()) -> Snapshot:
        """run.json and tables, each read once: run.json, the ingest check against it (as
        ``check_ingested``), each of ``tables`` (``read_table``, empty where never written; only the
        columns ``columns`` names for it, ``read_columns``), then each of ``optional`` the run has."""
        manifest = self.read_manifest()
        self.check_ingested(manifest)
        cols = columns or {}
        read = {name: self.read_columns(name, cols[name]) if name in cols else self.read_table(name) for name in tables}
        read.update({name: self.read_table(name) for name in optional if self.has_table(name)})
        return Snapshot(manifest, read)

    def read_df(self, name: str) -> Any:
        return self.read_table(name).to_pandas()

    def tables(self) -> list[str]:
        if not self.tables_dir.is_dir():
            return []
        return sorted(p.stem for p in self.tables_dir.glob("*.parquet"))

    def table_entry(self, name: str, rows: int) -> dict[str, Any]:
        """What run.json records of a table just written (``table_problems`` checks it): rows, bytes, digest."""
        path = self.table_path(name)
        return {"rows": rows, "bytes": path.stat().st_size, "blake2b": file_digest(path)}

    def table_problems(self, entries: dict[str, Any]) -> list[str]:
        """How the table files differ from ``entries`` (name -> ``table_entry``): missing, other size or
        content. Empty when every file is byte for byte the one recorded."""
        out = []
        for name, entry in entries.items():
            path = self.table_path(name)
            try:
                size = path.stat().st_size
                same = isinstance(entry, dict) and size == entry.get("bytes") and file_digest(path) == entry.get("blake2b")
            except FileNotFoundError:
                out.append(f"table {name} is missing")
                continue
            except OSError as exc:
                out.append(f"table {name} is unreadable ({exc.strerror})")
                continue
            if not same:
                out.append(f"table {name} is not the file ingest wrote")
        return out

    def check_ingested(self, manifest: Mapping[str, Any] | None = None) -> None:
        """CorruptRunError if the tables ingest wrote (run.json ``ingest.tables``; ``manifest``: run.json
        as already read) were changed since."""
        info = (manifest if manifest is not None else self.read_manifest()).get("ingest")
        entries = info.get("tables") if isinstance(info, dict) else None
        if isinstance(entries, dict):
            problems = self.table_problems(entries)
            if problems:
                raise CorruptRunError(f"{visible(self.run_id)}: {problems[0]}"
                                      + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
                                      + "; re-ingest with --force")


def _fit(name: str, table: pa.Table) -> pa.Table:
    """``table`` with every column of its schema (cast; absent ones null), other columns kept after them.
    The table as it is when it already has them (every table tracekit wrote)."""
    sch = _schema.schema(name)
    have = table.schema
    if all(have.get_field_index(f.name) >= 0 and have.field(f.name).type == f.type for f in sch):
        return table
    known = _schema.conform(name, table.select([c for c in table.column_names if c in sch.names]))
    for c in table.column_names:
        if c not in sch.names:
            known = known.append_column(table.schema.field(c), table.column(c))
    return known


def check_unique_columns(names: Sequence[str]) -> None:
    """ValueError where a column name appears twice: no writer of tracekit's makes one, and every reader
    picks columns by name."""
    twice = sorted({c for c in names if names.count(c) > 1})
    if twice:
        raise ValueError(f"column {twice[0]!r} appears more than once")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.split("\n", 1)[0][:300] if text else type(exc).__name__


_STALE_TMP_S = 600  # a temp file this old was left by a killed writer (an unlocked one may still be writing a newer one)


def _clean_staging(target: Path) -> None:
    """Remove what an earlier writer of ``target`` left beside it (killed mid-write, or a kept partial)
    and the temp files a killed writer left in it.

    Called with ``target``'s lock held, so no locked writer of it is alive. A ``run`` inside a staging
    directory is an old run moved aside by a swap without atomic exchange: if ``target`` is gone, it
    is put back first.
    """
    import time

    now = time.time()
    for d in (target, target / TABLES_DIR):
        try:
            stale = [p for p in d.glob(".*.tmp") if now - p.stat().st_mtime > _STALE_TMP_S]
        except OSError:
            continue
        for p in stale:
            with contextlib.suppress(OSError):
                p.unlink()
    try:
        leftovers = sorted(target.parent.glob(f".tracekit-{_staging_tag(target)}-*"))
    except OSError:
        return
    for d in leftovers:
        if not staging_leftover(d):
            continue  # named like ours, but not provably ours: left alone
        old = d / "run"
        if old.is_dir() and not (target / MANIFEST).exists():
            try:  # entry by entry: the lock file in ``target`` must stay the one this writer holds
                for entry in old.iterdir():
                    if entry.name != _lock.LOCK_FILE:
                        os.replace(entry, target / entry.name)
            except OSError as exc:
                raise StoreWriteError(f"cannot restore {visible(target)} from {visible(old)}: {exc.strerror}") from None
        shutil.rmtree(d, ignore_errors=True)
