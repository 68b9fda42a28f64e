"""Streams, signals, input files, environment variables, query results, numbers and charts.

Invariants, per class:

- locales: any encoding of stdout/stderr (ASCII, Latin-1) prints, with ASCII stand-ins, never a
  UnicodeEncodeError;
- streams: a closed stdout or a reader that goes away (``| head``) is a quiet exit, no traceback;
- signals: Ctrl-C is exit 130, SIGTERM/SIGHUP 128 + the signal, and no staging folder or temp file is
  left beside the output;
- input files: a FIFO, a device, a folder, a binary or UTF-16 file where a config or list is read is
  one line (never a hang, never a read until memory runs out);
- environment: a tracekit variable set to something it cannot use is one line naming it;
- query results: JSON is strict (NaN and infinities are null), two columns of one name both kept
  (the second renamed), INTERVAL columns written to Parquet, a script that would drop a result refused;
- numbers: an event whose end passes int64 ns is skipped and counted; a sweep's dtype is one it can run;
- charts: an SVG stays valid XML whatever the names hold (control characters, NUL, lone surrogates).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from faultlib import REPO, Result, case, cli, copy_run, events, one_line, snapshot, trace_doc, write_trace

ENV = {"PYTHONPATH": str(REPO)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, good_template: Path) -> Path:
    import shutil

    root = tmp_path_factory.mktemp("runs")
    shutil.copytree(good_template, root / "runs" / "r1")
    return root / "runs"


# --------------------------------------------------------------------------- locales
@pytest.mark.slow
@pytest.mark.parametrize("enc", ["ascii", "latin-1"])
def test_any_locale_prints_without_a_crash(runs: Path, enc: str) -> None:

    env = {**os.environ, **ENV, "PYTHONIOENCODING": enc, "LC_ALL": "C"}
    for argv in (["report", runs / "r1"], ["query", "select 'µs → é ✓ 😀' as x", "--runs", runs]):
        p = subprocess.run([sys.executable, "-m", "tracekit", *map(str, argv)], cwd=runs.parent, env=env,
                           capture_output=True, timeout=120)
        r = Result(p.returncode, p.stdout.decode(enc), p.stderr.decode(enc))
        one_line(r)
        assert r.rc == 0, r.err
    assert "s -> " in r.out and "\\U0001f600" in r.out  # the stand-ins


def test_ascii_fallback_handler() -> None:
    import tracekit.cli  # noqa: F401 - registers the handler

    assert "a → b µ 😀".encode("ascii", "tracekit-ascii") == b"a -> b u \\U0001f600"


# --------------------------------------------------------------------------- streams
@pytest.mark.slow
def test_closed_and_broken_stdout_are_quiet(runs: Path) -> None:
    def base(rows: int) -> list[str]:
        return [sys.executable, "-m", "tracekit", "query", f"select * from range({rows})", "--runs", str(runs)]

    env = {**os.environ, **ENV}
    p = subprocess.run(base(1000), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True,
                       pass_fds=(), close_fds=True, preexec_fn=lambda: os.close(1))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    # 20,000 rows: over 100 KB in every format, past what a pipe holds (64 KiB), so the writer meets EPIPE
    for fmt in ("table", "csv", "json"):
        p = subprocess.Popen([*base(20_000), "--format", fmt], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert p.stdout is not None
        p.stdout.read(10)
        p.stdout.close()  # the reader goes away
        err = p.stderr.read().decode() if p.stderr else ""
        assert p.wait(60) == 0 and "Traceback" not in err and "Exception ignored" not in err, (fmt, err)


# --------------------------------------------------------------------------- signals
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signals_leave_no_staging_or_temp_files(tmp_path: Path, sig: int) -> None:
    big = write_trace(tmp_path / "big.json", trace_doc(events(60_000)))
    out = tmp_path / "out"
    env = {**os.environ, **ENV}
    p = subprocess.Popen([sys.executable, "-m", "tracekit", "analyze", str(big), "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    # the signal once the work is under way (its staging folder is there), not after a fixed wait: on a
    # loaded machine a start-up slower than the wait met the signal before any handler was set
    deadline = time.monotonic() + 60
    while p.poll() is None and time.monotonic() < deadline and not any(
            q.name.startswith(".") for q in tmp_path.iterdir()):
        time.sleep(0.01)
    time.sleep(0.3)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert "Traceback" not in err, err
    want = {signal.SIGINT: 130, signal.SIGTERM: 128 + signal.SIGTERM, signal.SIGHUP: 128 + signal.SIGHUP}[sig]
    assert p.returncode in (want, 0), (p.returncode, err)  # 0: it finished before the signal
    left = [q.name for q in tmp_path.iterdir() if q.name.startswith(".")]
    assert not left, left
    if out.exists() and p.returncode != 0:
        m = json.loads((out / "run.json").read_text())
        assert m["status"] != "complete" or m.get("analysis", {}).get("status") != "complete"


# --------------------------------------------------------------------------- input files
@pytest.mark.parametrize("kind", ["fifo", "dev", "dir", "binary", "utf16", "latin1", "empty-name"])
@pytest.mark.parametrize("opt", ["sweep", "lengths"])
def test_input_files_that_are_not_text_files_are_one_line(tmp_path: Path, kind: str, opt: str) -> None:
    path = tmp_path / "input"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev":
        path = Path("/dev/zero")
    elif kind == "dir":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    elif kind == "utf16":
        path.write_bytes("shapes = ['smoke']\n".encode("utf-16"))
    elif kind == "latin1":
        path.write_bytes("name = 'caf\xe9'\n".encode("latin-1"))
    else:
        path = tmp_path / "missing"
    argv = (["sweep", "--config", path, "--dry-run"] if opt == "sweep"
            else ["record", "--serve", "--lengths", path, "--out", tmp_path / "r", "--device", "cpu"])
    r = cli(argv)
    one_line(r)
    assert r.rc == 2, r.err


def test_read_input_refuses_what_is_too_large(tmp_path: Path) -> None:
    from tracekit.errors import UsageError
    from tracekit.store.fsops import read_input

    (tmp_path / "big").write_bytes(b"x" * 2000)
    with pytest.raises(UsageError, match="larger than any"):
        read_input(tmp_path / "big", "--config", limit=1000)
    assert read_input(tmp_path / "big", "--config", limit=2000) == b"x" * 2000


# --------------------------------------------------------------------------- environment
@pytest.mark.parametrize(("name", "value"), [("TRACEKIT_PROGRESS_DELAY", "abc"), ("TRACEKIT_PROGRESS_DELAY", ""),
                                             ("TRACEKIT_PROGRESS_DELAY", "-1"), ("TRACEKIT_PROGRESS_DELAY", "nan"),
                                             ("TRACEKIT_PROGRESS_DELAY", "inf"), ("TRACEKIT_INGEST_ENGINE", "fast"),
                                             ("TRACEKIT_CACHE_DIR", "a\x00b")])
def test_bad_environment_is_one_line_naming_the_variable(runs: Path, monkeypatch: pytest.MonkeyPatch,
                                                         name: str, value: str) -> None:
    if "\x00" in value:  # the OS refuses NUL in the environment: set it in the copy tracekit reads
        from tracekit.model import environ

        monkeypatch.setattr(environ.os, "environ", {**os.environ, name: value})
    else:
        monkeypatch.setenv(name, value)
    r = cli(["query", "select 1", "--runs", runs])
    one_line(r)
    assert r.rc == 2 and name in r.err


# --------------------------------------------------------------------------- query results
def test_query_json_is_strict_and_columns_unique(runs: Path) -> None:
    r = cli(["query", "select 'nan'::double as a, 'inf'::double as a, [1.0, '-inf'::double] as l, 2 as a",
             "--runs", runs, "--format", "json"])
    one_line(r)
    row = json.loads(r.out)  # strict: json.loads would take NaN, so check the text too
    assert "NaN" not in r.out and "Infinity" not in r.out
    assert row == {"a": None, "a_2": None, "l": [1.0, None], "a_3": 2}
    assert "second is 'a_2'" in r.err


def test_query_interval_to_parquet(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "i.parquet"
    r = cli(["query", "select interval 3 day + interval 5 minute as i, null::interval as n", "--runs", runs,
             "--format", "parquet", "--out", out])
    one_line(r)
    assert r.rc == 0, r.err
    t = pq.read_table(out).to_pylist()
    assert t == [{"i": {"months": 0, "days": 3, "nanoseconds": 300_000_000_000}, "n": None}]


@pytest.mark.parametrize(("sql", "ok"), [("select 1; select 2", False), ("select 1 as a;", True),
                                         ("create view v as select 7 as x; select * from v", True),
                                         ("explain select 1; select 2", False),
                                         ("create table t as select 1 as x; insert into t values (2); "
                                          "select sum(x) as s from t", True)])
def test_query_script_runs_all_or_is_refused(runs: Path, sql: str, ok: bool) -> None:
    r = cli(["query", sql, "--runs", runs, "--format", "csv"])
    one_line(r)
    assert (r.rc == 0) == ok, r.err
    if not ok:
        assert "statements" in r.err


# --------------------------------------------------------------------------- numbers
@pytest.mark.parametrize("engine", ["native", "duckdb"])
def test_kernel_end_past_int64_is_skipped_and_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      engine: str) -> None:
    monkeypatch.setenv("TRACEKIT_INGEST_ENGINE", engine)
    ev = events(4)
    kernel = next(e for e in ev if e["cat"] == "kernel")
    kernel["ts"], kernel["dur"] = 9_223_372_036_854_000, 1000  # ts fits int64 ns, ts + dur does not
    src = write_trace(tmp_path / "t.json", trace_doc(ev))
    r = cli(["analyze", src, "--out", tmp_path / "run"])
    one_line(r)
    assert r.rc == 0, r.err
    counts = json.loads((tmp_path / "run" / "run.json").read_text())["ingest"]["counts"]
    assert counts["skipped"] == {"end (ts + dur) beyond the int64 ns range": 1}
    assert counts["events_by_table"]["gpu_activity"] == 3
    assert pq.read_metadata(tmp_path / "run" / "tables" / "gpu_activity.parquet").num_rows == 3


@pytest.mark.parametrize(("a", "b"), [(-(2**53), 10**18), (2**53, -(2**53))])
def test_a_span_past_int64_is_one_line_and_the_tables_are_kept(tmp_path: Path, a: int, b: int) -> None:
    # every time fits int64 ns (2**53 us = 9.007e18 ns), but the span between them does not (> 9.22e18 ns)
    ev = events(4)
    k = [e for e in ev if e["cat"] == "kernel"]
    (k[0]["ts"], k[0]["dur"]), (k[1]["ts"], k[1]["dur"]) = (a, 1000), (b, 1000)
    src = write_trace(tmp_path / "t.json", trace_doc(ev))
    r = cli(["analyze", src, "--out", tmp_path / "run"])
    one_line(r)
    assert r.rc == 1 and "more than int64 nanoseconds can hold" in r.err, r.err
    counts = json.loads((tmp_path / "run" / "run.json").read_text())["ingest"]["counts"]  # ingest's tables kept
    kept = pq.read_metadata(tmp_path / "run" / "tables" / "gpu_activity.parquet").num_rows
    assert kept == counts["events_by_table"]["gpu_activity"] >= 3


@pytest.mark.parametrize("dtype", ["float128", "float64", "int8", "1", "FLOAT16"])
def test_sweep_refuses_a_dtype_it_cannot_run(tmp_path: Path, dtype: str) -> None:
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'dtype = "{dtype}"\nshapes = ["smoke"]\n')
    r = cli(["sweep", "--config", cfg, "--dry-run"])
    one_line(r)
    assert r.rc == 2 and "dtype" in r.err


# --------------------------------------------------------------------------- charts
@pytest.mark.parametrize("name", ["a\x00b", "\x1b[31mred", "lone \ud800 surrogate", "\ufffe\uffff", "<&>\"'",
                                  "]]><!--", "\x0c\x0b\x7f\x9b"])
def test_svg_stays_valid_xml(name: str) -> None:
    from tracekit.report.svg import esc

    doc = f'<svg xmlns="http://www.w3.org/2000/svg"><text title="{esc(name)}">{esc(name)}</text></svg>'
    ET.fromstring(doc.encode("utf-8"))  # a lone surrogate would not even encode


# --------------------------------------------------------------------------- honest messages
def test_out_of_memory_is_said_as_itself(tmp_path: Path, good_template: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    import pyarrow.parquet as pqm

    run = shutil.copytree(good_template, tmp_path / "r")

    def no_memory(*a: object, **k: object) -> object:
        raise MemoryError

    monkeypatch.setattr(pqm, "ParquetFile", no_memory)
    r = cli(["analyze", run])
    one_line(r)
    assert r.rc == 1 and "out of memory" in r.err and "re-ingest" not in r.err, r.err


def _limited(limit: str, argv: list[object], cwd: Path) -> Result:
    """``python -m tracekit ARGV`` in a shell under ``ulimit LIMIT``: a real limit, so the kernel itself
    fails the writes (``-f``: EFBIG, as on a full disk) or the mappings (``-v``)."""
    cmd = f"ulimit {limit} && exec {shlex.quote(sys.executable)} -m tracekit {shlex.join(map(str, argv))}"
    p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env={**os.environ, **ENV}, capture_output=True, text=True,
                       timeout=180)
    return Result(p.returncode, p.stdout, p.stderr)


def test_a_write_the_file_system_refuses_is_one_line_and_loses_nothing(tmp_path: Path, good_template: Path) -> None:
    """Writes that fail for real (a 4 KiB file-size limit: EFBIG, what a full disk does with ENOSPC) while
    ingesting over a run and into a dataset: one line naming the failure, the run as it was, no partition
    folder left in the dataset."""
    case("filesystem faults")
    run = copy_run(good_template, tmp_path / "run")
    before = snapshot(run)
    src = write_trace(tmp_path / "big.json", trace_doc(events(400)))  # its tables pass 4 KiB
    r = _limited("-f 4", ["ingest", src, "--out", run, "--force", "--no-cache"], tmp_path)
    one_line(r)
    assert r.rc == 1 and "File too large" in r.err, r.err
    assert snapshot(run) == before
    r = _limited("-f 4", ["ingest", src, "--dataset", "--engine", "serial", "--out", tmp_path / "ds"], tmp_path)
    one_line(r)
    assert r.rc == 1 and "could not be written" in r.err and "File too large" in r.err, r.err
    assert not [p for p in (tmp_path / "ds").rglob("*") if p.is_dir() and p.name.startswith(("run_id=", "rank="))]


def test_a_name_too_long_for_the_file_system_is_said_as_such(tmp_path: Path) -> None:
    """A run id whose partition folder name passes the file system's 255 bytes: the real ENAMETOOLONG,
    said as a write failure (not as an unreadable trace), no partition folder left."""
    case("filesystem faults")
    src = write_trace(tmp_path / "t.json", trace_doc())
    r = cli(["ingest", src, "--dataset", "--engine", "serial", "--run-id", "x" * 250, "--out", tmp_path / "ds"])
    one_line(r)
    assert r.rc == 1 and "could not be written" in r.err and "File name too long" in r.err, r.err
    assert not [p for p in (tmp_path / "ds").rglob("*") if p.is_dir() and p.name.startswith(("run_id=", "rank="))]


def test_a_limited_address_space_gets_one_arena_and_one_arrow_thread_per_pool(tmp_path: Path) -> None:
    """Under ``ulimit -v`` the CLI sets one malloc arena and one thread per Arrow pool before anything
    starts a thread (a pool that could not launch a worker left a dataset scan waiting for ever); a
    value the user set is kept; without a limit nothing is set."""
    code = ("import os, tracekit.cli as c; c.fit_address_space(); "
            "print([os.environ.get(k) for k in ('MALLOC_ARENA_MAX', 'OMP_NUM_THREADS', 'ARROW_IO_THREADS')])")
    env = {k: v for k, v in {**os.environ, **ENV}.items()
           if k not in ("MALLOC_ARENA_MAX", "OMP_NUM_THREADS", "ARROW_IO_THREADS")}

    def run(limit: str, extra: dict[str, str]) -> str:
        p = subprocess.run(["bash", "-c", f"ulimit -v {limit} && exec {shlex.quote(sys.executable)} -c {shlex.quote(code)}"],
                           env={**env, **extra}, capture_output=True, text=True, timeout=60, check=True, cwd=tmp_path)
        return p.stdout.strip()

    assert run("2000000", {}) == "['1', '1', '1']"
    assert run("2000000", {"OMP_NUM_THREADS": "3"}) == "['1', '3', '1']"
    assert run("unlimited", {}) == "[None, None, None]"


def test_a_limited_address_space_is_said_as_such(tmp_path: Path, runs: Path) -> None:
    """``ulimit -v``: a query either runs (malloc keeps one arena, so its worker threads fit) or says
    that the address space was too small, in one line; never the C library's abort (exit 127)."""
    case("memory")
    sql = "select count(*) as n from gpu_activity"
    r = _limited("-v 600000", ["query", sql, "--runs", runs, "--format", "csv"], tmp_path)
    one_line(r)
    assert (r.rc == 0 and r.out.split() == ["n", "6"]) or (r.rc == 1 and "not enough address space" in r.err), r.err
    # below what the libraries need to load (an import aborted at 350,000; a stack failed to grow at
    # 250,000): said before any loads, every time
    for limit in (250000, 350000):
        r = _limited(f"-v {limit}", ["query", sql, "--runs", runs], tmp_path)
        one_line(r)
        assert r.rc == 1 and f"not enough address space (ulimit -v {limit}" in r.err, r.err
