"""Reading a Kineto / torch.profiler / Chrome-trace file: the bytes, not the events.

A trace is ``{..., "traceEvents": [ev, ev, ...], ...}`` or a bare ``[ev, ...]``, optionally
gzip-compressed (one or several members). Big ones (1 GB and more) are never loaded whole:

- ``_blocks`` inflates in blocks on a reader thread (ISA-L's inflater when installed, else zlib;
  both release the GIL, so inflating overlaps parsing on a second core); a truncated gzip still
  yields every byte before the cut, then raises ``TruncatedTrace``;
- ``split_point`` finds the last array-level event boundary in a buffer (a ``}, {`` candidate
  validated by parsing the prefix), used to close a cut JSON array after its last whole event.

The events themselves are parsed by tracekit/ingest/_kscan.c (tracekit.ingest.native) or, where that
extension is not built, by DuckDB (tracekit.ingest.duckdb_reader).
"""

from __future__ import annotations

import contextlib
import queue
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import orjson

from tracekit.errors import TraceFormatError

# Which table an event goes to, by its lower-cased cat (both readers route by these; anything not
# listed goes to other_events).
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "runtime", "driver", "hip_runtime", "mtia_runtime")
CPU_CATS = ("cpu_op", "operator", "python_function")
ANNOTATION_CATS = ("user_annotation", "gpu_user_annotation", "trace")

BLOCK_BYTES = 8 << 20  # decompressed bytes per block: large, so per-chunk overhead is small
GZIP_MAGIC = b"\x1f\x8b"

BOUNDARY_RE = re.compile(rb"\}\s*,\s*\{")
_EVENTS_KEY_RE = re.compile(rb'"traceEvents"\s*:\s*\[')

# --------------------------------------------------------------------------- input
def _inflater() -> Any:
    """ISA-L's zlib-compatible inflater when installed (measured on this 2-core VM: 0.079 s of CPU
    for the 80 MB H200 trace against zlib's 0.157 s), else zlib."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib
    return isal_zlib


def _inflate_errors() -> tuple[type[BaseException], ...]:
    """What a corrupt or cut input raises while inflating (read errors included)."""
    try:
        from isal import isal_zlib
    except ImportError:
        return (EOFError, OSError, zlib.error)
    return (EOFError, OSError, zlib.error, cast("type[BaseException]", isal_zlib.error))


def _inflate(path: str | Path, block: int) -> Iterator[bytes]:
    """Decompressed blocks of about ``block`` bytes.

    zlib directly rather than GzipFile: a truncated file still yields every
    byte before the cut (then EOFError), and multi-member gzip files work.
    """
    p = Path(path)
    try:
        fh = open(p, "rb")  # noqa: SIM115 - closed by the with below, after the error mapping
    except FileNotFoundError:
        raise TraceFormatError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise TraceFormatError(f"{p}: is a directory") from None
    with fh:
        first = fh.read(2)
        fh.seek(0)
        if first != GZIP_MAGIC:
            while data := fh.read(block):
                yield data
            return
        z = _inflater()
        d = z.decompressobj(wbits=47)
        out: list[bytes] = []
        size = 0
        while True:
            # Compressed input in small reads: one decompress call inflates all it is given (a
            # 1 MB read of an 18x trace made 18 MB at once), so the block size bounds memory only
            # if the reads are a small fraction of it.
            comp = fh.read(max(16 << 10, min(1 << 20, block // 32)))
            if not comp:
                break
            while comp:
                piece = d.decompress(comp)
                if piece:
                    out.append(piece)
                    size += len(piece)
                comp = b""
                if d.eof and d.unused_data.strip(b"\0"):  # next gzip member
                    comp = d.unused_data
                    d = z.decompressobj(wbits=47)
            if size >= block:
                yield b"".join(out)
                out, size = [], 0
        tail = d.flush()
        if tail:
            out.append(tail)
        if out:
            yield b"".join(out)
        if not d.eof:
            raise EOFError("compressed file ended before the end-of-stream marker")


def _blocks(path: str | Path, block: int) -> Iterator[bytes]:
    """Decompressed blocks, read ahead on a thread so inflate overlaps parsing."""
    q: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=3)
    stop = threading.Event()

    errors = _inflate_errors()

    def reader() -> None:
        try:
            for data in _inflate(path, block):
                if stop.is_set():
                    return
                q.put(("data", data))
            q.put(("end", None))
        except errors as exc:
            q.put(("error", exc))
        except TraceFormatError as exc:
            q.put(("error", exc))

    t = threading.Thread(target=reader, name="tracekit-inflate", daemon=True)
    t.start()
    try:
        while True:
            kind, val = q.get()
            if kind == "data":
                yield val
            elif kind == "end":
                return
            else:
                if isinstance(val, TraceFormatError):
                    raise val
                raise TruncatedTrace(f"{path}: truncated or corrupt compressed data ({val})")
    finally:
        stop.set()
        # Drain so the reader is never stuck on a full queue.
        while t.is_alive():
            with contextlib.suppress(queue.Empty):
                q.get(timeout=0.05)


class TruncatedTrace(TraceFormatError):
    """The input ended early: events decoded before the cut are still valid."""


# --------------------------------------------------------------------------- chunking
def _parse_prefix(buf: bytes, cut: int) -> Chunk | None:
    """The events of ``buf[:cut]`` if that is a valid run of events, else None."""
    text = buf[:cut]
    try:
        v = orjson.loads(b"[" + text + b"]")
    except orjson.JSONDecodeError:
        return None
    return Chunk(v, text) if isinstance(v, list) else None


def split_point(buf: bytes, *, tries: int = 4) -> tuple[int, Chunk] | None:
    """The last array-level event boundary in ``buf`` and the events before it.

    Returns ``(i, events)`` where ``buf[:i]`` ends with an event's closing
    ``}`` at array level, or None if no candidate validates. Validation is the
    parse itself, so a chunk is parsed once on the fast path.
    """
    cands = [m.start() + 1 for m in BOUNDARY_RE.finditer(buf)]
    if not cands:
        return None
    for c in reversed(cands[-tries:]):
        ev = _parse_prefix(buf, c)
        if ev is not None:
            return c, ev
    # Rare: nested "}, {" at the end of the buffer, or corrupt data. Bisect on
    # candidates: prefixes before the first bad spot validate, later ones don't.
    lo, hi = 0, len(cands) - tries - 1
    best: tuple[int, Chunk] | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        ev = _parse_prefix(buf, cands[mid])
        if ev is not None:
            best = (cands[mid], ev)
            lo = mid + 1
        else:
            hi = mid - 1
    return best


@dataclass
class Chunk:
    """One run of events: parsed dicts and the bytes they came from."""

    events: list[Any]
    text: bytes


# --------------------------------------------------------------------------- the array
_WS_RE = re.compile(rb"\s*")


def offset_ns(meta: dict[str, Any]) -> int:
    """The trace's time base (``baseTimeNanoseconds``), added to every ``ts``; 0 where absent."""
    base = meta.get("baseTimeNanoseconds")
    return int(base) if isinstance(base, int | float) and not isinstance(base, bool) else 0


def is_gzip(path: Path) -> bool:
    """gzip by its magic bytes, whatever the file's name."""
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == b"\x1f\x8b"
    except FileNotFoundError:
        raise TraceFormatError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceFormatError(f"{path}: is a directory") from None


def bare_list_in_place(path: Path) -> bool:
    """An uncompressed file that starts with ``[`` and ends with ``]``: readable in place (the DuckDB reader does)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(4096).lstrip()
        fh.seek(max(0, size - 4096))
        tail = fh.read().rstrip()
    return head[:1] == b"[" and tail[-1:] == b"]" and size > 2


def _find_events_key(buf: bytes) -> int | None:
    """Offset just after ``"traceEvents": [`` in a header buffer, or None."""
    m = _EVENTS_KEY_RE.search(buf)
    return m.end() if m else None


def _header_meta(path: Path, prefix: bytes) -> dict[str, Any]:
    try:
        pre = orjson.loads(prefix + b"]}")
    except orjson.JSONDecodeError:
        raise TraceFormatError(f"{path}: invalid JSON before traceEvents") from None
    if not isinstance(pre, dict):
        raise TraceFormatError(f"{path}: not a JSON trace")
    pre.pop("traceEvents", None)
    return pre


def _no_array(path: Path, buf: bytes) -> TraceFormatError:
    """No traceEvents array was found: say precisely why."""
    s = buf.strip()
    if not s:
        return TraceFormatError(f"{path}: empty file")
    if s[:1] not in (b"{", b"["):
        return TraceFormatError(f"{path}: not a JSON trace (starts with {s[:20]!r})")
    try:
        obj = orjson.loads(s)
    except orjson.JSONDecodeError:
        return TraceFormatError(f"{path}: invalid JSON (no traceEvents array found)")
    if isinstance(obj, dict) and "traceEvents" not in obj:
        return TraceFormatError(f"{path}: no traceEvents in the trace")
    return TraceFormatError(f"{path}: traceEvents is not an array")


class Body:
    """The bytes after the array's ``[`` (array, then whatever follows it), as blocks; what the
    header said (``meta``, ``bare``) and whether the input ended early (``truncated``)."""

    def __init__(self, p: Path, block: int) -> None:
        self.p, self.block = p, block
        self.meta: dict[str, Any] = {}
        self.bytes_in = 0
        self.truncated: str | None = None
        self.bare = False

    def __iter__(self) -> Iterator[bytes]:
        p = self.p
        started = False
        head = b""
        try:
            for data in _blocks(p, self.block):
                self.bytes_in += len(data)
                if not started:
                    head += data
                    # Leading whitespace is skipped, not stripped: lstrip would copy a whole block.
                    n_ws = _WS_RE.match(head).end()  # type: ignore[union-attr]
                    s = head[n_ws : n_ws + 64]
                    if not s:
                        continue
                    if s[:1] == b"[":
                        self.bare, started = True, True
                        data = head[n_ws + 1 :]
                    elif s[:1] != b"{":
                        raise TraceFormatError(f"{p}: not a JSON trace (starts with {s[:20]!r})")
                    else:
                        at = _find_events_key(head)
                        if at is None:
                            continue
                        self.meta = _header_meta(p, head[:at])
                        started = True
                        data = head[at:]
                    head = b""
                yield data
        except TruncatedTrace as exc:
            self.truncated = exc.message
            if not started:
                at = _find_events_key(head)
                if at is None:
                    raise
                self.meta = _header_meta(p, head[:at])
                started = True
                yield head[at:]
        if not started:
            raise _no_array(p, head)
