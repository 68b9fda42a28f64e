"""The built-in workload's status line on a terminal: ``<stage>, <done>/<total> tokens``.

A ``tracekit.model.progress`` listener: the recorder reports each request's stage with its tokens
so far (0 when it starts) out of the tokens it will generate. On a terminal the line is rewritten in
place (``\\r``), at most every 0.1 s except at a request's start and end; elsewhere only a finished
request's line is written.
"""

from __future__ import annotations

import time
from typing import IO


class TokenLine:
    """Use as a listener: ``TokenLine(stream)(stage, tokens_done, tokens_total)``."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self._tty = stream.isatty()
        self._last = 0.0

    def __call__(self, stage: str, done: float, total: float) -> None:
        now = time.monotonic()
        if not (done == 0 or done >= total) and now - self._last < 0.1:
            return
        self._last = now
        text = f"{stage}, {int(done)}/{int(total)} tokens"
        if self._tty:
            self.stream.write("\r\033[K" + text)
            if done >= total:
                self.stream.write("\n")
        elif done >= total:
            self.stream.write(text + "\n")
        self.stream.flush()
