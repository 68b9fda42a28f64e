"""Fault class: file-system faults. Every writing verb on a read-only file system (a read-only bind
mount) and on a full one (a tiny tmpfs filled to a generated level).

Where this machine cannot mount (not root, no CAP_SYS_ADMIN), the cases run against an unwritable
path instead (a --out below a regular file: ENOTDIR) and say so in their ids; the full-disk cases
then skip, since nothing else fails a write with ENOSPC.

Invariant: one line and an exit code (no traceback); the run is as it was or a complete new run;
no temp file is left behind.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultlib import (
    case,
    cli,
    copy_run,
    events,
    examples,
    one_line,
    same_or_complete,
    snapshot,
    trace_doc,
    write_trace,
)
from hypothesis import given
from hypothesis import strategies as st


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _can_mount() -> bool:
    d = Path(tempfile.mkdtemp(prefix="tracekit-mount-probe-"))
    try:
        if not shutil.which("mount") or not _mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(d)):
            return False
        _umount(d)
        return True
    finally:
        shutil.rmtree(d, ignore_errors=True)


MOUNT = _can_mount()

# (verb, argv builder): every verb that writes, with the run at ``run`` and writable inputs at ``src``.
WRITERS = {
    "ingest --force": lambda run, src, fs: ["ingest", src, "--out", run, "--force", "--no-cache"],
    "ingest new": lambda run, src, fs: ["ingest", src, "--out", fs / "new"],
    "analyze": lambda run, src, fs: ["analyze", run],
    "analyze trace": lambda run, src, fs: ["analyze", src, "--out", fs / "new2"],
    "export": lambda run, src, fs: ["export", run, "--force"],
    "export json": lambda run, src, fs: ["export", run, "--format", "json", "--out", fs / "t.json.gz"],
    "report": lambda run, src, fs: ["report", run],
    "query --out": lambda run, src, fs: ["query", "select * from gpu_activity", "--runs", run, "--format", "csv",
                                          "--out", fs / "q.csv"],
    "diff --out": lambda run, src, fs: ["diff", run, run, "--out", fs / "d.parquet"],
}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write_trace(tmp_path / "src.json", trace_doc(events(40)))


@pytest.fixture
def readonly(tmp_path: Path, good_template: Path) -> Iterator[tuple[Path, Path]]:
    """(a directory holding a good run GOOD, the run) on a read-only file system, or below a file."""
    if not MOUNT:
        blocker = tmp_path / "blocker"
        blocker.write_text("a file where a directory should be")
        yield blocker, blocker / "GOOD"
        return
    src, ro = tmp_path / "src", tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    copy_run(good_template, src / "GOOD")
    assert _mount("--bind", str(src), str(ro)), "bind mount"
    try:
        assert _mount("-o", "remount,bind,ro", str(ro)), "read-only remount"
        yield ro, ro / "GOOD"
    finally:
        _umount(ro)


@pytest.mark.parametrize("verb", list(WRITERS))
def test_a_read_only_file_system(readonly: tuple[Path, Path], source: Path, verb: str) -> None:
    case("filesystem faults")
    fs, run = readonly
    before = snapshot(run)
    r = cli(WRITERS[verb](run, source, fs))
    one_line(r)
    assert r.rc in (1, 2), (verb, r.out, r.err)
    reason = "Read-only file system" if MOUNT else "a file is in the way"
    assert reason in r.err or "not a tracekit run" in r.err or "Not a directory" in r.err, r.err
    assert snapshot(run) == before


@pytest.mark.skipif(not MOUNT, reason="no mount here: nothing else fails a write with ENOSPC")
@examples(24)
@given(verb=st.sampled_from(list(WRITERS)), free=st.integers(0, 48 << 10))
def test_a_full_file_system(tmp_path: Path, good_template: Path, source: Path, verb: str, free: int) -> None:
    case("filesystem faults")
    with tempfile.TemporaryDirectory(dir=tmp_path) as d:
        fs = Path(d)
        assert _mount("-t", "tmpfs", "-o", "size=2m", "tmpfs", str(fs))
        try:
            run = copy_run(good_template, fs / "GOOD")
            # fill the file system to ``free`` bytes left (tmpfs counts whole pages)
            filler = fs / "filler"
            with open(filler, "wb", buffering=0) as fh:
                try:
                    while True:
                        fh.write(b"\0" * 4096)
                except OSError:
                    pass
            size = filler.stat().st_size
            with open(filler, "r+b") as fh:
                fh.truncate(max(0, size - free))
            before = snapshot(run)
            r = cli(WRITERS[verb](run, source, fs))
            one_line(r)
            if r.rc != 0:
                assert "No space left on device" in r.err or "out of memory" in r.err, r.err
            state = same_or_complete(before, run)
            if verb.startswith(("ingest --force", "export", "report")) and r.rc != 0:
                assert state == "same"
            leftovers = [p for p in fs.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".tracekit-new")]
            assert not leftovers, leftovers
        finally:
            _umount(fs)
