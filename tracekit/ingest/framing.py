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

from tracekit.errors import TraceFormatError, visible

# Which table an event goes to, by its lower-cased cat (both readers route by these; anything not
# listed goes to other_events).
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "runtime", "driver", "hip_runtime", "mtia_runtime")
CPU_CATS = ("cpu_op", "operator", "python_function")
ANNOTATION_CATS = ("user_annotation", "gpu_user_annotation", "trace")

BLOCK_BYTES = 8 << 20  # decompressed bytes per block: large, so per-chunk overhead is small
GZIP_MAGIC = b"\x1f\x8b"

BOUNDARY_RE = re.compile(rb"\}\s*,\s*\{")

# --------------------------------------------------------------------------- input
def _inflater() -> Any:
    """ISA-L's zlib-compatible inflater when installed (about half zlib's CPU: docs/measurements/
    2026-12-07-docstring-figures.md), else zlib."""
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
                # At most a block per call: a highly compressible input (whitespace, a repeated
                # value) inflates ~1000x, and the rest waits in unconsumed_tail.
                piece = d.decompress(comp, max(block - size, 1 << 16))
                if piece:
                    out.append(piece)
                    size += len(piece)
                if not d.eof:
                    comp = d.unconsumed_tail
                else:  # what follows the member (zlib keeps it in unconsumed_tail too: not used)
                    comp = d.unused_data if d.unused_data.strip(b"\0") else b""
                    if comp:  # the next gzip member
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
        v = loads(b"[" + text + b"]")
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


# --------------------------------------------------------------------------- outside the array
META_LIMIT = 64 << 20  # bytes of JSON kept from outside the events array (header and trailer together)
_DEEP = 1000  # nesting orjson refuses (its limit is 1024): such a value is skipped, not an error
_KEEP_DEEP = 64  # deeper values are skipped too: run.json keeps the metadata and Python's json writes it recursively
_BOM = b"\xef\xbb\xbf"
_WS_RE = re.compile(rb"[ \t\n\r]*")
_WS_ANY = re.compile(rb"[ \t\n\r]+")
_PLAIN_RE = re.compile(rb'[^"\[\]{}]*')  # inside a container: everything up to a quote or a bracket
_STR_RE = re.compile(rb'[^"\\]*')  # inside a string: everything up to a quote or a backslash
_SCALAR_RE = re.compile(rb"[^,}\] \t\n\r]*")  # a number, true, false or null


def loads(data: bytes) -> Any:
    """orjson.loads, and Python's json where orjson refuses a valid number (1e400: beyond a double)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "infinity" not in str(exc):
            raise
    import json

    def _constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(data, parse_constant=_constant)
    except (ValueError, RecursionError) as exc:
        raise orjson.JSONDecodeError(str(exc), data.decode("utf-8", "replace")[:100], 0) from None


def _mb(n: int) -> str:
    return f"{n / (1 << 20):.0f} MB"


class Outside:
    """The JSON object around the events array, read incrementally in bounded memory.

    Header mode reads ``{"key": value, ..., "traceEvents": [`` and stops after the ``[``; trailer
    mode reads ``], "key": value, ... }`` from just after the array's ``]``. Whitespace between
    tokens is never stored; each top-level value is kept (whitespace outside strings dropped) while
    the kept total stays under ``META_LIMIT`` (``budget``, shared by header and trailer), else it is
    skipped by a bracket-and-string scan that stores nothing, and named in ``notes``. Memory is
    bounded by the budget whatever the input; time is linear in it.
    """

    KEY, IN_KEY, COLON, VALUE, AFTER, DONE, ARRAY = range(7)

    def __init__(self, path: Path, *, trailer: bool, budget: list[int]) -> None:
        self.path, self.trailer, self.budget = path, trailer, budget
        self.state = self.AFTER if trailer else self.KEY
        self.first = not trailer  # "{}" is an object; "{," is not
        self.pairs: list[tuple[bytes, bytes, int]] = []  # (key JSON, value JSON, its depth)
        self.notes: list[str] = []
        self.key = bytearray()
        self.key_len = 0
        self.cur: bytearray | None = None  # the value being kept (None: skipped)
        self.depth = 0  # inside the current value
        self.max_depth = 0
        self.in_str = False
        self.escape = False
        self.scalar = False
        self.value_bytes = 0
        self.seen = 0  # bytes fed, for messages
        self.found = False  # header: "traceEvents": [ reached

    # -- errors
    def _invalid(self, at: int, what: str) -> TraceFormatError:
        where = "after the traceEvents array" if self.trailer else "before traceEvents"
        return TraceFormatError(f"{self.path}: invalid JSON {where} at byte {self.seen + at} ({what})")

    def feed(self, data: bytes) -> int | None:
        """Scan ``data``; return the offset just past what this scanner reads (header: after the array's
        ``[``; trailer: after the closing ``}``) once it is reached, else None (feed more)."""
        i, n = 0, len(data)
        while i < n:
            st = self.state
            if st == self.VALUE:
                i = self._value(data, i)
                continue
            if st == self.IN_KEY:
                i = self._key(data, i)
                continue
            i = _WS_RE.match(data, i).end()  # type: ignore[union-attr]
            if i >= n:
                break
            c = data[i : i + 1]
            if st == self.DONE:
                raise self._invalid(i, "data after the end of the trace")
            if st == self.KEY:
                if c == b'"':
                    self.key, self.key_len, self.state = bytearray(b'"'), 1, self.IN_KEY
                    self.first = False
                elif c == b"}" and self.first:
                    return self._end(i + 1)
                else:
                    raise self._invalid(i, f"expected a key, found {c!r}")
                i += 1
            elif st == self.COLON:
                if c != b":":
                    raise self._invalid(i, f"expected ':', found {c!r}")
                self.state = self.VALUE
                self._start_value()
                i += 1
                if not self.trailer and bytes(self.key) == b'"traceEvents"':
                    self.state = self.ARRAY  # the array's "[" comes next, maybe in the next block
            elif st == self.ARRAY:
                if c != b"[":
                    raise TraceFormatError(f"{self.path}: traceEvents is not an array")
                self.found = True
                return i + 1
            elif st == self.AFTER:
                if c == b",":
                    self.state = self.KEY
                elif c == b"}":
                    return self._end(i + 1)
                else:
                    raise self._invalid(i, f"expected ',' or '}}', found {c!r}")
                i += 1
        self.seen += n
        return None

    def _end(self, at: int) -> int:
        if not self.trailer:
            raise TraceFormatError(f"{self.path}: no traceEvents in the trace")
        self.state = self.DONE
        return at

    def _key(self, data: bytes, i: int) -> int:
        """Inside a key string; keys are kept whole up to 1 MB (a longer one is a bomb: error)."""
        while i < len(data):
            if self.escape:
                self.key += data[i : i + 1]
                self.escape = False
                i += 1
                continue
            m = _STR_RE.match(data, i)
            j = m.end()  # type: ignore[union-attr]
            self.key += data[i:j]
            if len(self.key) > 1 << 20:
                raise self._invalid(i, "a key longer than 1 MB")
            if j >= len(data):
                return j
            self.key += data[j : j + 1]
            if data[j : j + 1] == b"\\":
                self.escape = True
                i = j + 1
                continue
            self.state = self.COLON
            return j + 1
        return i

    def _start_value(self) -> None:
        self.cur = bytearray()
        self.depth = self.max_depth = 0
        self.in_str = self.escape = self.scalar = False
        self.value_bytes = 0
        self.started = False

    def _keep(self, piece: bytes, string: bool) -> None:
        self.value_bytes += len(piece)
        if self.cur is None:
            return
        if not string:  # whitespace between tokens is not kept
            piece = _WS_ANY.sub(b"", piece)
        self.cur += piece
        if len(self.cur) + len(self.key) > self.budget[0]:
            self.cur = None  # over the limit: the rest of this value is only scanned

    def _value(self, data: bytes, i: int) -> int:
        n = len(data)
        while i < n:
            if self.in_str:
                if self.escape:
                    self._keep(data[i : i + 1], True)
                    self.escape = False
                    i += 1
                    continue
                j = _STR_RE.match(data, i).end()  # type: ignore[union-attr]
                self._keep(data[i:j], True)
                if j >= n:
                    return j
                self._keep(data[j : j + 1], True)
                i = j + 1
                if data[j : j + 1] == b"\\":
                    self.escape = True
                    continue
                self.in_str = False
                if self.depth == 0:
                    return self._value_done(i)
                continue
            if not self.started:
                i = _WS_RE.match(data, i).end()  # type: ignore[union-attr]
                if i >= n:
                    return i
                self.started = True
                c = data[i : i + 1]
                if c == b'"':
                    self.in_str = True
                    self._keep(c, True)
                    i += 1
                elif c in (b"{", b"["):
                    self.depth = self.max_depth = 1
                    self._keep(c, False)
                    i += 1
                elif c in (b"}", b"]", b",", b":"):
                    raise self._invalid(i, f"expected a value, found {c!r}")
                else:
                    self.scalar = True
                continue
            if self.scalar:
                j = _SCALAR_RE.match(data, i).end()  # type: ignore[union-attr]
                self._keep(data[i:j], False)
                if j >= n:
                    return j
                return self._value_done(j)
            j = _PLAIN_RE.match(data, i).end()  # type: ignore[union-attr]
            self._keep(data[i:j], False)
            if j >= n:
                return j
            c = data[j : j + 1]
            self._keep(c, c == b'"')
            i = j + 1
            if c == b'"':
                self.in_str = True
            elif c in (b"{", b"["):
                self.depth += 1
                self.max_depth = max(self.max_depth, self.depth)
            else:
                self.depth -= 1
                if self.depth == 0:
                    return self._value_done(i)
        return i

    def _value_done(self, i: int) -> int:
        key = bytes(self.key)
        if self.cur is not None:
            self.budget[0] -= len(self.cur) + len(key)
            self.pairs.append((key, bytes(self.cur), self.max_depth))
        else:
            self.notes.append(f"trace metadata {visible(_key_text(key))} ({_mb(self.value_bytes)}) skipped: "
                              f"over the {_mb(META_LIMIT)} kept from outside the events array")
        self.cur = None
        self.state = self.AFTER
        return i

    def finish(self) -> None:
        """At the end of the input: TraceFormatError unless the scanner reached its end."""
        if self.trailer and self.state != self.DONE:
            raise TraceFormatError(f"{self.path}: JSON ends early or is invalid after the traceEvents array")

    def meta(self) -> dict[str, Any]:
        """The kept keys and values; a value nested deeper than ``_KEEP_DEEP`` is skipped with a note,
        any other unreadable value is invalid JSON (TraceFormatError)."""
        out: dict[str, Any] = {}
        for key, value, depth in self.pairs:
            try:
                k = loads(key)
                v = loads(value)
            except orjson.JSONDecodeError:
                if depth >= _DEEP:
                    self.notes.append(f"trace metadata {visible(_key_text(key))} skipped: nested {depth} deep")
                    continue
                where = "after the traceEvents array" if self.trailer else "before traceEvents"
                raise TraceFormatError(f"{self.path}: invalid JSON {where}") from None
            if depth > _KEEP_DEEP:
                self.notes.append(f"trace metadata {visible(_key_text(key))} skipped: nested {depth} deep")
                continue
            out[k] = v
        return out


def _key_text(key: bytes) -> str:
    try:
        return repr(loads(key))[:80]
    except orjson.JSONDecodeError:
        return repr(key[:80])


def offset_ns(meta: dict[str, Any]) -> int:
    """The trace's time base (``baseTimeNanoseconds``), added to every ``ts``; 0 where absent or not
    a number within +-2**62 ns (``base_problem`` says why)."""
    base = meta.get("baseTimeNanoseconds")
    if base_problem(meta) is not None or not isinstance(base, int | float) or isinstance(base, bool):
        return 0
    return int(base)


def base_problem(meta: dict[str, Any]) -> str | None:
    """Why ``baseTimeNanoseconds`` is ignored (not a finite number within +-2**62 ns), or None."""
    import math

    base = meta.get("baseTimeNanoseconds")
    if base is None:
        return None
    if not isinstance(base, int | float) or isinstance(base, bool) or not math.isfinite(base) or abs(base) >= 1 << 62:
        return "baseTimeNanoseconds not a number within +-2**62 ns (ignored)"
    return None


def is_gzip(path: Path) -> bool:
    """gzip by its magic bytes, whatever the file's name."""
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == b"\x1f\x8b"
    except FileNotFoundError:
        raise TraceFormatError(f"{visible(path)}: no such file") from None
    except IsADirectoryError:
        raise TraceFormatError(f"{visible(path)}: is a directory") from None


def bare_list_in_place(path: Path) -> bool:
    """An uncompressed file that starts with ``[`` and ends with ``]``: readable in place (the DuckDB reader does)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(4096).lstrip()
        fh.seek(max(0, size - 4096))
        tail = fh.read().rstrip()
    return head[:1] == b"[" and tail[-1:] == b"]" and size > 2


class Body:
    """The bytes after the array's ``[`` (array, then whatever follows it), as blocks; what the
    header said (``meta``, ``bare``), what was skipped of it (``notes``) and whether the input ended
    early (``truncated``). The header is read by ``Outside`` in bounded memory; ``budget`` is what
    is left of META_LIMIT for the trailer."""

    def __init__(self, p: Path, block: int) -> None:
        self.p, self.block = p, block
        self.meta: dict[str, Any] = {}
        self.bytes_in = 0
        self.truncated: str | None = None
        self.bare = False
        self.notes: list[str] = []
        self.budget = [META_LIMIT]

    def trailer(self) -> Outside:
        """A scanner for what follows the array's closing ``]`` (its meta and notes go to this body's)."""
        return Outside(self.p, trailer=True, budget=self.budget)

    def __iter__(self) -> Iterator[bytes]:
        p = visible(self.p)
        started = False
        head: Outside | None = None
        seen = 0
        try:
            for data in _blocks(self.p, self.block):
                self.bytes_in += len(data)
                if not started:
                    at = 0
                    if head is None:
                        if seen == 0 and data.startswith(_BOM):  # UTF-8 with a byte order mark
                            data, seen = data[len(_BOM) :], len(_BOM)
                        # Leading whitespace is skipped, never stored (a 256 MB run of it costs nothing).
                        at = _WS_RE.match(data).end()  # type: ignore[union-attr]
                        seen += at
                        if at >= len(data):
                            continue
                        first = data[at : at + 1]
                        if first == b"[":
                            self.bare, started = True, True
                            data = data[at + 1 :]
                        elif first != b"{":
                            raise TraceFormatError(f"{p}: not a JSON trace (starts with {data[at : at + 20]!r})")
                        else:
                            head = Outside(Path(p), trailer=False, budget=self.budget)
                            head.seen = seen + 1
                            at += 1
                    if not started:
                        assert head is not None
                        end = head.feed(data[at:] if at else data)
                        if end is None:
                            continue
                        self.meta = head.meta()
                        self.notes.extend(head.notes)
                        started = True
                        data = data[at + end :]
                yield data
        except TruncatedTrace as exc:
            self.truncated = exc.message
            if not started:
                raise
        if not started:
            if head is None:
                raise TraceFormatError(f"{p}: empty file")
            raise TraceFormatError(f"{p}: invalid JSON (no traceEvents array found)")
