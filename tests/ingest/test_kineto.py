"""Reading a trace file: inflate, event boundaries, metadata around the array, bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracekit.errors import TraceFormatError
from tracekit.ingest import native as ingest_native
from tracekit.ingest.framing import split_point
from tracekit.ingest.native import scan

# Strings that look like event boundaries must never be split on.
_tricky = st.sampled_from(["}, {", "},{", '"}, {"', "[{", "}]", "\\", "ts", '"ts": 1'])
_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12) | _tricky
_event = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "i", "M", "C", "f", "s"]),
        "name": _text,
        "cat": st.sampled_from(["cpu_op", "kernel", "cuda_runtime", "user_annotation", "weird"]),
        "pid": st.integers(0, 2**31) | st.sampled_from(["Spans", "Traces"]),
        "tid": st.integers(0, 2**31),
        "ts": st.integers(0, 2**40),
    },
    optional={
        "dur": st.integers(0, 10**6),
        "args": st.dictionaries(_text, st.integers() | _text | st.lists(st.dictionaries(_text, st.integers(), max_size=2), max_size=2), max_size=3),
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(_event, min_size=1, max_size=15), cut=st.integers(1, 4000), indent=st.booleans())
def test_split_point_never_splits_inside_an_event(events: list[dict], cut: int, indent: bool) -> None:
    # GIVEN a serialised event array cut at an arbitrary byte
    body = json.dumps(events, indent=1 if indent else None)[1:-1].encode()
    buf = body[: min(cut, len(body))]
    sp = split_point(buf)
    if sp is None:
        return
    i, chunk = sp
    # THEN the chunk is exactly a prefix of whole events
    n = len(chunk.events)
    assert 1 <= n <= len(events)
    assert [e["name"] for e in chunk.events] == [e["name"] for e in events[:n]]
    assert buf[i:].lstrip().startswith(b",") or i == len(buf.rstrip())


def test_meta_before_and_after_events(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(b'{"schemaVersion": 1, "baseTimeNanoseconds": 5, "traceEvents": [{"ph":"X","name":"a","ts":1,"dur":2}], "traceName": "n", "INFO": ["}, {"]}')
    s = scan(p)
    assert s.rows == 1 and s.meta == {"schemaVersion": 1, "baseTimeNanoseconds": 5, "traceName": "n", "INFO": ["}, {"]}
    assert s.offset_ns == 5 and s.truncated is None


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "empty"),
        (b"hello", "not a JSON trace"),
        (b'{"schemaVersion": 1}', "no traceEvents"),
        (b'{"traceEvents": 5}', "not an array"),
    ],
)
def test_bad_input_is_a_one_line_error(tmp_path: Path, content: bytes, needle: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(TraceFormatError) as ei:
        scan(p)
    assert needle in ei.value.message and "\n" not in ei.value.message


def test_truncated_gzip_keeps_events_before_the_cut(tmp_path: Path) -> None:
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(20000)]
    data = gzip.compress(orjson.dumps({"traceEvents": events}))
    p = tmp_path / "t.json.gz"
    p.write_bytes(data[: len(data) // 2])
    s = scan(p, block=1 << 16)
    assert s.truncated is not None and "truncated" in s.truncated
    assert 0 < s.rows < 20000
    names = s.dictionary("name").to_pylist()
    assert s.n(ingest_native.R_CPU) == s.rows
    assert [names[c] for c in s.arr(f"r{ingest_native.R_CPU}.name", np.int32)] == [f"op{i}" for i in range(s.rows)]


def _write_tricky_trace(tmp_path: Path, events: list[dict], bare: bool, gz: bool, cut: float | None) -> Path:
    """The events as a bare array or inside a document whose trailer holds strings that look like
    array ends and event boundaries; gzipped or not; cut at a fraction of its bytes or whole."""
    doc = events if bare else {"schemaVersion": 1, "traceEvents": events, "INFO": ["}, {", "]", "x]}"], "baseTimeNanoseconds": 7}
    data = json.dumps(doc, indent=1).encode()
    if cut is not None:
        data = data[: int(len(data) * cut)]
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(data) if gz else data)
    return p


@pytest.mark.parametrize("block", [64, 4096])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(events=st.lists(_event, min_size=1, max_size=40), bare=st.booleans(), gz=st.booleans(), cut=st.none() | st.floats(0.3, 0.99))
def test_extract_array_gives_exactly_the_events_or_a_prefix(tmp_path: Path, block: int, events: list[dict], bare: bool, gz: bool, cut: float | None) -> None:
    from tracekit.ingest.duckdb_reader import extract_array

    # GIVEN a trace whose trailer holds strings that look like array ends and event boundaries
    p = _write_tricky_trace(tmp_path, events, bare, gz, cut)
    out = tmp_path / "x"
    out.mkdir(exist_ok=True)
    try:
        ex = extract_array(p, out, block=block)
    except TraceFormatError:
        assert cut is not None  # nothing complete before the cut: an error, never a wrong array
        return
    got = json.loads(ex.array.read_bytes())  # json, not orjson: ints beyond 64 bits stay exact
    if ex.truncated is None:
        assert got == events
        if not bare:
            assert ex.meta == {"schemaVersion": 1, "INFO": ["}, {", "]", "x]}"], "baseTimeNanoseconds": 7}
    else:
        assert cut is not None and got == events[: len(got)] and len(got) < len(events)


@pytest.mark.parametrize("bare", [True, False])
def test_a_cut_inside_nested_args_that_ends_in_a_bracket_is_a_truncated_prefix(tmp_path: Path, bare: bool) -> None:
    from tracekit.ingest.duckdb_reader import extract_array

    # GIVEN a trace cut right after a nested list of objects inside an event's args: the file ends in
    # "]" and the text before it has "}, {" boundaries that parse from where they stand
    events = [{"ph": "X", "name": "a", "ts": 1}, {"ph": "X", "name": "b", "ts": 2, "args": {"k": [{"x": 1}, {"y": 2}]}},
              {"ph": "X", "name": "c", "ts": 3}]
    doc = events if bare else {"traceEvents": events}
    data = json.dumps(doc, indent=1).encode()
    p = tmp_path / "t.json"
    p.write_bytes(data[: data.index(b"]") + 1])
    # WHEN the DuckDB reader's extraction reads it
    ex = extract_array(p, tmp_path)
    # THEN the complete events before the cut, marked truncated (never the cut text as a whole array)
    assert json.loads(ex.array.read_bytes()) == events[:1] and ex.truncated is not None


def test_inflate_is_the_same_with_isal_and_zlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from tracekit.ingest.framing import _inflate, _inflater

    # GIVEN a two-member gzip file, whole and cut
    raw = [orjson.dumps({"traceEvents": [{"ph": "X", "name": f"e{i}", "ts": i} for i in range(n)]}) for n in (3000, 2000)]
    data = gzip.compress(raw[0]) + gzip.compress(raw[1])
    whole, cut = tmp_path / "w.json.gz", tmp_path / "c.json.gz"
    whole.write_bytes(data)
    cut.write_bytes(data[: len(data) // 3])
    got = {}
    for mod in ("isal", "zlib"):
        if mod == "zlib":
            monkeypatch.setitem(sys.modules, "isal", None)  # as if isal were not installed
        assert _inflater().__name__.endswith(mod + "_zlib" if mod == "isal" else "zlib")
        # WHEN both inflate them
        out = b"".join(_inflate(whole, 1 << 12))
        part = bytearray()
        with pytest.raises(EOFError):
            for b in _inflate(cut, 1 << 12):
                part += b
        got[mod] = (out, bytes(part))
    # THEN the same bytes: every member, and every byte before the cut
    assert got["isal"] == got["zlib"] and got["zlib"][0] == raw[0] + raw[1]
    assert 0 < len(got["zlib"][1]) < len(raw[0]) and raw[0].startswith(got["zlib"][1])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(events=st.lists(_event, min_size=1, max_size=40), bare=st.booleans(), gz=st.booleans(), cut=st.none() | st.floats(0.3, 0.99),
       piece=st.sampled_from([1, 100, 400, 1 << 20]))
def test_extract_pieces_hold_exactly_the_events_or_merge(tmp_path: Path, events: list[dict], bare: bool, gz: bool, cut: float | None, piece: int) -> None:
    from tracekit.ingest.duckdb_reader import extract_array, extract_pieces

    # GIVEN the traces above, split into pieces as small as one event
    p = _write_tricky_trace(tmp_path, events, bare, gz, cut)
    for d in ("a", "b"):
        (tmp_path / d).mkdir(exist_ok=True)
        for q in (tmp_path / d).iterdir():
            q.unlink()
    try:
        want = extract_array(p, tmp_path / "a", block=64)
    except TraceFormatError as exc:
        with pytest.raises(TraceFormatError) as ei:
            extract_pieces(p, tmp_path / "b", block=64, piece=piece)
        assert ei.value.message == exc.message  # THEN the same error
        return
    # WHEN the array is extracted in pieces
    got = extract_pieces(p, tmp_path / "b", block=64, piece=piece)
    if got.array == p:  # an uncompressed file that looks like a bare list is read in place, unchecked:
        assert want.array == p and not got.pieces  # the reader validates it (a cut one ending in "[]" does)
        return
    # THEN the pieces, each a valid array or (a split inside an event) an invalid one the reader
    # rejects, together hold exactly the extracted events, with the same metadata and truncation
    texts = [f.read_bytes() for f in got.files]
    try:
        parts = [json.loads(t) for t in texts]
    except json.JSONDecodeError:
        parts = None
    if parts is not None:
        assert [e for part in parts for e in part] == json.loads(want.array.read_bytes())
        if len(texts) == 1:
            assert texts[0] == want.array.read_bytes()
    else:
        assert len(texts) > 1  # only a split can make a piece invalid; the merge then restores the array
        from tracekit.ingest.duckdb_reader import _merge

        merged = _merge(got.files, got.seps, tmp_path / "b" / "merged.json", closed=True)
        assert merged.read_bytes() == want.array.read_bytes()
    assert got.meta == want.meta and got.truncated == want.truncated
