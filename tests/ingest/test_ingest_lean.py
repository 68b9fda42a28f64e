"""Ingest never imports pandas: pyarrow's first ``pa.array`` / ``pa.scalar`` / ``to_numpy`` of a process
loads it (about 45 MB resident and a quarter of a second on a 2-core VM, docs/performance.md), and
ingest's tables need nothing of it. Checked on a real GPU trace read whole and in chunks, with an event
whose end is past int64 ns so that the skip-and-count path runs too."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FIXTURES

INGEST = """
import sys
from tracekit.ingest import chunked, ingest
if sys.argv[3] == "chunked":
    chunked.CHUNKED_MIN_BYTES, chunked.CHUNK_EVENTS = 0, 5000
run = ingest([sys.argv[1]], sys.argv[2])
print(run.read_manifest()["ingest"]["counts"]["skipped"])
print("pandas imported" if "pandas" in sys.modules else "no pandas")
"""


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # a real H200 trace (kernels, CPU ops with shapes, runtime calls, annotations) plus one kernel whose
    # ts fits int64 ns and whose ts + dur does not
    with gzip.open(FIXTURES / "gpu" / "bound_h200.json.gz", "rt") as f:
        doc = json.load(f)
    kernel = dict(next(e for e in doc["traceEvents"] if e.get("cat") == "kernel"))
    kernel["ts"] = (2**63 - 1 - doc["baseTimeNanoseconds"]) // 1000 - 1  # us, after the trace's ns base
    kernel["dur"] = 1000
    doc["traceEvents"].append(kernel)
    path = tmp_path_factory.mktemp("lean") / "t.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return path


@pytest.mark.parametrize("mode", ["whole", "chunked"])
def test_ingest_never_imports_pandas(trace: Path, tmp_path: Path, mode: str) -> None:
    # WHEN a fresh process ingests the trace (whole, or in chunks of 5,000 events)
    out = subprocess.run([sys.executable, "-c", INGEST, str(trace), str(tmp_path / "run"), mode],
                         capture_output=True, text=True, check=True)
    skipped, verdict = out.stdout.strip().splitlines()[-2:]
    # THEN the over-range kernel is skipped and counted, the tables are written, and pandas never loaded
    assert skipped == "{'end (ts + dur) beyond the int64 ns range': 1}"
    assert (tmp_path / "run" / "tables" / "gpu_activity.parquet").stat().st_size > 0
    assert verdict == "no pandas"
