"""``tracekit check TRACE_OR_RUN``: is a trace fit to analyse? (tracekit.app.check)."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.errors import EXIT_USAGE, say


@click.command("check")
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Keep the run directory analysed from a trace file here (default: a temporary one, removed).")
@click.option("--force", is_flag=True, help="Overwrite an existing --out run directory.")
@click.option("--capture", "captures", multiple=True, metavar="FILE",
              help="A graph-capture trace (or a folder of them) to merge, as for `tracekit analyze`. Repeatable.")
@click.option("--ceiling", "ceiling", default=None, metavar="NAME|FILE",
              help="The GPU's ceiling, as for `tracekit analyze`.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the verdict and its findings to this file as JSON.")
def command(target: Path, out: Path | None, force: bool, captures: tuple[str, ...], ceiling: str | None,
            json_out: Path | None) -> int:
    """Say whether a trace (or run) is fit to analyse: one verdict, a line per check, a fix per finding.

    Exit 0 when it is fit (caveats or not), 1 when a finding makes the analysis wrong, 2 when the
    input cannot be read (not a trace, no such file, a damaged run).
    """
    import json

    from tracekit.app.check import check
    from tracekit.errors import TracekitError
    from tracekit.report.terminal import check_lines
    from tracekit.store.rundir import atomic_open

    try:
        checked = check(target, out, force, list(captures) if captures else None, ceiling)
    except TracekitError as exc:
        raise TracekitError(exc.message, exit_code=EXIT_USAGE) from exc
    for c in checked:
        for line in check_lines(c.label, c.verdict):
            say(line)
    if json_out is not None:
        with atomic_open(json_out, "w") as fh:
            json.dump([{"target": c.label, **c.verdict.to_dict()} for c in checked], fh, indent=1)
    return max(c.verdict.exit_code for c in checked)
