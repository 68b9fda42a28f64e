"""Fault class: run directories tampered with after ingest and analyze: tables rewritten as valid Parquet
of another shape (a column twice, a run_id column, no columns), run.json fields of the wrong type deep
inside, then every verb over the run.

Invariant: one line and an exit code (no traceback); a verb that only reads leaves the run byte for
byte as it was, and so does an analyze that fails; query skips the run it cannot read, with a note.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from faultlib import cli, copy_run, one_line, same_or_complete, snapshot


def _rewrite(path: Path, fn: Any) -> None:
    pq.write_table(fn(pq.read_table(path)), path)


def _twice(col: str) -> Any:
    return lambda t: pa.Table.from_arrays([*t.columns, t.column(col)], names=[*t.column_names, col])


def _verbs(run: Path, other: Path, out: Path) -> dict[str, list[Any]]:
    return {
        "analyze": ["analyze", "-q", run],
        "report": ["report", run, "--html", out / "r.html"],
        "diff": ["diff", other, run],
        "export": ["export", "-q", run, "--format", "json", "--out", out / "x.json.gz"],
    }


@pytest.mark.parametrize("table,col", [("steps", "kind"), ("phases", "time_ns"), ("gpu_activity", "name")])
@pytest.mark.parametrize("verb", ["analyze", "report", "diff", "export"])
def test_a_table_with_a_column_twice_is_one_line(tmp_path: Path, good_template: Path, table: str, col: str,
                                                 verb: str) -> None:
    # It was a KeyError traceback ('Field "kind" exists 2 times in schema') from report, diff and analyze.
    run = copy_run(good_template, tmp_path / "runs" / "bad")
    other = copy_run(good_template, tmp_path / "runs" / "good")
    _rewrite(run / "tables" / f"{table}.parquet", _twice(col))
    before = snapshot(run)
    (tmp_path / "out").mkdir()
    r = cli(_verbs(run, other, tmp_path / "out")[verb])
    one_line(r)
    if verb == "analyze" and r.rc == 0:  # a table analyze writes anew: the run is complete again
        same_or_complete(before, run)
    else:
        assert snapshot(run) == before
    if r.rc != 0:
        assert "appears more than once" in r.err or "not the file ingest wrote" in r.err, r.err


@pytest.mark.parametrize("damage", ["run_id column", "column twice", "no columns"])
def test_query_skips_a_table_its_view_cannot_hold(tmp_path: Path, good_template: Path, damage: str) -> None:
    # A table with its own run_id column was a BinderException traceback (the view adds run_id);
    # one without columns an InvalidInputException traceback; a column twice a 'bad query' (exit 2).
    runs = tmp_path / "runs"
    copy_run(good_template, runs / "good")
    bad = copy_run(good_template, runs / "bad")
    fn = {"run_id column": lambda t: t.append_column("run_id", pa.array(["x"] * t.num_rows)),
          "column twice": _twice("name"), "no columns": lambda t: pa.table({})}[damage]
    _rewrite(bad / "tables" / "gpu_activity.parquet", fn)
    before = snapshot(runs)
    r = cli(["query", "select run_id, count(*) as n from gpu_activity group by all", "--runs", runs, "--format", "json"])
    one_line(r)
    assert r.rc == 0 and "bad: skipped: table gpu_activity unreadable" in r.err
    assert {json.loads(x)["run_id"] for x in r.out.splitlines()} == {"good"}
    assert snapshot(runs) == before


@pytest.mark.parametrize("sql", [
    "copy (select 1 as a) to '{d}/PWNED.csv'",
    "copy steps to '{run}/tables/steps.parquet' (format parquet)",  # over a run's own table
    "attach '{d}/PWNED.db' as x; create table x.t as select 1",
    "export database '{d}/PWNED_DIR'",
    "select * from read_text('{run}/run.json')",
    "set enable_external_access = true; copy (select 1) to '{d}/PWNED2.csv'",
])
def test_query_reads_the_runs_tables_and_writes_nothing(tmp_path: Path, good_template: Path, sql: str) -> None:
    # Each of these ran: a query wrote files anywhere (past --out's check, onto a run's own tables) or read any.
    runs = tmp_path / "runs"
    run = copy_run(good_template, runs / "good")
    before = snapshot(tmp_path)
    r = cli(["query", sql.format(d=tmp_path, run=run), "--runs", runs, "--format", "csv"])
    one_line(r)
    assert r.rc == 2 and ("disabled by configuration" in r.err or "locked" in r.err), r.err
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("sql", ["", "   ", " ; ;\n"])
def test_an_empty_query_is_a_usage_error(tmp_path: Path, good_template: Path, sql: str) -> None:
    copy_run(good_template, tmp_path / "runs" / "good")
    r = cli(["query", sql, "--runs", tmp_path / "runs"])  # exit 0 with no output before
    one_line(r)
    assert r.rc == 2 and "the query is empty" in r.err


@pytest.mark.parametrize("path,value", [
    (("timings", "profiled", "requests", 0, "request_id"), []),  # TypeError in the requests pass
    (("timings", "profiled", "requests", 0, "request_id"), ""),  # ValueError
    (("timings", "unprofiled", "requests", 0, "e2e_ns"), True),  # ArrowTypeError
    (("timings", "profiled", "requests", 0, "itl_ns", "p99"), ""),  # ArrowTypeError
    (("timings", "profiled", "requests", 0, "ttft_ns"), "1e3"),
    (("timings", "unprofiled", "cuda_events", "requests", 0, "output_tokens"), 2**70),
    (("model", "config", "num_key_value_heads"), "x"),  # ValueError in the cost pass
    (("model", "config", "num_hidden_layers"), 1e308),  # OverflowError
    (("model", "config", "num_attention_heads"), 0),  # ZeroDivisionError
    (("model", "parameters"), -5),
    (("warmup_requests",), ["x"]),  # ValueError in the warm-up pass and the report
    (("warmup_requests",), 5),  # TypeError: not iterable
    (("analysis", "warmup_requests"), [None]),
])
@pytest.mark.parametrize("verb", ["analyze", "report"])
def test_numbers_of_the_wrong_kind_deep_in_run_json_are_a_corrupt_run(tmp_path: Path, path: tuple[Any, ...],
                                                                       value: Any, verb: str) -> None:
    from helpers import FIXTURES

    run = copy_run(FIXTURES / "record_gpu_smoke", tmp_path / "run")
    data = json.loads((run / "run.json").read_text())
    d = data
    for k in path[:-1]:
        d = d.setdefault(k, {}) if isinstance(k, str) else d[k]
    d[path[-1]] = value
    (run / "run.json").write_text(json.dumps(data))
    before = snapshot(run)
    r = cli([verb, *(["-q"] if verb == "analyze" else ["--no-html"]), run])
    one_line(r)
    assert r.rc == 1 and "corrupt run.json" in r.err and str(path[-1] if len(path) < 3 else path[1]) in r.err, r.err
    assert snapshot(run) == before


def test_an_analysis_that_fails_on_a_table_names_the_runs_file(tmp_path: Path, good_template: Path) -> None:
    # The message named the hard-linked staging copy (runs/.tracekit-new-<tag>-<random>/tables/...),
    # a path that is gone when the user reads it.
    run = copy_run(good_template, tmp_path / "runs" / "bad")
    # the recorder's steps, which analyze reads before any pass
    pq.write_table(pa.table({"step_id": ["abc"]}), run / "tables" / "recorded_steps.parquet")
    before = snapshot(run)
    r = cli(["analyze", "-q", run])
    one_line(r)
    assert r.rc == 1 and ".tracekit-new" not in r.err and str(run / "tables" / "recorded_steps.parquet") in r.err, r.err
    assert snapshot(run) == before


@pytest.mark.parametrize("table", ["kernel_bound", "gpu_activity"])
@pytest.mark.parametrize("damage", ["garbage", "column twice"])
@pytest.mark.parametrize("verb", ["report", "diff", "export"])
def test_tables_read_by_column_are_checked_as_whole_ones(tmp_path: Path, good_template: Path, table: str, damage: str,
                                                         verb: str) -> None:
    # report, diff and export read some columns of the large tables straight from the file: a damaged
    # kernel_bound or gpu_activity was an ArrowInvalid or KeyError traceback there.
    run = copy_run(good_template, tmp_path / "runs" / "bad")
    other = copy_run(good_template, tmp_path / "runs" / "good")
    path = run / "tables" / f"{table}.parquet"
    if damage == "garbage":
        path.write_bytes(b"PAR1" + b"\x07" * 64 + b"PAR1")
    else:
        _rewrite(path, _twice("name" if table == "gpu_activity" else "phase"))
    before = snapshot(run)
    (tmp_path / "out").mkdir()
    r = cli(_verbs(run, other, tmp_path / "out")[verb])
    one_line(r)
    if not (verb == "report" and table == "gpu_activity"):  # the report does not read the kernels
        assert r.rc == 1 and f"table {table} is unreadable" in r.err, r.err
    assert snapshot(run) == before


@pytest.mark.parametrize("verb", ["ingest", "analyze"])
def test_force_never_replaces_the_run_whose_trace_is_being_read(tmp_path: Path, verb: str) -> None:
    # 'tracekit ingest RUN/trace.json.gz --out RUN --force' swapped in a run without the trace: the
    # recorded run's only copy of its trace, its timings and workload were deleted.
    from helpers import FIXTURES

    run = copy_run(FIXTURES / "record_gpu_smoke", tmp_path / "run")
    before = snapshot(run)
    r = cli([verb, "-q", run / "trace.json.gz", "--out", run, "--force"])
    one_line(r)
    assert r.rc == 2 and "which --force would replace" in r.err, r.err
    assert snapshot(run) == before


@pytest.mark.parametrize("name", ["9" * 30, "\u00b2"])
def test_a_rank_directory_named_as_no_rank_is_not_a_rank(tmp_path: Path, name: str) -> None:
    # ranks/<30 digits>/ was an OverflowError traceback (the int32 rank column), ranks/²/ a ValueError
    # (str.isdigit accepts it, int() does not).
    import shutil

    from helpers import FIXTURES

    run = copy_run(FIXTURES / "tp_h200", tmp_path / "tp")
    shutil.copytree(run / "ranks" / "1", run / "ranks" / name)
    r = cli(["analyze", "-q", run])
    one_line(r, ok=(0,))
    assert set(pq.read_table(run / "tables" / "steps.parquet").column("rank").to_pylist()) == {0, 1}


@pytest.mark.parametrize("where", ["--ceiling", "cache"])
def test_a_ceiling_file_nested_too_deep_is_one_line(tmp_path: Path, good_template: Path, where: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # RecursionError traceback; from the calibration cache, for every analysis of that GPU.
    from tracekit.model.ceilings import slug

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    run = copy_run(good_template, tmp_path / "run")
    before = snapshot(run)
    if where == "cache":
        monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
        (tmp_path / "cache" / "ceilings").mkdir(parents=True)
        deep.rename(tmp_path / "cache" / "ceilings" / f"{slug('NVIDIA H200')}.json")
        r = cli(["analyze", "-q", run])
        one_line(r, ok=(0,))  # analysed without a ceiling, and said why
        assert "nested too deep" in r.text
    else:
        r = cli(["analyze", "-q", run, "--ceiling", deep])
        one_line(r, ok=(2,))
        assert "nested too deep" in r.err
        assert snapshot(run) == before


@pytest.mark.parametrize("marker", ["{", "[]", '{"runs": 5}', '{"runs": {"x": 5}}', "[" * 100_000 + "]" * 100_000])
def test_a_dataset_with_a_corrupt_marker_takes_no_parts(tmp_path: Path, marker: str) -> None:
    # Ingest into it wrote its parts, then failed on the marker with a JSONDecodeError, AttributeError or
    # RecursionError traceback: parts in the dataset that its marker does not list.
    from faultlib import events, trace_doc, write_trace

    src = write_trace(tmp_path / "a.json", trace_doc(events(3)))
    ds = tmp_path / "ds"
    one_line(cli(["ingest", "-q", src, "--dataset", "--out", ds]), ok=(0,))
    (ds / "_tracekit_dataset.json").write_text(marker)
    before = snapshot(ds)
    r = cli(["ingest", "-q", write_trace(tmp_path / "b.json", trace_doc(events(4))), "--dataset", "--out", ds,
             "--run-id", "b"])
    one_line(r)
    assert r.rc == 1 and "corrupt dataset marker" in r.err, r.err
    assert snapshot(ds) == before


@pytest.mark.parametrize("node", ["fifo", "chardev"])
@pytest.mark.parametrize("verb", ["report", "export", "query", "query-parquet"])
def test_an_output_that_is_a_device_or_fifo_is_never_replaced(tmp_path: Path, good_template: Path, node: str,
                                                              verb: str) -> None:
    # Every output is written to a temp file renamed over the target: --out /dev/null (as root) replaced
    # the device node with a regular file, for every user of the machine.
    import os
    import stat

    out = tmp_path / "out"
    if node == "fifo":
        os.mkfifo(out)
    else:
        try:
            os.mknod(out, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
        except PermissionError:
            pytest.skip("mknod needs root")
    run = copy_run(good_template, tmp_path / "runs" / "good")
    argv: list[Any] = {
        "report": ["report", run, "--html", out],
        "export": ["export", "-q", run, "--out", out, "--force"],
        "query": ["query", "select 1 as a", "--runs", run, "--format", "csv", "--out", out],
        "query-parquet": ["query", "select 1 as a", "--runs", run, "--format", "parquet", "--out", out],
    }[verb]
    r = cli(argv)
    one_line(r)
    assert r.rc == 2 and "not a file" in r.err, r.err
    mode = os.lstat(out).st_mode
    assert (stat.S_ISFIFO(mode) if node == "fifo" else stat.S_ISCHR(mode)), oct(mode)


@pytest.mark.parametrize("damage", ["garbage", "uncastable"])
def test_damaged_recorder_tables_are_a_corrupt_run(tmp_path: Path, good_template: Path, damage: str) -> None:
    """recorded_steps / recorded_requests (the recorder's own tables) are read as every table is."""
    run = copy_run(good_template, tmp_path / "runs" / "bad")
    path = run / "tables" / "recorded_steps.parquet"
    if damage == "garbage":
        path.write_bytes(b"PAR1 not parquet at all PAR1")
    else:
        pq.write_table(pa.table({"step_id": ["x"], "kind": ["decode"]}), path)
    before = snapshot(run)
    r = cli(["analyze", "-q", run])
    one_line(r)
    assert r.rc != 0 and "recorded_steps" in r.err, r.err
    assert snapshot(run) == before


def test_a_damaged_derived_steps_table_is_re_derived(tmp_path: Path, good_template: Path) -> None:
    """An analysed run's steps table is the analysis' own: re-analysis replaces it, never reads it."""
    run = copy_run(good_template, tmp_path / "runs" / "bad")
    (run / "tables" / "steps.parquet").write_bytes(b"not parquet")
    r = cli(["analyze", "-q", run])
    assert r.rc == 0, r.err
    assert pq.read_table(run / "tables" / "steps.parquet").num_rows >= 0
