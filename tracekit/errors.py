"""Errors that reach the user as one line and an exit code.

Every failure a user can cause (bad path, bad trace, unknown preset) raises a
TracekitError; the CLI prints ``tracekit: error: <message>`` and exits with its
code. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

# Exit codes, shared by every verb (memray style: errors carry their exit code).
EXIT_OK = 0
EXIT_FAILURE = 1  # the work ran and failed (e.g. nothing usable in a trace)
EXIT_USAGE = 2  # bad arguments, unknown preset, missing path
EXIT_INTERRUPTED = 130  # Ctrl-C; what was captured is kept and marked incomplete


class TracekitError(Exception):
    """A user-facing error: one line, one exit code."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        # One line, always: the first line of whatever we were given.
        text = str(self.args[0]) if self.args else self.__class__.__name__
        return text.strip().splitlines()[0] if text.strip() else self.__class__.__name__


class UsageError(TracekitError):
    """Bad arguments: unknown preset, missing file, conflicting options."""

    exit_code = EXIT_USAGE


class TraceFormatError(TracekitError):
    """A trace that cannot be read: truncated, not JSON, no events."""

    exit_code = EXIT_FAILURE


class RunExistsError(UsageError):
    """A run directory already exists and --force was not given."""
