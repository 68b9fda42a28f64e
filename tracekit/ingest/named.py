"""The few events of a big trace whose name starts with a prefix, without parsing the others.

``read_named(path, prefix)`` finds every ``"<prefix>`` in the trace's bytes (a byte search over a
memory map: a few milliseconds per 100 MB), cuts out the event object around each hit, and runs the
reader (tracekit.ingest.reader.read_raw) over a small trace made of the file's own head, those events
and its own trailer. Every row of the raw tables is built from its event alone (ts + the trace's
baseTimeNanoseconds, dur, name, cat, pid/tid), so the rows are exactly the ones a read of the whole
file gives for those events; events of other names are simply absent.

A JSON string value that starts with ``prefix`` is written as ``"<prefix>...`` (the prefix is taken
as plain ASCII, which JSON writers do not escape), so no event named so is missed. Returns None
where the search cannot stand in for a full read (a gzip file, a bare list, no ``traceEvents``
near the start, a hit it cannot delimit, a small trace the reader refuses): the caller then reads
the whole file.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import orjson

from tracekit.errors import TraceFormatError
from tracekit.ingest.framing import GZIP_MAGIC
from tracekit.ingest.result import Counts, RawScan

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_HEAD_LIMIT = 256 << 20  # where the traceEvents key must start (the merge's limit too)
_TAIL_LIMIT = 64 << 10  # the trailer after the array: a few keys
_WINDOWS = (4 << 10, 64 << 10, 1 << 20)  # bytes decoded after a candidate start, widened on failure
_BACK = 64 << 10  # how far before a hit its event may start
_STRETCH = 16 << 20  # bytes searched between two releases of the mapped pages


def read_named(path: str | Path, prefix: str) -> RawScan | None:
    """The raw tables of the events whose ``name`` starts with ``prefix`` (see the module doc), or
    None where only a full read can say. No such event: no tables (and an empty ``meta``)."""
    p = Path(path)
    needle = b'"' + prefix.encode("ascii")
    with open(p, "rb") as fh:
        if fh.read(2) == GZIP_MAGIC or os.fstat(fh.fileno()).st_size == 0:
            return None
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            m = _EVENTS_KEY.search(buf, 0, min(len(buf), _HEAD_LIMIT))
            if m is None:
                return None
            close = _array_close(buf, m.end())
            if close is None:
                return None
            events = _events(buf, needle, prefix, m.end(), close)
            if events is None:
                return None
            if not events:
                return RawScan({}, {}, Counts(), 0, None)
            mini = buf[: m.end()] + b",\n".join(events) + buf[close:]
    return _read_bytes(mini, p.name)


def _array_close(buf: Any, lo: int) -> int | None:
    """Offset of the ``]`` that closes traceEvents (which opens before ``lo``): the first ``]`` near
    the end after which the rest of the file ends a JSON object (the trailer's keys). Any ``]``
    inside the array leaves the rest of its event (and the array's ``]``) unbalanced; one inside the
    trailer comes after the right one."""
    at = max(lo, len(buf) - _TAIL_LIMIT) - 1
    while True:
        at = buf.find(b"]", at + 1)
        if at < 0:
            return None
        try:
            orjson.loads(b'{"a":[]' + buf[at + 1 :])
            return at
        except orjson.JSONDecodeError:
            continue


def _events(buf: Any, needle: bytes, prefix: str, lo: int, hi: int) -> list[bytes] | None:
    """The text of each event between ``lo`` and ``hi`` named ``prefix...``, in file order; None
    where a hit cannot be delimited. The map is searched a stretch at a time, each stretch's pages
    given back after it (they stay in the page cache): the process's resident size does not grow
    with the file."""
    found: dict[int, bytes] = {}
    for start in range(lo, hi, _STRETCH):
        end = min(hi, start + _STRETCH)
        at = buf.find(needle, start, min(hi, end + len(needle) - 1))
        while 0 <= at < end:
            span = _event_at(buf, at, prefix, lo)
            if span is None:
                return None
            if span[1]:  # the hit is this event's name (not some other event's argument)
                found[span[0]] = span[1]
            at = buf.find(needle, at + len(needle), min(hi, end + len(needle) - 1))
        _release(buf, start, end)
    return [found[k] for k in sorted(found)]


def _release(buf: Any, start: int, end: int) -> None:
    """Drop the mapped pages of [start, end) from this process (a no-op where madvise is missing)."""
    advise = getattr(buf, "madvise", None)
    if advise is None or not hasattr(mmap, "MADV_DONTNEED"):
        return
    page = mmap.PAGESIZE
    a = start - start % page
    with contextlib.suppress(OSError, ValueError):
        advise(mmap.MADV_DONTNEED, a, end - a)


def _event_at(buf: Any, hit: int, prefix: str, lo: int) -> tuple[int, bytes] | None:
    """(start, text) of the top-level event holding the string at ``hit``; text empty where that
    event's name is not the string (the hit is inside its args). None: not found."""
    floor = max(lo, hit - _BACK)
    start = hit
    while True:
        start = buf.rfind(b"{", floor, start)
        if start < 0:
            return None
        obj, text = _decode(buf, start)
        if obj is None or start + len(text) <= hit:
            continue  # not an object, or one that ends before the hit: look further back
        if not isinstance(obj, dict) or "ph" not in obj:
            continue  # an object nested in the event (its args): the event starts further back
        name = obj.get("name")
        return (start, text if isinstance(name, str) and name.startswith(prefix) else b"")


def _decode(buf: Any, start: int) -> tuple[Any, bytes]:
    """The JSON value starting at ``start`` and its bytes, or (None, b"") if none is there."""
    dec = json.JSONDecoder()
    for width in _WINDOWS:
        raw = buf[start : start + width]
        text = raw.decode("utf-8", errors="replace")
        try:
            obj, end = dec.raw_decode(text)
        except json.JSONDecodeError:
            if start + width >= len(buf):
                break
            continue
        return obj, text[:end].encode("utf-8")
    return None, b""


def _read_bytes(data: bytes, name: str) -> RawScan | None:
    from tracekit.ingest.reader import read_raw

    fd, tmp = tempfile.mkstemp(prefix="tracekit-named-", suffix=f"-{name}")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        res = read_raw(tmp)
    except TraceFormatError:
        return None
    finally:
        os.unlink(tmp)
    return None if res.truncated else res
