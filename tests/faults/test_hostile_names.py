"""Fault class: hostile names. Trace files, run directories, table files and event names made of
quotes, SQL, shell and glob characters, escape sequences, rich markup, bidi controls, line breaks and
long or odd Unicode, through ingest, analyze, report, query, export and diff.

Invariant: one line and an exit code (no traceback); nothing printed holds a raw control character;
nothing is executed (no ``PWNED`` file appears); nothing is written outside ``--out`` (and the file a
verb was asked to write).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from faultlib import (
    case,
    check_complete,
    cli,
    events,
    examples,
    foreign_part,
    nothing_executed,
    one_line,
    outside,
    outside_unchanged,
    trace_doc,
    write_trace,
)
from hypothesis import given
from hypothesis import strategies as st

PIECES = ["'", '"', "`", "$(touch PWNED)", "; COPY (select 1) TO 'PWNED.csv'; --", "*", "?", "[1]", "[bold]", "[/x]",
          "[link=file:///etc/passwd]", "\x1b[31m", "\x1b]0;PWNED\x07", "\x1b[2J", "\r", "\n", "\t", "\u202e", "\u2028",
          "é", "😀", "\u0301", " ", "..", "-", "--force", "%s", "{0}", "\\", "\x7f", "\x9b", "NUL", "CON", "~"]
_name = st.lists(st.sampled_from(PIECES) | st.text(min_size=1, max_size=4), min_size=1, max_size=6).map("".join)


def _filename(s: str) -> str:
    """A name the file system accepts: no '/', no NUL, at most 200 bytes, not '.' or '..'."""
    s = s.replace("/", "_").replace("\x00", "_")
    while len(s.encode("utf-8", "surrogatepass")) > 200:
        s = s[:-1]
    s = s.encode("utf-8", "replace").decode("utf-8")
    return s if s not in ("", ".", "..") else "x" + s


@examples(70)
@given(trace_name=_name, out_name=_name, event_name=_name, table_name=_name, gz=st.booleans(),
       verb=st.sampled_from(["report", "query", "export", "diff", "query-csv", "query-table"]))
@pytest.mark.slow
def test_hostile_names_everywhere(trace_name: str, out_name: str, event_name: str, table_name: str, gz: bool,
                                  verb: str) -> None:
    case("hostile names")
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "runs").mkdir()
        src = root / (_filename(trace_name) + (".json.gz" if gz else ".json"))
        ev = events(3)
        for e in ev:
            if e["cat"] in ("kernel", "cpu_op"):
                e["name"] = event_name + e["name"][-1]
        ev.append({"ph": "X", "cat": "user_annotation", "name": event_name, "pid": 1, "tid": 7, "ts": ev[0]["ts"], "dur": 5})
        write_trace(src, trace_doc(ev, traceName=event_name, distributedInfo={"backend": event_name}))
        out = root / "runs" / _filename(out_name)
        around = outside(root, out)
        # ingest and analyze the trace under its hostile name into a hostile --out
        for argv in (["ingest", src, "--out", out], ["analyze", out]):
            r = cli(argv, cwd=root)
            one_line(r)
        nothing_executed(root)
        if not out.is_dir():  # a name click reads as an option: a usage error, nothing written
            assert r.rc == 2, r.err
            outside_unchanged(around, root, out)
            return
        outside_unchanged(around, root, out)
        assert r.rc == 0, r.err
        check_complete(out)
        # a table file with a hostile name in the run: never a view, never SQL
        (out / "tables" / f"{_filename(table_name)}.parquet").write_bytes((out / "tables" / "runtime.parquet").read_bytes())
        target = root / "exports" / "x.pftrace"
        argv = {
            "report": ["report", out, "--html", root / "exports" / "r.html"],
            "query": ["query", "select run_id, name, count(*) as n from gpu_activity group by all", "--runs", root / "runs",
                      "--format", "json"],
            "query-csv": ["query", "select name, run_id from gpu_activity", "--runs", root / "runs", "--format", "csv"],
            "query-table": ["query", "select name, run_id from annotations", "--runs", root / "runs"],
            "export": ["export", out, "--out", target],
            "diff": ["diff", out, out],
        }[verb]
        r = cli(argv, cwd=root)
        one_line(r)
        assert r.rc == 0, r.err
        nothing_executed(root)
        if verb == "query":
            rows = [json.loads(x) for x in r.out.splitlines()]
            assert {x["run_id"] for x in rows} == {out.name}  # the run id is the folder's name, as it is
            assert sum(x["n"] for x in rows) == 3


@examples(25)
@given(run_id=_name, table=_name)
def test_hostile_names_in_a_dataset(run_id: str, table: str) -> None:
    """A dataset whose run ids and table folders carry hostile names: queried as data, never as SQL."""
    case("hostile names")
    import pyarrow as pa

    from tracekit.store.dataset import init_dataset, write_run_tables

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        ds = init_dataset(root / "ds")
        t = pa.table({"ts_ns": [1, 2], "name": [run_id, table]})
        write_run_tables(ds, run_id, {"gpu_activity": t})
        foreign_part(ds, _filename(table), run_id, t)
        r = cli(["query", "select run_id, name from gpu_activity order by ts_ns", "--runs", ds, "--format", "json"],
                cwd=root)
        one_line(r)
        assert r.rc == 0, r.err
        assert [json.loads(x)["name"] for x in r.out.splitlines()] == [run_id, table]
        nothing_executed(root)
