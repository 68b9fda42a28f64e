"""Fault class: kill -9 at random points of ingest, analyze, export and record (the ``tiny`` preset on
CPU), over a good run and into a new one.

Invariant: the run is byte for byte what it was, or a complete new run (never a mix); a new run is
marked incomplete until it is complete; what a killed writer leaves beside the run (a hidden staging
directory) is never read and is removed by the next writer, which then succeeds.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faultlib import (
    case,
    check_complete,
    cli,
    copy_run,
    events,
    manifest,
    one_line,
    same_or_complete,
    snapshot,
    trace_doc,
    write_trace,
)
from helpers import need_module

pytestmark = pytest.mark.slow


def _kill_after(argv: list[str], cwd: Path, delay: float) -> int | None:
    """Run ``tracekit ARGV`` and SIGKILL it after ``delay`` s; its exit code if it ended first."""
    p = subprocess.Popen([sys.executable, "-m", "tracekit", *map(str, argv)], cwd=cwd,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return p.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL)
        p.wait()
        return None


def _beside(root: Path, run: Path) -> list[str]:
    """What is beside ``run`` in its parent, other than itself and the inputs."""
    return sorted(p.name for p in root.iterdir() if p != run and not p.name.startswith("src"))


@pytest.fixture(scope="module")
def big_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace that takes a while to ingest and analyse (so a kill lands mid-way)."""
    root = tmp_path_factory.mktemp("big")
    return write_trace(root / "src.json.gz", trace_doc(events(15000)))


VERBS = {
    "ingest --force": lambda run, src: ["ingest", src, "--out", run, "--force", "--no-cache"],
    "analyze": lambda run, src: ["analyze", run],
    "export": lambda run, src: ["export", run, "--force"],
    "export json": lambda run, src: ["export", run, "--format", "json", "--force"],
    "analyze trace --force": lambda run, src: ["analyze", src, "--out", run, "--force"],
}


_DURATION: dict[str, float] = {}


def _duration(verb: str, good: Path, src: Path, tmp: Path) -> float:
    """How long the verb takes here, start to exit (measured once): kills land within it."""
    if verb not in _DURATION:
        run = copy_run(good, tmp / "timing")
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "tracekit", *map(str, VERBS[verb](run, src))], cwd=tmp,
                           capture_output=True, timeout=300)
        assert p.returncode == 0, p.stderr
        _DURATION[verb] = time.perf_counter() - t0
        import shutil

        shutil.rmtree(run)
    return _DURATION[verb]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("verb", list(VERBS))
def test_kill9_over_a_good_run(tmp_path: Path, good_template: Path, big_source: Path, verb: str, seed: int) -> None:
    case("kill -9")
    rnd = random.Random(f"{verb}-{seed}")
    src = tmp_path / "src.json.gz"
    src.write_bytes(big_source.read_bytes())
    duration = _duration(verb, good_template, src, tmp_path)
    run = copy_run(good_template, tmp_path / "GOOD")
    before = snapshot(run)
    rc = _kill_after(VERBS[verb](run, src), tmp_path, rnd.uniform(0.35, 1.0) * duration)
    same_or_complete(before, run)
    assert rc in (None, 0)  # killed, or it finished first (then the run is the complete new one)
    for name in _beside(tmp_path, run):  # only a staging directory the next writer removes
        assert name.startswith(".tracekit-new-"), name
    # THEN the next writer succeeds and nothing is left beside the run
    r = cli(VERBS[verb](run, src))
    one_line(r)
    assert r.rc == 0, r.err
    check_complete(run)
    assert _beside(tmp_path, run) == []


@pytest.mark.parametrize("seed", range(3))
def test_kill9_ingest_into_a_new_run(tmp_path: Path, big_source: Path, seed: int) -> None:
    case("kill -9")
    rnd = random.Random(f"new-{seed}")
    run = tmp_path / "NEW"
    src = tmp_path / "src.json.gz"
    src.write_bytes(big_source.read_bytes())
    rc = _kill_after(["analyze", src, "--out", run], tmp_path, rnd.uniform(0.5, 2.5))
    if (run / "run.json").exists():
        m = manifest(run)
        if m["status"] == "complete":
            check_complete(run)
        else:
            assert rc is None
    # a killed ingest of a new run is incomplete: the next ingest needs --force and then succeeds
    r = cli(["analyze", src, "--out", run, "--force"])
    one_line(r)
    assert r.rc == 0, r.err
    check_complete(run)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_module("torch")
    need_module("transformers")
    root = tmp_path_factory.mktemp("rec")
    r = subprocess.run([sys.executable, "-m", "tracekit", "record", "-q", "--warmup", "0", "--output-tokens", "2",
                        "--out", str(root / "REC")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return root / "REC"


@pytest.mark.parametrize("seed", range(2))
def test_kill9_record_over_a_recorded_run(tmp_path: Path, recorded: Path, seed: int) -> None:
    case("kill -9")
    rnd = random.Random(f"record-{seed}")
    run = copy_run(recorded, tmp_path / "REC")
    before = snapshot(run)
    argv = ["record", "-q", "--warmup", "0", "--output-tokens", "3", "--out", run, "--force"]
    _kill_after(argv, tmp_path, rnd.uniform(2.0, 9.0))
    # the old run byte for byte, or a complete new one (a kill can land after the swap, before the exit)
    assert same_or_complete(before, run) in ("same", "new")
    for name in _beside(tmp_path, run):
        assert name.startswith(".tracekit-new-"), name
    # a kill -9 never leaves a run that looks complete and is not, anywhere
    for m in tmp_path.rglob("run.json"):
        data = json.loads(m.read_text())
        if data.get("status") == "complete":
            check_complete(m.parent)


def test_kill9_record_into_a_new_run_says_incomplete(tmp_path: Path, recorded: Path) -> None:
    case("kill -9")
    run = tmp_path / "NEW"
    argv = [sys.executable, "-m", "tracekit", "record", "-q", "--warmup", "0", "--output-tokens", "400", "--out", str(run)]
    p = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None and not (run / "run.json").exists():
        time.sleep(0.05)
    time.sleep(1.0)  # well inside the workload: 400 tokens of the tiny model take ~20 s here
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert manifest(run)["status"] == "incomplete"
