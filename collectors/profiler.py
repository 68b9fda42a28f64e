"""torch.profiler around the workload: shapes on, stacks off, an optional window of steps.

``record_shapes`` feeds the per-op FLOP/byte models; ``with_stack`` is off
because it multiplies trace size and overhead. ``--trace-steps`` limits
kernel-level capture to a window of forward passes (a schedule driven by the
step hooks), so long generations stay tractable while the host timers still
cover every request.

Kineto writes its own lines (``USDT: ... profiler_start``) to descriptor 2 from C++ when the
profiler starts and stops, which happens in ``start``, in ``step`` (the schedule's transitions)
and in ``stop``: each of those runs inside ``native()``, a context the session passes in
(tracekit.collectors.noise.ThirdPartyOutput.native), so they land in the run's third-party log.

Clock: each ``tracekit.clock_sync host_ns=<t>`` annotation is opened right
after reading ``time.time_ns()``; its ``ts`` in the trace gives the offset
between the host clock and the trace's clock.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.errors import UsageError

CLOCK_SYNC = "tracekit.clock_sync"


@dataclass(frozen=True)
class StepWindow:
    """Forward passes [start, stop) of the recorded run (global step ids)."""

    start: int
    stop: int

    def __str__(self) -> str:
        return f"{self.start}:{self.stop}"


def parse_trace_steps(text: str | None, option: str = "--trace-steps") -> StepWindow | None:
    """``"0:16"`` -> steps 0..15; ``"16"`` -> the first 16 steps; None/"all" -> everything. ``option``:
    the flag the text came from, as errors name it."""
    if text is None or text in ("", "all"):
        return None
    try:
        if ":" in text:
            a, b = text.split(":", 1)
            window = StepWindow(int(a or 0), int(b))
        else:
            window = StepWindow(0, int(text))
    except ValueError:
        raise UsageError(f"{option} {text!r}: use a count (16) or a window (START:STOP)") from None
    if window.start < 0 or window.stop <= window.start:
        raise UsageError(f"{option} {text!r}: need 0 <= START < STOP")
    return window


@dataclass(frozen=True)
class ProfilerConfig:
    cuda: bool
    window: StepWindow | None = None
    record_shapes: bool = True
    profile_memory: bool = False
    # Every thread, not only the one that started the profiler: an engine stepping in a
    # background thread is invisible otherwise (torch >= 2.7; not with profile_memory).
    all_threads: bool = False


def clock_sync_marker() -> None:
    """Emit one clock-sync annotation carrying the host time it was opened at."""
    import torch

    t = time.time_ns()
    with torch.autograd.profiler.record_function(f"{CLOCK_SYNC} host_ns={t}"):
        pass


class KinetoCapture:
    """One torch.profiler session writing its Chrome trace to ``raw_path``."""

    def __init__(
        self,
        config: ProfilerConfig,
        raw_path: Path,
        native: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.config = config
        self.raw_path = raw_path
        self._native = native or contextlib.nullcontext
        self.exported = False
        self._prof: Any = None
        self._active = False
        self._stopped = False
        self._ready = False

    @property
    def windowed(self) -> bool:
        return self.config.window is not None

    def start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        if self.config.cuda:
            activities.append(ProfilerActivity.CUDA)
        kwargs: dict[str, Any] = {}
        w = self.config.window
        if w is not None:
            # One warm-up step before the window where there is one: CUPTI's
            # first collection is slow and would distort the first captured step.
            warm = 1 if w.start > 0 else 0
            kwargs["schedule"] = schedule(wait=w.start - warm, warmup=warm, active=w.stop - w.start, repeat=1)
            kwargs["on_trace_ready"] = self._on_ready
        if self.config.all_threads:
            try:
                kwargs["experimental_config"] = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
            except (AttributeError, TypeError):
                raise UsageError(
                    f"torch {torch.__version__} cannot profile other threads (profile_all_threads: torch 2.7+)"
                ) from None
        self._prof = profile(
            activities=activities,
            record_shapes=self.config.record_shapes,
            profile_memory=self.config.profile_memory,
            with_stack=False,
            **kwargs,
        )
        del torch
        with self._native():
            self._prof.start()
        self._active = True
        if w is None:
            clock_sync_marker()

    def _on_ready(self, prof: Any) -> None:
        # Called inside the step that closes the window, i.e. inside a timed
        # request: writing hundreds of MB of JSON here would land in its TPOT.
        # Export later, in stop().
        self._ready = True

    def on_step_start(self, step_id: int) -> None:
        w = self.config.window
        if w is not None and self._active and step_id in (w.start, w.stop - 1):
            clock_sync_marker()  # inside the captured window, or it would not be recorded

    def on_step_end(self, step_id: int) -> None:
        if self.windowed and self._active and not self._stopped:
            if self._transition_near(step_id):
                with self._native():  # the schedule starts and stops Kineto inside step()
                    self._prof.step()
            else:  # no redirect (~30 us) on the steps where the schedule changes nothing
                self._prof.step()

    def _transition_near(self, step_id: int) -> bool:
        """Whether the step() after ``step_id`` may start or stop Kineto (a step either side of the
        schedule's wait/warm-up/active boundaries, to be safe against an off-by-one in torch)."""
        w = self.config.window
        if w is None:
            return True
        warm = 1 if w.start > 0 else 0
        return any(abs(step_id + 1 - b) <= 1 for b in (w.start - warm, w.start, w.stop))

    def stop(self) -> None:
        """Stop and export; safe to call twice and after a failure."""
        if self._prof is None or self._stopped:
            return
        self._stopped = True
        if not self.windowed:
            clock_sync_marker()
        with self._native():
            self._prof.stop()
            self._active = False
            if not self.windowed or self._ready:
                self._prof.export_chrome_trace(str(self.raw_path))
                self.exported = True
