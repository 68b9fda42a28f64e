"""Mutants of real and generated traces that once ended in a traceback: each case failed before its fix.

Every case: one line and an exit code, or an analysis whose numbers are finite.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from faultlib import cli, events, one_line, trace_doc, write_trace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _fixture(rel: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress((FIXTURES / rel).read_bytes()))
    return doc


def test_a_graph_launch_without_a_duration_is_a_step(tmp_path: Path) -> None:
    ev = events(4)
    ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 7,
               "ts": ev[-2]["ts"] + 50, "args": {"correlation": 999}})  # no dur: read as null
    src = write_trace(tmp_path / "t.json", trace_doc(ev))
    r = cli(["analyze", "-q", src, "--out", tmp_path / "run"])
    one_line(r, ok=(0,))
    steps = pq.read_table(tmp_path / "run" / "tables" / "steps.parquet").to_pandas()
    assert len(steps) >= 1
