"""``record --repeat`` and ``diff`` on the tiny CPU workload, as a user runs them: the summary on stdout,
progress on stderr, a CPU split first, and a diff of a set of runs against itself that is within noise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import need_module

need_module("torch")
need_module("transformers")


def _tk(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tracekit", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
def test_repeat_then_diff_reports_the_noise(tmp_path: Path) -> None:
    rec = _tk(["record", "--repeat", "2", "--out", "a", "--warmup", "1"], tmp_path)
    assert rec.returncode == 0, rec.stderr[-2000:]
    out = rec.stdout.splitlines()
    assert out[0].startswith("tracekit record: complete")
    assert out[1].startswith("  where the time went (CPU: no roofline")
    assert any(ln.startswith("  decode ") and "GEMM" in ln for ln in out)
    assert any(ln.startswith("repeats         2 runs under a") for ln in out)
    assert "recording: request 1/1" in rec.stderr and "tracekit record:" not in rec.stderr
    assert {p.name for p in (tmp_path / "a").iterdir()} == {"repeat-1", "repeat-2"}
    diff = _tk(["diff", "a", "a"], tmp_path)
    assert diff.returncode == 0, diff.stderr[-2000:]
    assert "analyzing a/repeat-1 first (tracekit analyze a/repeat-1)" in diff.stderr
    rows = [ln for ln in diff.stdout.splitlines() if ln.startswith("│ decode") and "noise" in ln]
    assert rows and "1.00×" in rows[0] and "within noise" in rows[0]
    assert "per operator class (CPU host time)" in diff.stdout
