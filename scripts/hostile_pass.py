"""An independent hostile pass over tracekit's CLI: generated cases, counted by what went wrong.

    python scripts/hostile_pass.py [--seed 0] [--per-class N] [--json OUT]

Every case runs a verb the way a user would (in this process through ``tracekit.cli.main``, or in a
child under a pty or with a given locale, stdout or signal) inside a sandbox folder, then counts:

- traceback: an exception escaped ``main``, or "Traceback" was printed, or the exit code is not one of
  0, 1, 2, 130, 129, 143;
- lost or outside: a file outside the case's ``--out`` changed, appeared or disappeared (links
  followed, foreign folders replaced, dataset files overwritten, staging or temp files left);
- injected: a raw control character printed (in-process), an escape sequence tracekit did not mean to
  send (pty), or rich markup from a name interpreted (the name's ``[bold]MK[/bold]`` printed without
  its tags);
- wrong: the case's own check failed (strict JSON, a count, a refusal that should have happened).

The goal is 0 of each. Cases are drawn from the seed, so a run is repeatable; tests/faults runs a small
sample of it (``test_hostile_pass.py``, marked slow).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "faults"))
sys.path.insert(0, str(REPO))

import faultlib  # noqa: E402
from test_terminal_pty import PAYLOAD, run_pty, toml_str, unmeant  # noqa: E402

OK_CODES = (0, 1, 2, 130, 129, 143)
MARK = "[bold]MK[/bold]"
PIECES = ["\x1b]0;T\x07", "\x1b]8;;http://e/\x1b\\", "\x1b[5m", "\x1b[2J", "\x9b1m", "\x07", "\r", "\n", "\t", "\x00",
          "\u202e", "\u2028", "\ud800", "\udfff", "\ufffe", "[link=http://e]", "[/link]", "[blink]", MARK, "'", '"',
          ";", "$(x)", "*", "é", "😀", "=", "%2F", "..", " ", "__HIVE_DEFAULT_PARTITION__"]
_RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


@dataclass
class Outcome:
    cls: str
    what: str
    traceback: bool = False
    outside: bool = False
    injected: bool = False
    wrong: str = ""
    seconds: float = 0.0


@dataclass
class Tally:
    outcomes: list[Outcome] = field(default_factory=list)

    def add(self, o: Outcome) -> None:
        self.outcomes.append(o)

    def summary(self) -> dict[str, Any]:
        by: dict[str, Counter[str]] = {}
        for o in self.outcomes:
            c = by.setdefault(o.cls, Counter())
            c["cases"] += 1
            c["traceback"] += o.traceback
            c["outside"] += o.outside
            c["injected"] += o.injected
            c["wrong"] += bool(o.wrong)
        total = Counter()
        for c in by.values():
            total.update(c)
        fails = [{"class": o.cls, "case": ascii(o.what[:300]), "traceback": o.traceback, "outside": o.outside,
                  "injected": o.injected, "wrong": ascii(o.wrong[-1500:])}
                 for o in self.outcomes if o.traceback or o.outside or o.injected or o.wrong]
        return {"total": dict(total), "classes": {k: dict(v) for k, v in sorted(by.items())}, "failures": fails}


# --------------------------------------------------------------------------- running one case
def name(rng: random.Random, k: int = 4, *, path: bool = True) -> str:
    s = "".join(rng.choice(PIECES) for _ in range(k))
    if path:
        s = s.replace("/", "_").replace("\x00", "0")
        # a lone surrogate in a path is a byte that is not UTF-8 (\udc80-\udcff, Python's surrogateescape)
        s = re.sub("[\ud800-\udc7f\udd00-\udfff]", "\udcff", s)
        s = s[:80] or "x"
        if s in (".", ".."):
            s = "x" + s
    return s


def cli(argv: list[Any], cwd: Path | None = None) -> tuple[int | None, str, str, str]:
    """(exit code or None, stdout, stderr, traceback text) of ``tracekit ARGV`` in this process."""
    from tracekit.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    tb = ""
    rc: int | None = None
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main([str(a) for a in argv])
    except BaseException:
        tb = traceback.format_exc()
    finally:
        os.chdir(old)
    return rc, out.getvalue(), err.getvalue(), tb


def judge(o: Outcome, rc: int | None, out: str, err: str, tb: str) -> None:
    text = out + err
    if tb or rc not in OK_CODES or "Traceback (most recent call last)" in text:
        o.traceback = True
        o.wrong = o.wrong or (tb or text)[-1500:]
    if _RAW.search(text):
        o.injected = True
    if "MK" in text and "[bold]MK" not in text:
        o.injected = True  # the name's markup was interpreted


@contextlib.contextmanager
def guarded(o: Outcome, root: Path, out: Path | None) -> Iterator[None]:
    """Snapshot ``root`` (but ``out``) before the case; afterwards anything changed there is counted."""
    before = faultlib.snapshot(root, skip=[out] if out is not None else [])
    beside_before = set(os.listdir(out.parent)) if out is not None and out.parent.is_dir() else set()
    t0 = time.perf_counter()
    try:
        yield
    except AssertionError as exc:
        o.wrong = o.wrong or f"check failed: {exc}"[:500]
    except Exception as exc:
        o.wrong = o.wrong or f"harness: {type(exc).__name__}: {exc}"[:500]
    o.seconds = time.perf_counter() - t0
    after = faultlib.snapshot(root, skip=[out] if out is not None else [])
    if after != before:
        o.outside = True
        diff = sorted(set(after) ^ set(before)) + sorted(k for k in set(after) & set(before) if after[k] != before[k])
        o.wrong = o.wrong or f"changed outside --out: {diff[:4]}"
    if out is not None:
        left = [p.name for p in out.parent.glob(".tracekit-*")] if out.parent.exists() else []
        left += [p.name for p in out.parent.glob(".*.tmp")] if out.parent.exists() else []
        left = [n for n in left if n not in beside_before]  # a look-alike the user made stays, as it should
        if left:
            o.outside = True
            o.wrong = o.wrong or f"left beside --out: {left[:3]}"


# --------------------------------------------------------------------------- fixtures
class Box:
    """A sandbox: a template run, a trace, a dataset, made once and copied per case."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.template = faultlib.good_run(base / "tpl", "GOOD", 6)
        self.trace = faultlib.write_trace(base / "tpl" / "t.json", faultlib.trace_doc())
        self.n = 0

    def fresh(self) -> Path:
        self.n += 1
        d = self.base / f"c{self.n}"
        d.mkdir()
        return d

    def run(self, root: Path, rid: str = "r") -> Path:
        return faultlib.copy_run(self.template, root / rid)


# --------------------------------------------------------------------------- classes
def c_paths(box: Box, rng: random.Random, n: int, tally: Tally) -> None:
    """Links and foreign folders: lock links, linked runs and rank folders, sweeps over foreign
    folders, staging look-alikes, outputs aimed at a run's or a dataset's own files."""
    kinds = ["lock-link", "lock-fifo", "run-link", "tables-link", "sweep-foreign", "sweep-run", "staging-lookalike",
             "out-into-run", "out-into-dataset", "force-foreign"]
    for i in range(n):
        kind = kinds[i % len(kinds)]
        root = box.fresh()
        o = Outcome("paths", kind)
        victim = root / "victim.txt"
        victim.write_text("keep\n")
        if kind in ("lock-link", "lock-fifo"):
            run = box.run(root)
            (run / ".tracekit.lock").unlink(missing_ok=True)
            if kind == "lock-link":
                os.symlink(os.path.relpath(victim, run), run / ".tracekit.lock")
            else:
                os.mkfifo(run / ".tracekit.lock")
            argv = rng.choice([["analyze", run], ["ingest", box.trace, "--out", run, "--force"]])
            with guarded(o, root, None):
                rc, out, err, tb = cli(argv)
                judge(o, rc, out, err, tb)
                assert rc == 2, err
        elif kind == "run-link":
            run = box.run(root, "real")
            link = root / "latest"
            link.symlink_to("real")
            argv = rng.choice([["analyze", link], ["ingest", box.trace, "--out", link, "--force"]])
            with guarded(o, root, run):
                rc, out, err, tb = cli(argv)
                judge(o, rc, out, err, tb)
                assert link.is_symlink() and os.readlink(link) == "real", "the link was replaced"
        elif kind == "tables-link":
            run = box.run(root)
            shutil.move(run / "tables", root / "tables-elsewhere")
            (run / "tables").symlink_to(root / "tables-elsewhere")
            with guarded(o, root, None):
                rc, out, err, tb = cli(["analyze", run])
                judge(o, rc, out, err, tb)
        elif kind in ("sweep-foreign", "sweep-run"):
            out_dir = root / "out"
            if kind == "sweep-run":
                box.run(root, "out")
            else:
                (out_dir / "notes").mkdir(parents=True)
                (out_dir / "thesis.tex").write_text("x\n")
            with guarded(o, root, None):
                rc, out, err, tb = cli(["sweep", "--quick", "--out", out_dir, rng.choice(["--force", "--resume"])])
                judge(o, rc, out, err, tb)
                assert rc == 2, err
        elif kind == "staging-lookalike":
            run = box.run(root)
            from tracekit.store.rundir import _staging_tag

            theirs = root / f".tracekit-{_staging_tag(run)}-{rng.randrange(10**6)}"
            theirs.mkdir()
            (theirs / "mine.txt").write_text("x\n")
            with guarded(o, root, run):
                rc, out, err, tb = cli(rng.choice([["analyze", run], ["ingest", box.trace, "--out", run, "--force"]]))
                judge(o, rc, out, err, tb)
        elif kind == "out-into-run":
            run = box.run(root)
            target = run / rng.choice(["run.json", "trace.json.gz", ".tracekit.lock", "tables/steps.parquet",
                                       "tables/new.parquet"])
            argv = rng.choice([["query", "select 1", "--runs", run, "--out", target],
                               ["export", run, "--out", target], ["report", run, "--html", target]])
            with guarded(o, root, None):
                rc, out, err, tb = cli(argv)
                judge(o, rc, out, err, tb)
                assert rc == 2, err
        elif kind == "out-into-dataset":
            ds = root / "ds"
            rc, *_ = cli(["ingest", box.trace, "--dataset", "--engine", "serial", "--out", ds])
            parts = sorted(ds.rglob("*.parquet"))
            target = rng.choice([ds / "_tracekit_dataset.json", *parts[:3], ds / "steps" / "new.parquet"])
            argv = rng.choice([["query", "select 1", "--runs", box.template, "--out", target],
                               ["export", box.template, "--out", target], ["report", box.template, "--html", target]])
            with guarded(o, root, None):
                rc, out, err, tb = cli(argv)
                judge(o, rc, out, err, tb)
                assert rc == 2, err
        else:  # --force over a folder of someone's files
            out_dir = root / "out"
            out_dir.mkdir()
            (out_dir / "paper.tex").write_text("x\n")
            argv = rng.choice([["ingest", box.trace, "--out", out_dir, "--force"],
                               ["analyze", box.trace, "--out", out_dir, "--force"],
                               ["ingest", box.trace, "--dataset", "--engine", "serial", "--out", out_dir, "--force"]])
            with guarded(o, root, None):
                rc, out, err, tb = cli(argv)
                judge(o, rc, out, err, tb)
                assert rc == 2, err
        o.what = f"{kind}"
        tally.add(o)


def c_names(box: Box, rng: random.Random, n: int, tally: Tally) -> None:
    """Hostile names (escapes, markup, surrogates, separators) in trace files, run folders, event names,
    --out paths and config strings, through every reading and writing verb (in process)."""
    for _ in range(n):
        root = box.fresh()
        nm = name(rng)
        verb = rng.choice(["ingest", "analyze", "report", "query", "diff", "export", "sweep", "doctor", "counters"])
        o = Outcome("names", f"{verb} {nm!r}")
        doc = faultlib.trace_doc()
        ev_name = name(rng, path=False)
        for ev in doc["traceEvents"]:
            if ev["cat"] == "kernel":
                ev["name"] = ev_name
        try:
            trace = faultlib.write_trace(root / f"{nm}.json", doc)
        except (OSError, UnicodeEncodeError):
            trace = faultlib.write_trace(root / "t.json", doc)
        runs = root / "runs"
        runs.mkdir()
        try:
            run = box.run(runs, nm)
        except (OSError, UnicodeEncodeError):
            run = box.run(runs, "r")
        out = root / f"o{nm}"
        argv = {
            "ingest": ["ingest", trace, "--out", out],
            "analyze": ["analyze", trace, "--out", out],
            "report": ["report", run, "--html", out / "r.html"],
            "query": ["query", f"select run_id, '{ev_name.replace(chr(39), '')}' as {json.dumps(nm)} from steps "
                               "union all select run_id, name, 1 from gpu_activity", "--runs", runs,
                      "--format", rng.choice(["table", "csv", "json"])],
            "diff": ["diff", run, run],
            "export": ["export", run, "--out", out / "e.json"],
            "sweep": ["sweep", "--quick", "--dry-run", "--out", out],
            "doctor": ["doctor", "--runs", out],
            "counters": ["counters", run],
        }[verb]
        with guarded(o, root, out):
            rc, so, se, tb = cli(argv)
            judge(o, rc, so, se, tb)
        tally.add(o)


def c_pty(box: Box, rng: random.Random, n: int, tally: Tally) -> None:
    """Every verb in a child on a pty with progress bars forced on: escapes it did not mean to send."""
    root = box.fresh()
    doc = faultlib.trace_doc(faultlib.events(3000))
    for ev in doc["traceEvents"]:
        ev["name"] += PAYLOAD
    trace = faultlib.write_trace(root / f"t{PAYLOAD.replace('/', '_')[:50]}.json", doc)
    runs = root / "runs"
    run = box.run(runs, "r" + PAYLOAD.replace("/", "_")[:50])
    cfg = root / "s.toml"
    cfg.write_text(f"name = {toml_str('s' + PAYLOAD)}\nmodel = {toml_str('m' + PAYLOAD)}\nshapes = ['smoke']\n")
    for i in range(n):
        out = root / f"o{i}{name(rng, 2)}"
        argv = rng.choice([["ingest", trace, "--out", out], ["analyze", trace, "--out", out], ["report", run],
                           ["query", "select * from gpu_activity", "--runs", runs], ["diff", run, run],
                           ["export", run, "--out", out / "e.json"], ["sweep", "--config", cfg, "--dry-run"],
                           ["sweep", "--quick", "--dry-run", "--out", out], ["doctor", "--runs", out],
                           ["ingest", out / "missing", "--out", out], ["counters", run],
                           ["record", "--preset", "x" + PAYLOAD, "--out", out]])
        o = Outcome("pty", " ".join(map(str, argv[:1])))
        t0 = time.perf_counter()
        rc, text = run_pty([str(a) for a in argv], root)
        o.seconds = time.perf_counter() - t0
        if rc not in OK_CODES or "Traceback (most recent call last)" in text:
            o.traceback, o.wrong = True, text[-500:]
        bad = unmeant(text)
        if bad:
            o.injected, o.wrong = True, repr(bad[:4])
        tally.add(o)


def c_streams(box: Box, rng: random.Random, n: int, tally: Tally) -> None:
    """Locales (ASCII, Latin-1, C), a closed stdout, a reader that goes away, in a child."""
    root = box.fresh()
    runs = root / "runs"
    box.run(runs, "r")
    env0 = {**os.environ, "PYTHONPATH": str(REPO)}
    for i in range(n):
        kind = ["ascii", "latin-1", "closed", "head"][i % 4]
        verb = rng.choice([["report", runs / "r"], ["query", "select 'µ→é😀' || i as x from range(5000) t(i)",
                                                     "--runs", runs, "--format", rng.choice(["table", "csv", "json"])],
                           ["diff", runs / "r", runs / "r"], ["doctor", "--runs", runs]])
        o = Outcome("streams", f"{kind} {verb[0]}")
        cmd = [sys.executable, "-m", "tracekit", *map(str, verb)]
        t0 = time.perf_counter()
        if kind in ("ascii", "latin-1"):
            p = subprocess.run(cmd, env={**env0, "PYTHONIOENCODING": kind, "LC_ALL": "C"}, capture_output=True,
                               timeout=300)
            rc, text = p.returncode, (p.stdout + p.stderr).decode(kind, "replace")
        elif kind == "closed":
            p = subprocess.run(cmd, env=env0, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300,
                               preexec_fn=lambda: os.close(1))
            rc, text = p.returncode, p.stderr.decode()
        else:
            q = subprocess.Popen(cmd, env=env0, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            assert q.stdout is not None and q.stderr is not None
            q.stdout.read(rng.randrange(1, 200))
            q.stdout.close()
            text = q.stderr.read().decode()
            rc = q.wait(300)
        o.seconds = time.perf_counter() - t0
        if rc not in OK_CODES or "Traceback" in text or "Exception ignored" in text:
            o.traceback, o.wrong = True, text[-500:]
        tally.add(o)


def c_signals(box: Box, rng: random.Random, n: int, tally: Tally) -> None:
    """SIGINT, SIGTERM and SIGHUP at a random moment of ingest/analyze/export/query with --out beside a
    sandbox: the exit code, no traceback, no staging folder or temp file left, the old run as it was or
    complete."""
    env0 = {**os.environ, "PYTHONPATH": str(REPO)}
    big = faultlib.write_trace(box.base / "big.json", faultlib.trace_doc(faultlib.events(40_000)))
    for i in range(n):
        root = box.fresh()
        sig = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP][i % 3]
        run = box.run(root, "old")
        before = faultlib.snapshot(run)
        out = root / "new"
        argv = rng.choice([["ingest", big, "--out", out], ["analyze", big, "--out", out],
                           ["ingest", big, "--out", run, "--force"], ["export", run, "--out", root / "e.json"],
                           ["query", "select count(*) from range(2000000000)", "--runs", root]])
        o = Outcome("signals", f"{sig.name} {argv[0]}")
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-m", "tracekit", *map(str, argv)], env=env0, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0.3, 3.0))
        p.send_signal(sig)
        _, err = p.communicate(timeout=300)
        o.seconds = time.perf_counter() - t0
        want = 130 if sig == signal.SIGINT else 128 + sig
        # -sig: the signal came while the interpreter started, before tracekit ran (nothing to clean up)
        if p.returncode not in (want, 0, -sig) or "Traceback" in err:
            o.traceback, o.wrong = True, f"rc {p.returncode}: {err[-400:]}"
        left = [q.name for q in root.iterdir() if q.name.startswith(".")]
        if left:
            o.outside, o.wrong = True, f"left: {left}"
        try:
            faultlib.same_or_complete(before, run)
        except (AssertionError, OSError, ValueError) as exc:
            o.outside, o.wrong = True, f"old run changed: {exc}"
        tally.add(o)


def c_inputs(box: Box, rng: random.Random, n: int, tally: Tally) -> None:
    """Special and undecodable files where a config, a lengths list, a ceiling or a trace is read."""
    kinds = ["fifo", "dev-zero", "dev-null", "dir", "binary", "utf16", "latin1", "empty", "missing", "huge-line",
             "socket"]
    for i in range(n):
        root = box.fresh()
        kind = kinds[i % len(kinds)]
        path = root / "input"
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "dev-zero":
            path = Path("/dev/zero")
        elif kind == "dev-null":
            path = Path("/dev/null")
        elif kind == "dir":
            path.mkdir()
        elif kind == "binary":
            path.write_bytes(rng.randbytes(rng.randrange(1, 4000)))
        elif kind == "utf16":
            path.write_bytes("shapes = ['smoke']\n".encode(rng.choice(["utf-16", "utf-16-le", "utf-32"])))
        elif kind == "latin1":
            path.write_bytes("name = 'caf\xe9'\nshapes = ['smoke']\n".encode("latin-1"))
        elif kind == "empty":
            path.write_bytes(b"")
        elif kind == "huge-line":
            path.write_bytes(b"# " + b"x" * rng.randrange(10**5, 10**6))
        elif kind == "socket":
            import socket

            s = socket.socket(socket.AF_UNIX)
            with contextlib.suppress(OSError):
                s.bind(str(path))
        opt = rng.choice(["config", "lengths", "ceiling", "trace", "capture"])
        argv = {"config": ["sweep", "--config", path, "--dry-run"],
                "lengths": ["record", "--serve", "--lengths", path, "--out", root / "r", "--device", "cpu"],
                "ceiling": ["analyze", box.template, "--ceiling", path],
                "trace": ["ingest", path, "--out", root / "r"],
                "capture": ["ingest", box.trace, "--capture", path, "--out", root / "r"]}[opt]
        o = Outcome("inputs", f"{opt} {kind}")
        with guarded(o, root, root / "r"):
            done: dict[str, Any] = {}

            def go(argv: list[Any] = argv, done: dict[str, Any] = done) -> None:
                done["r"] = cli(argv)

            import threading

            th = threading.Thread(target=go, daemon=True)
            th.start()
            th.join(120)
            if th.is_alive():
                o.wrong = "hung (120 s)"
            else:
                rc, so, se, tb = done["r"]
                judge(o, rc, so, se, tb)
        tally.add(o)


def c_env(box: Box, rng: random.Random, n: int, tally: Tally) -> None:
    """tracekit's environment variables set to junk."""
    values = ["", "abc", "-1", "nan", "inf", "1e999", "0x10", " 2 ", "\x1b]0;T\x07", "1" * 400, "duckdb", "DuckDB",
              "native ", "fast", "[bold]MK[/bold]"]
    names = ["TRACEKIT_PROGRESS_DELAY", "TRACEKIT_INGEST_ENGINE", "TRACEKIT_CACHE_DIR", "TRACEKIT_NCU"]
    for _ in range(n):
        root = box.fresh()
        var, val = rng.choice(names), rng.choice(values)
        argv = rng.choice([["ingest", box.trace, "--out", root / "r"], ["query", "select 1", "--runs", box.template],
                           ["report", box.template], ["doctor", "--runs", root]])
        o = Outcome("env", f"{var}={val!r} {argv[0]}")
        with guarded(o, root, root / "r"), faultlib.env(**{var: val}):
            rc, so, se, tb = cli(argv)
            judge(o, rc, so, se, tb)
        tally.add(o)


def c_query(box: Box, rng: random.Random, n: int, tally: Tally) -> None:
    """Query results: NaN/infinities in JSON, repeated column names, INTERVAL and other types to Parquet,
    CSV and tables; scripts of several statements."""
    values = ["'nan'::double", "'inf'::double", "'-inf'::double", "1", "null", "'x'", "interval 3 day",
              "[1.0, 'nan'::double]", "{'a': 'inf'::double}", "now()::date", "12.5::decimal(10,2)", "'\\x1b[31m'",
              "'\x1b]0;T\x07'", "'[bold]MK[/bold]'", "uuid()", "'1 day'::interval * 2", "map([1],['a'])",
              "to_timestamp(0)", "'\ud800'", "2::hugeint", "blob 'x'"]
    cols = ["a", "a", "b", "A", "a_2", '"a"', "x y"]
    for _ in range(n):
        root = box.fresh()
        k = rng.randrange(1, 5)
        select = ", ".join(f"{rng.choice(values)} as {json.dumps(rng.choice(cols))}" for _ in range(k))
        sql = f"select {select}"
        if rng.random() < 0.25:
            first = rng.choice(["select 1", "create view v as select 1 as z", "set threads=1", "explain select 1",
                                "create table t as select 2 as y", "pragma version", "show tables"])
            sql = f"{first}; {sql}"
        fmt = rng.choice(["table", "csv", "json", "parquet"])
        out = root / "q.out"
        argv = ["query", sql, "--runs", box.template, "--format", fmt] + (["--out", out] if fmt == "parquet" or
                                                                           rng.random() < 0.3 else [])
        o = Outcome("query", f"{fmt}: {sql}")
        with guarded(o, root, out):
            rc, so, se, tb = cli(argv)
            judge(o, rc, so, se, tb)
            if rc == 0 and fmt == "json":
                text = out.read_text() if out.exists() else so
                for line in text.splitlines():
                    if not line.strip():
                        continue
                    json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"non-JSON {c}")))
            if rc == 0 and fmt == "parquet":
                import pyarrow.parquet as pq

                t = pq.read_table(out)
                assert len(set(t.column_names)) == len(t.column_names), t.column_names
        tally.add(o)


def c_datasets(box: Box, rng: random.Random, n: int, tally: Tally) -> None:
    """Two run ids into one dataset: distinct ids never share a folder, a reserved value is refused,
    the same id again replaces its own run; every refusal leaves the dataset as it was."""
    ids = ["exp/1", "exp=1", "exp-1", "exp 1", "exp.1", "exp-1.", "exp%2F1", "__HIVE_DEFAULT_PARTITION__", "e", "E",
           "é", "e\x1b[5m", "run", "t", "..", "a/b/c", "0042", "42", "null", "NULL"]  # "" is no --run-id: the stem
    for _ in range(n):
        root = box.fresh()
        ds = root / "ds"
        a, b = rng.choice(ids), rng.choice(ids)
        o = Outcome("datasets", f"{a!r} then {b!r}")
        from tracekit.store.dataset import RESERVED, safe_run_id

        with guarded(o, root, ds):
            rc, so, se, tb = cli(["ingest", box.trace, "--dataset", "--engine", "serial", "--out", ds, "--run-id", a])
            judge(o, rc, so, se, tb)
            if a.upper() in RESERVED or safe_run_id(a).upper() in RESERVED:
                assert rc == 2, se
                tally.add(o)
                continue
            assert rc in (0, 2), se
            first_ok = rc == 0
            before = faultlib.snapshot(ds)
            rc, so, se, tb = cli(["ingest", box.trace, "--dataset", "--engine", "serial", "--out", ds, "--run-id", b])
            judge(o, rc, so, se, tb)
            collide = first_ok and a != b and safe_run_id(a) == safe_run_id(b)
            if collide or b.upper() in RESERVED:
                assert rc == 2, f"should be refused: {se}"
                assert faultlib.snapshot(ds) == before, "the dataset changed on a refusal"
            elif rc == 0 and first_ok:
                m = json.loads((ds / "_tracekit_dataset.json").read_text())
                assert safe_run_id(a) in m["runs"] and safe_run_id(b) in m["runs"]
        tally.add(o)


def c_numbers(box: Box, rng: random.Random, n: int, tally: Tally) -> None:
    """Times at the edge of int64 ns (ts, dur, base time), both readers: skipped and counted, never kept
    wrapped; a sweep's dtype."""
    edge = [9_223_372_036_854_775, 9_223_372_036_854_000, 9_223_372_036_853_999, 2**53, -(2**53), 0, 1, 10**18]
    durs = [0, 1, 1000, 10**6, 2**62, -5, 1e300, 775.807, 776]
    for i in range(n):
        root = box.fresh()
        if i % 5 == 4:
            dtype = rng.choice(["float128", "float64", "int8", "fp16", "", "FLOAT32", "float16", "bfloat16", "auto"])
            cfg = root / "s.toml"
            cfg.write_text(f'dtype = "{dtype}"\nshapes = ["smoke"]\n')
            o = Outcome("numbers", f"dtype {dtype!r}")
            with guarded(o, root, None):
                rc, so, se, tb = cli(["sweep", "--config", cfg, "--dry-run"])
                judge(o, rc, so, se, tb)
                assert (rc == 0) == (dtype in ("float16", "bfloat16", "float32", "auto")), se
            tally.add(o)
            continue
        ev = faultlib.events(4)
        k = [e for e in ev if e["cat"] in ("kernel", "cpu_op", "cuda_runtime")]
        for e in rng.sample(k, rng.randrange(1, 4)):
            e["ts"], e["dur"] = rng.choice(edge), rng.choice(durs)
        extra = {"baseTimeNanoseconds": rng.choice([0, 2**62, 10**18])} if rng.random() < 0.3 else {}
        src = faultlib.write_trace(root / "t.json", faultlib.trace_doc(ev, **extra))
        engine = rng.choice(["native", "duckdb"])
        out = root / "r"
        o = Outcome("numbers", f"{engine} {[(e['ts'], e['dur']) for e in k]} {extra}")
        with guarded(o, root, out), faultlib.env(TRACEKIT_INGEST_ENGINE=engine):
            rc, so, se, tb = cli(["analyze", src, "--out", out])
            judge(o, rc, so, se, tb)
            if rc == 0:
                import pyarrow.compute as pc
                import pyarrow.parquet as pq

                for t in ("gpu_activity", "cpu_ops", "runtime"):
                    tab = pq.read_table(out / "tables" / f"{t}.parquet", columns=["ts_ns", "dur_ns"])
                    if tab.num_rows:
                        ends = pc.add_checked(pc.fill_null(tab["ts_ns"], 0), pc.fill_null(tab["dur_ns"], 0))
                        assert ends is not None
                m = json.loads((out / "run.json").read_text())["ingest"]["counts"]
                assert m["events_read"] == sum(m["events_by_table"].values()) + sum(m["skipped"].values()), m
        tally.add(o)


def c_svg(box: Box, rng: random.Random, n: int, tally: Tally) -> None:
    """Names in SVG text (control characters, NUL, lone surrogates, XML's own characters): valid XML."""
    import xml.etree.ElementTree as ET

    from tracekit.report.svg import esc

    for _ in range(n):
        s = "".join(rng.choice([*PIECES, "<", "&", "]]>", "\x00", "\x0b", "\ud83d", "\ude00", "\uffff"])
                    for _ in range(rng.randrange(1, 8)))
        o = Outcome("svg", repr(s))
        try:
            doc = f'<svg xmlns="http://www.w3.org/2000/svg"><text title="{esc(s)}">{esc(s)}</text></svg>'
            ET.fromstring(doc.encode("utf-8"))
        except Exception as exc:
            o.wrong = f"{type(exc).__name__}: {exc}"
        tally.add(o)


def c_twice(box: Box, rng: random.Random, n: int, tally: Tally) -> None:
    """One trace given twice: the same path, ./path, a link, a hard link, a copy, gzip of the same bytes."""
    for i in range(n):
        root = box.fresh()
        t = faultlib.write_trace(root / "t.json", faultlib.trace_doc())
        kind = ["same", "dot", "link", "hard", "copy", "dir-and-file"][i % 6]
        if kind == "same":
            other = t
        elif kind == "dot":
            other = root / "." / "t.json"
        elif kind == "link":
            other = root / "l.json"
            other.symlink_to("t.json")
        elif kind == "hard":
            other = root / "h.json"
            os.link(t, other)
        elif kind == "copy":
            other = root / "c.json"
            shutil.copy(t, other)
        else:
            other = root
        extra = rng.choice([[], ["--dataset", "--engine", "serial"]])
        o = Outcome("twice", f"{kind} {extra}")
        with guarded(o, root, root / "out"):
            rc, so, se, tb = cli(["ingest", t, other, "--out", root / "out", *extra])
            judge(o, rc, so, se, tb)
            assert rc == 2, f"not refused: {se or so}"
        tally.add(o)


CLASSES: dict[str, tuple[Callable[[Box, random.Random, int, Tally], None], int]] = {
    "paths": (c_paths, 120), "names": (c_names, 160), "pty": (c_pty, 36), "streams": (c_streams, 24),
    "signals": (c_signals, 18), "inputs": (c_inputs, 66), "env": (c_env, 45), "query": (c_query, 140),
    "datasets": (c_datasets, 60), "numbers": (c_numbers, 80), "svg": (c_svg, 200), "twice": (c_twice, 24),
}


def run(seed: int = 0, scale: float = 1.0, only: list[str] | None = None, log: Any = None) -> dict[str, Any]:
    """Run the pass; the summary (totals, per class, every failure)."""
    tally = Tally()
    base = Path(tempfile.mkdtemp(prefix="tracekit-hostile-"))
    try:
        box = Box(base)
        for cls, (fn, n) in CLASSES.items():
            if only and cls not in only:
                continue
            t0 = time.perf_counter()
            k = max(1, round(n * scale))
            fn(box, random.Random(f"{seed}-{cls}"), k, tally)
            if log is not None:
                print(f"{cls}: {k} cases in {time.perf_counter() - t0:.0f} s", file=log, flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    out = tally.summary()
    out["seed"], out["scale"] = seed, scale
    out["seconds"] = round(sum(o.seconds for o in tally.outcomes), 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="cases per class times this")
    ap.add_argument("--only", nargs="*", help="classes to run: " + ", ".join(CLASSES))
    ap.add_argument("--json", type=Path, help="write the summary here")
    args = ap.parse_args()
    t0 = time.perf_counter()
    res = run(args.seed, args.scale, args.only, log=sys.stderr)
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1, ensure_ascii=True) + "\n")
    t = res["total"]
    print(f"{t.get('cases', 0)} cases: {t.get('traceback', 0)} tracebacks, {t.get('outside', 0)} lost or outside, "
          f"{t.get('injected', 0)} injected, {t.get('wrong', 0)} wrong ({res['wall_s']} s)")
    for cls, c in res["classes"].items():
        print(f"  {cls:9} {c}")
    for f in res["failures"][:30]:
        print(f"  FAIL {f['class']}: {f['case'][:120]}: {f['wrong'][-300:]}")
    return 0 if not res["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
