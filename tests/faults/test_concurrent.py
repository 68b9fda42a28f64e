"""Fault class: concurrent writers. Two processes write the same run at once (two ingest --force of
different traces, ingest --force against analyze, two analyses), and readers read while a writer swaps.

Invariant: every process ends with exit 0 or one line naming the writer it met; the run is then a
complete run of exactly one of the inputs (its tables and run.json agree, the cache serves it),
never a mix; a reader sees the old run or the new one, never neither.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from faultlib import (
    Result,
    case,
    check_complete,
    cli,
    copy_run,
    events,
    manifest,
    one_line,
    trace_doc,
    write_trace,
)

pytestmark = pytest.mark.slow


def _start(argv: list[object], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tracekit", *map(str, argv)], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(p: subprocess.Popen[str]) -> Result:
    out, err = p.communicate(timeout=300)
    return Result(p.returncode, out, err)


@pytest.mark.parametrize("round_", range(4))
def test_two_ingests_force_into_one_run(tmp_path: Path, good_template: Path, round_: int) -> None:
    case("concurrent writers")
    run = copy_run(good_template, tmp_path / "GOOD")
    a = write_trace(tmp_path / "a.json.gz", trace_doc(events(4000)))
    b = write_trace(tmp_path / "b.json.gz", trace_doc(events(5000 + round_)))
    pa_, pb = _start(["ingest", a, "--out", run, "--force"], tmp_path), None
    time.sleep(0.15 * round_)
    pb = _start(["ingest", b, "--out", run, "--force"], tmp_path)
    ra, rb = _finish(pa_), _finish(pb)
    for r in (ra, rb):
        one_line(r)
        assert r.rc == 0 or "is being written by pid" in r.err, r.err
    assert 0 in (ra.rc, rb.rc)
    check_complete(run)
    # exactly one input's tables, and run.json names that input
    n = pq.read_table(run / "tables" / "gpu_activity.parquet").num_rows
    inputs = manifest(run)["inputs"]
    assert (n, inputs) in ((4000, [str(a)]), (5000 + round_, [str(b)])), (n, inputs)
    winner = a if n == 4000 else b
    again = cli(["ingest", winner, "--out", run])
    assert again.rc == 0 and "(cached)" in again.out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["GOOD", "a.json.gz", "b.json.gz"]


@pytest.mark.parametrize("order", ["ingest first", "analyze first"])
def test_ingest_force_against_analyze(tmp_path: Path, good_template: Path, order: str) -> None:
    case("concurrent writers")
    run = copy_run(good_template, tmp_path / "GOOD")
    src = write_trace(tmp_path / "a.json.gz", trace_doc(events(6000)))
    first, second = (["ingest", src, "--out", run, "--force"], ["analyze", run])
    if order == "analyze first":
        first, second = second, first
    p1 = _start(first, tmp_path)
    time.sleep(0.4)
    p2 = _start(second, tmp_path)
    r1, r2 = _finish(p1), _finish(p2)
    for r in (r1, r2):
        one_line(r)
        assert r.rc == 0 or "is being written by pid" in r.err, r.err
    check_complete(run)


def test_readers_never_see_the_run_missing(tmp_path: Path, good_template: Path) -> None:
    """While ingest --force swaps runs in again and again, a reader always finds a whole run."""
    case("concurrent writers")
    run = copy_run(good_template, tmp_path / "GOOD")
    src = write_trace(tmp_path / "a.json.gz", trace_doc(events(300)))
    loop = ("import sys\nfrom tracekit.cli import main\n"
            f"for i in range(12):\n    assert main(['ingest', {str(src)!r}, '--out', {str(run)!r}, '--force', '--no-cache']) == 0\n")
    writer = subprocess.Popen([sys.executable, "-c", loop], cwd=tmp_path)
    seen = 0
    try:
        while writer.poll() is None:
            r = cli(["query", "select count(*) as n from gpu_activity", "--runs", run, "--format", "json"])
            one_line(r)
            assert r.rc == 0, r.err
            seen += 1
    finally:
        writer.wait(timeout=300)
    assert writer.returncode == 0 and seen > 0
    check_complete(run)
