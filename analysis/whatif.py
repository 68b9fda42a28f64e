"""What-if projections: a run's prefill and decode under a change, from its own kernels (pure).

``project(profile, change, ceiling_of)`` takes a run reduced by tracekit.analysis.whatif_profile and a
``Change`` (any combination of: CUDA graphs, batch, prompt / answer length, another GPU, quantized
weights, no profiler) and returns a ``Projection``: per phase, the step time and TTFT (prefill) or
TPOT (decode) as measured and as projected, the per-class GPU time before and after, an uncertainty
band, and every assumption made. How:

1. each kernel of the phase's representative step is re-costed at the source's and at the new
   workload (tracekit.analysis.whatif_cost: shapes, the GPU's ceilings, quantized weight bytes);
2. the step's timeline is replayed with those durations (tracekit.analysis.whatif_sim): the host
   issues at its measured pace (scaled to the unprofiled pace where the run has its own unprofiled
   timers, else by the profiler's measured cost per CPU op), the GPU runs each kernel when issued
   and free, the host waits at its synchronisations;
3. the projection is the measured time plus the replayed difference (new minus source); under CUDA
   graphs a decode step is the graph's kernels back to back (fused chains when ``fuse``) plus the
   measured host time of a graph-launched step (tracekit.analysis.whatif_constants).

A change the run lacks the data for raises ``WhatifError`` with one line saying what is missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis import whatif_cost as wc
from tracekit.analysis import whatif_moe as moe
from tracekit.analysis import whatif_sim as sim
from tracekit.analysis.whatif_constants import DEFAULT, Constants
from tracekit.analysis.whatif_profile import PhaseStep, Profile, without_stall
from tracekit.model.ceilings import Ceiling
from tracekit.model.quant import MODES as QUANT_MODES
from tracekit.model.quant import weight_bytes as quant_weight_bytes

CLASSES = ("compute", "memory", "latency", "other", "memcpy")


class WhatifError(ValueError):
    """A projection the run lacks the data for (the message says what is missing, in one line)."""


@dataclass(frozen=True)
class Change:
    """What to project. None / False: as measured. ``fuse``: with ``graphs``, a compiler's fusion of
    elementwise chains; ``use_run_timers``: False ignores the run's own unprofiled timers (the
    profiler's cost then comes from the per-op model)."""

    graphs: bool = False
    fuse: bool = True
    batch: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    gpu: str | None = None
    quant: str | None = None
    no_profiler: bool = False
    use_run_timers: bool = True
    cache_len: int | None = None  # a compiled decode's static cache, slots per sequence (None: see the doc)

    def describe(self) -> str:
        bits = []
        if self.graphs:
            bits.append("CUDA graphs" + (" + fusion" if self.fuse else ""))
        for name, v in (("batch", self.batch), ("input tokens", self.input_tokens),
                        ("output tokens", self.output_tokens), ("GPU", self.gpu), ("quant", self.quant),
                        ("static cache", self.cache_len)):
            if v is not None:
                bits.append(f"{name} {v}")
        if self.no_profiler:
            bits.append("no profiler")
        return ", ".join(bits) or "no change"

    def is_empty(self) -> bool:
        return self.describe() == "no change"


@dataclass(frozen=True)
class Times:
    step_ns: float
    latency_ns: float  # TTFT (prefill) or TPOT (decode)
    gpu_ns: Mapping[str, float] = field(default_factory=dict)  # GPU time per bound class

    def to_dict(self, phase: str) -> dict[str, Any]:
        key = "ttft_ms" if phase == "prefill" else "tpot_ms"
        return {"step_ms": _ms(self.step_ns), key: _ms(self.latency_ns),
                "gpu_ms": {c: _ms(v) for c, v in self.gpu_ns.items()},
                "host_idle_ms": _ms(max(self.step_ns - sum(self.gpu_ns.values()), 0.0))}


@dataclass(frozen=True)
class PhaseProjection:
    phase: str
    measured: Times
    projected: Times
    band: tuple[float, float]  # projected latency, low and high (ns)
    shape: Mapping[str, Any]  # the projected step's batch / query / KV length

    @property
    def saved_ns(self) -> float:
        return self.measured.latency_ns - self.projected.latency_ns


@dataclass(frozen=True)
class Projection:
    run: str
    change: Change
    phases: Mapping[str, PhaseProjection]
    assumptions: tuple[str, ...]
    measured_unprofiled: Mapping[str, float]  # the run's own timers (ttft_ns / tpot_ns), where it has them
    ceilings: Mapping[str, str]  # "from" / "to": the ceilings used

    def latency(self, side: str, key: str) -> float | None:
        phase = "prefill" if key == "ttft_ns" else "decode"
        p = self.phases.get(phase)
        if p is None:
            return None
        return (p.measured if side == "measured" else p.projected).latency_ns

    def to_dict(self) -> dict[str, Any]:
        """The --json object: measured and projected, each with ttft_ms / tpot_ms and per phase
        step_ms, ttft_ms, tpot_ms (the request's) and the phase's GPU time per class."""
        out: dict[str, Any] = {"run": self.run, "change": self.change.describe(),
                               "changes": {k: v for k, v in self.change.__dict__.items()}}
        for side in ("measured", "projected"):
            ttft, tpot = _ms(self.latency(side, "ttft_ns")), _ms(self.latency(side, "tpot_ns"))
            phases = {}
            for ph, p in self.phases.items():
                t = p.measured if side == "measured" else p.projected
                d = t.to_dict(ph)
                d.update({"ttft_ms": ttft, "tpot_ms": tpot})
                if side == "projected":
                    lo, hi = p.band
                    d["band_ms"] = [_ms(lo), _ms(hi)]
                    d["saved_ms"] = _ms(p.saved_ns)
                    d["shape"] = dict(p.shape)
                phases[ph] = d
            out[side] = {"ttft_ms": ttft, "tpot_ms": tpot, "phases": phases}
        out["measured"]["unprofiled"] = {k.replace("_ns", "_ms"): _ms(v) for k, v in self.measured_unprofiled.items()}
        out["assumptions"] = list(self.assumptions)
        out["ceilings"] = dict(self.ceilings)
        return out


def _ms(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v) / 1e6, 4)


CeilingOf = Callable[[str], Ceiling | None]


@dataclass
class _Ctx:
    profile: Profile
    change: Change
    c_from: Ceiling | None
    c_to: Ceiling | None
    k: Constants
    notes: list[str]
    rates: wc.Rates | None = None  # linear GEMM families' marginal rates


def project(profile: Profile, change: Change, ceiling_of: CeilingOf, constants: Constants = DEFAULT) -> Projection:
    """The run of ``profile`` under ``change`` (see the module doc). WhatifError where it cannot be."""
    if not profile.phases:
        raise WhatifError(f"{profile.run or 'the run'}: no captured prefill or decode step with GPU kernels")
    notes: list[str] = []
    c_from = ceiling_of(profile.gpu) if profile.gpu else None
    c_to = c_from
    if change.gpu is not None:
        if c_from is None:
            raise WhatifError(f"no ceiling for the run's GPU ({profile.gpu or 'unnamed'}): cannot scale to {change.gpu}")
        c_to = ceiling_of(change.gpu)
        if c_to is None:
            raise WhatifError(f"no ceiling for GPU {change.gpu!r} in tracekit's ceilings table")
    reshapes = any(v is not None for v in (change.batch, change.input_tokens, change.output_tokens))
    if reshapes and not profile.has_shapes:
        raise WhatifError("the trace recorded no op shapes (record with shapes): kernels cannot be re-costed")
    if (reshapes or change.quant) and c_from is None:
        raise WhatifError(f"no ceiling for the run's GPU ({profile.gpu or 'unnamed'}): kernels cannot be re-costed")
    if change.quant is not None and change.quant != "none":
        if change.quant not in QUANT_MODES:
            raise WhatifError(f"unknown quantization {change.quant!r} (known: {', '.join(QUANT_MODES)})")
        if profile.quant not in ("none", "", None):
            raise WhatifError(f"the run is already quantized ({profile.quant}): project from an fp16/bf16 run")
        for ph in profile.phases:
            ex = _execution(profile, change, ph)
            if (change.quant, ex) not in constants.quant:
                raise WhatifError(f"no measured dequantization cost for {change.quant} {ex} ({ph}): no projection")
    ctx = _Ctx(profile, change, c_from, c_to, constants, notes,
               wc.marginal_rates(s.kernels for s in profile.phases.values()))
    phases = {ph: _phase(ctx, ph, step) for ph, step in profile.phases.items()}
    notes.extend(_assumptions(ctx))
    return Projection(
        run=profile.run, change=change, phases=phases, assumptions=tuple(dict.fromkeys(notes)),
        measured_unprofiled=dict(profile.unprofiled),
        ceilings={"from": c_from.describe() if c_from else "none",
                  "to": c_to.describe() if c_to else "none"})


def _execution(profile: Profile, change: Change, phase: str) -> str:
    """How the phase's steps run: "compiled" (decode replayed as CUDA graphs) or "eager" (prefill always:
    a compiled model replays graphs for fixed-shape decode only)."""
    return "compiled" if phase == "decode" and (change.graphs or _graphed(profile)) else "eager"


def _graphed(profile: Profile) -> bool:
    d = profile.phases.get("decode")
    return bool(d is not None and d.graph_launches > 0) or profile.mode == "compiled"


def _workload(ctx: _Ctx, step: PhaseStep) -> tuple[wc.Shape, wc.Shape]:
    """(the source's workload shape, the new one) of a phase's step; decode at the answer's mean KV length."""
    p, c = ctx.profile, ctx.change
    b0 = p.batch or step.batch
    in0 = p.input_tokens or (step.q_len if step.phase == "prefill" else max(step.kv_len - 1, 1))
    out0 = p.output_tokens or 2
    b1, in1, out1 = c.batch or b0, c.input_tokens or in0, c.output_tokens or out0
    if step.phase == "prefill":
        return wc.Shape(b0, in0, in0, b0 * in0), wc.Shape(b1, in1, in1, b1 * in1)
    return (wc.Shape(b0, 1, int(in0 + out0 / 2), b0), wc.Shape(b1, 1, int(in1 + out1 / 2), b1))


def _costed(ctx: _Ctx, step: PhaseStep, shape: wc.Shape, ceiling: Ceiling | None, quant: str | None,
            static: bool = False) -> pd.DataFrame:
    """The step's kernels doing ``shape``'s work on ``ceiling``'s GPU (durations replaced); ``static``:
    graph-replayed kernels without a model keep their time (the static cache's term covers them)."""
    k = step.kernels
    if ctx.c_from is None or ceiling is None:
        return k.copy()
    old = wc.Shape(step.batch, step.q_len, step.kv_len, step.tokens)
    new = wc.rescale(k, old, shape, step.phase)
    if quant:
        new = _quantized(new, quant, shape)
    out = new.copy()
    dur = wc.retime(k, new, ctx.c_from, ceiling, ctx.rates)
    none = wc.unmodelled(k, old, old if static else shape, step.graph_launches > 0)
    out["dur_ns"] = np.where(none != k["dur_ns"].to_numpy(dtype=float), none, dur)
    return out


def _quantized(k: pd.DataFrame, mode: str, shape: wc.Shape) -> pd.DataFrame:
    """Linear GEMMs (at ``shape``) reading their weights at ``mode``'s width (per element, as a
    4096 x 4096 weight: group scales included)."""
    out = k.copy()
    def ratio_of(dtype: str) -> float:
        e = wc.element_bytes(dtype)
        return quant_weight_bytes(mode, 4096, 4096, dtype_bytes=max(int(e), 1)) / (4096 * 4096 * e)

    ratio = wc.per_dtype(k["dtype"], ratio_of)
    w = wc.weight_bytes(k, shape)  # 0 outside linear GEMMs
    out["bytes"] = k["bytes"].to_numpy(dtype=float) - w * (1 - ratio)
    return out


def _static_extra(ctx: _Ctx, step: PhaseStep, src: wc.Shape, new: wc.Shape) -> tuple[float, int] | None:
    """Decode under CUDA graphs over a static cache: the GPU time its non-GEMM kernels add (ns) for the
    keys and values attention reads over every slot (whatif_cost.static_cache_bytes x the measured
    ns per byte, scaled by the bandwidths on another GPU): all of it for an eager source, the difference
    for a graphed one whose cache length is known; with the slots projected. None where it does not apply
    or a size is unknown."""
    p, c, per_byte = ctx.profile, ctx.change, ctx.k.static_decode_ns_per_byte
    if step.phase != "decode" or per_byte <= 0:
        return None
    if ctx.c_from is not None and ctx.c_to is not None and ctx.c_to.peak_bytes_per_s > 0:
        per_byte *= ctx.c_from.peak_bytes_per_s / ctx.c_to.peak_bytes_per_s  # measured on the run's GPU
    unit = _slot_bytes(p, step)  # bytes per sequence and slot
    if unit is None:
        return None
    if step.graph_launches > 0:
        if not p.cache_len:
            return None
        slots = c.cache_len or p.cache_len
        return per_byte * unit * (new.batch * slots - src.batch * p.cache_len), slots
    if not c.graphs:
        return None
    slots = c.cache_len or ((c.input_tokens or p.input_tokens or src.kv_len) + (c.output_tokens or p.output_tokens or 2))
    return per_byte * unit * new.batch * int(slots), int(slots)


def _slot_bytes(p: Profile, step: PhaseStep) -> float | None:
    """The bytes decode attention reads per sequence and static-cache slot at the query heads' count
    (whatif_cost.static_cache_bytes of one): from the model config, else from the step's modelled
    attention kernels (4 x query heads x head dim FLOPs per layer, sequence and KV position)."""
    unit = wc.static_cache_bytes(p.model, 1, 1)
    if unit is not None:
        return unit
    k = step.kernels
    att = (wc.text(k, "kclass") == "attention") & (k["flops"].fillna(0).to_numpy(dtype=float) > 0)
    flops = float(k.loc[att, "flops"].sum())
    return flops / (step.batch * step.kv_len) if flops > 0 and step.batch > 0 and step.kv_len > 0 else None


def _static_note(ctx: _Ctx, ph: str, static: tuple[float, int], signed: bool) -> str:
    """The assumption line of a static-cache term: its slots and its GPU time (a change where ``signed``)."""
    us = f"{static[0] / 1e3:+,.0f}" if signed else f"{static[0] / 1e3:,.0f}"
    return (f"{ph}: attention reads the static cache ({static[1]:,} slots) at the query heads' count: {us} us of "
            f"GPU time ({ctx.k.static_decode_ns_per_byte * 1e3:.2f} ps per byte, measured)")


def _grow_non_gemm(k: pd.DataFrame, extra: float) -> pd.DataFrame:
    """``k`` with its non-GEMM kernels lasting ``extra`` ns more in all, in proportion to their time."""
    d = k["dur_ns"].to_numpy(dtype=float)
    mask = wc.text(k, "kclass") != "gemm"
    total = float(d[mask].sum())
    if total <= 0:
        return k
    return k.assign(dur_ns=np.where(mask, d * max(1.0 + extra / total, 0.0), d))


def _rerouted(ctx: _Ctx, step: PhaseStep, src: wc.Shape, new: wc.Shape) -> PhaseStep:
    """The step with its eager MoE expert loops grown to the experts a larger batch touches
    (tracekit.analysis.whatif_moe); the step itself where it has none or the batch does not grow."""
    ex = moe.experts_of(ctx.profile.model)
    if ex is None or new.batch <= src.batch or not ctx.profile.has_shapes:
        return step
    grown, sizes = moe.reroute(step, ex, new.batch / src.batch)
    if sizes:
        h = sorted(a for a, _ in sizes)
        h2 = sorted(b for _, b in sizes)
        ctx.notes.append(
            f"{step.phase}: {len(sizes)} eager expert loops touched {h[len(h) // 2]} of {ex.experts} experts (median "
            f"per layer); {new.batch} sequences routing independently of each other touch {h2[len(h2) // 2]}: each "
            "added expert costs a copy of a traced expert's kernels and host time, the routed rows spread over them")
    return grown


def _host_scale(ctx: _Ctx, step: PhaseStep, base: pd.DataFrame, key: str) -> tuple[float, str]:
    """The host's pace relative to the profiled trace: 1 under the profiler; without it, solved from
    the run's own timer, else from the profiler's cost per CPU op."""
    if not ctx.change.no_profiler:
        return 1.0, ""
    own = ctx.profile.unprofiled.get(key)
    if own is not None and ctx.change.use_run_timers:
        s, exact = sim.solve_host_scale(own, base["off_ns"], base["dur_ns"], base["gap_ns"], step.syncs,
                                        step.period_ns, ctx.profile.launch_ns)
        how = f"{step.phase}: host pace without the profiler from the run's own unprofiled {key[:4].upper()} " \
              f"({own / 1e6:,.2f} ms): x{s:.2f}"
        return s, how + ("" if exact else " (the GPU alone is slower than the timer: clamped)")
    if step.cpu_ops <= 0:
        raise WhatifError("no unprofiled timers and no CPU ops in the trace: the profiler's cost is unknown")
    wait = sum(max(b - a - 20_000.0, 0.0) for a, b in step.syncs)
    host = max(step.period_ns - wait, 1.0)
    cost = step.cpu_ops * ctx.k.profiler_ns_per_op + step.launches * ctx.k.profiler_ns_per_launch
    s = max(1.0 - cost / host, 0.05)
    return s, (f"{step.phase}: host pace without the profiler from {ctx.k.profiler_ns_per_op / 1e3:.2f} us per "
               f"recorded CPU op x {step.cpu_ops} and {ctx.k.profiler_ns_per_launch / 1e3:.2f} us per launch x "
               f"{step.launches}: x{s:.2f}")


def _host_speed(ctx: _Ctx, ref_ns_per_linear: float) -> float:
    """This run's host time per linear call of an eager decode step (its unprofiled TPOT, else its traced
    step at the unprofiled pace) over the reference host's: how much slower (>1) or faster its host is."""
    d = ctx.profile.phases.get("decode")
    n = int(wc.linear_mask(d.kernels).sum()) if d is not None else 0
    if d is None or n == 0 or d.graph_launches or ref_ns_per_linear <= 0:
        return 1.0
    tpot = ctx.profile.unprofiled.get("tpot_ns") or d.period_ns
    return float(tpot / n / ref_ns_per_linear)


def _replay(step: PhaseStep, k: pd.DataFrame, s: float, launch_ns: float) -> float:
    return sim.replay(k["off_ns"], k["dur_ns"], k["gap_ns"], step.syncs, step.period_ns, s, launch_ns)


def _by_class(k: pd.DataFrame) -> dict[str, float]:
    b = wc.text(k, "bound")
    d = k["dur_ns"].to_numpy(dtype=float)
    known = np.isin(b, CLASSES)
    out = {c: float(d[b == c].sum()) for c in CLASSES}
    out["other"] += float(d[~known].sum())
    return out


def _with_host_quant(k: pd.DataFrame, step: PhaseStep, host_ns: float, s: float) -> tuple[pd.DataFrame, PhaseStep]:
    """Each linear call costing ``host_ns`` more host time (in the replay's profiled-pace units)."""
    if host_ns <= 0:
        return k, step
    per = host_ns / max(s, 1e-9)
    off = k["off_ns"].to_numpy(dtype=float)
    lin_off = np.sort(off[wc.linear_mask(k)])
    out = k.copy()
    out["off_ns"] = off + np.searchsorted(lin_off, off, side="right") * per
    syncs = tuple((a + d, b + d) for a, b in step.syncs
                  for d in [float(np.searchsorted(lin_off, a, side="right")) * per])
    return out, replace(step, period_ns=step.period_ns + len(lin_off) * per, syncs=syncs)


def _phase(ctx: _Ctx, ph: str, measured_step: PhaseStep) -> PhaseProjection:
    c, p = ctx.change, ctx.profile
    key = "ttft_ns" if ph == "prefill" else "tpot_ns"
    step, stall = without_stall(measured_step)
    if stall:
        ctx.notes.append(f"{ph}: a one-off host stall of {stall / 1e6:,.1f} ms in the step (no kernel issued, no "
                         "sync: a first call's autotuning, compilation or allocation) is left out of the projection")
    src, new = _workload(ctx, step)
    base = _costed(ctx, step, src, ctx.c_from, None)
    quant = c.quant if c.quant not in (None, "none") else None
    rstep = _rerouted(ctx, step, src, new)
    static = _static_extra(ctx, step, src, new)
    if static is None and c.cache_len is not None and ph == "decode":
        ctx.notes.append(f"{ph}: --cache-len not applied: " + (
            "the run's decode is replayed from graphs over a cache of unknown length (an engine's paged cache reads "
            "what it holds)" if step.graph_launches > 0 else
            "no static cache without --graphs" if not c.graphs else "the model's attention sizes are not known"))
    proj = _costed(ctx, rstep, new, ctx.c_to, quant, static=static is not None)
    if static is not None and step.graph_launches > 0:
        proj = _grow_non_gemm(proj, static[0])
        ctx.notes.append(_static_note(ctx, ph, static, signed=True))
    s, how = _host_scale(ctx, step, base, key)
    if how:
        ctx.notes.append(how)
    measured_lat = p.profiled.get(key, measured_step.period_ns)
    # decode: the representative step's period (the trace's TPOT averages in its first, one-off step)
    base_lat = step.period_ns if ph == "decode" else measured_lat - stall
    anchor = p.unprofiled.get(key) if (c.no_profiler and c.use_run_timers and key in p.unprofiled) else None
    t_base = _replay(step, base, s, p.launch_ns)
    graphed_now = step.graph_launches > 0
    pstep = rstep
    if quant:
        ex = _execution(p, c, ph)
        qc = ctx.k.quant[(quant, ex)]
        lin = wc.linear_mask(proj)
        n_lin = int(lin.sum())
        gpu_extra = qc.gpu_ns + qc.gpu_ns_per_seq * new.batch
        if gpu_extra > 0:
            proj = proj.assign(dur_ns=proj["dur_ns"].to_numpy(dtype=float) + np.where(lin, gpu_extra, 0.0))
        peak = ctx.c_to.flops("bf16") if ctx.c_to is not None else None
        if qc.rate_of_peak and peak:
            # the quantized kernel's own rate bounds it where the rows are many (its FLOPs at that rate)
            floor = proj["flops"].fillna(0).to_numpy(dtype=float) / (qc.rate_of_peak * peak) * 1e9
            d = proj["dur_ns"].to_numpy(dtype=float)
            proj = proj.assign(dur_ns=np.where(lin, np.maximum(d, floor), d))
        host_ns = qc.host_ns * _host_speed(ctx, qc.host_ref_ns_per_linear) if qc.host_ns > 0 else 0.0
        proj, pstep = _with_host_quant(proj, rstep, host_ns, s)
        ctx.notes.append(f"{ph}: {quant} ({ex}): {n_lin} linear calls, each {host_ns / 1e3:,.0f} us more host "
                         f"time and {gpu_extra / 1e3:,.1f} us more GPU time (torchao's measured dequantization "
                         f"paths), weights read at {quant}'s width")
    if c.graphs and ph == "decode" and not graphed_now:
        g = wc.fuse(proj) if c.fuse else proj
        if static is not None:
            g = _grow_non_gemm(g, static[0])
            ctx.notes.append(_static_note(ctx, ph, static, signed=False))
        gpu = float(g["dur_ns"].sum()) + len(g) * ctx.k.graph_gap_ns
        t_new = ctx.k.graph_host_ns + gpu
        lat = t_new
        if not c.no_profiler:
            ctx.notes.append("decode under CUDA graphs: the graph-launched step's host time is the one measured "
                             "without the profiler (the profiler adds little to a graph launch)")
        shown = g
    else:
        t_new = _replay(pstep, proj, s, p.launch_ns)
        if anchor is not None:
            lat = anchor + (t_new - t_base)
        else:  # the part of the latency outside the step (TTFT's set-up: host work) runs at the host's pace
            t_prof = t_base if s == 1.0 else _replay(step, base, 1.0, p.launch_ns)
            lat = max(base_lat - t_prof, 0.0) * s + t_new
        shown = proj
        if c.graphs and ph == "prefill" and not _graphed(p):
            lat += ctx.k.static_prefill_ns
            t_new += ctx.k.static_prefill_ns
    band = _band(ctx, step, base, proj, lat, t_new)
    measured = Times(measured_step.period_ns, measured_lat, _by_class(step.kernels))
    projected = Times(t_new, lat, _by_class(shown))
    return PhaseProjection(ph, measured, projected, band,
                           {"batch": new.batch, "q_len": new.q_len, "kv_len": new.kv_len, "tokens": new.tokens})


def _band(ctx: _Ctx, step: PhaseStep, base: pd.DataFrame, proj: pd.DataFrame, lat: float, t_new: float
          ) -> tuple[float, float]:
    """Relative uncertainty: the spread of what the change touches (see docs/whatif.md)."""
    c = ctx.change
    u = 0.03  # run-to-run spread of a step in the same process
    gpu_share = min(float(proj["dur_ns"].sum()) / max(t_new, 1.0), 1.0)
    if any(v is not None for v in (c.batch, c.input_tokens, c.output_tokens)):
        u += 0.10 * gpu_share + 0.03
    if c.gpu is not None:
        u += 0.10 * gpu_share + 0.05 * (1 - gpu_share)
    if c.graphs and step.phase == "decode":
        u += 0.15
    if c.quant not in (None, "none"):
        u += 0.30
    if c.no_profiler and not (c.use_run_timers and ctx.profile.unprofiled):
        u += 0.15
    return lat * (1 - u), lat * (1 + u)


def _assumptions(ctx: _Ctx) -> list[str]:
    c, p = ctx.change, ctx.profile
    out = ["one stream: kernels run in issue order; the host issues at its measured pace"]
    unmodelled = [s.kernels["flops"].isna() & s.kernels["bytes"].isna() for s in p.phases.values()]
    n_un = int(sum(int(m.sum()) for m in unmodelled))
    if n_un and (c.batch or c.input_tokens or c.output_tokens or c.gpu or c.quant):
        out.append(f"{n_un} kernels of the representative steps have no cost model: kept at their measured time")
    if any(v is not None for v in (c.batch, c.input_tokens, c.output_tokens)):
        out.append("cuBLAS / attention kernels keep their measured efficiency at the new shapes (a different "
                   "kernel choice at a new shape is not known); latency-bound kernels keep their measured time "
                   f"as a floor and reach {wc.ROOF_FRACTION:.0%} of the peaks at most; the host issues the same "
                   "ops at any batch")
    experts = p.model.get("num_experts") or p.model.get("num_local_experts") or p.model.get("n_routed_experts")
    if experts and any(v is not None for v in (c.batch, c.input_tokens, c.output_tokens)):
        out.append(f"a mixture of {experts} experts: eager expert loops touch more experts at a larger batch "
                   "(sequences route independently); fused MoE kernels, and every kernel at a new prompt or answer "
                   "length, read the experts' weights as traced (tokens of one sequence do not route "
                   "independently: a lower bound on weight bytes)")
    if c.gpu is not None:
        out.append(f"another GPU ({c.gpu}): compute- and memory-bound kernels scale by the ratio of the "
                   "ceilings; latency-bound kernels and launch latency stay as measured (same clocks assumed); "
                   "the host CPU and software stay the same")
    if c.graphs:
        if _graphed(p):
            out.append("the run's decode already runs under CUDA graphs: --graphs changes nothing there")
        else:
            out.append(f"decode under CUDA graphs: the step is its kernels back to back ({ctx.k.graph_gap_ns:,.0f} ns "
                       f"apart) plus {ctx.k.graph_host_ns / 1e6:.2f} ms of host time per step (generate's loop, "
                       "sampling, the launch; measured on tracekit's compiled runs)"
                       + ("; elementwise / reduction / copy chains fused into one kernel each lasting the "
                          "longest of the chain" if c.fuse else "")
                       + "; prefill stays eager (a compiled model replays graphs for fixed-shape decode only) "
                       f"and pays the static cache's measured {ctx.k.static_prefill_ns / 1e6:.2f} ms more")
    if c.no_profiler and not p.unprofiled:
        out.append("the run has no unprofiled timers: the profiler's cost from the per-op model")
    if not c.no_profiler:
        out.append("times are under the profiler, as the run was recorded (add --no-profiler for production times)")
    return out


def linear_calls(profile: Profile) -> int:
    """Linear GEMM calls in the representative decode step (0 where unknown)."""
    d = profile.phases.get("decode")
    return int(wc.linear_mask(d.kernels).sum()) if d is not None else 0
