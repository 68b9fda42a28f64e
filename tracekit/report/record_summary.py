"""The terminal summary printed after ``tracekit record``: read from run.json only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracekit.report.memory_summary import memory_lines
from tracekit.report.text import visible

PERFETTO_URL = "https://ui.perfetto.dev"
THIRD_PARTY = "third-party: "  # the prefix of the run.json warnings the recorder kept from libraries


def _ms(ns: float | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e6:.2f} ms"


def _rate(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f} tok/s"


def _pct(v: float | None, signed: bool = False) -> str:
    if v is None:
        return "n/a"
    return f"{v:+.1f}%" if signed else f"{v:.1f}%"


def third_party_line(manifest: dict[str, Any], run_path: str | Path) -> str | None:
    """One line for what libraries printed during the recording (run.json ``third_party``), or None."""
    info = manifest.get("third_party") or {}
    n = int(info.get("messages") or 0)
    if not n:
        return None
    origins = ", ".join(f"{k} {v}" for k, v in sorted((info.get("by_origin") or {}).items()))
    kept = int(info.get("kept") or 0)
    routine = int(info.get("routine") or 0)
    log = Path(run_path) / str(info.get("log") or "third_party.log")
    what = f"{kept} kept as run.json warnings" if kept else "none worth a warning"
    return f"{n} message(s) captured ({origins}; {routine} routine), {what}; full text in {log}"


def overhead_reading(over: dict[str, Any]) -> str:
    """What the profiler-cost percentages say, by their sign: never "slower" beside a negative number."""
    vals = [v for v in (over.get(k) for k in ("ttft_pct", "tpot_pct", "e2e_pct")) if v is not None]
    base = "profiled vs unprofiled host timers"
    if vals and all(v >= 0 for v in vals):
        return f"{base}: the traced run is slower"
    if vals and all(v < 0 for v in vals):
        return (f"{base}: the traced run was faster, so run-to-run noise is larger than the profiler's cost "
                "here; record --repeat N to measure it")
    return f"{base}: mixed signs, so run-to-run noise is as large as the profiler's cost here"


def warning_lines(manifest: dict[str, Any]) -> list[str]:
    """The run's own warnings (the first five), as the summary prints them; library messages are counted apart."""
    warnings = manifest.get("warnings", [])
    return [visible(f"  warning         {w}") for w in [w for w in warnings if not str(w).startswith(THIRD_PARTY)][:5]]


CLASS_LABEL = {"attention": "attention", "gemm": "GEMM", "norm": "norm", "elementwise": "elementwise",
               "sampling": "sampling", "framework": "framework overhead"}


def cpu_split_lines(manifest: dict[str, Any]) -> list[str]:
    """A CPU run's answer first: that a CPU has no roofline, and each phase's time by operator class."""
    split = manifest.get("cpu_split")
    if not split:
        return []
    lines = ["  where the time went (CPU: no roofline; each phase's time by operator class, under the profiler)"]
    for p in split:
        total = p.get("time_ns") or 0
        if total <= 0:
            continue
        classes = sorted((p.get("classes") or {}).items(), key=lambda kv: -kv[1])
        shares = ", ".join(f"{CLASS_LABEL.get(c, c)} {100 * v / total:.0f}%" for c, v in classes if v > 0)
        n = p.get("steps") or 0
        name = "outside steps" if p.get("phase") == "outside" else str(p.get("phase"))
        per = f", {total / n / 1e6:,.2f} ms/step" if n > 1 else ""
        lines.append(f"  {name:<15} {total / 1e6:,.1f} ms{per}: {shares}")
    return lines


def render(manifest: dict[str, Any], run_path: str | Path, with_warnings: bool = True) -> str:
    """A short, plain-text summary of one run (on a CPU, the split by operator class first; TTFT, TPOT,
    rates, overhead, where the trace is). ``with_warnings=False`` leaves the warnings to warning_lines."""
    run_path = Path(run_path)
    t = manifest.get("timings", {})
    prof = (t.get("profiled") or {}).get("aggregate", {})
    unprof = (t.get("unprofiled") or {}).get("aggregate", {})
    over = t.get("profiler_overhead") or {}
    wl = manifest.get("workload", {})
    lines = [f"tracekit record: {manifest.get('status', '?')}  ({run_path})"]
    lines += cpu_split_lines(manifest)
    if wl.get("model") and wl.get("kind") == "serve":
        lines.append(
            f"  workload        {wl.get('model')} {wl.get('dtype')} on {wl.get('device')}, {wl.get('requests')} "
            f"requests of {wl.get('shape')}: {wl.get('input_tokens')} prompt / {wl.get('output_tokens')} output "
            "tokens in all"
        )
    elif wl.get("model"):
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
    # record --serve times requests by the engine's own stamps, not tracekit's host timers.
    timer = "engine timestamps" if "engine" in str((t.get("unprofiled") or t.get("profiled") or {}).get("clock")) \
        else "host timers"
    src = f"{timer}, no profiler" if has_unprof else f"{timer}, under the profiler"

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
        f"  prefill         {_rate(base.get('prefill_tok_s'))}  ({timer}, {short})",
        f"  decode          {_rate(base.get('decode_tok_s'))}  ({timer}, {short})",
        f"  prefill share   {_pct(share)} of request time ({timer}, {short})",
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
            f"e2e {_pct(over.get('e2e_pct'), True)}  ({overhead_reading(over)})"
        )
    lines += serve_lines(manifest) + assisted_lines(manifest) + memory_lines(manifest, run_path)
    quant = (manifest.get("model") or {}).get("quant")
    if quant:
        lines.append(f"  quant           {quant.get('mode')}: torchao {quant.get('torchao')} {quant.get('config')}, "
                     f"weights {quant.get('weights_bytes_before', 0) / 1e6:,.1f} -> {quant.get('weights_bytes', 0) / 1e6:,.1f} MB")
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
    if with_warnings:
        lines += warning_lines(manifest)
    third = third_party_line(manifest, run_path)
    if third:
        lines.append(f"  libraries       {third}")
    post = manifest.get("postprocess") or {}
    if post.get("seconds") is not None:
        mb = f" of {post['trace_bytes'] / 1e6:.0f} MB" if post.get("trace_bytes") else ""
        lines.append(
            f"  post-processing {post['seconds']:.2f} s (reading the trace{mb} {post.get('annotations_s', 0):.2f} s, "
            f"tables {post.get('tables_s', 0):.2f} s, merged trace {post.get('merge_s', 0):.2f} s), after the "
            f"profiler's own export ({post.get('profiler_export_s', 0):.2f} s)"
        )
    trace = run_path / "trace.json.gz"
    lines += [
        f"  run dir         {run_path}",
        f"  trace           {trace}",
        f"                  open it at {PERFETTO_URL} (Open trace file)",
    ]
    return "\n".join(visible(line) for line in lines)  # run.json text shown, never sent to the terminal


def serve_lines(manifest: dict[str, Any]) -> list[str]:
    """``record --serve``: the load, throughput and latency percentiles (engine timestamps), and the check."""
    serve = manifest.get("serve")
    if not serve:
        return []
    t = manifest.get("timings", {})
    un, pr = (t.get("unprofiled") or {}).get("load") or {}, (t.get("profiled") or {}).get("load") or {}
    base, src = (un, "no profiler") if un.get("completed") else (pr, "under the profiler")
    rate = serve.get("rate_rps")
    lines = [f"  serve           {serve.get('requests')} requests, "
             + (f"{rate:g} req/s (Poisson)" if rate else "all at once")
             + f", {serve.get('max_batch_tokens')} tokens/step, attention {serve.get('attention')}"
             + (", CUDA graphs" if serve.get("cuda_graphs") else "")]
    if base.get("completed"):
        lines.append(
            f"  under load      {_rate(base.get('output_tok_s'))} out, TTFT p50 {_ms(base.get('ttft_ns_p50'))} "
            f"p99 {_ms(base.get('ttft_ns_p99'))}, TPOT p50 {_ms(base.get('tpot_ns_p50'))} "
            f"p99 {_ms(base.get('tpot_ns_p99'))}, queue p99 {_ms(base.get('queue_ns_p99'))}  (engine timestamps, {src})"
        )
    kinds = manifest.get("steps_by_kind") or {}
    if kinds:
        lines.append("  steps           " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
                     + f"; up to {manifest.get('max_batch')} requests in one step")
    chk = (t.get("profiled") or {}).get("trace_check") or {}
    if chk.get("requests_checked"):
        lines.append(
            f"  vs the trace    first token stamped {_ms(chk.get('first_token_ns_min'))} to "
            f"{_ms(chk.get('first_token_ns_max'))} after its step ended ({chk['requests_checked']} requests)"
        )
    return lines


def assisted_lines(manifest: dict[str, Any]) -> list[str]:
    """``record --assistant``: acceptance, tokens per round, the speed-up and where the time went."""
    a = manifest.get("assisted")
    if not a:
        return []
    t = manifest.get("timings", {})
    un, pr = (t.get("unprofiled") or {}).get("assisted") or {}, (t.get("profiled") or {}).get("assisted") or {}
    base = un or pr
    rate = base.get("acceptance_rate")
    lines = [f"  assistant       {a.get('assistant')} ({a.get('kind')}), {a.get('tokens_per_round')} tokens per round: "
             f"acceptance {_pct(None if rate is None else 100 * rate)}, "
             f"{base.get('tokens_per_round') or 0:.2f} tokens per round"]
    if base.get("speedup_mean") is not None:
        lines.append(f"  speed-up        {base['speedup_mean']:.2f}x e2e against the same requests without it "
                     f"(range {base.get('speedup_min'):.2f}-{base.get('speedup_max'):.2f}; "
                     f"{'no profiler' if un else 'under the profiler'})")
    if pr.get("draft_ns") is not None:
        lines.append(f"  time            draft forwards {_ms(pr.get('draft_ns'))}, verify forwards "
                     f"{_ms(pr.get('verify_ns'))} (recorded pass)")
    return lines


def repeat_lines(manifests: list[dict[str, Any]], out: str | Path) -> list[str]:
    """``record --repeat N``: TTFT and TPOT of every repeat (host timers without the profiler, else under
    it), their median and spread, and how to compare two such sets."""
    def agg(m: dict[str, Any]) -> dict[str, Any]:
        t = m.get("timings") or {}
        un = (t.get("unprofiled") or {}).get("aggregate") or {}
        return un if un.get("ttft_ns") is not None else (t.get("profiled") or {}).get("aggregate") or {}

    lines = [f"repeats         {len(manifests)} runs under {out} (repeat-1 ... repeat-{len(manifests)})"]
    for key, name in (("ttft_ns", "TTFT"), ("tpot_ns", "TPOT")):
        vals = sorted(float(v) for v in (agg(m).get(key) for m in manifests) if v is not None)
        if not vals:
            continue
        med = vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2
        spread = f", max/min {vals[-1] / vals[0]:.2f}x" if vals[0] > 0 else ""
        lines.append(f"  {name:<14} median {med / 1e6:.2f} ms, {vals[0] / 1e6:.2f} to {vals[-1] / 1e6:.2f} ms{spread}  "
                     f"({', '.join(f'{v / 1e6:.2f}' for v in (float(agg(m).get(key) or 0) for m in manifests))})")
    lines.append(f"  compare         tracekit diff {out} OTHER  (each side a run or a directory of repeats)")
    return [visible(line) for line in lines]
