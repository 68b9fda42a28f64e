"""One test per defect of the hardening list: each failed before its fix.

Bad input, faults and concurrent use never end in a traceback, never lose or mix a run, and never
execute what a name or a trace says.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from faultlib import (
    cli,
    events,
    foreign_part,
    good_run,
    manifest,
    nothing_executed,
    one_line,
    outside,
    outside_unchanged,
    snapshot,
    trace_doc,
    write_trace,
)

from tracekit.store.rundir import RunDir

INJECTION = "x\" as select 1; COPY (select 'pwned') TO 'PWNED.csv'; create view \"y"


# 1 --------------------------------------------------------------------------------------------
def test_query_never_runs_sql_from_file_or_folder_names(tmp_path: Path) -> None:
    # GIVEN runs whose table file and folder names carry SQL, quotes and glob characters
    runs = tmp_path / "runs"
    good = good_run(runs, "good")
    (good / "tables" / f"{INJECTION}.parquet").write_bytes((good / "tables" / "steps.parquet").read_bytes())
    odd = runs / "a'b\"c*[1]"
    good_run(runs, odd.name)
    # WHEN any query runs
    r = cli(["query", "select run_id, count(*) as n from gpu_activity group by run_id order by run_id", "--runs", runs,
             "--format", "json"], cwd=tmp_path)
    # THEN nothing was executed, the odd name is skipped with a warning, the odd folder is a run like any other
    one_line(r)
    nothing_executed(tmp_path)
    assert r.rc == 0
    assert "skipped" in r.err and "not a plain table name" in r.err
    got = [json.loads(x) for x in r.out.splitlines()]
    assert {g["run_id"] for g in got} == {"good", odd.name}
    # AND a dataset whose table folder carries SQL is no different
    from tracekit.store.dataset import init_dataset, write_run_tables

    ds = init_dataset(tmp_path / "ds")
    write_run_tables(ds, "r1", {"steps": pq.read_table(good / "tables" / "steps.parquet")})
    foreign_part(ds, INJECTION, "r1", pq.read_table(good / "tables" / "steps.parquet").drop_columns(["rank"]))
    r = cli(["query", "select count(*) as n from steps", "--runs", ds, "--format", "json"], cwd=tmp_path)
    one_line(r)
    assert r.rc == 0 and "not a plain table name" in r.err
    nothing_executed(tmp_path)


# 2 --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("verb", ["ingest", "analyze"])
@pytest.mark.parametrize("bad", [b"[]", b"garbage", b'{"traceEvents": [1, 2]}'])
def test_force_never_deletes_the_good_run_before_the_new_one_is_complete(tmp_path: Path, verb: str, bad: bytes) -> None:
    good = good_run(tmp_path)
    before = snapshot(good)
    src = write_trace(tmp_path / "bad.json.gz", bad)
    r = cli([verb, src, "--out", good, "--force"])
    one_line(r)
    assert r.rc == 1
    assert snapshot(good) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["GOOD", "bad.json.gz"]  # no staging left beside


def test_force_swaps_a_complete_new_run_in(tmp_path: Path) -> None:
    good = good_run(tmp_path)
    old = manifest(good)["created_at"]
    src = write_trace(tmp_path / "new.json", trace_doc(events(6)))
    r = cli(["ingest", src, "--out", good, "--force"])
    one_line(r)
    assert r.rc == 0
    m = manifest(good)
    assert m["created_at"] != old and m["status"] == "complete" and m["run_id"] == "GOOD"
    assert "analysis" not in m and not (good / "tables" / "steps.parquet").exists()  # nothing of the old run left
    assert pq.read_table(good / "tables" / "gpu_activity.parquet").num_rows == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["GOOD", "new.json"]


def test_force_never_deletes_a_good_dataset_before_the_new_one_is_written(tmp_path: Path) -> None:
    good = write_trace(tmp_path / "good.json", trace_doc())
    bad = write_trace(tmp_path / "bad.json", b"[1, 2]")
    ds = tmp_path / "DS"
    assert cli(["ingest", good, "--dataset", "--engine", "serial", "--out", ds]).rc == 0
    before = snapshot(ds)
    r = cli(["ingest", bad, "--dataset", "--engine", "serial", "--out", ds, "--force"])
    one_line(r)
    assert r.rc == 1 and "not a trace" in r.err
    assert snapshot(ds) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["DS", "bad.json", "good.json"]
    # AND a forced ingest that reads every trace replaces it
    assert cli(["ingest", good, "--dataset", "--engine", "serial", "--out", ds, "--force", "--run-id", "new"]).rc == 0
    assert sorted(p.name for p in (ds / "gpu_activity").iterdir()) == ["run_id=new"]


def test_force_refuses_to_replace_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    src = write_trace(tmp_path / "t.json", trace_doc())
    r = cli(["ingest", src, "--out", home, "--force"])
    one_line(r)
    assert r.rc == 2 and "not a tracekit run" in r.err
    assert (home / "thesis.tex").read_text() == "years of work"


# 3 --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_second_writer_fails_with_one_line_while_the_first_holds_the_run(tmp_path: Path) -> None:
    good = good_run(tmp_path)
    src = write_trace(tmp_path / "t.json", trace_doc(events(8)))
    # GIVEN an ingest --force into GOOD that is slow to read its trace (held in a child process)
    child = textwrap.dedent(f"""
        import sys, time
        import tracekit.ingest.run as run
        orig = run.read_file
        def slow(*a, **k):
            print("reading", flush=True)
            time.sleep(4)
            return orig(*a, **k)
        run.read_file = slow
        from tracekit.cli import main
        sys.exit(main(["ingest", {str(src)!r}, "--out", {str(good)!r}, "--force", "--jobs", "1"]))
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "reading"
        before = snapshot(good)
        # WHEN a second writer comes
        r = cli(["ingest", src, "--out", good, "--force", "--no-cache"])
        # THEN it fails at once with one line naming the holder, and touched nothing
        one_line(r)
        assert r.rc == 1 and f"pid {proc.pid}" in r.err
        assert snapshot(good) == before
    finally:
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert manifest(good)["status"] == "complete"
    assert pq.read_table(good / "tables" / "gpu_activity.parquet").num_rows == 8


# 4 --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["truncate", "delete", "swap"])
def test_the_cache_checks_the_tables_it_serves(tmp_path: Path, damage: str) -> None:
    src = write_trace(tmp_path / "t.json", trace_doc(events(5)))
    assert cli(["ingest", src, "--out", tmp_path / "run"]).rc == 0
    table = tmp_path / "run" / "tables" / "gpu_activity.parquet"
    if damage == "truncate":
        table.write_bytes(table.read_bytes()[: table.stat().st_size // 2])
    elif damage == "delete":
        table.unlink()
    else:  # a readable table with other rows
        table.write_bytes((tmp_path / "run" / "tables" / "runtime.parquet").read_bytes())
    r = cli(["ingest", src, "--out", tmp_path / "run"])
    one_line(r)
    assert r.rc == 0 and "(cached)" not in r.out
    assert pq.read_table(table).num_rows == 5


# 5 --------------------------------------------------------------------------------------------
def _dying_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """RunDir.write_table dies on the third table (as kill -9 would leave an analysis)."""
    real = RunDir.write_table
    written: list[str] = []

    def dying(self: RunDir, name: str, table: object) -> Path:
        if len(written) == 2:
            raise KeyboardInterrupt
        written.append(name)
        return real(self, name, table)  # type: ignore[arg-type]

    monkeypatch.setattr(RunDir, "write_table", dying)


def test_an_interrupted_analysis_leaves_the_run_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracekit.model import schema

    good = good_run(tmp_path)  # analysed once already, by an analysis whose tables a new one changes
    RunDir(good).write_table("steps", schema.from_columns("steps", {"step_id": [99]}))
    RunDir(good).write_table("requests", schema.from_columns("requests", {"request_id": [99]}))
    RunDir(good).write_table("phases", schema.empty("phases"))
    before = snapshot(good)
    _dying_writes(monkeypatch)
    r = cli(["analyze", good])
    assert r.rc == 130
    assert snapshot(good) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["GOOD"]


def test_an_interrupted_analysis_in_place_is_never_taken_for_a_finished_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tracekit.store.rundir as rundir

    good = good_run(tmp_path, analyze=False)
    # GIVEN a file system without hard links (the analysis writes in place) and an analysis that dies
    monkeypatch.setattr(rundir, "link_tree", lambda src, tag: None)
    _dying_writes(monkeypatch)
    r = cli(["analyze", good])
    assert r.rc == 130
    monkeypatch.undo()
    m = manifest(good)
    assert m["analysis"]["status"] != "complete"
    # THEN report and query say the analysis is unfinished
    for argv in (["report", good, "--no-html"], ["query", "select count(*) from steps", "--runs", good]):
        r = cli(argv)
        one_line(r)
        assert "analysis" in r.text and "not finished" in r.text, (argv, r.text)
    # AND diff analyses it again first, saying so with the command it ran
    r = cli(["diff", good, good, "--no-analyze"])
    assert f"is not analysed: run tracekit analyze {good}" in r.text, r.text
    r = cli(["diff", good, good])
    assert r.rc == 0 and f"analyzing {good} first (tracekit analyze {good})" in r.text, r.text
    assert manifest(good)["analysis"]["status"] == "complete"
    # AND a new analysis finishes it
    assert cli(["analyze", good]).rc == 0
    assert manifest(good)["analysis"]["status"] == "complete"


# 6 --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["native", "duckdb"])
def test_out_of_range_times_are_skipped_and_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    monkeypatch.setenv("TRACEKIT_INGEST_ENGINE", engine)
    ev = events(3)
    bad = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": f"@@{v}", "dur": 1,
            "args": {"correlation": 1, "device": 0, "stream": 7}}
           for i, v in enumerate(["9223372036854775808", "1e400", "1" * 40, "-1e400"])]
    text = json.dumps(trace_doc(ev + bad)).replace('"@@', "").replace('", "dur"', ', "dur"')
    src = write_trace(tmp_path / "t.json", text.encode())
    r = cli(["analyze", src, "--out", tmp_path / "run"])
    one_line(r)
    assert r.rc == 0, r.err
    m = manifest(tmp_path / "run")
    assert m["ingest"]["counts"]["skipped"] == {"ts beyond the int64 ns range": 4}
    gpu = pq.read_table(tmp_path / "run" / "tables" / "gpu_activity.parquet")
    assert gpu.num_rows == 3 and gpu.column("ts_ns").null_count == 0


# 7 --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["native", "duckdb"])
@pytest.mark.parametrize("content", [b"[1, 2, 3]", b'{"traceEvents": [1, "a", null]}', b'[[{"ph": "X"}]]', b"[{}]"])
def test_a_list_of_non_events_is_not_a_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str, content: bytes) -> None:
    monkeypatch.setenv("TRACEKIT_INGEST_ENGINE", engine)
    src = write_trace(tmp_path / "t.json", content)
    r = cli(["ingest", src, "--out", tmp_path / "run"])
    one_line(r)
    assert r.rc == 1 and "not a trace" in r.err
    assert manifest(tmp_path / "run")["status"] == "incomplete"


# 8 --------------------------------------------------------------------------------------------
HOSTILE_NAMES = ["\x1b]0;owned\x07", "\x1b[31mred", "[/x]", "[bold]loud", "a\rb", "\u202egnp.exe", "[link=file:///etc]x"]


def test_trace_text_reaches_the_terminal_as_text(tmp_path: Path) -> None:
    ev = events(len(HOSTILE_NAMES))
    for i, e in enumerate(k for k in ev if k.get("cat") == "kernel"):
        e["name"] = HOSTILE_NAMES[i]
    ev.append({"ph": "X", "cat": "user_annotation", "name": "[/x]\x1b[2J", "pid": 1, "tid": 7, "ts": ev[0]["ts"], "dur": 1})
    src = write_trace(tmp_path / "t\x1b[1m[bold].json", trace_doc(ev, distributedInfo={"backend": "[/]\x1b"}))
    run = tmp_path / "run"
    for argv in (["analyze", src, "--out", run], ["report", run, "--no-html"],
                 ["query", "select name from gpu_activity", "--runs", run],
                 ["query", "select name as \"[/x]\x1b\" from gpu_activity", "--runs", run, "--format", "csv"],
                 ["diff", run, run], ["ingest", src, "--out", run, "--force", "--no-cache"],
                 ["ingest", tmp_path / "missing\x1b[2J[/x].json", "--out", run]):
        r = cli(argv)
        one_line(r)
        assert r.rc in (0, 2), (argv, r.err)
    r = cli(["query", "select name from gpu_activity order by name", "--runs", run, "--format", "table"])
    assert "\\x1b]0;owned\\x07" in r.out and "[/x]" in r.out and "[bold]loud" in r.out


# 9 --------------------------------------------------------------------------------------------
def test_out_pointing_at_a_file_is_one_line(tmp_path: Path) -> None:
    src = write_trace(tmp_path / "t.json", trace_doc())
    f = tmp_path / "afile"
    f.write_text("keep me")
    for argv in (["ingest", src, "--out", f], ["ingest", src, "--out", f, "--force"], ["analyze", src, "--out", f],
                 ["ingest", src, "--out", f / "sub"]):
        r = cli(argv)
        one_line(r)
        assert r.rc == 2, argv
    assert f.read_text() == "keep me"


@pytest.mark.parametrize("content", [b"", b'{"status": "compl', b"[1,2]", b'"run"', b"null", b"\xff\xfe",
                                     b'{"status": 5, "warnings": "x", "ingest": [], "analysis": 3}',
                                     b'{"warnings": [1, {"a": 2}], "workload": "x", "trace_meta": 7}',
                                     b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000])
def test_a_corrupt_run_json_is_one_line_for_every_verb(tmp_path: Path, content: bytes) -> None:
    good = good_run(tmp_path)
    (good / "run.json").write_bytes(content)
    for argv in (["analyze", good], ["report", good, "--no-html"], ["diff", good, good], ["export", good, "--force"],
                 ["query", "select 1", "--runs", good]):
        r = cli(argv)
        one_line(r)
        assert r.rc in (1, 2), (argv, r.out)
        assert "run.json" in r.err
    # AND --force replaces it with a good run
    src = write_trace(tmp_path / "t.json", trace_doc())
    assert cli(["ingest", src, "--out", good, "--force"]).rc == 0


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_a_corrupt_table_is_one_line_and_query_skips_that_run(tmp_path: Path, damage: str) -> None:
    runs = tmp_path / "runs"
    good = good_run(runs, "good")
    bad = good_run(runs, "bad")
    for name in ("steps", "gpu_activity", "phases"):
        t = bad / "tables" / f"{name}.parquet"
        data = t.read_bytes()
        t.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"PAR1" + os.urandom(300), "empty": b""}[damage])
    for argv in (["analyze", bad], ["report", bad, "--no-html"], ["diff", good, bad], ["export", bad, "--force"],
                 ["export", bad, "--format", "json", "--force"]):
        r = cli(argv)
        one_line(r)
        assert r.rc == 1 and "bad" in r.err, argv
    r = cli(["query", "select run_id, count(*) as n from gpu_activity group by run_id", "--runs", runs, "--format", "json"])
    one_line(r)
    assert r.rc == 0 and [json.loads(x)["run_id"] for x in r.out.splitlines()] == ["good"]
    assert "bad" in r.err and "skipped" in r.err


def test_memory_error_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tracekit.ingest.run as ingest_run

    def boom(*a: object, **k: object) -> None:
        raise MemoryError

    monkeypatch.setattr(ingest_run, "read_file", boom)
    src = write_trace(tmp_path / "t.json", trace_doc())
    r = cli(["ingest", src, "--out", tmp_path / "run", "--jobs", "1"])
    one_line(r)
    assert r.rc == 1 and "out of memory" in r.err


# 10 -------------------------------------------------------------------------------------------
def test_export_from_a_truncated_trace_is_an_error_not_an_interrupt(tmp_path: Path) -> None:
    good = good_run(tmp_path)
    trace = good / "trace.json.gz"
    data = write_trace(tmp_path / "x.json.gz", trace_doc(events(200))).read_bytes()
    trace.write_bytes(data[: len(data) // 2])
    out = tmp_path / "GOOD" / "merged.json.gz"
    r = cli(["export", good, "--from-trace", "--format", "json", "--out", out])
    one_line(r)
    assert r.rc == 1 and "truncated" in r.err and "interrupted" not in r.err
    assert not out.exists()


# 11 -------------------------------------------------------------------------------------------
def _peak_rss_mb(argv: list[str], warm: list[str]) -> tuple[float, str]:
    """Peak RSS of ``tracekit ARGV`` above that of a warm-up run of the same verb (imports, arenas)."""
    # VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork and exec.
    code = textwrap.dedent(f"""
        from tracekit.cli import main
        def hwm():
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        assert main({warm!r}) == 0
        base = hwm()
        rc = main({argv!r})
        print(rc, hwm() - base)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    rc, mb = p.stdout.split()[-2:]
    return float(mb), rc + p.stderr


@pytest.mark.slow
def test_whitespace_and_big_values_outside_the_events_are_read_in_bounded_memory(tmp_path: Path) -> None:
    import gzip

    warm = write_trace(tmp_path / "warm.json", trace_doc())
    body = json.dumps(events(3))[1:-1].encode()
    blob = b'"' + b"x" * (80 << 20) + b'"'
    cases = {
        "ws": b"{" + b" " * (96 << 20) + b'"traceEvents": [' + body + b"]}",
        "header": b'{"big": ' + blob + b', "traceEvents": [' + body + b'], "traceName": "t"}',
        "trailer": b'{"traceEvents": [' + body + b'], "big": ' + blob + b', "baseTimeNanoseconds": 5}',
    }
    for name, data in cases.items():
        src = tmp_path / f"{name}.json.gz"
        src.write_bytes(gzip.compress(data, compresslevel=1))
        mb, detail = _peak_rss_mb(["ingest", str(src), "--out", str(tmp_path / name), "--jobs", "1"],
                                  ["ingest", str(warm), "--out", str(tmp_path / f"warm-{name}"), "--jobs", "1"])
        assert detail.startswith("0"), (name, detail)
        # 80-96 MB outside the array (before: 4.6x that for whitespace, 5.7x for a header value): at most
        # the 64 MB of metadata tracekit keeps while it reads a value, and a few blocks
        assert mb < (32 if name == "ws" else 120), (name, mb)
        m = manifest(tmp_path / name)
        assert m["status"] == "complete"
        if name != "ws":
            assert "big" not in m["trace_meta"]
            assert any("big" in w and "64 MB" in w for w in m["warnings"]), m["warnings"]
        if name == "trailer":
            assert m["trace_meta"]["baseTimeNanoseconds"] == 5


# 12 -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_files_respect_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        run = good_run(tmp_path)
        r = cli(["export", run, "--format", "json"])
        assert r.rc == 0
    finally:
        os.umask(old)
    for p in [run, *run.rglob("*")]:
        mode = stat.S_IMODE(p.stat().st_mode)
        want = (0o777 if p.is_dir() else 0o666) & ~umask
        if p.name == ".tracekit.lock":
            continue
        assert mode == want, (str(p.relative_to(tmp_path)), oct(mode), oct(want))


# invariants shared by every case above
def test_a_failed_ingest_writes_nothing_outside_its_out(tmp_path: Path) -> None:
    src = write_trace(tmp_path / "t.json", b"[1]")
    before = outside(tmp_path, tmp_path / "out")
    r = cli(["ingest", src, "--out", tmp_path / "out"])
    one_line(r)
    outside_unchanged(before, tmp_path, tmp_path / "out")
