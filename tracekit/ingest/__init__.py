"""Trace -> tables: any Kineto / torch.profiler trace into the tables of tracekit.model.schema.

- ``framing``: the bytes of a trace file (gzip members, the traceEvents array, header and trailer);
- ``native`` (C scanner, ``_kscan``) and ``duckdb_reader``: the two readers behind one protocol;
- ``reader``: picks a reader, adds rank, links the tables (``linkage``);
- ``run``: files into a run directory (``ingest``, cached by ``cache``), a run's own trace
  (``ingest_into``); ``ray_engine``: many files into a hive dataset on a process pool or Ray.

``tracekit.ingest(paths, out)`` calls ``ingest``: the package is callable.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from tracekit.ingest.reader import read_file, read_raw
from tracekit.ingest.result import TABLES_OUT, Counts, FileResult, RawScan
from tracekit.ingest.run import ingest, ingest_into

__all__ = ["TABLES_OUT", "Counts", "FileResult", "RawScan", "ingest", "ingest_into", "read_file", "read_raw", "read_trace_tables"]


def read_trace_tables(path: Any) -> dict[str, Any]:
    """Every table of one trace, in memory (small traces and tests)."""
    return read_file(path).tables


class _CallablePackage(types.ModuleType):
    """``tracekit.ingest`` is both this package and the public function ``tracekit.ingest(...)``."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return ingest(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
