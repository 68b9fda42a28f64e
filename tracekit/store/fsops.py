"""File-system primitives every writer uses: atomic replacement, the umask, directory exchange.

- ``atomic_path``: write to a temp name beside the target, rename over it on success; the temp file
  gets the mode a plain ``open`` would (0666 minus the umask), not mkstemp's 0600;
- ``write_error``: an OSError of a write (read-only file system, disk full, permission) as one line;
- ``exchange``: swap two directories in one step (Linux ``renameat2(RENAME_EXCHANGE)``), so a
  replaced run is the old one or the new one at every instant, never neither.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from tracekit.errors import StoreWriteError, UsageError, visible

_TMP_STEM = 64  # characters of the target's name kept in a temp name (the whole name may be 255 bytes)


_READ = 8 << 20


def file_digest(path: Path) -> str:
    """blake2b (20 bytes, hex) of a file's content."""
    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as fh:
        while block := fh.read(_READ):
            h.update(block)
    return h.hexdigest()


INPUT_LIMIT = 64 << 20  # a config or list file larger than this is not one


def read_input(path: str | os.PathLike[str], what: str, *, limit: int = INPUT_LIMIT) -> bytes:
    """The bytes of an input file a user named (a config, a lengths list): UsageError, one line, where it
    is missing, not a regular file (a FIFO or /dev/zero would hang or never end), unreadable or larger
    than ``limit``. Opened without blocking, checked on the open descriptor, read to ``limit`` + 1."""
    shown = f"{what} {visible(path)}"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UsageError(f"{shown}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{shown}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a device, FIFO or socket"
            raise UsageError(f"{shown}: not a regular file ({kind})")
        if st.st_size > limit:
            raise UsageError(f"{shown}: {st.st_size / 1e6:.0f} MB, larger than any {what} file ({limit >> 20} MB)")
        chunks, got = [], 0
        while got <= limit:
            block = os.read(fd, min(1 << 20, limit + 1 - got))
            if not block:
                break
            chunks.append(block)
            got += len(block)
        if got > limit:
            raise UsageError(f"{shown}: larger than any {what} file ({limit >> 20} MB)")
        return b"".join(chunks)
    except OSError as exc:
        raise UsageError(f"{shown}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def check_distinct(paths: list[Path], what: str = "trace") -> None:
    """UsageError where one file is given twice: the same file by two paths (a link, ``./a`` and ``a``)
    or two files with the same bytes (a copy). Digests are taken only of files of equal size."""
    by_id: dict[tuple[int, int], Path] = {}
    by_size: dict[int, list[Path]] = {}
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue  # the read says why
        first = by_id.setdefault((st.st_dev, st.st_ino), p)
        if first is not p:
            raise UsageError(f"{visible(first)} and {visible(p)} are the same file: give each {what} once")
        by_size.setdefault(st.st_size, []).append(p)
    for group in by_size.values():
        if len(group) < 2:
            continue
        seen: dict[str, Path] = {}
        for p in group:
            try:
                first = seen.setdefault(file_digest(p), p)
            except OSError:
                continue
            if first is not p:
                raise UsageError(f"{visible(first)} and {visible(p)} hold the same bytes: give each {what} once")


def decode_text(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text (a BOM skipped); UsageError naming ``where`` and the first bad byte otherwise
    (a binary file, UTF-16, Latin-1)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UsageError(f"{where}: UTF-16 text; save it as UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{where}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                         "save it as UTF-8") from None


def umask() -> int:
    """The process umask, read without changing it where /proc says it (Linux >= 4.7)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    return 0o666 & ~umask()


def dir_mode() -> int:
    return 0o777 & ~umask()


def write_error(path: Path, exc: OSError) -> StoreWriteError:
    """``cannot write PATH: reason`` (the file the error names when it is another one)."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    where = exc.filename if isinstance(exc.filename, str) and ".tmp" not in exc.filename else path
    return StoreWriteError(f"cannot write {visible(where)}: {reason}")


def mkdirs(path: Path) -> None:
    """``path`` and its parents as directories; a file in the way is a usage error (exit 2)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise StoreWriteError(f"cannot write {visible(path)}: a file is in the way", exit_code=2) from None
    except OSError as exc:
        raise write_error(path, exc) from None


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it into place on success.

    Any OSError with an errno (ENOSPC, EROFS, EACCES, ...) while writing becomes a one-line
    StoreWriteError; the temp file is removed and ``path`` keeps what it held. A ``path`` that is a
    device, FIFO or socket (``/dev/null``) is a UsageError: the rename would replace the node itself.
    """
    path = Path(path)
    try:
        special = not stat.S_ISREG(os.stat(path).st_mode) and not stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        special = False  # absent (or unreadable: the write says why)
    if special:
        raise UsageError(f"{visible(path)} is a device, FIFO or socket, not a file: write the output to a file")
    mkdirs(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:_TMP_STEM]}.", suffix=".tmp", dir=path.parent)
        try:
            os.fchmod(fd, file_mode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise write_error(path, exc) from None
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except OSError as exc:
        if exc.errno is None:
            raise
        raise write_error(path, exc) from None
    finally:
        with suppress(OSError):
            tmp_path.unlink(missing_ok=True)


@contextmanager
def atomic_open(path: Path, mode: str = "w") -> Iterator[IO[Any]]:
    with atomic_path(path) as tmp, open(tmp, mode) as fh:
        yield fh


def resolved(path: Path) -> Path:
    """``path`` with its symbolic links resolved, for a writer: a run reached through a link
    (``runs/latest -> runs/x``) is written where the link points, and the link stays a link."""
    path = Path(path)
    try:
        return Path(os.path.realpath(path)) if _has_link(path) else path
    except OSError:
        return path


def _has_link(path: Path) -> bool:
    p = Path(os.path.abspath(path))
    return any(q.is_symlink() for q in (p, *p.parents))


def staging_leftover(d: Path) -> bool:
    """Whether ``d`` (named like a staging directory) is one tracekit made and may remove: a real
    directory (never a link), owned by this user, empty or holding what a writer leaves there (a run's
    run.json or tables, a run or sweep moved aside, a dataset's marker)."""
    try:
        st = os.lstat(d)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return False
    try:
        names = set(os.listdir(d))
    except OSError:
        return False
    return not names or bool(names & {"run.json", "tables", "run", "old", "sweep.json", "points",
                                      "_tracekit_dataset.json", "_tracekit_replaces.json"})


def make_dir_beside(target: Path, tag: str) -> Path:
    """A new, empty directory beside ``target`` (same file system) named ``.tracekit-<tag>-<random>``."""
    mkdirs(target.parent)
    try:
        d = Path(tempfile.mkdtemp(prefix=f".tracekit-{tag}-", dir=target.parent))
        os.chmod(d, dir_mode())
    except OSError as exc:
        raise write_error(target, exc) from None
    return d


def link_tree(src: Path, tag: str) -> Path | None:
    """A copy of directory ``src`` beside it whose files are hard links (no data copied); None where
    the file system has no hard links. Replacing a file in the copy (atomic_path) leaves ``src``'s
    as it was."""
    import shutil
    import stat

    for dirpath, dirnames, _ in os.walk(src):
        for d in dirnames:
            if os.path.islink(os.path.join(dirpath, d)):
                raise UsageError(f"{visible(Path(dirpath) / d)} is a symbolic link: tracekit writes only inside "
                                 f"the run {visible(src)}; put the folder it points to in its place")
    dest = make_dir_beside(src, tag)
    try:
        os.chmod(dest, stat.S_IMODE(os.stat(src).st_mode))
        for dirpath, dirnames, filenames in os.walk(src):
            here = Path(dirpath)
            there = dest / here.relative_to(src)
            for d in dirnames:
                (there / d).mkdir()
                os.chmod(there / d, stat.S_IMODE(os.stat(here / d, follow_symlinks=False).st_mode))
            for f in filenames:
                os.link(here / f, there / f, follow_symlinks=False)
    except OSError as exc:
        shutil.rmtree(dest, ignore_errors=True)
        if exc.errno in (errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            return None
        raise write_error(src, exc) from None
    return dest


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _renameat2() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_EXCHANGE = _renameat2()


def exchange(a: Path, b: Path) -> bool:
    """Swap directories ``a`` and ``b`` atomically; False where the system cannot (the caller falls back)."""
    if _EXCHANGE is None:
        return False
    if _EXCHANGE(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise write_error(b, OSError(err, os.strerror(err)))


def replace_dir(new: Path, target: Path, tag: str) -> None:
    """Put directory ``new`` at ``target`` and remove what was there: one atomic swap where the system
    can exchange directories, else two renames (``target`` is absent only between them)."""
    import shutil

    target = resolved(target)
    if not target.exists():
        os.replace(new, target)
        return
    if exchange(new, target):
        shutil.rmtree(new, ignore_errors=True)
        return
    old = make_dir_beside(target, tag)
    os.replace(target, old / "old")
    os.replace(new, target)
    shutil.rmtree(old, ignore_errors=True)
