"""Streaming decoder of Kineto / torch.profiler / Chrome-trace JSON.

A trace is ``{..., "traceEvents": [ev, ev, ...], ...}`` or a bare ``[ev, ...]``,
optionally gzip-compressed. Big ones (1 GB and more) must never be loaded
whole, so the decoder:

1. decompresses in large blocks on a reader thread (zlib releases the GIL, so
   decompression overlaps with parsing on a second core);
2. finds event boundaries inside the ``traceEvents`` array with a regex scan
   for ``}\\s*,\\s*{`` candidates and validates a candidate by parsing
   ``[`` + chunk + ``]`` with orjson. A candidate inside a string or a nested
   object leaves an unclosed string/bracket in the prefix, so the parse fails
   and an earlier candidate is tried: a chunk is never split wrongly;
3. quotes the numbers of ``ts``, ``dur``, ``pid``, ``tid`` and ``id`` before
   parsing, because Kineto writes timestamps as float microseconds with
   nanosecond fractions (``1712195495519689.047``): 19 significant digits,
   more than a double holds. The text is converted to exact int64 ns later,
   vectorised (``text_us_to_ns``);
4. turns each chunk's events into one Arrow struct array in C++
   (``pa.array(events, type=EVENT_TYPE)``), so no Python loop runs per event
   on the fast path.

The top-level keys other than ``traceEvents`` (deviceProperties,
distributedInfo, displayTimeUnit, baseTimeNanoseconds, ...) come back as
``meta`` once the stream ends.
"""

from __future__ import annotations

import contextlib
import queue
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson
import pyarrow as pa

from tracekit.errors import TraceFormatError

BLOCK_BYTES = 8 << 20  # decompressed bytes per block: large, so per-chunk overhead is small
GZIP_MAGIC = b"\x1f\x8b"

# Exact timestamps: orjson parses "ts"/"dur" into doubles (lossy beyond ~16
# digits); their text is pulled out separately with a regex that starts with a
# literal, which Python's re scans for at memchr speed.
TS_TEXT_RE = re.compile(rb'"ts":\s*(-?[0-9][0-9.eE+\-]*)')
DUR_TEXT_RE = re.compile(rb'"dur":\s*(-?[0-9][0-9.eE+\-]*)')
# pid/tid are ints in most events and strings ("Spans", "Traces") in a few: a
# plain byte replace moves the string ones to their own keys before parsing.
_STR_KEYS = ((b'"pid": "', b'"pidS": "'), (b'"tid": "', b'"tidS": "'), (b'"pid":"', b'"pidS":"'), (b'"tid":"', b'"tidS":"'))
_BOUNDARY_RE = re.compile(rb"\}\s*,\s*\{")
_EVENTS_KEY_RE = re.compile(rb'"traceEvents"\s*:\s*\[')

_i64 = pa.int64()
_str = pa.string()
_f64 = pa.float64()

# Args tracekit reads, by their Kineto names. Everything else stays in the raw
# event (other_events keeps it as JSON text).
ARG_FIELDS: dict[str, pa.DataType] = {
    "External id": _i64,
    "correlation": _i64,
    "device": _i64,
    "stream": _i64,
    "grid": pa.list_(_i64),
    "block": pa.list_(_i64),
    "registers per thread": _i64,
    "shared memory": _i64,
    "bytes": _i64,
    "Sequence number": _i64,
    "Device Type": _i64,
    "Device Id": _i64,
    "Addr": _i64,
    "Bytes": _i64,
    "Total Allocated": _i64,
    "Total Reserved": _i64,
}
ARGS_TYPE = pa.struct([pa.field(k, t) for k, t in ARG_FIELDS.items()])
EVENT_TYPE = pa.struct(
    [
        pa.field("ph", _str),
        pa.field("cat", _str),
        pa.field("name", _str),
        pa.field("ts", _f64),
        pa.field("dur", _f64),
        pa.field("pid", _i64),
        pa.field("tid", _i64),
        pa.field("pidS", _str),
        pa.field("tidS", _str),
        pa.field("id", _i64),
        pa.field("bp", _str),
        pa.field("args", ARGS_TYPE),
    ]
)


@dataclass
class DecodeStats:
    bytes_in: int = 0  # decompressed bytes read
    chunks: int = 0
    sanitized_chunks: int = 0  # chunks that needed the slow, coercing path
    warnings: list[str] = field(default_factory=list)


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
    text = fix_keys(buf[:cut])
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
    cands = [m.start() + 1 for m in _BOUNDARY_RE.finditer(buf)]
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


def fix_keys(chunk: bytes) -> bytes:
    for a, b in _STR_KEYS:
        if a in chunk:
            chunk = chunk.replace(a, b)
    return chunk


@dataclass
class Chunk:
    """One run of events: parsed dicts and the (key-fixed) bytes they came from."""

    events: list[Any]
    text: bytes


class TraceReader:
    """Iterate a trace as lists of raw event dicts (numbers of ts/dur/pid/tid/id as text).

    After iteration ``meta`` holds the top-level keys other than traceEvents
    and ``stats`` the byte counts. Raises TraceFormatError for input that is
    not a trace; TruncatedTrace (a TraceFormatError) when the input ends early,
    after every event before the cut has been yielded.
    """

    def __init__(self, path: str | Path, *, block: int = BLOCK_BYTES) -> None:
        self.path = Path(path)
        self.block = block
        self.meta: dict[str, Any] = {}
        self.stats = DecodeStats()
        self.bare_list = False

    def __iter__(self) -> Iterator[Chunk]:
        blocks = _blocks(self.path, self.block)
        buf = b""
        started = False
        try:
            # --- header: find where the events start
            for data in blocks:
                self.stats.bytes_in += len(data)
                buf += data
                s = buf.lstrip()
                if not s:
                    continue
                if s[:1] == b"[":
                    self.bare_list = True
                    buf = s[1:]
                    started = True
                    break
                if s[:1] != b"{":
                    raise TraceFormatError(f"{self.path}: not a JSON trace (starts with {s[:20]!r})")
                m = _EVENTS_KEY_RE.search(buf)
                if m:
                    prefix = buf[: m.end()]
                    try:
                        pre = orjson.loads(prefix + b"]}")
                    except orjson.JSONDecodeError:
                        raise TraceFormatError(f"{self.path}: invalid JSON before traceEvents") from None
                    pre.pop("traceEvents", None)
                    self.meta.update(pre)
                    buf = buf[m.end() :]
                    started = True
                    break
            else:
                self._whole_small(buf)
                return
            # --- body: yield validated chunks
            for data in blocks:
                self.stats.bytes_in += len(data)
                buf += data
                if len(buf) < self.block:
                    continue
                sp = split_point(buf)
                if sp is None:
                    # One event can be large; only a long run without a valid boundary is corrupt.
                    if len(buf) > max(4 * self.block, 64 << 20):
                        off = self.stats.bytes_in - len(buf)
                        raise TraceFormatError(f"{self.path}: invalid JSON in traceEvents near byte {off}")
                    continue
                cut, events = sp
                buf = buf[cut:].lstrip().removeprefix(b",")
                self.stats.chunks += 1
                yield events
        except TruncatedTrace:
            if not started:
                m = _EVENTS_KEY_RE.search(buf)
                if m is None:
                    raise
                buf = buf[m.end() :]
            sp = split_point(buf)
            if sp is not None:
                self.stats.chunks += 1
                yield sp[1]
            raise
        # --- tail: the last events and the top-level keys after the array
        tail = buf.strip()
        if self.bare_list:
            text = fix_keys(tail)
            try:
                events = orjson.loads(b"[" + text)
            except orjson.JSONDecodeError:
                yield from self._salvage(tail)
                return
            if not isinstance(events, list):
                raise TraceFormatError(f"{self.path}: not a trace")
            self.stats.chunks += 1
            yield Chunk(events, text)
            return
        text = fix_keys(tail)
        try:
            obj = orjson.loads(b'{"traceEvents":[' + text)
        except orjson.JSONDecodeError:
            yield from self._salvage(tail)
            return
        events = obj.pop("traceEvents")
        # The suffix's keys were renamed too only if they matched pid/tid keys,
        # which top-level trace metadata does not use.
        self.meta.update(obj)
        self.stats.chunks += 1
        yield Chunk(events, text)

    def _salvage(self, tail: bytes) -> Iterator[Chunk]:
        sp = split_point(tail)
        if sp is not None:
            self.stats.chunks += 1
            yield sp[1]
        raise TruncatedTrace(f"{self.path}: JSON ends early or is invalid after the last complete event")

    def _whole_small(self, buf: bytes) -> None:
        """No traceEvents array was found: say precisely why."""
        s = buf.strip()
        if not s:
            raise TraceFormatError(f"{self.path}: empty file")
        try:
            obj = orjson.loads(s)
        except orjson.JSONDecodeError:
            raise TraceFormatError(f"{self.path}: invalid JSON (no traceEvents array found)") from None
        if isinstance(obj, dict) and "traceEvents" not in obj:
            raise TraceFormatError(f"{self.path}: no traceEvents in the trace")
        raise TraceFormatError(f"{self.path}: traceEvents is not an array")


# --------------------------------------------------------------------------- events -> Arrow
def events_to_struct(events: list[Any]) -> tuple[pa.StructArray, bool]:
    """The events as one struct array of EVENT_TYPE; True if the slow path ran.

    The fast path is pure C++. Events whose fields have unexpected types (an id
    as a string, args that are not an object, events that are not objects)
    make it raise; then every event is coerced field by field in Python.
    """
    try:
        return pa.array(events, type=EVENT_TYPE), False  # type: ignore[return-value]
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return pa.array([_sanitize(e) for e in events], type=EVENT_TYPE), True  # type: ignore[return-value]


_TOP_STR = ("ph", "cat", "name", "bp", "pidS", "tidS")


def _as_text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return repr(v)
    return orjson.dumps(v).decode()


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v if -(2**63) <= v < 2**63 else None
    if isinstance(v, float):
        return int(v) if v == v and abs(v) < 9.2e18 else None
    if isinstance(v, str):
        try:
            return _as_int(int(v, 0))
        except ValueError:
            return None
    return None


def _sanitize(e: Any) -> dict[str, Any] | None:
    if not isinstance(e, dict):
        return {"ph": "?invalid", "name": None}
    out: dict[str, Any] = {k: _as_text(e.get(k)) for k in _TOP_STR}
    for k in ("ts", "dur"):
        v = e.get(k)
        out[k] = float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
    for k in ("pid", "tid"):
        v = e.get(k)
        if isinstance(v, str) and _as_int(v) is None:
            out[k + "S"] = v
        else:
            out[k] = _as_int(v)
    out["id"] = _as_int(e.get("id"))
    args = e.get("args")
    if isinstance(args, dict):
        a: dict[str, Any] = {}
        for k, t in ARG_FIELDS.items():
            v = args.get(k)
            if v is None:
                continue
            if pa.types.is_list(t):
                a[k] = [_as_int(x) for x in v] if isinstance(v, list) else None
            else:
                a[k] = _as_int(v)
        out["args"] = a
    return out


_FLOAT_RE = r"^-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
_NUM_RE = r"^(?P<s>-?)(?P<i>[0-9]+)(?:\.(?P<f>[0-9]*))?$"


def text_us_to_ns(arr: pa.Array, *, offset_ns: int = 0) -> pa.Array:
    """Exact int64 ns from decimal microsecond text ("1712195495519689.047").

    Digits beyond the ns are truncated. Exponent notation falls back to float.
    Null or unparseable text gives null.
    """
    import pyarrow.compute as pc  # lazily: ingest does not need it (+11 MB RSS at import)

    if len(arr) == 0:
        return pa.array([], _i64)
    m = pc.extract_regex(arr, _NUM_RE)
    ip = pc.cast(pc.struct_field(m, "i"), _i64)
    frac = pc.struct_field(m, "f")
    frac = pc.utf8_rpad(pc.utf8_slice_codeunits(frac, 0, 3), 3, "0")
    fp = pc.cast(frac, _i64)
    ns = pc.add(pc.multiply(ip, 1000), fp)
    neg = pc.equal(pc.struct_field(m, "s"), "-")
    ns = pc.if_else(neg, pc.negate(ns), ns)
    # Exponent notation or other float text: the float path, rounded to ns.
    other = pc.fill_null(pc.and_(pc.is_null(m), pc.match_substring_regex(arr, _FLOAT_RE)), False)
    if pc.any(other).as_py():
        fl = pc.cast(pc.if_else(other, arr, pa.scalar(None, _str)), pa.float64(), safe=False)
        fl = pc.if_else(pc.is_finite(fl), fl, pa.scalar(None, pa.float64()))
        ns = pc.if_else(other, pc.cast(pc.round(pc.multiply(fl, 1000.0)), _i64, safe=False), ns)
    if offset_ns:
        ns = pc.add(ns, offset_ns)
    return ns


def text_to_int(arr: pa.Array) -> pa.Array:
    """int64 from integer text; null where the text is not an integer (e.g. "Spans")."""
    import pyarrow.compute as pc  # lazily: ingest does not need it (+11 MB RSS at import)

    if len(arr) == 0:
        return pa.array([], _i64)
    ok = pc.match_substring_regex(arr, r"^-?[0-9]{1,18}$")
    return pc.cast(pc.if_else(ok, arr, pa.scalar(None, _str)), _i64)


def read_events(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every event and the metadata, in memory (small traces and tests only)."""
    reader = TraceReader(path)
    events: list[dict[str, Any]] = []
    for chunk in reader:
        events.extend(chunk.events)
    return events, reader.meta


def exact_ns(values: pa.Array, text: bytes, pattern: re.Pattern[bytes], *, offset_ns: int = 0) -> tuple[pa.Array, bool]:
    """int64 ns of a ts/dur column (float µs), exact where the text allows.

    ``pattern`` finds every ``"ts": <number>`` in the chunk's text in document
    order; when their count equals the number of non-null values they belong
    to those events in order, and the text is converted exactly. Otherwise
    (the key also used inside args, say) the doubles are used, rounded to the
    ns, and False says the column may be inexact.
    """
    import pyarrow.compute as pc  # lazily: ingest does not need it (+11 MB RSS at import)

    n_valid = len(values) - values.null_count
    texts = pattern.findall(text) if n_valid else []
    if len(texts) == n_valid:
        if n_valid == 0:
            return pa.nulls(len(values), _i64), True
        exact = text_us_to_ns(pa.array(texts, pa.binary()).cast(_str), offset_ns=offset_ns)
        if values.null_count == 0:
            return exact, True
        base = pa.nulls(len(values), _i64)
        return pc.replace_with_mask(base, pc.is_valid(values), exact), True
    ns = pc.cast(pc.round(pc.multiply(values, 1000.0)), _i64, safe=False)
    if offset_ns:
        ns = pc.add(ns, offset_ns)
    return ns, False
