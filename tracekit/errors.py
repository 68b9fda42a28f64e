"""Errors that reach the user as one line and an exit code, and the text they may print.

Every failure a user can cause (bad path, bad trace, unknown preset, a corrupt or busy run, a full
or read-only disk) raises a TracekitError; the CLI prints ``tracekit: error: <message>`` and exits
with its code. ``visible`` is how any text that came from a trace, a file name or run.json is made
safe for a terminal: control characters (ESC, BEL, CR, bidi overrides, ...) are shown as escapes,
never sent; tracekit.report.text adds the escaping of rich markup on top of it.
"""

from __future__ import annotations

import re

# Exit codes, shared by every verb (memray style: errors carry their exit code).
EXIT_OK = 0
EXIT_FAILURE = 1  # the work ran and failed (e.g. nothing usable in a trace)
EXIT_USAGE = 2  # bad arguments, unknown preset, missing path
EXIT_INTERRUPTED = 130  # Ctrl-C; what was captured is kept and marked incomplete

# C0 and C1 controls, DEL, bidi embeddings/overrides/isolates, line and paragraph separators, lone
# surrogates (no encoding can write one: a file name that is not UTF-8) and the non-characters U+FFFE/FFFF.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff\ufffe\uffff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    if c in _NAMED:
        return _NAMED[c]
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def visible(text: object) -> str:
    """``text`` with every control character written as an escape (``\\x1b``, ``\\n``, ``\\u202e``)."""
    s = text if isinstance(text, str) else str(text)
    return _CONTROL.sub(_escape, s) if _CONTROL.search(s) else s


def lines(text: str) -> str:
    """Several lines, each made visible (the line breaks between them kept)."""
    return "\n".join(visible(line) for line in text.split("\n"))


def say(text: object = "", *, err: bool = False) -> None:
    """Print ``text`` (one line or several) to stdout, or stderr with ``err``: every line made visible
    (control characters as escapes, whatever they came from), the line breaks between them kept. The one
    way tracekit prints plain text; rich output (tables, bars) goes through tracekit.report.text's
    ``cell`` and ``markup_safe``."""
    import click

    click.echo(lines(text if isinstance(text, str) else str(text)), err=err)


class TracekitError(Exception):
    """A user-facing error: one line, one exit code."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        # One line, always: the first line of whatever we were given (names that hold a line break are
        # passed through ``visible`` where the message is made), control characters made visible.
        text = str(self.args[0]).strip() if self.args else ""
        return visible(text.split("\n", 1)[0])[:2000] if text else self.__class__.__name__


class UsageError(TracekitError):
    """Bad arguments: unknown preset, missing file, conflicting options."""

    exit_code = EXIT_USAGE


class TraceFormatError(TracekitError):
    """A trace that cannot be read: truncated, not JSON, no events."""

    exit_code = EXIT_FAILURE


class RunExistsError(UsageError):
    """A run directory already exists and --force was not given (or --out is not a run directory)."""


class RunLockedError(TracekitError):
    """Another process is writing this run directory."""

    exit_code = EXIT_FAILURE


class CorruptRunError(TracekitError):
    """A run directory whose run.json or tables cannot be read: re-ingest it (--force)."""

    exit_code = EXIT_FAILURE


class StoreWriteError(TracekitError):
    """Writing failed: read-only file system, disk full, no permission. What was there is kept."""

    exit_code = EXIT_FAILURE


class SchemaError(TracekitError):
    """A table written that its schema (tracekit.model.schema) does not describe: undeclared, an unknown
    column, or a column of the wrong type. A bug in the writer, never in the user's input."""

    exit_code = EXIT_FAILURE



# What Arrow, DuckDB, glibc and the loader say when a worker thread cannot start, or memory cannot be
# mapped: under a limited address space (``ulimit -v``) that is the limit, not the input.
_NO_THREAD = re.compile(r"failed to launch worker thread|can't start new thread|cannot allocate memory for "
                        r"thread|pthread_create|resource temporarily unavailable", re.IGNORECASE)
_NO_MEMORY = re.compile(r"failed to map segment|cannot allocate memory|out of memory|bad_alloc|allocation failure",
                        re.IGNORECASE)


def address_space_limit() -> int | None:
    """The process's address-space limit in bytes (``ulimit -v``), or None when it has none."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return None
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    return None if soft == resource.RLIM_INFINITY else int(soft)


class AddressSpaceError(TracekitError):
    """Work that could not get a worker thread or memory because the address space is limited (``ulimit -v``)."""

    exit_code = EXIT_FAILURE


def address_space_failure(exc: BaseException) -> AddressSpaceError | None:
    """``exc`` as one honest line when it is a library failing to start a worker thread or to map
    memory under a limited address space (``ulimit -v``); None for anything else, or without a limit
    (a real error keeps its own message)."""
    limit = address_space_limit()
    if limit is None:
        return None
    text = f"{type(exc).__name__}: {exc}"
    if _NO_THREAD.search(text):
        what = "not enough address space for worker threads"
    elif isinstance(exc, MemoryError) or _NO_MEMORY.search(text):
        what = "out of memory: not enough address space"
    else:
        return None
    return AddressSpaceError(f"{what} (ulimit -v {limit // 1024}; what was being written was left as it was): "
                             "raise the limit (ulimit -v unlimited) and run it again")


# The address space tracekit's libraries need to load (NumPy, Arrow with its compute and Parquet
# modules, DuckDB) under one malloc arena: 350-400 MB measured on x86-64 Linux. Below it an import can
# throw in a C++ static initialiser or a stack cannot grow, and the process dies without a word.
ADDRESS_SPACE_FLOOR = 512 << 20


def address_space_too_small() -> AddressSpaceError | None:
    """One honest line when the address-space limit (``ulimit -v``) is below ``ADDRESS_SPACE_FLOOR``:
    said before any library loads, so that a too-tight limit is never a crash; None otherwise."""
    limit = address_space_limit()
    if limit is None or limit >= ADDRESS_SPACE_FLOOR:
        return None
    return AddressSpaceError(f"out of memory: not enough address space (ulimit -v {limit // 1024}; tracekit's "
                             f"libraries need {ADDRESS_SPACE_FLOOR >> 20} MiB to load; nothing was written): "
                             "raise the limit (ulimit -v unlimited) and run it again")
