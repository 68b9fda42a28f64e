"""The ``tracekit`` command: a click group whose verbs load lazily.

One module per verb under ``tracekit.commands``; each exposes ``command``, a
click command. Loading lazily keeps ``tracekit --help`` fast and keeps torch
out of every verb that does not record.
"""

from __future__ import annotations

import _thread
import codecs
import importlib
import importlib.util
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import click

from tracekit.errors import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    TracekitError,
    address_space_failure,
    address_space_limit,
    address_space_too_small,
    visible,
)
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
    fit_address_space()
    tight = address_space_too_small()
    if tight is not None and not set(args) <= {"--help", "-h", "--version"}:
        _say(f"tracekit: error: {tight.message}")
        return tight.exit_code
    safe_streams()
    _RECEIVED.clear()
    try:
        with _signals_interrupt():
            from tracekit.model import environ

            environ.check()
            rv = cli.main(args=args, prog_name="tracekit", standalone_mode=False)
    except TracekitError as exc:
        click.echo(f"tracekit: error: {exc.message}", err=True)
        return exc.exit_code
    except click.exceptions.Abort as exc:
        if isinstance(exc.__context__, EOFError):  # click turns any EOFError into Abort: a cut input, not Ctrl-C
            click.echo(f"tracekit: error: unexpected end of input ({_one_line(exc.__context__)})", err=True)
            return EXIT_FAILURE
        return interrupted_exit(exc.__context__)
    except click.ClickException as exc:
        # click's usage errors are already one line; keep its exit code (2).
        click.echo(f"tracekit: error: {visible(exc.format_message())}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt as exc:
        return interrupted_exit(exc)
    except UnicodeEncodeError as exc:
        if "surrogates" not in str(exc):
            raise
        # a file or folder name (or an argument) holding bytes that are not UTF-8: Arrow and DuckDB take
        # only UTF-8 paths
        _say(f"tracekit: error: a name is not UTF-8 text ({visible(exc.object[max(0, exc.start - 40):exc.end + 10])}); "
             "rename it or choose another path")
        return EXIT_USAGE
    except MemoryError as exc:
        limited = address_space_failure(exc)
        if limited is not None:
            _say(f"tracekit: error: {limited.message}")
            return limited.exit_code
        _say("tracekit: error: out of memory (what was being written was left as it was; free memory or "
             "use a machine with more)")
        return EXIT_FAILURE
    except BrokenPipeError:
        _quiet_stdout()  # the reader went away (``| head``): what it read was all it wanted
        return EXIT_OK
    except SystemExit:  # click's own handling of EPIPE (it wraps the streams, exits 1): as above
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if type(stream).__name__ == "_PacifyFlushWrapper":
                setattr(sys, name, getattr(stream, "wrapped", stream))
                if name == "stdout":
                    _quiet_stdout()
                    return EXIT_OK
        raise
    except Exception as exc:
        if interrupt_in(exc) is not None:  # an interrupt Python wrapped (e.g. inside a class body's __set_name__)
            return interrupted_exit(interrupt_in(exc))
        limited = address_space_failure(exc)  # Arrow, DuckDB or the loader under ``ulimit -v``: the limit
        if limited is not None:
            _say(f"tracekit: error: {limited.message}")
            return limited.exit_code
        if not isinstance(exc, OSError):
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"tracekit: error: {visible(where)}{_one_line(exc)}", err=True)
        return EXIT_FAILURE
    finally:
        lock.release_all()
    return rv if isinstance(rv, int) else 0


def interrupted_exit(exc: BaseException | None) -> int:
    """Say the interrupt in one line and give its exit code: 128 + the signal for SIGTERM / SIGHUP (also
    when a library turned it into its own interrupt or click into an Abort: the signal is recorded when
    it arrives), else 130 (Ctrl-C)."""
    signum = exc.signum if isinstance(exc, Terminated) else (_RECEIVED[-1] if _RECEIVED else None)
    if signum is None:
        _say("tracekit: interrupted")
        return EXIT_INTERRUPTED
    _say(f"tracekit: interrupted ({signal.Signals(signum).name}); what was being written was left as it was")
    return 128 + signum


def interrupt_in(exc: BaseException) -> BaseException | None:
    """The KeyboardInterrupt (or Terminated) an exception was raised from, if any."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


_M_ARENA_MAX = -8  # glibc's mallopt parameter


def fit_address_space() -> None:
    """Under a limited address space (``ulimit -v``), one malloc arena for all threads, set before any
    thread starts: glibc gives a thread that allocates while another holds the lock an arena of its
    own, each reserving 64 MiB of address space, so Arrow's and DuckDB's worker threads would use up
    the limit and abort the process. And one thread in each of Arrow's pools (read when they start):
    a pool that could not launch a worker left a dataset scan waiting on it for ever. Nothing changes
    without a limit (or without glibc); a value the user set is kept."""
    if address_space_limit() is None:
        return
    os.environ.setdefault("MALLOC_ARENA_MAX", "1")  # the processes tracekit starts, too
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # Arrow's CPU pool
    os.environ.setdefault("ARROW_IO_THREADS", "1")
    with suppress(OSError, AttributeError, TypeError):
        import ctypes

        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, 1)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the process was so that every writer cleans up as for Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


_RECEIVED: list[int] = []  # SIGTERM/SIGHUP received while main ran (a library may turn the exception into its own)


def _raise_terminated(signum: int, frame: object) -> None:
    _RECEIVED.append(signum)
    raise Terminated(signum)


def redeliver_interrupt(unraisable: Any, fallback: Any = None) -> None:
    """An ``sys.unraisablehook``: a Ctrl-C (or Terminated) raised where Python can only ignore it (a
    weakref or import-lock callback) is delivered again at the next safe point in the main thread, so
    it interrupts the verb instead of printing "Exception ignored" and letting it finish; anything else
    goes to ``fallback`` (the hook there was)."""
    exc = getattr(unraisable, "exc_value", None)
    if isinstance(exc, KeyboardInterrupt):
        _thread.interrupt_main(signal.Signals(exc.signum) if isinstance(exc, Terminated) else signal.SIGINT)
        return
    (fallback or sys.__unraisablehook__)(unraisable)


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP interrupt the work like Ctrl-C (staging folders and temp files removed, a run
    left as it was) while main runs; a handler someone else installed is kept; an interrupt that lands
    where Python ignores exceptions is delivered again (``redeliver_interrupt``)."""
    previous_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: redeliver_interrupt(u, previous_hook)
    installed: list[tuple[int, Any]] = []
    if threading.current_thread() is threading.main_thread():
        for sig in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)):
            if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
                installed.append((sig, signal.signal(sig, _raise_terminated)))
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        for sig, old in installed:
            signal.signal(sig, old)


def _ascii_fallback(exc: UnicodeError) -> tuple[str, int]:
    """The codec error handler of tracekit's output streams: a character the terminal's encoding
    cannot show becomes a readable ASCII stand-in (``->`` for an arrow, ``\\u00b5`` otherwise)."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start:exc.end]
    return "".join(_ASCII.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else
                                     f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}")
                   for c in text), exc.end


_ASCII = {"\u2192": "->", "\u2190": "<-", "\u2014": "--", "\u2013": "-", "\u2026": "...", "\u00d7": "x",
          "\u00b5": "u", "\u03bc": "u", "\u2264": "<=", "\u2265": ">=", "\u2248": "~", "\u2018": "'", "\u2019": "'",
          "\u201c": '"', "\u201d": '"', "\u00b1": "+-", "\u2212": "-", "\u00a0": " ", "\u2022": "*", "\u2713": "ok",
          "\u2717": "x", "\u2500": "-", "\u2502": "|", "\u2501": "=", "\u2503": "|"}
codecs.register_error("tracekit-ascii", _ascii_fallback)


def safe_streams() -> None:
    """Make stdout and stderr safe to print anything to: a character the locale's encoding lacks is
    written as an ASCII stand-in (never a UnicodeEncodeError), and a closed descriptor 0, 1 or 2 is
    taken by /dev/null (a file tracekit opens must never become the terminal's stdout)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                got = os.open(os.devnull, os.O_RDWR)
            except OSError:
                continue
            if got != fd:
                os.dup2(got, fd)
                os.close(got)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:  # Python found the descriptor closed at start
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 - the process's stream, never closed
            continue
        reconfigure = getattr(stream, "reconfigure", None)
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if reconfigure is not None and not encoding.startswith("utf"):
            with suppress(ValueError, OSError, AttributeError):
                reconfigure(errors="tracekit-ascii")


def _say(line: str) -> None:
    """One line to stderr, whatever state stderr is in."""
    with suppress(OSError, ValueError):
        click.echo(line, err=True)


def _quiet_stdout() -> None:
    """After EPIPE on stdout: point it at /dev/null, so the interpreter's final flush raises nothing."""
    with suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _one_line(exc: BaseException) -> str:
    text = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)).strip()
    return visible(text.split("\n", 1)[0]) if text else type(exc).__name__


def entry() -> None:
    """The console script: main's exit code; Ctrl-C at any moment (while the verb loads, while an
    error is printed) is exit 130, and a reader of stdout that went away is a quiet exit."""
    try:
        code = main()
    except Terminated as exc:
        code = 128 + exc.signum
    except KeyboardInterrupt:
        _say("tracekit: interrupted")
        code = EXIT_INTERRUPTED
    except BrokenPipeError:
        _quiet_stdout()
        code = EXIT_OK
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError, OSError):
        _quiet_stdout()
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    sys.exit(code)


