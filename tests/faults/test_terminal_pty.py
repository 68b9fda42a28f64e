"""Terminal output under a real terminal (a pty): every verb, with names that carry escape sequences
and rich markup, progress bars forced on (TRACEKIT_PROGRESS_DELAY=0).

Invariant: the only escape sequences tracekit sends are the ones it means to (rich's colours and the
progress bar's cursor moves: CSI ... m, CSI ?25 l/h, CSI 2K, CSI 1A, CR); no OSC (title, hyperlink), BEL,
DCS, blink or screen clear; no markup from a name is interpreted; no traceback.
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest
from faultlib import good_run, trace_doc, write_trace

# What tracekit's own output may send: SGR (colours, bold), cursor show/hide, erase line, cursor up.
_MEANT = re.compile(r"\x1b\[[0-9;]*m|\x1b\[\?25[lh]|\x1b\[2K|\x1b\[[0-9]*A|\r|\n|\t")
# One escape sequence (CSI, OSC to its end, or ESC and one character) or one lone control character.
_SEQ = r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|.)|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
PAYLOAD = "\x1b]0;PWNED\x07\x1b]8;;http://evil/\x1b\\L\x1b[5m\x1b[2J\x9b31m[link=http://evil]M[/link][blink]B[/blink]"


def run_pty(argv: list[str], cwd: Path, timeout: float = 120) -> tuple[int, str]:
    """``python -m tracekit ARGV`` with stdin, stdout and stderr on a pty; (exit code, all it wrote)."""
    master, slave = pty.openpty()
    env = {**os.environ, "TRACEKIT_PROGRESS_DELAY": "0", "TERM": "xterm-256color", "COLUMNS": "120"}
    env.pop("NO_COLOR", None)
    p = subprocess.Popen([sys.executable, "-m", "tracekit", *argv], cwd=cwd, stdin=slave, stdout=slave,
                         stderr=slave, env=env, close_fds=True)
    os.close(slave)
    out = bytearray()
    try:
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                p.kill()
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
    return p.wait(timeout=30), out.decode("utf-8", "replace")


def toml_str(s: str) -> str:
    """``s`` as a TOML basic string (control characters as \\u escapes)."""
    return '"' + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in '"\\' else c
                         for c in s) + '"'


def _sgr_meant(params: str) -> bool:
    """Whether an SGR's parameters are ones rich's styles use (no blink 5/6, no conceal 8)."""
    vals = [int(v) if v.isdigit() else 0 for v in params.split(";")] if params else [0]
    i = 0
    while i < len(vals):
        if vals[i] in (38, 48, 58):  # a colour: 5;n or 2;r;g;b follow
            i += 3 if i + 1 < len(vals) and vals[i + 1] == 5 else 5
            continue
        if vals[i] in (5, 6, 8):
            return False
        i += 1
    return True


def unmeant(text: str) -> list[str]:
    """The escape sequences and control characters in ``text`` that tracekit does not mean to send."""
    rest = _MEANT.sub(lambda m: "" if not m.group().endswith("m") or _sgr_meant(m.group()[2:-1]) else m.group(),
                      text)
    return sorted({m.group() for m in re.finditer(_SEQ, rest, re.S)})


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pty")
    name = "run" + PAYLOAD.replace("/", "_")
    doc = trace_doc()
    for ev in doc["traceEvents"]:
        ev["name"] = ev["name"] + PAYLOAD
    write_trace(root / f"t{name[:60]}.json", doc)
    good_run(root / "runs", name[:100])
    (root / "sweep.toml").write_text(f"name = {toml_str('s' + PAYLOAD)}\nmodel = {toml_str('tiny' + PAYLOAD)}\n"
                                     'shapes = ["smoke"]\n')
    return root


def _cases(root: Path) -> list[list[str]]:
    trace = next(root.glob("t*.json"))
    run = next((root / "runs").iterdir())
    out = root / f"o{PAYLOAD.replace('/', '_')[:40]}"
    return [
        ["ingest", str(trace), "--out", str(out / "i"), "--force"],
        ["analyze", str(trace), "--out", str(out / "a"), "--force"],
        ["analyze", str(run)],
        ["report", str(run)],
        ["query", "select run_id, name from gpu_activity", "--runs", str(root / "runs")],
        ["query", "select run_id, name from gpu_activity", "--runs", str(root / "runs"), "--format", "csv"],
        ["diff", str(run), str(run)],
        ["export", str(run), "--out", str(out / "e.json")],
        ["sweep", "--config", str(root / "sweep.toml"), "--dry-run", "--out", str(out / "s")],
        ["sweep", "--quick", "--dry-run", "--out", str(out / f"s{PAYLOAD.replace('/', '_')}")],
        ["doctor", "--runs", str(out / "d")],
        ["counters", str(run)],
        ["check", str(trace)],
        ["ingest", str(out / "missing"), "--out", str(out / "m")],
        ["record", "--preset", f"nope{PAYLOAD}", "--out", str(out / "r")],
        ["calibrate", "--device", f"cuda{PAYLOAD}"],
    ]


@pytest.mark.slow
def test_every_verb_sends_only_the_escapes_it_means(hostile: Path) -> None:
    bad: dict[str, list[str]] = {}
    shown = 0
    for argv in _cases(hostile):
        rc, text = run_pty(argv, hostile)
        shown += "\\x1b]0;PWNED\\x07" in text  # the payload, printed as text
        assert "Traceback (most recent call last)" not in text, (argv[0], text[-2000:])
        assert rc in (0, 1, 2), (argv[0], rc, text[-1000:])
        found = unmeant(text)
        if found:
            bad[" ".join(argv[:1])] = found
    assert not bad, bad
    assert shown >= 8, shown  # most verbs did print the hostile name (as text)


def test_the_scan_finds_what_it_looks_for() -> None:
    assert unmeant("a\x1b[1mb\x1b[0m\r\n") == []
    assert unmeant("\x1b]0;x\x07") == ["\x1b]0;x\x07"]
    assert unmeant("\x07") == ["\x07"]
    assert unmeant("\x1b[5m") == ["\x1b[5m"]
    assert unmeant("x\x1b[2J") == ["\x1b[2J"]
