from __future__ import annotations

import re
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
    command = re.search(r"^\.venv/bin/python -m pytest .*$", first_screen, re.M)
    assert command is not None
    ci = (REPO / ".ci" / "run").read_text()
    # CI runs the README's test command, as it is written there
    assert "scripts/setup.sh" in ci and command.group(0) in ci.splitlines()


def test_the_distribution_name_is_ours_everywhere() -> None:
    # `tracekit` on the package index is another project: the distribution is tracekit-llm (import name tracekit)
    name = re.search(r'^name = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)  # type: ignore[union-attr]
    assert name == "tracekit-llm"
    assert f"The distribution is `{name}`" in (REPO / "README.md").read_text()
    wrong = re.compile(r"pip install\s+['\"]?tracekit(\[|\s|['\"]|$)")
    for p in [REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "tracekit").rglob("*.py"),
              *(REPO / "collectors").glob("*.py"), *(REPO / "analysis").glob("*.py")]:
        if "measurements" in p.parts:
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            assert not wrong.search(line), f"{p.relative_to(REPO)}:{n}: {line.strip()}"
