"""``record --repeat`` and ``diff`` on the tiny CPU workload, as a user runs them: the summary on stdout,
progress on stderr, a CPU split first, and a diff of a set of runs against itself that is within noise."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import need_module

need_module("torch")
need_module("transformers")


def _tk(args: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``tracekit ARGS`` in this process (the test is about what it prints where, not about start-up)."""
    from tracekit.cli import main

    capfd.readouterr()
    rc = main(args)
    got = capfd.readouterr()
    return rc, got.out, got.err


@pytest.mark.slow
def test_repeat_then_diff_reports_the_noise(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rc, stdout, stderr = _tk(["record", "--repeat", "2", "--out", "a", "--warmup", "1"], capfd)
    assert rc == 0, stderr[-2000:]
    out = stdout.splitlines()
    assert out[0].startswith("tracekit record: complete")
    assert out[1].startswith("  where the time went (CPU: no roofline")
    assert any(ln.startswith("  decode ") and "GEMM" in ln for ln in out)
    assert any(ln.startswith("repeats         2 runs under a") for ln in out)
    assert "recording: request 1/1" in stderr and "tracekit record:" not in stderr
    assert {p.name for p in (tmp_path / "a").iterdir()} == {"repeat-1", "repeat-2"}
    rc, stdout, stderr = _tk(["diff", "a", "a"], capfd)
    assert rc == 0, stderr[-2000:]
    assert "analyzing a/repeat-1 first (tracekit analyze a/repeat-1)" in stderr
    rows = [ln for ln in stdout.splitlines() if ln.startswith("│ decode") and "noise" in ln]
    assert rows and "1.00×" in rows[0] and "within noise" in rows[0]
    assert "per operator class (CPU host time)" in stdout
