"""Is this CPU timing trustworthy? The machine's load and torch's threads around a CPU recording.

On a CPU every op runs on the host's cores: other processes, or more torch threads than free cores,
stretch the timings by whatever they take (docs/measurements/2026-12-07-first-hour.md has an example).
``probe()`` reads the load before the workload starts; ``Window`` measures, over the
timed requests, how much CPU the process got against the threads it asked for. ``warnings()`` says what
was wrong and what to set.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

# The 1-minute load average, per free core, above which a CPU timing is called loaded.
LOADED = 0.5
# The share of its threads' CPU time the process got while timed, below which its threads were starved.
STARVED = 0.7


def cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def torch_threads() -> int | None:
    try:
        import torch

        return int(torch.get_num_threads())
    except Exception:  # torch absent or broken: the record fails elsewhere, in one line
        return None


def probe() -> dict[str, Any]:
    """The machine before the workload: cores, load average, torch's intra-op threads, OMP_NUM_THREADS."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"cores": cores(), "load_1m": None if load is None else round(load, 2),
            "torch_threads": torch_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


@dataclass
class Window:
    """Process CPU time against wall time over a block: ``cpu_share`` = CPU s / (wall s x threads used)."""

    threads: int
    t0: float = field(default=0.0)
    c0: float = field(default=0.0)
    result: dict[str, Any] = field(default_factory=dict)

    def __enter__(self) -> Window:
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self.t0
        cpu = time.process_time() - self.c0
        used = max(1, min(self.threads, cores()))
        self.result = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                       "cpu_share": round(cpu / (wall * used), 3) if wall > 0 else None}


def warnings(before: dict[str, Any], timed: dict[str, Any]) -> list[str]:
    """What made this CPU timing noisy, each with what to set; empty when nothing did."""
    out = []
    n, load, threads = before.get("cores") or 1, before.get("load_1m"), before.get("torch_threads")
    free = max(1, int(n - (load or 0.0) + 0.5))
    if threads is not None and threads > n:
        out.append(f"torch runs {threads} threads on {n} cores: threads oversubscribed; set OMP_NUM_THREADS={n} "
                   "(or torch.set_num_threads) before recording")
    if load is not None and load > LOADED * n:
        out.append(f"the machine was loaded before recording (load average {load:.2f} on {n} cores): CPU timings "
                   f"here are noisy; record on an idle machine, or set OMP_NUM_THREADS={free} and record "
                   "--repeat 5 so that tracekit diff can tell a change from the noise")
    share = timed.get("cpu_share")
    if share is not None and share < STARVED and threads:
        used = max(1, min(threads, n))
        out.append(f"the timed requests got {100 * share:.0f}% of the CPU their {used} thread(s) asked for: other "
                   f"work took the rest, so the latencies are inflated; set OMP_NUM_THREADS={free} or record on an "
                   "idle machine")
    return out
