"""One writer per run directory: an advisory lock on ``<run>/.tracekit.lock``, which holds the writer's pid.

A second process that wants to write the same run fails at once with one line naming the holder
(``RunLockedError``); readers never lock. The lock is ``flock``: the kernel drops it when the holder
exits, however it exits (kill -9 included), so a stale lock file never blocks anyone. Within one
process the lock is re-entrant (ingest inside analyze, a recording analysed by the same process).
Where ``fcntl`` is missing (Windows) there is no locking.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tracekit.errors import RunLockedError
from tracekit.store.fsops import file_mode, mkdirs, write_error

LOCK_FILE = ".tracekit.lock"

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

_held: dict[str, list[int]] = {}  # real path of the run -> [fd, depth]


def _key(run: Path) -> str:
    return os.path.realpath(run)


def _holder(run: Path) -> str:
    try:
        text = (run / LOCK_FILE).read_text(errors="replace").split("\n", 1)[0].strip()
    except OSError:
        return "another process"
    pid, _, what = text.partition(" ")
    return f"pid {pid} ({what})" if pid.isdigit() and what else (f"pid {pid}" if pid.isdigit() else "another process")


def acquire(run: Path) -> None:
    """Take the write lock of ``run`` (created if missing); RunLockedError if another process holds it."""
    run = Path(run)
    key = _key(run)
    if key in _held:
        _held[key][1] += 1
        return
    mkdirs(run)
    if fcntl is None:  # pragma: no cover
        _held[key] = [-1, 1]
        return
    path = run / LOCK_FILE
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, file_mode())
        except OSError as exc:
            raise write_error(run, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunLockedError(f"{run} is being written by {_holder(run)}; wait for it to finish or write "
                                 "to another --out") from None
        except OSError as exc:
            os.close(fd)
            raise write_error(run, exc) from None
        # The run may have been swapped (``--force``) between open and flock: then this is the old
        # directory's lock file, and the lock that counts is the one now at ``path``.
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except OSError:
            same = False
        if same:
            break
        os.close(fd)
    what = "tracekit " + (sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "")
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {what.strip()}\n".encode())
    except OSError:
        pass  # the pid is for the message only; the lock holds without it
    _held[key] = [fd, 1]


def release(run: Path) -> None:
    key = _key(Path(run))
    entry = _held.get(key)
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] > 0:
        return
    del _held[key]
    if entry[0] >= 0:
        os.close(entry[0])  # closing the descriptor drops the flock


def held(run: Path) -> bool:
    return _key(Path(run)) in _held


def release_all() -> None:
    """Drop every lock this process holds (the CLI's last step, whatever happened)."""
    for key in list(_held):
        fd, _ = _held.pop(key)
        if fd >= 0:
            os.close(fd)
