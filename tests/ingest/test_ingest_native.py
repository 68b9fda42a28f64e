"""The native scanner (tracekit.ingest._kscan + tracekit.ingest.native) against the DuckDB reader and a
Python reference: same tables on real traces, exact timestamps, any block size, bad input."""

from __future__ import annotations

import gzip
import json
import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import CORPUS, CORPUS_ABSENT, FIXTURES, corpus_traces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracekit.errors import TraceFormatError
from tracekit.ingest import TABLES_OUT, FileResult, ingest, read_file
from tracekit.ingest import native as ingest_native
from tracekit.store.rundir import RunDir


def test_native_scanner_is_built_and_used_by_default() -> None:
    # The DuckDB fallback would hide a broken build: CI must build and use the extension.
    assert ingest_native.available()


def _read(path: Path, engine: str, monkeypatch: pytest.MonkeyPatch) -> FileResult:
    monkeypatch.setenv("TRACEKIT_INGEST_ENGINE", engine)
    return read_file(path)


def _rows(t: Any) -> list[str]:
    return sorted(map(repr, t.to_pylist()))


def _same(a: FileResult, b: FileResult) -> None:
    assert a.counts.as_dict() == b.counts.as_dict()
    assert a.meta == b.meta and a.truncated == b.truncated and a.rank == b.rank
    for t in TABLES_OUT:
        assert a.tables[t].schema == b.tables[t].schema, t
        assert _rows(a.tables[t]) == _rows(b.tables[t]), t


def _real_traces() -> list[Path]:
    """The committed recordings, and every corpus trace; without the corpus, one entry that skips and says so."""
    found = corpus_traces(CORPUS) if CORPUS.is_dir() else [CORPUS / "(corpus absent)"]
    return found + sorted(FIXTURES.glob("gpu/*.json.gz")) + sorted(FIXTURES.glob("cpu/*.json.gz")) + [
        FIXTURES / "ncu" / "compiled_llama-3.2-1b_b1.json.gz",
        FIXTURES / "record_gpu_smoke" / "trace.json.gz", FIXTURES / "tp_h200" / "ranks" / "1" / "trace.json.gz"]


@pytest.mark.parametrize("path", _real_traces(), ids=lambda p: p.name if p.parent.name in ("hta", "gpu", "cpu") else str(p.parent.name))
@pytest.mark.slow
def test_same_tables_as_the_duckdb_reader_on_real_traces(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a real trace (every corpus trace, the committed H200 and CPU recordings)
    if not path.exists():
        pytest.skip(CORPUS_ABSENT)
    # WHEN both readers ingest it
    # THEN counts, metadata, schemas and every row of every table are the same
    _same(_read(path, "native", monkeypatch), _read(path, "duckdb", monkeypatch))


@pytest.mark.parametrize("reader", ["native", "duckdb"])
def test_concrete_inputs_are_read_for_cpu_ops(reader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # an Inductor kernel's op on the H200 carries its element counts (xnumel, r0_numel) as concrete inputs
    cpu = _read(FIXTURES / "ncu" / "compiled_llama-3.2-1b_b1.json.gz", reader, monkeypatch).tables["cpu_ops"]
    rows = cpu.to_pandas()
    rms = rows[rows["name"] == "triton_red_fused__to_copy_add_embedding_mean_mul_pow_rsqrt_0"]
    assert len(rms) and set(rms["concrete_inputs"]) == {'["","","","","1","2048"]'}
    # kept only where some input has a value: every Inductor op; never a list of "" alone
    tri = rows["name"].str.startswith("triton_")
    assert rows.loc[tri, "concrete_inputs"].notna().all() and rows["concrete_inputs"].isna().sum() > 100
    assert not rows["concrete_inputs"].isin(['[""]', '["",""]', "[]"]).any()


@pytest.mark.parametrize("reader", ["native", "duckdb"])
def test_input_strides_kept_only_for_expanded_inputs(reader: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    strides = {"dense": [[2048, 1], []], "expanded": [[2048, 1], [], [1, 0]], "tens": [[10, 1], [100, 10]],
               "text": ["0", [20, 1]], "nested": [[[0]], [3, 1]], "spaced": [[1, 0]], "absent": None}
    events = [{"ph": "X", "cat": "cpu_op", "name": f"aten::{k}", "pid": 1, "tid": 1, "ts": i, "dur": 1,
               "args": {"Input Dims": [[4, 4]], **({"Input Strides": v} if v is not None else {})}}
              for i, (k, v) in enumerate(strides.items())]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))  # ", " separators: the zero follows a space
    rows = _read(path, reader, monkeypatch).tables["cpu_ops"].to_pandas().set_index("name")["input_strides"]
    kept = {k.split("::")[1]: v for k, v in rows.items() if isinstance(v, str)}
    assert kept == {"expanded": "[[2048,1],[],[1,0]]", "nested": "[[[0]],[3,1]]", "spaced": "[[1,0]]"}


# Strings that look like event boundaries, escapes and non-ASCII text.
_tricky = st.sampled_from(["}, {", "},{", '"}, {"', "[{", "}]", "\\", '"ts": 1', "é", "\u2028", "😀", "\x01", "[memory]"])
_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=10) | _tricky
_number = st.integers(-(2**62), 2**62) | st.floats(allow_nan=False, allow_infinity=False, width=64)
_json = st.recursive(st.none() | st.booleans() | _number | _text, lambda c: st.lists(c, max_size=3) | st.dictionaries(_text, c, max_size=3), max_leaves=6)
_event = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "i", "I", "M", "C", "f", "s", "b"]),
        "name": _text,
        "cat": st.sampled_from(["cpu_op", "Kernel", "gpu_memcpy", "cuda_runtime", "user_annotation", "gpu_user_annotation", "ac2g", "weird"]),
        "pid": st.integers(0, 2**40) | st.sampled_from(["Spans", "7"]),
        "tid": st.integers(-5, 2**40),
        # Kineto's text form (float us with ns digits) is generated as text, below
        "ts": st.decimals(min_value=-(10**15), max_value=10**16, places=3, allow_nan=False, allow_infinity=False),
    },
    optional={
        "dur": st.decimals(min_value=-100, max_value=10**7, places=4, allow_nan=False, allow_infinity=False),
        "id": st.integers(0, 2**31),
        "bp": st.just("e"),
        "args": st.dictionaries(
            st.sampled_from(["External id", "correlation", "device", "stream", "Input Dims", "Concrete Inputs", "Bytes",
                             "Addr", "sm", "x", "y"]) | _text,
            _json, max_size=4),
    },
)


def _dump(doc: Any, indent: int | None) -> bytes:
    def default(o: Any) -> Any:
        if isinstance(o, Decimal):
            return f"§dec§{o}"
        raise TypeError

    text = json.dumps(doc, indent=indent, default=default, ensure_ascii=False)
    # "§dec§1.5" -> 1.5: the decimals go out as bare numbers with every digit they have
    return re.sub(r'"§dec§(-?[0-9.E+-]+)"', r"\1", text).encode()


def _ref_ns(v: Decimal) -> int:
    return int((v * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(events=st.lists(_event | st.integers() | st.just([1, {"a": 2}]), min_size=1, max_size=25), indent=st.sampled_from([None, 1]),
       gz=st.booleans(), block=st.sampled_from([1, 7, 64, 4096]))
def test_any_events_any_block_size_match_the_reference(tmp_path: Path, events: list[Any], indent: int | None, gz: bool, block: int) -> None:
    # GIVEN generated events (odd types, escapes, nested args, ns-digit timestamps) in a file
    doc = {"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": 0, "trailer": [{"a": 1}]}
    data = _dump(doc, indent)
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(data) if gz else data)
    # WHEN it is scanned in blocks of a few bytes and in one block
    small = ingest_native.scan(p, block=block)
    big = ingest_native.scan(p, block=1 << 20)
    # THEN both saw every element, and agree column for column
    assert small.rows == big.rows == len(events)
    assert small.truncated is None and big.meta == small.meta == {"schemaVersion": 1, "baseTimeNanoseconds": 0, "trailer": [{"a": 1}]}
    for k, v in big.cols.items():
        assert (v if isinstance(v, int) else bytes(v)) == (small.cols[k] if isinstance(v, int) else bytes(small.cols[k])), k
    # AND names are unescaped text, timestamps exact ns (the reference goes through Decimal, not floats)
    names = big.dictionary("name").to_pylist()
    route = big.arr("route", np.uint8)
    seen = np.zeros(ingest_native.N_ROUTES, dtype=np.int64)
    for i, e in enumerate(events):
        r = int(route[i])
        k = int(seen[r])  # the element's position among the elements of its route
        seen[r] += 1
        if not isinstance(e, dict):
            assert r == ingest_native.R_SKIP_NOTOBJ
            continue
        assert names[big.arr(f"r{r}.name", np.int32)[k]] == e["name"]
        flags = int(big.arr(f"r{r}.flags", np.uint8)[k])
        want = _ref_ns(e["ts"])
        if -(2**63) <= want < 2**63:
            assert flags & ingest_native.F_TS_OK and big.arr(f"r{r}.ts", np.int64)[k] == want, (e["ts"], want)
        if "dur" in e:  # 4 decimals: the 4th is rounded half away from zero
            got = big.arr(f"r{r}.dur", np.int64)[k]
            assert flags & ingest_native.F_DUR_OK and got == _ref_ns(e["dur"]), (e["dur"], got)
    assert [big.n(r) for r in range(ingest_native.N_ROUTES)] == seen.tolist()
    # AND ingest accounts for every element (the DuckDB reader is compared on real traces above:
    # on generated odd types its coercing path goes through doubles, so it is not the reference here)
    tables = read_file(p)
    other = [e for e in events if isinstance(e, dict)]
    assert tables.counts.events_read == len(events)
    assert sum(tables.counts.events_by_table.values()) + sum(tables.counts.skipped.values()) == len(events)
    kept = tables.tables["other_events"]["args"].to_pylist()
    for text in kept:  # other events keep args and extras as valid JSON text
        if text is not None:
            assert isinstance(json.loads(text), dict)
    assert len(other) >= tables.tables["other_events"].num_rows


@pytest.mark.parametrize("block", [3, 1 << 20])
def test_invalid_json_mid_file_keeps_the_events_before_it(tmp_path: Path, block: int) -> None:
    # GIVEN a trace whose 3000th event is broken JSON
    ev = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(5000)]
    text = json.dumps({"traceEvents": ev}).encode()
    at = text.index(b'"op3000"')
    p = tmp_path / "bad.json"
    p.write_bytes(text[:at] + b"op3000" + text[at + 8 :])  # a bare word where a string belongs
    # WHEN it is scanned / ingested
    s = ingest_native.scan(p, block=block)
    # THEN the 3000 events before it are kept and the reason names the byte
    assert s.rows == 3000 and s.truncated is not None and "invalid JSON in traceEvents at byte" in s.truncated
    with pytest.raises(TraceFormatError, match="invalid JSON"):
        ingest([p], tmp_path / "run")
    run = RunDir(tmp_path / "run")
    assert run.status == "incomplete" and run.read_table("cpu_ops").num_rows == 3000


def test_escaped_keys_unicode_and_exponent_numbers(tmp_path: Path) -> None:
    # GIVEN escapes in names and keys, surrogate pairs, and numbers in exponent form
    raw = (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a\\"b\\u00e9\\ud83d\\ude00\\n", "pid": 1, "tid": 1, '
           b'"ts": 1.7121954955196891e3, "dur": 2E-3, "args": {"External id": 4.0e1, "Input Dims": [ [1, 2] , [] ]}},'
           b' {"ph": "C", "name": "c", "pid": 0, "ts": 5, "args": {"v": -1.5e2, "b": true, "s": "x"}},'
           b' {"ph": "M", "name": "m", "pid": 0, "args": { "q" : "a \\"b\\\\ \\u00e9 } ]" , "l": [ 1 , { "k": null } ] }, "id": 3 }]}')
    p = tmp_path / "t.json"
    p.write_bytes(raw)
    t = read_file(p).tables
    cpu = t["cpu_ops"].to_pylist()[0]
    # THEN the name is unescaped, the timestamps exact, the int arg integral, shapes minified
    assert cpu["name"] == 'a"bé😀\n'
    assert cpu["ts_ns"] == 1712195 and cpu["dur_ns"] == 2  # 1712.1954955... us -> ns rounded; 0.002 us -> 2 ns
    assert cpu["external_id"] == 40 and cpu["input_dims"] == "[[1,2],[]]"
    # AND an unmodelled event keeps its args and extras as minified JSON with the same values
    (other,) = t["other_events"].to_pylist()
    assert json.loads(other["args"]) == {"args": {"q": 'a "b\\ é } ]', "l": [1, {"k": None}]}, "id": 3}
    assert " " not in other["args"].replace('a \\"b\\\\ \\u00e9 } ]', "")
    # AND a counter keeps only its numeric args
    c = t["counters"].to_pylist()
    assert [(r["metric"], r["value"]) for r in c] == [("c.v", -150.0)]


_BASE = json.dumps({"traceEvents": [
    {"ph": "X", "cat": "kernel", "name": "k\u00e9\\\"", "pid": 1, "tid": 2, "ts": 1712195495519689.047, "dur": 1.5,
     "args": {"External id": 3, "grid": [1, 2, 3], "Input Dims": [[1, 2]], "x": [{"a": None}, True, -1e5]}},
    {"ph": "C", "name": "c", "pid": 0, "ts": 5, "args": {"v": 1, "w": "s"}},
    {"ph": "i", "name": "[memory]", "ts": 6, "args": {"Bytes": -5, "Addr": 12}},
    {"ph": "s", "cat": "ac2g", "id": 7, "pid": 1, "tid": 1, "ts": 1, "name": "x"}, 5, "str", None], "k": 1}, indent=1).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.sampled_from(list(b'{}[]",:\\u0123456789.eE+-tfnl \n\xc3\xa9\xff\x00')),
                                st.sampled_from(["set", "insert", "delete"])), min_size=1, max_size=6),
       block=st.sampled_from([1, 5, 64, 1 << 20]))
@pytest.mark.slow
def test_mutated_bytes_never_crash_and_never_pass_silently(tmp_path: Path, edits: list[Any], block: int) -> None:
    # GIVEN a valid trace with a few bytes replaced, inserted or deleted
    b = bytearray(_BASE)
    for where, byte, op in edits:
        i = int(where * len(b))
        if op == "set":
            b[i] = byte
        elif op == "insert":
            b.insert(i, byte)
        elif len(b) > 1:
            del b[i]
    p = tmp_path / "m.json"
    p.write_bytes(bytes(b))
    # WHEN it is scanned THEN it is a one-line TraceFormatError, or rows with every element counted;
    # a file that is not exactly valid JSON is never reported complete
    try:
        s = ingest_native.scan(p, block=block)
    except TraceFormatError as exc:
        assert "\n" not in exc.message
        return
    try:
        json.loads(bytes(b))
        valid = True
    except (ValueError, UnicodeDecodeError):
        valid = False
    if not valid:
        assert s.truncated is not None
    assert len(s.arr("route", np.uint8)) == s.rows == sum(s.n(r) for r in range(ingest_native.N_ROUTES)) > 0
