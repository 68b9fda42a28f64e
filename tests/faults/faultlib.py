"""The fault suite's harness: run a verb as a user would, then check the invariants.

Every case of tests/faults/ ends in the same checks:

- ``one_line``: the exit code is 0, 1, 2 or 130 and nothing printed is a traceback; a failure prints
  exactly one ``tracekit: error:`` line (after at most a few ``warning:`` lines), and nothing
  printed holds a raw control character (ESC, BEL, ...) or unescaped trace text;
- ``same_or_complete``: a run directory holds its previous state byte for byte, or a complete new
  run whose tables match what its run.json says (rows per table), never a mix;
- ``outside_unchanged``: nothing was written outside ``--out`` (a snapshot of the rest of the tree);
- ``nothing_executed``: no file an injected statement would write (``PWNED*``) exists anywhere.

``cli`` runs ``tracekit.cli.main`` in this process (fast: hundreds of cases in seconds) with its own
capture; ``cli_proc`` runs ``python -m tracekit`` in a child (for kill -9 and concurrency).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[2]
LOCK_NAME = ".tracekit.lock"
T0 = 1_712_195_495_519_000  # Kineto µs


@dataclass
class Result:
    rc: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def cli(argv: Sequence[str], cwd: Path | None = None) -> Result:
    """``tracekit ARGV`` in this process; stdout and stderr captured. An exception escaping ``main``
    is a traceback the user would have seen: it fails the case."""
    from tracekit.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with redirect_stdout(out), redirect_stderr(err):
            rc = main([str(a) for a in argv])
    finally:
        os.chdir(old)
    return Result(rc, out.getvalue(), err.getvalue())


def cli_proc(argv: Sequence[str], cwd: Path, timeout: float = 120, env: dict[str, str] | None = None) -> Result:
    p = subprocess.run([sys.executable, "-m", "tracekit", *map(str, argv)], cwd=cwd, capture_output=True,
                       text=True, timeout=timeout, env={**os.environ, **(env or {})})
    return Result(p.returncode, p.stdout, p.stderr)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def one_line(r: Result, *, ok: Sequence[int] = (0, 1, 2)) -> None:
    """Exit code in ``ok``; no traceback; a failure is one ``tracekit: error:`` line; no raw control characters."""
    assert r.rc in ok, (r.rc, r.err[-2000:])
    assert "Traceback (most recent call last)" not in r.text, r.err[-3000:]
    bad = _CONTROL.search(r.text)
    assert bad is None, f"raw control character {bad.group()!r} printed: {r.text[max(0, bad.start() - 80):bad.start() + 80]!r}"
    if r.rc != 0:
        lines = [ln for ln in r.err.splitlines() if ln.strip()]
        assert lines, "a failure printed nothing"
        assert lines[-1].startswith(("tracekit: error:", "tracekit: interrupted")), r.err[-2000:]
        errors = [ln for ln in lines if ln.startswith("tracekit: error:")]
        assert len(errors) <= 1, r.err
        for ln in lines[:-1]:  # before the error only warnings and notes
            assert ln.lstrip().startswith(("warning:", "note:", "tracekit: warning:", "tracekit: note:")), r.err


def snapshot(root: Path, *, skip: Sequence[Path] = ()) -> dict[str, tuple[int, str]]:
    """Every file under ``root`` (except under ``skip``, lock files and a killed writer's hidden temp
    files): relative path -> (size, digest)."""
    out: dict[str, tuple[int, str]] = {}
    skips = [s.resolve() for s in skip]
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        dirnames[:] = [n for n in dirnames if (d / n).resolve() not in skips]
        for n in filenames:
            p = d / n
            if n == LOCK_NAME or p.resolve() in skips or (n.startswith(".") and n.endswith(".tmp")):
                continue  # a killed writer's temp file is never read (the next writer removes it)
            try:
                if not stat.S_ISREG(os.stat(p).st_mode):
                    out[str(p.relative_to(root))] = (-1, "not a regular file")  # a FIFO would block the read
                    continue
                data = p.read_bytes()
            except OSError:
                continue
            out[str(p.relative_to(root))] = (len(data), hashlib.blake2b(data, digest_size=12).hexdigest())
    return out


def outside(root: Path, out: Path) -> dict[str, tuple[int, str]]:
    """The snapshot ``outside_unchanged`` compares with: everything under ``root`` but ``out``."""
    return snapshot(root, skip=[out])


def outside_unchanged(before: dict[str, tuple[int, str]], root: Path, out: Path) -> None:
    """Nothing under ``root`` outside ``out`` changed (``before``: ``outside(root, out)``), and no
    staging directory was left beside ``out``."""
    after = snapshot(root, skip=[out])
    added = sorted(set(after) - set(before))
    changed = sorted(k for k in set(after) & set(before) if after[k] != before[k])
    removed = sorted(set(before) - set(after))
    assert not added and not changed and not removed, (added[:5], changed[:5], removed[:5])


def nothing_executed(*roots: Path) -> None:
    for root in roots:
        hits = [p for p in root.rglob("*") if p.name.upper().startswith("PWNED")] if root.exists() else []
        assert not hits, hits


def manifest(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "run.json").read_text())
    return data


def check_complete(run: Path) -> dict[str, Any]:
    """A complete run: run.json says so and every table it counts has that many rows, readable."""
    m = manifest(run)
    assert m["status"] == "complete", m.get("incomplete_reason")
    rows = ((m.get("ingest") or {}).get("counts") or {}).get("rows_by_table") or {}
    for name, n in rows.items():
        assert pq.ParquetFile(run / "tables" / f"{name}.parquet").metadata.num_rows == n, name
    analysis = m.get("analysis")
    if isinstance(analysis, dict) and analysis.get("status") == "complete":
        for name, n in (analysis.get("rows") or {}).items():
            assert pq.ParquetFile(run / "tables" / f"{name}.parquet").metadata.num_rows == n, name
    return m


def same_or_complete(before: dict[str, tuple[int, str]], run: Path) -> str:
    """The run at ``run`` is exactly ``before`` ("same") or a complete, consistent run ("new")."""
    now = snapshot(run)
    if now == before:
        return "same"
    check_complete(run)
    return "new"


# --------------------------------------------------------------------------- traces
def events(n_kernels: int = 4, *, name: str = "gemm", t0: int = T0) -> list[dict[str, Any]]:
    """A small CUDA trace's events: ops launching kernels, a step annotation per kernel pair."""
    ev: list[dict[str, Any]] = []
    for i in range(n_kernels):
        t = t0 + 100 * i
        ev.append({"ph": "X", "cat": "cpu_op", "name": f"aten::mm{i % 2}", "pid": 1, "tid": 7, "ts": t, "dur": 30,
                   "args": {"External id": i + 1, "Input Dims": [[4, 8], [8, 4]], "Input type": ["float", "float"]}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 7, "ts": t + 5,
                   "dur": 5, "args": {"correlation": 100 + i, "External id": i + 1}})
        ev.append({"ph": "X", "cat": "kernel", "name": f"{name}{i % 2}", "pid": 0, "tid": 7, "ts": t + 20, "dur": 10,
                   "args": {"correlation": 100 + i, "device": 0, "stream": 7, "grid": [1, 1, 1], "block": [32, 1, 1]}})
    ev.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 7, "ts": t0 - 10,
               "dur": 100 * n_kernels + 20})
    return ev


def trace_doc(ev: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],
                           "traceEvents": events() if ev is None else ev}
    doc.update(extra)
    return doc


def write_trace(path: Path, doc: Any, *, gz: bool | None = None) -> Path:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    if gz if gz is not None else path.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=1)
    path.write_bytes(data)
    return path


def good_run(root: Path, name: str = "GOOD", n_kernels: int = 4, *, analyze: bool = True) -> Path:
    """A complete, analysed run (ingested from a small trace) at ``root/name``."""
    root.mkdir(parents=True, exist_ok=True)
    src = write_trace(root / f"{name}-src.json", trace_doc(events(n_kernels)))
    r = cli(["analyze" if analyze else "ingest", src, "--out", root / name])
    assert r.rc == 0, r.err
    src.unlink()
    return root / name


# --------------------------------------------------------------------------- figures
# Cases run per fault class in this pytest run (docs/reliability.md quotes them; tests/faults/conftest.py
# writes them to $TRACEKIT_FAULT_STATS at the end of the session when that is set).
CASES: dict[str, int] = {}


def case(cls: str) -> None:
    CASES[cls] = CASES.get(cls, 0) + 1


def examples(n: int) -> Any:
    """Hypothesis settings for a generated class: ``n`` examples, the same ones on every run (CI and the
    figures in docs/reliability.md); TRACEKIT_FAULT_EXPLORE=K draws K times as many new ones."""
    from hypothesis import HealthCheck, settings

    explore = int(os.environ.get("TRACEKIT_FAULT_EXPLORE", "0") or 0)
    return settings(max_examples=n * max(explore, 1), derandomize=not explore, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


class env:
    """Set environment variables for a block (hypothesis examples cannot use monkeypatch)."""

    def __init__(self, **values: str | None) -> None:
        self.values, self.old = values, {k: os.environ.get(k) for k in values}

    def __enter__(self) -> None:
        for k, v in self.values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def __exit__(self, *exc: object) -> None:
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def copy_run(src: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(src, dest)
    return dest


def foreign_part(root: Path, table: str, run_id: str, rows: Any) -> Path:
    """A dataset part of a table tracekit has no schema for (the store refuses to write one), as a
    foreign writer would leave it: the file written directly, at the place the layout gives it."""
    from tracekit.store.dataset import part_path
    from tracekit.store.rundir import write_parquet

    path = part_path(Path(root), table, run_id, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_parquet(rows, path)
    return path
