"""The terminal summary printed after ``tracekit record``: read from run.json only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracekit.report.text import visible

PERFETTO_URL = "https://ui.perfetto.dev"


def _ms(ns: float | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e6:.2f} ms"


def _rate(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f} tok/s"


def _pct(v: float | None, signed: bool = False) -> str:
    if v is None:
        return "n/a"
    return f"{v:+.1f}%" if signed else f"{v:.1f}%"


def render(manifest: dict[str, Any], run_path: str | Path) -> str:
    """A short, plain-text summary of one run (TTFT, TPOT, rates, overhead, where the trace is)."""
    run_path = Path(run_path)
    t = manifest.get("timings", {})
    prof = (t.get("profiled") or {}).get("aggregate", {})
    unprof = (t.get("unprofiled") or {}).get("aggregate", {})
    over = t.get("profiler_overhead") or {}
    wl = manifest.get("workload", {})
    lines = [f"tracekit record: {manifest.get('status', '?')}  ({run_path})"]
    if wl.get("model"):
        lines.append(
            f"  workload        {wl.get('model')} {wl.get('dtype')} on {wl.get('device')}, "
            f"shape {wl.get('shape')} ({wl.get('input_tokens')} in / {wl.get('output_tokens')} out), "
            f"batch {wl.get('batch')}, {wl.get('requests')} request(s)"
        )
    comp = manifest.get("compiled")
    if comp:
        how = "torch.compile " + str(comp.get("compile_mode")) if comp.get("auto_compile") else "no compile"
        lines.append(
            f"  mode            compiled: {comp.get('cache_implementation')} cache, {how}, "
            f"warm-up {comp.get('compile_s')} s (untimed)"
        )
    # Three clocks, never mixed up on one line: host timers without the profiler (what the
    # workload really costs), the same requests on CUDA events (a check of those host timers),
    # and host timers while the profiler ran (the run the trace shows, slower by its overhead).
    events = (t.get("unprofiled") or {}).get("cuda_events") or {}
    ea = events.get("aggregate") or {}
    has_unprof = unprof.get("ttft_ns") is not None
    base = unprof if has_unprof else prof
    src = "host timers, no profiler" if has_unprof else "host timers, under the profiler"

    def latency(key: str) -> str:
        parts = [f"{_ms(base.get(key))} {src}"]
        if ea.get(key) is not None:
            parts.append(f"CUDA events {_ms(ea.get(key))}")
        if has_unprof and prof.get(key) is not None:
            parts.append(f"profiled {_ms(prof.get(key))}")
        return " | ".join(parts)

    short = "no profiler" if has_unprof else "under the profiler"
    share = None if base.get("prefill_share") is None else 100 * base["prefill_share"]
    lines += [
        f"  TTFT            {latency('ttft_ns')}",
        f"  TPOT            {latency('tpot_ns')}",
        f"  prefill         {_rate(base.get('prefill_tok_s'))}  (host timers, {short})",
        f"  decode          {_rate(base.get('decode_tok_s'))}  (host timers, {short})",
        f"  prefill share   {_pct(share)} of request time (host timers, {short})",
    ]
    if ea.get("ttft_ns") is not None:
        d = events.get("host_minus_events_pct") or {}
        lines.append(
            f"  host vs events  TTFT {_pct(d.get('ttft_pct'), True)}, TPOT {_pct(d.get('tpot_pct'), True)}  "
            "(same unprofiled requests: host timers minus CUDA events)"
        )
    if over:
        lines.append(
            f"  profiler cost   TTFT {_pct(over.get('ttft_pct'), True)}, TPOT {_pct(over.get('tpot_pct'), True)}, "
            f"e2e {_pct(over.get('e2e_pct'), True)}  (profiled vs unprofiled host timers: the traced run is slower)"
        )
    sources = manifest.get("step_boundaries") or {}
    if sources.get("streamer"):
        lines.append(
            "  steps           token to token (streamer: no hooks inside the compiled forward), "
            "not the forward alone"
        )
    nvml = manifest.get("nvml") or {}
    if nvml.get("available"):
        lines.append(
            f"  NVML            {nvml.get('samples', 0)} samples, GPM {'on' if nvml.get('gpm_supported') else 'off'}"
        )
    else:
        lines.append(f"  NVML            off ({nvml.get('reason') or 'not available'})")
    for w in manifest.get("warnings", [])[:5]:
        lines.append(f"  warning         {w}")
    trace = run_path / "trace.json.gz"
    lines += [
        f"  run dir         {run_path}",
        f"  trace           {trace}",
        f"                  open it at {PERFETTO_URL} (Open trace file)",
    ]
    return "\n".join(visible(line) for line in lines)  # run.json text shown, never sent to the terminal
