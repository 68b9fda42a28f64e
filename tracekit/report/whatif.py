"""Text of what-if projections: ``tracekit whatif``'s table and the report's advice lines with savings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracekit.analysis.whatif import CLASSES, Projection


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v / 1e6:,.2f}"


def render(p: Projection) -> str:
    """The run as measured beside the projection, per phase; then the GPU time per class and the assumptions."""
    lines = [f"run {p.run}: {p.change.describe()}",
             f"{'phase':<9}{'':<10}{'measured':>12}{'projected':>12}  {'band':<20}{'saved':>10}"]
    for ph, pp in p.phases.items():
        lat = "TTFT ms" if ph == "prefill" else "TPOT ms"
        lo, hi = pp.band
        lines.append(f"{ph:<9}{'step ms':<10}{_f(pp.measured.step_ns):>12}{_f(pp.projected.step_ns):>12}")
        lines.append(f"{'':<9}{lat:<10}{_f(pp.measured.latency_ns):>12}{_f(pp.projected.latency_ns):>12}  "
                     f"{_f(lo) + ' - ' + _f(hi):<20}{_f(pp.saved_ns):>10}")
    lines.append("GPU time per step by class, ms (measured -> projected):")
    for ph, pp in p.phases.items():
        bits = [f"{c} {_f(pp.measured.gpu_ns.get(c, 0.0))} -> {_f(pp.projected.gpu_ns.get(c, 0.0))}"
                for c in CLASSES if pp.measured.gpu_ns.get(c) or pp.projected.gpu_ns.get(c)]
        m_idle = pp.measured.step_ns - sum(pp.measured.gpu_ns.values())
        p_idle = pp.projected.step_ns - sum(pp.projected.gpu_ns.values())
        bits.append(f"host / idle {_f(max(m_idle, 0.0))} -> {_f(max(p_idle, 0.0))}")
        lines.append(f"  {ph}: " + ", ".join(bits))
    if p.measured_unprofiled:
        own = ", ".join(f"{k[:4].upper()} {_f(v)} ms" for k, v in p.measured_unprofiled.items())
        lines.append(f"the run's own timers without the profiler: {own}")
    lines.append("assumptions:")
    lines += [f"  - {a}" for a in p.assumptions]
    lines.append(f"ceiling: {p.ceilings.get('from', 'none')}")
    if p.ceilings.get("to") != p.ceilings.get("from"):
        lines.append(f"projected onto: {p.ceilings.get('to')}")
    return "\n".join(lines)


def advice_lines(items: Sequence[tuple[str, Projection | None, Projection]]) -> list[str]:
    """One line per projected fix: TTFT and TPOT before and after (band), and the time saved or lost;
    a batch change also says what it does to decode throughput."""
    out = []
    for label, base, p in items:
        bits = []
        for ph, name in (("prefill", "TTFT"), ("decode", "TPOT")):
            pp = p.phases.get(ph)
            if pp is None:
                continue
            ref = base.phases.get(ph) if base is not None else None
            old = ref.projected.latency_ns if ref is not None else pp.measured.latency_ns
            new = pp.projected.latency_ns
            lo, hi = pp.band
            bits.append(f"{name} {_f(old)} -> {_f(new)} ms ({_f(lo)}-{_f(hi)}; "
                        f"{'saves' if old >= new else 'costs'} {_f(abs(old - new))} ms)")
            if ph == "decode" and p.change.batch is not None and ref is not None and new > 0 and old > 0:
                before = ref.shape.get("batch", 1) / old * 1e9
                after = pp.shape.get("batch", 1) / new * 1e9
                bits.append(f"decode {before:,.0f} -> {after:,.0f} tokens/s")
        if bits:
            out.append(f"{label}: " + ", ".join(bits))
    return out


def run_advice(run: Any) -> list[str]:
    """The advice lines with projected savings of an analysed run directory (empty where the run
    lacks what a projection needs: no kernels, no steps, a GPU without a ceiling)."""
    from tracekit.app.whatif import advice_projections, analysed_profile
    from tracekit.errors import TracekitError

    try:
        prof = analysed_profile(run)
    except (TracekitError, ValueError, KeyError):
        return []
    return advice_lines(advice_projections(prof))
