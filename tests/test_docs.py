from __future__ import annotations

import subprocess
import sys

from helpers import REPO


def test_cli_reference_is_generated_from_the_current_help() -> None:
    # docs/cli.md is the CLI's own --help: an option added or renamed without
    # regenerating it (scripts/gen_cli_docs.py) fails here.
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_cli_docs.py"), "--check"],
        capture_output=True, text=True, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr


def test_readme_first_screen_gives_the_two_commands() -> None:
    first_screen = "\n".join((REPO / "README.md").read_text().splitlines()[:30])
    assert "bash scripts/setup.sh && .venv/bin/tracekit record" in first_screen
    assert ".venv/bin/python -m pytest -q" in first_screen
    ci = (REPO / ".ci" / "run").read_text()
    assert "scripts/setup.sh" in ci and "pytest -q" in ci
