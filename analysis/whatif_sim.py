"""Replay of one step's timeline with changed kernel durations and host speed (pure).

One stream, in issue order. The host issues kernel i at its measured offset, with every stretch of
host work (the time between two issues, outside blocking calls) multiplied by ``host_scale``; kernel
i starts at max(issue + launch latency, previous kernel's end + its graph gap) and runs its duration.
At each blocking call (a synchronisation, a DtoH copy into pageable memory) the host waits until the
GPU has finished everything issued before it. The step lasts until the host reaches the period's end
or the GPU finishes, whichever is later.

With the measured durations and ``host_scale`` = 1 it reproduces the measured period up to the
launch-latency estimate: the tests check that on recorded steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def replay(off_ns: Any, dur_ns: Any, graph_gap_ns: Any,
           syncs: Sequence[tuple[float, float]], period_ns: float, host_scale: float = 1.0,
           launch_ns: float = 2000.0) -> float:
    """The step's period (ns) under the replay described in the module doc; the first three are
    per-kernel arrays (issue offset, duration, gap after the previous graph kernel), in ns."""
    off = np.asarray(off_ns, dtype=float)
    dur = np.asarray(dur_ns, dtype=float)
    gap = np.asarray(graph_gap_ns, dtype=float)
    order = np.argsort(off, kind="stable")
    events: list[tuple[float, int, int]] = [(float(off[i]), 1, int(i)) for i in order]
    events += [(float(a), 0, j) for j, (a, _) in enumerate(syncs)]  # a sync at the same instant first
    events.sort(key=lambda e: (e[0], e[1]))
    host = 0.0  # the host's clock in the new timeline
    last = 0.0  # the measured offset the host clock corresponds to
    gpu = 0.0  # when the GPU finishes what has been issued so far
    for at, kind, i in events:
        if at > last:
            host += (at - last) * host_scale
            last = at
        if kind == 1:
            gpu = max(host + launch_ns, gpu + gap[i]) + dur[i]
        else:
            a, b = syncs[i]
            call = max(b - a, 0.0)
            # the call's own cost is host work; the rest of its measured length was waiting
            host = max(host + min(call, 20_000.0) * host_scale, gpu)
            last = max(last, b)
    if period_ns > last:
        host += (period_ns - last) * host_scale
    return max(host, gpu)


def solve_host_scale(target_ns: float, off_ns: Any, dur_ns: Any,
                     graph_gap_ns: Any, syncs: Sequence[tuple[float, float]], period_ns: float,
                     launch_ns: float = 2000.0, lo: float = 0.02, hi: float = 4.0) -> tuple[float, bool]:
    """(host_scale, exact): the host speed that makes ``replay`` last ``target_ns``. Not exact where the
    GPU alone takes longer than the target (the smallest scale is returned) or the host is slower than
    ``hi`` allows."""
    def f(s: float) -> float:
        return replay(off_ns, dur_ns, graph_gap_ns, syncs, period_ns, s, launch_ns)

    if f(lo) >= target_ns:
        return lo, False
    if f(hi) <= target_ns:
        return hi, False
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if f(mid) < target_ns:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-5:
            break
    return 0.5 * (lo + hi), True
