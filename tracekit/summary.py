"""The terminal summary printed after ``tracekit record``: read from run.json only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    # The unprofiled numbers are what the workload really costs; the profiled ones
    # are what the trace shows. Print both where we have both.
    base = unprof if unprof.get("ttft_ns") is not None else prof
    label = "host timers, without profiler" if base is unprof else "host timers, profiled"
    lines += [
        f"  TTFT            {_ms(base.get('ttft_ns'))}  ({label}; profiled {_ms(prof.get('ttft_ns'))})",
        f"  TPOT            {_ms(base.get('tpot_ns'))}  ({label}; profiled {_ms(prof.get('tpot_ns'))})",
        f"  prefill         {_rate(base.get('prefill_tok_s'))}",
        f"  decode          {_rate(base.get('decode_tok_s'))}",
        f"  prefill share   {_pct(None if base.get('prefill_share') is None else 100 * base['prefill_share'])}"
        " of request time",
    ]
    events = (t.get("unprofiled") or {}).get("cuda_events") or {}
    if events.get("aggregate", {}).get("ttft_ns") is not None:
        ea = events["aggregate"]
        d = events.get("host_minus_events_pct") or {}
        # The same unprofiled requests on the device's clock: an independent check of the host timers.
        lines.append(
            f"  CUDA events     TTFT {_ms(ea.get('ttft_ns'))}, TPOT {_ms(ea.get('tpot_ns'))}  "
            f"(same requests; host timers {_pct(d.get('ttft_pct'), True)} / {_pct(d.get('tpot_pct'), True)})"
        )
    if over:
        lines.append(
            f"  profiler cost   e2e {_pct(over.get('e2e_pct'), True)}, TTFT {_pct(over.get('ttft_pct'), True)}, "
            f"TPOT {_pct(over.get('tpot_pct'), True)}"
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
    return "\n".join(lines)
