"""The ingest cache: an unchanged trace is not read twice.

The key is a hash of every input file's content, the table schema version and
tracekit's version (a new decoder may fill columns an old one left null). It is
stored in run.json (``ingest.cache_key``) with each table's size and digest
(``ingest.tables``); ingesting the same files into a run directory that is complete,
carries the same key and whose table files are byte for byte the ones ingest wrote
returns it at once. A run of the same inputs whose tables were damaged or removed is
rebuilt in its place (``lookup`` says so); anything else is re-read as usual.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracekit.errors import TracekitError
from tracekit.ingest.result import TABLES_OUT
from tracekit.model import schema as _schema
from tracekit.model.version import VERSION
from tracekit.store.fsops import file_digest


def cache_key(files: Sequence[Path]) -> str:
    h = hashlib.blake2b(digest_size=20)
    h.update(f"schema={_schema.SCHEMA_VERSION};tracekit={VERSION};".encode())
    for f in files:
        h.update(file_digest(f).encode())
        h.update(b";")
    return h.hexdigest()


STALE = "stale"  # lookup's answer for a run of the same inputs whose tables are not the ones ingest wrote


def lookup(out: str | Path, key: str) -> Any:
    """The run at ``out`` if it is a complete ingest of exactly these inputs with intact tables (its
    ``cached`` set); ``STALE`` if it is an ingest of these inputs that is damaged (rebuild it); else None."""
    from tracekit.store.rundir import STATUS_COMPLETE, RunDir

    run = RunDir(out)
    try:
        if not run.manifest_path.is_file():
            return None
        manifest = run.read_manifest()
    except (OSError, TracekitError):
        return None
    ingest = manifest.get("ingest")
    if manifest.get("status") != STATUS_COMPLETE or not isinstance(ingest, dict):
        return None
    if ingest.get("cache_key") != key:
        return None
    tables = ingest.get("tables")
    if not isinstance(tables, dict) or set(tables) != set(TABLES_OUT) or run.table_problems(tables):
        return STALE
    run.cached = True
    return run
