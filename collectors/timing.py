"""Timing aggregates of recorded requests for run.json ``timings``: per-request metrics, their means,
the CUDA-event view of the same requests, and the profiler's overhead over an unprofiled pass."""

from __future__ import annotations

from typing import Any

from tracekit.collectors.hooks import RequestRecord


def timings(
    records: list[RequestRecord],
    clock: str = "host time.time_ns, synchronised",
    warmup: frozenset[int] = frozenset(),
) -> dict[str, Any]:
    """Per-request metrics and their means over the requests that completed, warm-ups
    (request ids in ``warmup``, flagged ``"warmup": true``) left out of the means."""
    per = [r.metrics() for r in records]
    for m in per:
        if m["request_id"] in warmup:
            m["warmup"] = True
    done = [m for m in per if m["complete"] and m["ttft_ns"] is not None and not m.get("warmup")]
    agg: dict[str, Any] = {"requests": len(done)}
    if warmup:
        agg["warmup_requests"] = sum(1 for m in per if m.get("warmup"))

    def mean(key: str) -> float | None:
        vals = [m[key] for m in done if m.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    for key in ("ttft_ns", "tpot_ns", "e2e_ns", "prefill_share"):
        agg[key] = mean(key)
    pre = [m["batch"] * m["input_tokens"] / (m["ttft_ns"] / 1e9) for m in done if m["ttft_ns"]]
    dec = [
        m["batch"] * (m["output_tokens"] - 1) / ((m["e2e_ns"] - m["ttft_ns"]) / 1e9)
        for m in done
        if m["output_tokens"] > 1 and m["e2e_ns"] > m["ttft_ns"]
    ]
    agg["prefill_tok_s"] = sum(pre) / len(pre) if pre else None
    agg["decode_tok_s"] = sum(dec) / len(dec) if dec else None
    return {"clock": clock, "aggregate": agg, "requests": per}


EVENTS_CLOCK = (
    "CUDA events (torch.cuda.Event elapsed_time) recorded on the current stream at request start, "
    "at each token as it reached the host (then synchronised on), and at the end: same requests as the host timers"
)


def event_timings(records: list[RequestRecord]) -> dict[str, Any] | None:
    """The same requests timed by their CUDA events, and how far the host timers are from them (%)."""
    views = [r.event_view() for r in records]
    if not any(v is not None for v in views):
        return None
    ev = timings([v for v in views if v is not None], clock=EVENTS_CLOCK)
    host = timings([r for r, v in zip(records, views, strict=True) if v is not None])
    diff: dict[str, float | None] = {}
    for key in ("ttft_ns", "tpot_ns", "e2e_ns"):
        h, e = host["aggregate"].get(key), ev["aggregate"].get(key)
        diff[key.replace("_ns", "_pct")] = round(100.0 * (h - e) / e, 3) if h and e else None
    ev["host_minus_events_pct"] = diff
    return ev


def overhead(profiled: dict[str, Any], unprofiled: dict[str, Any]) -> dict[str, float | None]:
    """Profiler overhead in %, per metric: (profiled - unprofiled) / unprofiled."""
    out: dict[str, float | None] = {}
    for key in ("ttft_ns", "tpot_ns", "e2e_ns"):
        p, u = profiled["aggregate"].get(key), unprofiled["aggregate"].get(key)
        out[key.replace("_ns", "_pct")] = round(100.0 * (p - u) / u, 2) if p and u else None
    return out
