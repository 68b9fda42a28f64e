"""The sampling loop on a fake clock: a tick that overruns drops the missed deadlines instead of bursting
to catch up. Every time worked by hand (interval 10 ms)."""

from __future__ import annotations

import pytest

from tracekit.collectors import nvml_sampling


class FakeTime:
    """perf_counter / perf_counter_ns / thread_time_ns of a clock that moves only when told."""

    def __init__(self) -> None:
        self.t = 0.0

    def perf_counter(self) -> float:
        return self.t

    def perf_counter_ns(self) -> int:
        return round(self.t * 1e9)

    def thread_time_ns(self) -> int:
        return 0


class FakeStop:
    """The loop's stop event: waiting moves the fake clock; set once ``ticks`` ticks have started."""

    def __init__(self, clock: FakeTime, loop: list[nvml_sampling._Loop], ticks: int) -> None:
        self.clock, self.loop, self.ticks = clock, loop, ticks
        self.waits: list[float] = []

    def is_set(self) -> bool:
        return len(self.loop[0].starts_ns) >= self.ticks

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        self.clock.t += max(timeout, 0.0)
        return False


def test_a_late_tick_drops_missed_deadlines_instead_of_bursting(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN ticks of 1 ms, except the second, which takes 35 ms (the GIL, a slow NVML call)
    clock = FakeTime()
    monkeypatch.setattr(nvml_sampling, "time", clock)
    durations = iter([0.001, 0.035, 0.001, 0.001, 0.001])

    def tick() -> None:
        clock.t += next(durations)

    holder: list[nvml_sampling._Loop] = []
    stop = FakeStop(clock, holder, 5)
    loop = nvml_sampling._Loop("test", 0.010, tick, stop)  # type: ignore[arg-type]
    holder.append(loop)
    loop._run()
    # THEN ticks start at 0 and 10 ms; the second ends at 45 ms, past the deadlines of 20, 30 and 40 ms,
    # which are dropped (3 missed); the next tick waits for 50 ms, then 60 and 70 ms: no burst at 45, 46, ...
    assert loop.error is None
    assert [round(s / 1e6) for s in loop.starts_ns] == [0, 10, 50, 60, 70]
    assert loop.missed == 3
    assert all(w > 0 for w in stop.waits)
