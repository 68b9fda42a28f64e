"""The what-if constants measured on runs (pure): the profiler's cost per CPU op, and the host time and
node gap of a graph-launched decode step.

``calibrate(profiles)`` returns tracekit.analysis.whatif_constants.Constants with every constant it can
measure on ``profiles`` replaced (the others kept): the median over the runs of

- profiler_ns_per_op and profiler_ns_per_launch: the non-negative least-squares fit of (the profiled
  latency - the run's unprofiled timer) = a x CPU ops + b x kernel launches of the representative step,
  over runs with both (prefill: the trace's TTFT, decode: the representative step's period vs TPOT)
  whose step is host-bound with and without the profiler (kernels busy under ``HOST_BOUND`` of the
  profiled period and of the unprofiled latency: where the GPU sets the pace, the profiler's host cost
  hides under it and the difference understates it). Where the runs'
  ops-per-launch ratios span less than ``SPREAD`` (one model's op mix), the two terms cannot be told
  apart: only a common scale of ``base``'s pair is fitted (the host's speed), its mix kept;
- graph_host_ns: unprofiled TPOT - the decode step's GPU time (kernels + graph gaps), over runs whose
  decode launches CUDA graphs;
- graph_gap_ns: the median gap between consecutive kernels of one graph replay;
- static_prefill_ns: compiled TTFT - eager TTFT over pairs of runs of one model, GPU and workload;
- static_decode_ns_per_byte: over compiled runs of one model and GPU at two or more batches (their static
  cache's length known), the slope of the decode step's non-GEMM GPU time against the bytes attention
  reads over the cache (tracekit.analysis.whatif_cost.static_cache_bytes), fewest to most sequences.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from tracekit.analysis.whatif_constants import DEFAULT, Constants
from tracekit.analysis.whatif_cost import static_cache_bytes, text
from tracekit.analysis.whatif_profile import Profile

HOST_BOUND = 0.4  # a step whose kernels are busy under this fraction of its time is host-bound
SPREAD = 2.0  # the ops-per-launch ratios must span this factor for the two-term fit


def profiler_costs(profiles: Iterable[Profile]) -> list[tuple[int, int, float]]:
    """Per run and host-bound phase with both timers: (CPU ops, kernel launches, the profiler's extra ns)."""
    out = []
    for p in profiles:
        for ph, key in (("prefill", "ttft_ns"), ("decode", "tpot_ns")):
            s = p.phases.get(ph)
            own = p.unprofiled.get(key)
            prof = p.profiled.get(key) if ph == "prefill" else (s.period_ns if s is not None else None)
            if s is None or own is None or prof is None or s.cpu_ops < 50:
                continue
            if float(s.kernels["dur_ns"].sum()) >= HOST_BOUND * min(s.period_ns, own):
                continue
            out.append((s.cpu_ops, s.launches, max(prof - own, 0.0)))
    return out


def fit_profiler(rows: list[tuple[int, int, float]]) -> tuple[float, float] | None:
    """(ns per op, ns per launch): non-negative least squares of extra = a ops + b launches."""
    if len(rows) < 2:
        return None
    x = np.array([[o, n] for o, n, _ in rows], dtype=float)
    y = np.array([e for _, _, e in rows], dtype=float)
    best: tuple[float, float, float] | None = None
    for cols in ((0, 1), (0,), (1,)):  # the full fit, else one term alone where a coefficient goes negative
        coef, *_ = np.linalg.lstsq(x[:, cols], y, rcond=None)
        if (coef < 0).any():
            continue
        ab = [0.0, 0.0]
        for c, v in zip(cols, coef, strict=True):
            ab[c] = float(v)
        err = float(((x @ np.array(ab) - y) ** 2).sum())
        if best is None or err < best[2]:
            best = (ab[0], ab[1], err)
    return (best[0], best[1]) if best is not None else None


def fit_profiler_scaled(rows: list[tuple[int, int, float]], a0: float, b0: float) -> tuple[float, float] | None:
    """(ns per op, ns per launch): the two-term fit where the rows' op mixes differ enough, else
    ``(k a0, k b0)`` with k the least-squares scale (see the module doc)."""
    if not rows:
        return None
    ratio = [o / max(n, 1) for o, n, _ in rows]
    if len(rows) >= 2 and max(ratio) >= SPREAD * max(min(ratio), 1e-9):
        fit = fit_profiler(rows)
        if fit is not None:
            return fit
    x = np.array([a0 * o + b0 * n for o, n, _ in rows], dtype=float)
    y = np.array([e for _, _, e in rows], dtype=float)
    if float(x @ x) <= 0:
        return None
    k = max(float(x @ y / (x @ x)), 0.0)
    return (k * a0, k * b0)


def graph_steps(profiles: Iterable[Profile]) -> list[tuple[float, float]]:
    """Per run whose decode launches CUDA graphs: (host ns outside the GPU work, median graph gap ns)."""
    out = []
    for p in profiles:
        s = p.phases.get("decode")
        own = p.unprofiled.get("tpot_ns")
        if s is None or own is None or not s.graph_launches:
            continue
        k = s.kernels
        g = k[k["graph"]]
        gaps = g["gap_ns"].to_numpy(dtype=float)[1:]
        gap = float(np.median(gaps)) if len(gaps) else DEFAULT.graph_gap_ns
        gpu = float(k["dur_ns"].sum()) + len(g) * gap
        out.append((own - gpu, gap))
    return out


def _key(p: Profile) -> tuple[object, ...]:
    m = p.model
    return (p.gpu, m.get("hidden_size"), m.get("num_hidden_layers"), m.get("num_experts"), p.batch,
            p.input_tokens, p.output_tokens, p.quant)


def static_prefill(profiles: Iterable[Profile]) -> list[float]:
    """Compiled TTFT - eager TTFT of runs alike but for the mode (unprofiled timers)."""
    ps = [p for p in profiles if p.unprofiled.get("ttft_ns") is not None]
    eager = {_key(p): p.unprofiled["ttft_ns"] for p in ps if p.mode == "eager"}
    return [p.unprofiled["ttft_ns"] - eager[_key(p)] for p in ps if p.mode == "compiled" and _key(p) in eager]


def static_decode(profiles: Iterable[Profile]) -> list[float]:
    """Per model and GPU with compiled runs at two or more batches: ns of non-GEMM decode GPU time per
    byte of static_cache_bytes, from the fewest sequences to the most."""
    groups: dict[tuple[object, ...], dict[float, list[float]]] = {}
    for p in profiles:
        s = p.phases.get("decode")
        if p.mode != "compiled" or s is None or not s.graph_launches or not p.cache_len or not p.batch:
            continue
        x = static_cache_bytes(p.model, p.batch, p.cache_len)
        if x is None:
            continue
        k = s.kernels
        key = (p.gpu, tuple(sorted((str(a), str(b)) for a, b in p.model.items())))
        non_gemm = text(k, "kclass") != "gemm"
        groups.setdefault(key, {}).setdefault(x, []).append(float(k.loc[non_gemm, "dur_ns"].sum()))
    out = []
    for by_x in groups.values():
        if len(by_x) < 2:
            continue
        x0, x1 = min(by_x), max(by_x)
        out.append(max((float(np.median(by_x[x1])) - float(np.median(by_x[x0]))) / (x1 - x0), 0.0))
    return out


def calibrate(profiles: Iterable[Profile], base: Constants = DEFAULT) -> Constants:
    """``base`` with the constants ``profiles`` measure replaced (see the module doc)."""
    ps = list(profiles)
    c = base
    fit = fit_profiler_scaled(profiler_costs(ps), base.profiler_ns_per_op, base.profiler_ns_per_launch)
    if fit is not None:
        c = replace(c, profiler_ns_per_op=fit[0], profiler_ns_per_launch=fit[1])
    graphs = graph_steps(ps)
    if graphs:
        c = replace(c, graph_host_ns=float(np.median([h for h, _ in graphs])),
                    graph_gap_ns=float(np.median([g for _, g in graphs])))
    pre = static_prefill(ps)
    if pre:
        c = replace(c, static_prefill_ns=float(np.median(pre)))
    dec = static_decode(ps)
    if dec:
        c = replace(c, static_decode_ns_per_byte=float(np.median(dec)))
    return c
