"""The ingest cache: an unchanged trace is not read twice.

The key is a hash of every input file's content, the table schema version and
tracekit's version (a new decoder may fill columns an old one left null). It is
stored in run.json (``ingest.cache_key``); ingesting the same files into a run
directory that is complete and carries the same key returns it at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracekit.model import schema as _schema
from tracekit.model.version import VERSION

_READ = 8 << 20


def file_digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as fh:
        while block := fh.read(_READ):
            h.update(block)
    return h.hexdigest()


def cache_key(files: Sequence[Path]) -> str:
    h = hashlib.blake2b(digest_size=20)
    h.update(f"schema={_schema.SCHEMA_VERSION};tracekit={VERSION};".encode())
    for f in files:
        h.update(file_digest(f).encode())
        h.update(b";")
    return h.hexdigest()


def lookup(out: str | Path, key: str) -> Any:
    """The run at ``out`` if it is a complete ingest of exactly these inputs, else None."""
    from tracekit.store.rundir import STATUS_COMPLETE, RunDir

    run = RunDir(out)
    if not run.manifest_path.is_file():
        return None
    try:
        manifest = run.read_manifest()
    except Exception:
        return None
    ingest = manifest.get("ingest")
    if manifest.get("status") != STATUS_COMPLETE or not isinstance(ingest, dict):
        return None
    if ingest.get("cache_key") != key:
        return None
    if not all(run.has_table(t) for t in ("gpu_activity", "cpu_ops", "runtime")):
        return None
    return run
