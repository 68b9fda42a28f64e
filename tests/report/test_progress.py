"""Long work shows a progress bar on a terminal, and nothing when quiet or not on a terminal."""

from __future__ import annotations

import io
import os
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.model import progress
from tracekit.report.progress import Bar

BAR = "━"  # rich's bar glyph


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_is_drawn_on_a_terminal_once_the_work_outlasts_the_delay() -> None:
    # GIVEN a terminal stream and a bar with no delay
    out = _Tty()
    # WHEN a stage reports its progress through the listener
    with Bar(delay=0, stream=out) as bar, progress.listening(bar):
        for i in range(5):
            progress.report("writing", i, 4)
    # THEN the bar was drawn there
    assert bar.shown and BAR in out.getvalue() and "writing" in out.getvalue()


@pytest.mark.parametrize("case", ["quiet", "not a terminal", "short work"])
def test_no_bar_when_quiet_not_a_terminal_or_short(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACEKIT_PROGRESS_DELAY", raising=False)
    out = io.StringIO() if case == "not a terminal" else _Tty()
    bar = Bar(quiet=case == "quiet", delay=0 if case != "short work" else 60, stream=out)
    with bar, progress.listening(bar):
        for i in range(5):
            progress.report("writing", i, 4)
    assert not bar.shown and out.getvalue() == ""


def test_reports_without_a_listener_go_nowhere() -> None:
    assert not progress.active()
    progress.report("nothing listens", 1, 2)  # no error, no output
    seen: list[tuple[str, float, float]] = []
    with progress.listening(lambda *a: seen.append(a)):
        assert progress.active()
        progress.report("x", 1, 2)
    assert seen == [("x", 1, 2)] and not progress.active()


def _on_a_pty(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env={**os.environ, **env},
                            close_fds=True)
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    proc.wait(60)
    os.close(master)
    assert proc.returncode == 0, out.decode(errors="replace")[-2000:]
    return out.decode(errors="replace")


@pytest.mark.skipif(sys.platform != "linux", reason="needs a pseudo-terminal")
@pytest.mark.parametrize("verb", ["ingest", "analyze", "export"])
@pytest.mark.slow
def test_the_commands_draw_a_bar_on_a_terminal_and_not_with_quiet(verb: str, tmp_path: Path,
                                                                    fixtures_dir: Path) -> None:
    # GIVEN a recorded GPU trace, and a terminal (a pty) with the bar's delay set to 0
    trace = tmp_path / "trace.json.gz"
    shutil.copy(fixtures_dir / "gpu" / "bound_h200.json.gz", trace)
    tk = [sys.executable, "-m", "tracekit"]
    if verb == "export":
        subprocess.run([*tk, "analyze", str(trace), "--out", str(tmp_path / "run")], check=True, capture_output=True)
    args = {"ingest": [verb, str(trace), "--out", str(tmp_path / "run")],
            "analyze": [verb, str(trace), "--out", str(tmp_path / "run")],
            "export": [verb, str(tmp_path / "run")]}[verb]
    env = {"TRACEKIT_PROGRESS_DELAY": "0", "COLUMNS": "100"}
    # WHEN the command runs there
    shown = _on_a_pty([*tk, *args, "--force"], tmp_path, env)
    # THEN a bar was drawn (and cleared), with the command's own lines after it
    assert BAR in shown, shown[-1000:]
    # AND with --quiet nothing but the command's own lines
    quiet = _on_a_pty([*tk, *args, "--force", "--quiet"], tmp_path, env)
    assert BAR not in quiet and "\x1b[" not in quiet, quiet[-1000:]


def test_no_bar_when_the_output_is_not_a_terminal(tmp_path: Path, fixtures_dir: Path) -> None:
    # GIVEN a recorded GPU trace and the bar's delay set to 0, output piped (not a terminal)
    env = {**os.environ, "TRACEKIT_PROGRESS_DELAY": "0", "COLUMNS": "100"}
    # WHEN ingest runs
    out = subprocess.run([sys.executable, "-m", "tracekit", "ingest", str(fixtures_dir / "gpu" / "bound_h200.json.gz"),
                          "--out", str(tmp_path / "run")], capture_output=True, text=True, env=env, check=True)
    # THEN neither stream carries a bar or terminal control codes, and the command's own lines are there
    assert BAR not in out.stdout + out.stderr and "\x1b[" not in out.stdout + out.stderr
    assert str(tmp_path / "run") in out.stdout
