"""The ``tracekit`` command: a click group whose verbs load lazily.

One module per verb under ``tracekit.commands``; each exposes ``command``, a
click command. Loading lazily keeps ``tracekit --help`` fast and keeps torch
out of every verb that does not record.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Sequence

import click

from tracekit.errors import EXIT_FAILURE, EXIT_INTERRUPTED, TracekitError, visible
from tracekit.model.version import VERSION

# verb -> (module, one-line help). The help is here so `--help` imports nothing.
VERBS: dict[str, tuple[str, str]] = {
    "record": ("tracekit.commands.record", "Record a generation workload (or your script) into a run directory."),
    "ingest": ("tracekit.commands.ingest", "Read torch.profiler traces into Parquet tables."),
    "analyze": ("tracekit.commands.analyze", "Split a run or trace into requests, steps and phases."),
    "check": ("tracekit.commands.check", "Say whether a trace is fit to analyse, with a fix per finding."),
    "calibrate": ("tracekit.commands.calibrate", "Measure this GPU's copy bandwidth and matmul rate."),
    "counters": ("tracekit.commands.counters", "Measure a run's kernels with Nsight Compute and classify them."),
    "report": ("tracekit.commands.report", "Summarise runs in the terminal and as a self-contained HTML file."),
    "query": ("tracekit.commands.query", "SQL over the tables of many runs (DuckDB)."),
    "diff": ("tracekit.commands.diff", "What changed between two runs, per phase and kernel class."),
    "whatif": ("tracekit.commands.whatif", "Project a run's TTFT, TPOT and step time under a change (graphs, batch, GPU, ...)."),
    "sweep": ("tracekit.commands.sweep", "Run a latency study over request shapes, batch sizes and modes."),
    "export": ("tracekit.commands.export", "Write a run's trace for Perfetto (JSON or protobuf, windowed)."),
    "doctor": ("tracekit.commands.doctor", "Say what this machine can record and measure, and how to fix the rest."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [v for v in VERBS if _available(v)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in VERBS or not _available(cmd_name):
            return None
        module = importlib.import_module(VERBS[cmd_name][0])
        cmd: click.Command = module.command
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(v, VERBS[v][1]) for v in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _available(verb: str) -> bool:
    return importlib.util.find_spec(VERBS[verb][0]) is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, prog_name="tracekit")
def cli() -> None:
    """tracekit: where did the time of this LLM request go?

    Record a workload, open its trace in Perfetto, analyse the Parquet tables.
    """


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code instead of exiting.

    Failures are one line: TracekitError (what every verb raises for what a user can cause), and as a
    last resort an OSError or MemoryError that escaped (a file system that failed under us, a machine
    out of memory) -- said in one line, not a traceback; anything else is a bug and keeps its traceback.
    Write locks this process still holds are dropped whatever happened.
    """
    from tracekit.store import lock

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        rv = cli.main(args=args, prog_name="tracekit", standalone_mode=False)
    except TracekitError as exc:
        click.echo(f"tracekit: error: {exc.message}", err=True)
        return exc.exit_code
    except click.exceptions.Abort as exc:
        if isinstance(exc.__context__, EOFError):  # click turns any EOFError into Abort: a cut input, not Ctrl-C
            click.echo(f"tracekit: error: unexpected end of input ({_one_line(exc.__context__)})", err=True)
            return EXIT_FAILURE
        click.echo("tracekit: interrupted", err=True)
        return EXIT_INTERRUPTED
    except click.ClickException as exc:
        # click's usage errors are already one line; keep its exit code (2).
        click.echo(f"tracekit: error: {visible(exc.format_message())}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("tracekit: interrupted", err=True)
        return EXIT_INTERRUPTED
    except MemoryError:
        click.echo("tracekit: error: out of memory", err=True)
        return EXIT_FAILURE
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"tracekit: error: {visible(where)}{_one_line(exc)}", err=True)
        return EXIT_FAILURE
    finally:
        lock.release_all()
    return rv if isinstance(rv, int) else 0


def _one_line(exc: BaseException) -> str:
    text = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)).strip()
    return visible(text.split("\n", 1)[0]) if text else type(exc).__name__


def entry() -> None:
    sys.exit(main())


