"""Fault class: run-directory corruption. A good run with its run.json, tables or trace damaged in a
generated way, then one verb over it (analyze, report, diff, export, query, ingest from the cache).

Invariant: one line and an exit code (no traceback); a verb that only reads leaves the run byte for
byte as it was; analyze either finishes (run.json says so, its tables hold the rows it says) or
leaves the run as it was; query skips what it cannot read and says so.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from faultlib import (
    case,
    check_complete,
    cli,
    copy_run,
    events,
    examples,
    manifest,
    one_line,
    outside,
    snapshot,
    trace_doc,
    write_trace,
)
from hypothesis import given
from hypothesis import strategies as st

_scalar = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8)
_json = st.recursive(_scalar, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                     max_leaves=8)
FIELDS = ["status", "warnings", "ingest", "analysis", "trace_meta", "workload", "model", "environment", "timings",
          "clock", "run_id", "created_at", "incomplete_reason", "rank_analysis", "steps", "inputs", "command"]
TABLES = ["gpu_activity", "cpu_ops", "runtime", "annotations", "steps", "requests", "phases", "kernel_steps",
          "gpu_timeline", "counters"]


@st.composite
def damages(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """A list of (what, how) damages to a run directory."""
    out: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(["manifest-field", "manifest-field", "manifest-bytes", "manifest-json",
                                     "table", "table", "tables-dir", "trace", "junk"]))
        if what == "manifest-field":
            out.append((what, (draw(st.sampled_from(FIELDS) | st.text(max_size=5)), draw(_json))))
        elif what == "manifest-bytes":
            out.append((what, draw(st.sampled_from(["truncate", "empty", "garbage", "nul", "deep", "directory",
                                                    "delete", "utf16"]))))
        elif what == "manifest-json":
            out.append((what, draw(_json)))
        elif what == "table":
            out.append((what, (draw(st.sampled_from(TABLES)),
                               draw(st.sampled_from(["truncate", "garbage", "empty", "delete", "swap", "directory",
                                                     "flip"])))))
        elif what == "tables-dir":
            out.append((what, draw(st.sampled_from(["file", "delete", "odd-names"]))))
        elif what == "trace":
            out.append((what, draw(st.sampled_from(["truncate", "garbage", "delete", "directory"]))))
        else:
            out.append((what, draw(st.sampled_from(["ranks", "hidden", "lock-file"]))))
    return out


def _damage(run: Path, damages: list[tuple[str, Any]], rnd: Any) -> None:
    for what, how in damages:
        # a damage that does not apply after the previous ones (a file now a directory) is left out
        with contextlib.suppress(OSError):
            _damage_one(run, what, how, rnd)


def _damage_one(run: Path, what: str, how: Any, rnd: Any) -> None:
    m = run / "run.json"
    if what == "manifest-field" and m.is_file():
        try:
            data = json.loads(m.read_text())
        except (ValueError, UnicodeDecodeError):
            return
        if isinstance(data, dict):
            data[how[0]] = how[1]
            m.write_text(json.dumps(data))
    elif what == "manifest-json" and m.is_file():
        m.write_text(json.dumps(how))
    elif what == "manifest-bytes" and m.is_file():
        raw = m.read_bytes()
        m.write_bytes({"truncate": raw[: rnd.randrange(max(1, len(raw)))], "empty": b"", "garbage": rnd.randbytes(64),
                       "nul": raw.replace(b'"', b"\x00", 3), "deep": b"[" * 50_000 + b"]" * 50_000,
                       "utf16": raw.decode("utf-8", "replace").encode("utf-16"), "directory": raw, "delete": raw}[how])
        if how == "directory":
            m.unlink()
            m.mkdir()
        elif how == "delete":
            m.unlink()
    elif what == "table":
        name, kind = how
        t = run / "tables" / f"{name}.parquet"
        if not t.is_file():
            return
        raw = t.read_bytes()
        if kind == "truncate":
            t.write_bytes(raw[: rnd.randrange(max(1, len(raw)))])
        elif kind == "garbage":
            t.write_bytes(b"PAR1" + rnd.randbytes(200) + b"PAR1")
        elif kind == "empty":
            t.write_bytes(b"")
        elif kind == "delete":
            t.unlink()
        elif kind == "swap":
            others = sorted(p for p in t.parent.glob("*.parquet") if p != t)
            if others:
                t.write_bytes(rnd.choice(others).read_bytes())
        elif kind == "directory":
            t.unlink()
            t.mkdir()
        else:  # flip bytes in the middle (data pages), footer intact
            b = bytearray(raw)
            for _ in range(8):
                i = rnd.randrange(4, max(5, len(b) - 64))
                b[i] ^= 0xFF
            t.write_bytes(bytes(b))
    elif what == "tables-dir":
        d = run / "tables"
        if how == "file" and d.is_dir():
            import shutil

            shutil.rmtree(d)
            d.write_text("not a directory")
        elif how == "delete" and d.is_dir():
            import shutil

            shutil.rmtree(d)
        elif how == "odd-names" and d.is_dir():
            (d / "x\" as select 1; COPY (select 1) TO 'PWNED.csv'; --.parquet").write_bytes(b"x")
            (d / "[bold]\x1b[31m.parquet").write_bytes((d / "runtime.parquet").read_bytes()
                                                       if (d / "runtime.parquet").is_file() else b"")
            (d / "*.parquet").write_bytes(b"PAR1")
    elif what == "trace":
        t = run / "trace.json.gz"
        if how == "delete":
            t.unlink(missing_ok=True)
        elif how == "directory":
            t.unlink(missing_ok=True)
            t.mkdir()
        elif t.is_file():
            raw = t.read_bytes()
            t.write_bytes(raw[: len(raw) // 2] if how == "truncate" else rnd.randbytes(100))
    elif what == "junk":
        if how == "ranks":
            (run / "ranks" / "0").mkdir(parents=True, exist_ok=True)
            (run / "ranks" / "0" / "run.json").write_text("{")
        elif how == "hidden":
            (run / ".tracekit-new-x").mkdir(exist_ok=True)
        else:
            (run / ".tracekit.lock").write_text("999999 tracekit ingest\n")


@pytest.fixture(scope="module")
def traced_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A good analysed run that keeps its trace.json.gz, and the source trace it was ingested from."""
    root = tmp_path_factory.mktemp("traced")
    src = write_trace(root / "src.json.gz", trace_doc(events(6)))
    run = root / "GOOD"
    assert cli(["ingest", src, "--out", run]).rc == 0
    (run / "trace.json.gz").write_bytes(src.read_bytes())
    assert cli(["analyze", run]).rc == 0
    return run, src


VERBS = ["analyze", "report", "diff", "export-proto", "export-json", "export-from-trace", "query", "ingest-cache"]


@examples(90)
@given(damage=damages(), verb=st.sampled_from(VERBS), seed=st.integers(0, 2**16))
@pytest.mark.slow
def test_a_damaged_run_under_every_verb(traced_template: tuple[Path, Path], damage: list[tuple[str, Any]],
                                        verb: str, seed: int) -> None:
    import random

    case("run-directory corruption")
    template, src = traced_template
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        run = copy_run(template, root / "runs" / "bad")
        other = copy_run(template, root / "runs" / "good")
        _damage(run, damage, random.Random(seed))
        before = snapshot(run)
        around = outside(root, run)
        outfile = root / "exports" / "x.out"
        argv: list[Any] = {
            "analyze": ["analyze", run],
            "report": ["report", run, "--html", outfile],
            "diff": ["diff", other, run],
            "export-proto": ["export", run, "--out", outfile],
            "export-json": ["export", run, "--format", "json", "--out", outfile],
            "export-from-trace": ["export", run, "--format", "json", "--from-trace", "--out", outfile],
            "query": ["query", "select run_id, count(*) as n from gpu_activity group by all", "--runs", root / "runs",
                      "--format", "json"],
            "ingest-cache": ["ingest", src, "--out", run],
        }[verb]
        r = cli(argv)
        one_line(r)
        if verb in ("analyze", "ingest-cache") and r.rc == 0:  # as it was, or a complete new state
            if snapshot(run) != before:
                m = check_complete(run) if manifest(run).get("status") == "complete" else manifest(run)
                if verb == "analyze":
                    assert m["analysis"]["status"] == "complete"
        else:
            assert snapshot(run) == before
        if verb == "query":
            assert r.rc in (0, 2)
            if r.rc == 0:
                rows = [json.loads(x) for x in r.out.splitlines()]
                assert "good" in {x["run_id"] for x in rows}
        allowed_new = {outfile} if r.rc == 0 and verb not in ("analyze", "ingest-cache", "query", "diff") else set()
        now = outside(root, run)
        for k in set(now) - set(around):
            assert root / k in allowed_new, k
        assert {k: v for k, v in now.items() if root / k not in allowed_new} == around
