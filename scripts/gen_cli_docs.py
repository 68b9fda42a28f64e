#!/usr/bin/env python3
"""Write docs/cli.md from the CLI's own help, so the reference never drifts.

    .venv/bin/python scripts/gen_cli_docs.py          # rewrite docs/cli.md
    .venv/bin/python scripts/gen_cli_docs.py --check  # exit 1 if it is stale (tests run this)
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracekit.cli import VERBS, cli

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"

HEADER = """# tracekit command line

`tracekit VERB [OPTIONS]`. Errors are one line on stderr (`tracekit: error: ...`); exit codes:
0 success, 1 the work failed, 2 bad arguments (unknown preset, missing path, existing run without
`--force`), 130 interrupted (what was captured is kept, marked incomplete).

This page is generated from the commands' own `--help` by `scripts/gen_cli_docs.py`; a test fails
when it is stale. The guides explain the options in context: docs/record.md, docs/ingest.md,
docs/metrics.md, docs/roofline.md, docs/views.md, docs/sweep.md, docs/multi-gpu.md, docs/whatif.md.
"""


def render() -> str:
    parts = [HEADER]
    for verb in VERBS:
        cmd = cli.get_command(click.Context(cli), verb)
        if cmd is None:
            continue
        ctx = click.Context(cmd, info_name=f"tracekit {verb}", max_content_width=100, terminal_width=100)
        parts.append(f"\n## {verb}\n\n```\n{cmd.get_help(ctx).rstrip()}\n```\n")
    return "".join(parts)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not DOC.is_file() or DOC.read_text() != text:
            print(f"{DOC} is stale: run scripts/gen_cli_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
