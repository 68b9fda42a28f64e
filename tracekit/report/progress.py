"""A progress bar for long work on a terminal (rich), fed by tracekit.model.progress reports.

The bar appears only once the work has run ``delay`` seconds (short work prints nothing; the
environment variable TRACEKIT_PROGRESS_DELAY overrides the 2 s), only when the stream is a terminal
and not ``quiet``, and disappears when the work ends: what the command prints after it is all that
stays on the screen.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any

from tracekit.model import environ
from tracekit.report.text import markup_safe


class Bar:
    """Use as ``with Bar(quiet=q) as bar, tracekit.model.progress.listening(bar): work()``."""

    def __init__(self, *, quiet: bool = False, delay: float = 2.0, stream: IO[str] | None = None,
                 force: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = not quiet and (force or bool(isatty and isatty()))
        self.delay = environ.progress_delay(delay)
        self.t0 = time.monotonic()
        self.progress: Any = None
        self.task: Any = None
        self.shown = False  # whether a bar was drawn (tests)

    def __enter__(self) -> Bar:
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def __call__(self, stage: str, done: float, total: float) -> None:
        if not self.enabled:
            return
        if self.progress is None:
            if time.monotonic() - self.t0 < self.delay:
                return
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

            console = Console(file=self.stream, force_terminal=True if self.enabled else None)
            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                                     TimeElapsedColumn(), console=console, transient=True)
            self.progress.start()
            self.task = self.progress.add_task(markup_safe(stage), total=max(total, 1))
            self.shown = True
        self.progress.update(self.task, description=markup_safe(stage), completed=min(done, total), total=max(total, 1))
