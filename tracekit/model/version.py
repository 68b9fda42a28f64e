"""tracekit's version: in run.json, the ingest cache key and ``tracekit --version``."""

from __future__ import annotations

VERSION = "0.1.0"
