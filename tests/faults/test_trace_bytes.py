"""Fault class: trace bytes. Generated traces (cut, mutated, hostile numbers, non-events, nesting,
encodings, gzip damage, oversized metadata) through both readers, into a new run and over a good one.

Invariant: one line and an exit code (no traceback); a new run is complete and consistent or marked
incomplete; a good run replaced with --force is the old one byte for byte or a complete new one.
"""

from __future__ import annotations

import gzip
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from faultlib import (
    case,
    check_complete,
    cli,
    copy_run,
    env,
    events,
    examples,
    manifest,
    one_line,
    outside,
    outside_unchanged,
    same_or_complete,
    snapshot,
    trace_doc,
)
from hypothesis import given
from hypothesis import strategies as st

import tracekit.ingest.framing as framing

HOSTILE_NUMBERS = ["9223372036854775808", "-9223372036854775809", "1e400", "-1e400", "1" * 40, "1e-400", "-0",
                   "9223372036854775.807", "9223372036854775807000", "NaN", "Infinity", "0x10", "1.", ".5", "01"]
BYTES = list(b'{}[]",:\\0123456789.eE+-tfnl \n\xc3\xa9\xff\x00\x1b')


def _base(n: int, bare: bool, indent: int | None, extra: dict[str, Any]) -> bytes:
    ev = events(n)
    doc: Any = ev if bare else trace_doc(ev, **extra)
    return json.dumps(doc, indent=indent).encode()


@st.composite
def traces(draw: st.DrawFn) -> bytes:
    """Trace bytes: a valid small trace, then zero or more damages."""
    bare = draw(st.booleans())
    extra = draw(st.sampled_from([{}, {"baseTimeNanoseconds": 1000}, {"traceName": "x", "displayTimeUnit": "ms"},
                                  {"baseTimeNanoseconds": "@@9223372036854775807@@"},
                                  {"baseTimeNanoseconds": "@@1e400@@"}, {"distributedInfo": {"rank": "@@1e400@@"}}]))
    data = _base(draw(st.integers(1, 6)), bare, draw(st.sampled_from([None, 1])), extra)
    data = re.sub(rb'"@@(.*?)@@"', rb"\1", data)  # a bare number where Python could not write one
    kind = draw(st.sampled_from(["valid", "cut", "bytes", "number", "nonevent", "nest", "encoding", "meta"]))
    if kind == "cut":
        data = data[: draw(st.integers(0, max(0, len(data) - 1)))]
    elif kind == "bytes":
        b = bytearray(data)
        for where, byte, op in draw(st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.sampled_from(BYTES),
                                                       st.sampled_from(["set", "insert", "delete"])), min_size=1, max_size=5)):
            i = int(where * len(b))
            if op == "set" and b:
                b[i] = byte
            elif op == "insert":
                b.insert(i, byte)
            elif len(b) > 1:
                del b[i]
        data = bytes(b)
    elif kind == "number":
        field = draw(st.sampled_from([b'"ts": ', b'"dur": ', b'"pid": ', b'"correlation": ', b'"External id": ']))
        at = data.find(field, int(draw(st.floats(0, 1)) * len(data)))
        at = at if at >= 0 else data.find(field)
        if at >= 0:
            start = at + len(field)
            end = start
            while end < len(data) and data[end : end + 1] not in b",}\n":
                end += 1
            data = data[:start] + draw(st.sampled_from(HOSTILE_NUMBERS)).encode() + data[end:]
    elif kind == "nonevent":
        items = draw(st.lists(st.sampled_from(["1", '"s"', "null", "true", "[]", "[{}]", "{}", '{"ph": 5}', '{"ph": "X"}',
                                               '{"ph": "X", "ts": "abc", "cat": "kernel"}']), max_size=5))
        body = ", ".join(items).encode()
        data = b"[" + body + b"]" if bare else b'{"traceEvents": [' + body + b"]}"
    elif kind == "nest":
        depth = draw(st.sampled_from([10, 1100, 5000]))
        deep = b"[" * depth + b"1" + b"]" * depth
        where = draw(st.sampled_from(["header", "trailer", "event"]))
        ev = json.dumps(events(2)).encode()[1:-1]
        if where == "header":
            data = b'{"deep": ' + deep + b', "traceEvents": [' + ev + b"]}"
        elif where == "trailer":
            data = b'{"traceEvents": [' + ev + b'], "deep": ' + deep + b', "traceName": "t"}'
        else:
            data = b'{"traceEvents": [' + ev + b', {"ph": "X", "cat": "cpu_op", "name": "d", "ts": 1, "dur": 1, "args": {"x": ' + deep + b"}}]}"
    elif kind == "encoding":
        how = draw(st.sampled_from(["bom", "utf16", "latin1-name", "nul", "crlf"]))
        if how == "bom":
            data = b"\xef\xbb\xbf" + data
        elif how == "utf16":
            data = data.decode().encode("utf-16")
        elif how == "latin1-name":
            data = data.replace(b"gemm", b"g\xe9mm\xff", 1)
        elif how == "nul":
            data = data.replace(b"gemm", b"ge\\u0000mm\x00", 1)
        else:
            data = data.replace(b"\n", b"\r\n")
    elif kind == "meta":
        size = draw(st.sampled_from([100, 5000, 20000]))
        value = draw(st.sampled_from([b'"' + b"x" * size + b'"', b"[" + b"1," * size + b"1]",
                                      b"{" + b",".join(b'"k%d": %d' % (i, i) for i in range(size // 8)) + b"}",
                                      b" " * size + b"1"]))
        ev = json.dumps(events(2)).encode()[1:-1]
        data = draw(st.sampled_from([b'{"big": ' + value + b', "traceEvents": [' + ev + b"]}",
                                     b'{"traceEvents": [' + ev + b'], "big": ' + value + b', "baseTimeNanoseconds": 7}',
                                     b"{" + b" " * size + b'"traceEvents": [' + ev + b"]" + b" " * size + b"}"]))
    if draw(st.booleans()):
        gz = gzip.compress(data, compresslevel=1)
        damage = draw(st.sampled_from(["none", "none", "cut", "two members", "garbage after"]))
        if damage == "cut":
            gz = gz[: max(2, int(len(gz) * draw(st.floats(0.1, 0.95))))]
        elif damage == "two members":
            cut = len(data) // 2
            gz = gzip.compress(data[:cut]) + gzip.compress(data[cut:])
        elif damage == "garbage after":
            gz += b"not gzip"
        return gz
    return data


@examples(110)
@given(data=traces(), engine=st.sampled_from(["native", "duckdb"]), over_good=st.booleans(),
       small_meta=st.booleans())
@pytest.mark.slow
def test_trace_bytes_into_a_run(good_template: Path, data: bytes, engine: str, over_good: bool, small_meta: bool) -> None:
    case("trace bytes")
    with tempfile.TemporaryDirectory() as d, env(TRACEKIT_INGEST_ENGINE=engine):
        root = Path(d)
        src = root / "in" / "t.json.gz"
        src.parent.mkdir()
        src.write_bytes(data)
        out = root / "out"
        if over_good:
            copy_run(good_template, out)
        before = snapshot(out)
        around = outside(root, out)
        limit = framing.META_LIMIT
        if small_meta:  # the metadata limit at a size the generated bombs reach
            framing.META_LIMIT = 4096
        try:
            r = cli(["ingest", src, "--out", out, *(["--force"] if over_good else [])])
        finally:
            framing.META_LIMIT = limit
        one_line(r)
        outside_unchanged(around, root, out)
        if over_good:
            state = same_or_complete(before, out)
            assert (state == "same") == (r.rc != 0), (r.rc, state, r.err)
        elif r.rc == 0:
            check_complete(out)
        elif (out / "run.json").exists():
            assert manifest(out)["status"] == "incomplete"
        if r.rc == 0 and len(data) < 4000:  # analysis never sees a null time or a half table
            a = cli(["analyze", out])
            one_line(a)
            assert a.rc == 0, a.err
            check_complete(out)
