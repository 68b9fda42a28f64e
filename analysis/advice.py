"""What would help a phase, in one sentence, from its measured split (pure: a phase row in, text out).

``advice(row)`` takes one row of the phases table (or any mapping with its columns) and names the
largest share of the phase's time, with the numbers that justify it, and the fix that class calls for:

  latency-bound kernels   fuse kernels, capture CUDA graphs, raise the batch
  memory-bound kernels    quantize weights or the KV cache, raise the batch
  compute-bound kernels   lower precision, better kernels
  host idle               CUDA graphs / torch.compile (launch overhead, Python)
  profiler idle           record fewer steps (--trace-steps)
  waiting idle            remove host syncs, overlap copies and other streams
  before-window idle      not the host's and not a sync: record a longer or earlier window
  other / comm / memcpy   cost models (shapes, `tracekit counters`), overlap, fewer copies

Every report view (terminal, HTML, Markdown) and the phases table's ``advice`` column use it.
None where the row has no time split.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# (column, what it is, what would help)
CAUSES: tuple[tuple[str, str, str], ...] = (
    ("latency_bound_ns", "latency-bound kernels (under the latency line of both peak compute and peak bandwidth)",
     "fuse kernels, capture CUDA graphs or raise the batch so each launch does more work"),
    ("memory_bound_ns", "memory-bound kernels",
     "quantize the weights or the KV cache, or raise the batch so each byte read serves more tokens"),
    ("compute_bound_ns", "compute-bound kernels", "use lower precision (fp8) or better kernels"),
    ("idle_host_ns", "GPU idle while the host issues work (Python, framework, kernel launches)",
     "capture CUDA graphs or use torch.compile (static cache) to cut launch overhead"),
    ("idle_profiler_ns", "the profiler's own cost (GPU idle the unprofiled run does not have)",
     "record fewer steps (--trace-steps) and read the host timings of the unprofiled pass"),
    ("idle_wait_ns", "GPU idle waiting on a sync, a copy or another stream",
     "remove host synchronisations (.item(), .cpu()) and overlap copies with compute"),
    ("idle_before_window_ns",
     "the GPU running work the trace does not show (launched before the trace window, or by another process), "
     "not the host and not a sync",
     "record a longer window, or start it earlier (skip the first steps: schedule(wait=..., warmup=...)), "
     "so that the step's own work is all in it; removing syncs will not help"),
    ("other_ns", "kernels without a cost model",
     "record with shapes or run `tracekit counters` to classify them"),
    ("comm_ns", "exposed communication", "overlap communication with compute or shard less"),
    ("memcpy_ns", "memory copies", "pin host memory and overlap copies with compute, or copy less"),
)


def finite(v: Any) -> float | None:
    """``v`` as a float, or None where it is missing, not a number, NaN or infinite."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def shares(row: Mapping[str, Any]) -> dict[str, float]:
    """ns per cause of ``row``: the idle split where present, else all of idle_ns as host idle."""
    out = {c: finite(row.get(c)) or 0.0 for c, _, _ in CAUSES}
    split = [finite(row.get(c)) for c in ("idle_host_ns", "idle_wait_ns", "idle_before_window_ns")]
    if all(v is None for v in split):  # a run analysed before the idle split: idle is the host's
        out["idle_host_ns"] = finite(row.get("idle_ns")) or 0.0
    return out


def advice(row: Mapping[str, Any]) -> str | None:
    """One sentence: the phase's largest cause, its share and numbers, and what would help."""
    t = finite(row.get("time_ns"))
    if not t:
        return None
    ns = shares(row)
    col, v = max(ns.items(), key=lambda cv: cv[1])
    if v <= 0:
        return None
    what, fix = next((w, f) for c, w, f in CAUSES if c == col)
    phase = str(row.get("phase") or "phase")
    # the time columns cover the steps with kernel capture only (--trace-steps)
    steps = finite(row.get("steps_captured")) or finite(row.get("steps"))
    per = f", {v / steps / 1e6:,.2f} ms per step" if steps and steps > 1 else ""
    facts = f"{100 * v / t:.0f}% of its {t / 1e6:,.1f} ms is {what}{per}"
    detail = _detail(row, col)
    return f"{phase}: {facts}{detail}; {fix}."


def _detail(row: Mapping[str, Any], col: str) -> str:
    """The numbers that back the advice for one cause."""
    pb, pf = finite(row.get("pct_peak_bandwidth")), finite(row.get("pct_peak_flops"))
    tb, tf = finite(row.get("achieved_tbps")), finite(row.get("achieved_tflops"))
    if col == "memory_bound_ns" and tb is not None and pb is not None:
        return f" (the busy GPU moves {tb:.2f} TB/s, {pb:.0f}% of peak)"
    if col == "compute_bound_ns" and tf is not None and pf is not None:
        return f" (the busy GPU runs {tf:,.0f} TFLOP/s, {pf:.0f}% of peak)"
    if col == "latency_bound_ns":
        busy = finite(row.get("gpu_busy_ns"))
        bits = []
        if busy:
            bits.append(f"{100 * (finite(row.get(col)) or 0.0) / busy:.0f}% of the GPU's busy time")
        if pb is not None:
            bits.append(f"the busy GPU reaches {pb:.0f}% of peak bandwidth")
        return f" ({', '.join(bits)})" if bits else ""
    if col in ("idle_host_ns", "idle_profiler_ns", "idle_wait_ns", "idle_before_window_ns"):
        idle = finite(row.get("idle_ns"))
        prof = finite(row.get("idle_profiler_ns"))
        bits = []
        if idle and col != "idle_profiler_ns" and prof is not None:
            bits.append(f"of the {100 * idle / (finite(row.get('time_ns')) or idle):.0f}% idle, "
                        f"{100 * prof / idle:.0f}% is the profiler's")
        elif col == "idle_host_ns" and prof is None and finite(row.get("idle_ns")):
            bits.append("the profiler's share is unknown: no unprofiled timing pass")
        return f" ({'; '.join(bits)})" if bits else ""
    return ""
