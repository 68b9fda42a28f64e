"""One writer per run directory: an advisory lock on ``<run>/.tracekit.lock``, which holds the writer's pid.

A second process that wants to write the same run fails at once with one line naming the holder
(``RunLockedError``); readers never lock. The lock is ``flock``: the kernel drops it when the holder
exits, however it exits (kill -9 included), so a stale lock file never blocks anyone. Within one
process the lock is re-entrant (ingest inside analyze, a recording analysed by the same process).
Where ``fcntl`` is missing (Windows) there is no locking.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path

from tracekit.errors import RunLockedError, UsageError, visible
from tracekit.store.fsops import file_mode, mkdirs, write_error

LOCK_FILE = ".tracekit.lock"

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO in the lock's place must not block the open
_held: dict[str, list[int]] = {}  # real path of the run -> [fd, depth]


def _key(run: Path) -> str:
    return os.path.realpath(run)


def _holder(run: Path) -> str:
    try:
        fd = os.open(run / LOCK_FILE, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
        try:
            text = os.read(fd, 200).decode(errors="replace").split("\n", 1)[0].strip()
        finally:
            os.close(fd)
    except OSError:
        return "another process"
    pid, _, what = text.partition(" ")
    what = visible(what)
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
        try:  # never through a link: a lock file that points elsewhere would have us truncate that file
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | _NOFOLLOW | _NONBLOCK, file_mode())
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK) or os.path.islink(path):
                raise UsageError(f"{visible(path)} is a symbolic link, not tracekit's lock file; "
                                 "remove it and run again") from None
            raise write_error(run, exc) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UsageError(f"{visible(path)} is not a regular file, not tracekit's lock file; "
                             "remove it and run again")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunLockedError(f"{visible(run)} is being written by {_holder(run)}; wait for it to finish or write "
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
