"""Trace -> tables: any Kineto / torch.profiler trace into the tables of tracekit.model.schema.

- ``framing``: the bytes of a trace file (gzip members, the traceEvents array, header and trailer);
- ``native`` (C scanner, ``tracekit.ingest._kscan``) and ``duckdb_reader``: the two readers behind one protocol;
- ``reader``: picks a reader, adds rank, links the tables (``linkage``);
- ``run``: files into a run directory (``ingest``, cached by ``cache``), a run's own trace
  (``ingest_into``); ``ray_engine``: many files into a hive dataset on a process pool or Ray.

The package re-exports the entry points below; its modules never import the package itself.
The user-facing function is ``tracekit.ingest_traces`` (tracekit._api).
"""

from __future__ import annotations

from tracekit.ingest.reader import read_file, read_raw, read_trace_tables
from tracekit.ingest.result import TABLES_OUT, Counts, FileResult, RawScan
from tracekit.ingest.run import ingest, ingest_into

__all__ = ["TABLES_OUT", "Counts", "FileResult", "RawScan", "ingest", "ingest_into", "read_file", "read_raw", "read_trace_tables"]
