"""More sequences route to more experts: an eager MoE layer's expert loop re-sized for a batch (pure).

An eager mixture-of-experts layer that loops over the experts its tokens were routed to (Transformers'
eager experts, Mixtral- and Qwen-MoE-style) launches kernels per touched expert. Found in a step's
kernels by the model config (E experts, top-k, hidden size H, expert intermediate size I):

- an expert GEMM multiplies rows by an H x I or H x 2I weight (F / (2 M) = its elements);
- a layer's loop is a run of expert GEMMs with no other GEMM between them (the router's and the
  attention's GEMMs separate layers); each weight shape's rows sum to a whole multiple m of the
  step's tokens x top-k (m calls of it per expert), so the loop touched h = calls / m experts;
- the loop's per-expert kernels are its expert GEMMs and every other kernel kind that it issues a
  whole multiple of h times (a per-expert gather, activation or scatter); the rest run once per layer.

Sequences route independently of each other: an expert that none of the trace's b sequences touched
stays untouched by b' sequences with probability u^(b'/b), u = 1 - h / E, so a layer touches
h' = E (1 - u^(b'/b)) experts. ``reroute`` appends h' - h experts' kernels to each loop (the traced
experts' kernels in turn), each expert adding ``block_host_ns`` of host time (everything issued
after the loop moves later by it), and marks the per-expert kernels with ``route`` = h / h': the
factor by which their rows per call differ from the token scale (the same tokens x top-k rows spread
over more experts). Tokens inside one sequence are not independent (a longer prompt is not a larger
batch), so a change of prompt or answer length keeps the touched experts as traced.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis.whatif_cost import text
from tracekit.analysis.whatif_profile import PhaseStep

SHAPE_TOLERANCE = 0.02  # a GEMM's weight elements within 2% of an expert's
ROWS_TOLERANCE = 0.15  # a loop's first-shape rows within 15% of tokens x top-k


@dataclass(frozen=True)
class Experts:
    """A model's routed experts: how many, how many per token, and the GEMM weight sizes (elements)."""

    experts: int
    top_k: int
    weights: tuple[float, ...]


@dataclass(frozen=True)
class Loop:
    """One layer's expert loop in a step: its per-expert kernels by kind, experts touched, extent."""

    families: tuple[tuple[int, tuple[int, ...]], ...]  # (calls per expert, kernel rows in issue order)
    touched: int
    first: int  # kernel row of the loop's first expert GEMM
    last: int  # kernel row of its last expert GEMM

    @property
    def per_expert(self) -> np.ndarray:
        return np.array(sorted(i for _, rows in self.families for i in rows), dtype=int)


def experts_of(model: Mapping[str, Any]) -> Experts | None:
    """The routed experts of a model config, or None where it has none (or lacks a size)."""
    e = _int(model, "num_experts", "num_local_experts", "n_routed_experts")
    k = _int(model, "num_experts_per_tok", "moe_topk", "top_k")
    h = _int(model, "hidden_size")
    i = _int(model, "moe_intermediate_size") or _int(model, "intermediate_size")
    if not (e and e > 1 and k and h and i):
        return None
    return Experts(e, min(k, e), (float(h * i), float(2 * h * i)))


def loops(k: pd.DataFrame, ex: Experts, tokens: int) -> list[Loop]:
    """The expert loops of a step's kernels (see the module doc); empty where it has none."""
    gemm = text(k, "kclass") == "gemm"
    rows = k["rows"].to_numpy(dtype=float)
    flops = k["flops"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(gemm & (rows > 0), flops / (2 * rows), np.nan)
    shape = np.full(len(k), -1)
    for j, size in enumerate(ex.weights):
        shape[np.isfinite(w) & (np.abs(w / size - 1) < SHAPE_TOLERANCE)] = j
    kind = np.char.add(np.char.add(text(k, "op_name"), "|"), text(k, "kclass"))
    out: list[Loop] = []
    run: list[int] = []
    for pos in [*np.flatnonzero(gemm), len(k)]:
        if pos < len(k) and shape[pos] >= 0:
            run.append(int(pos))
            continue
        if run:
            loop = _loop(run, shape, rows, kind, ex, tokens)
            if loop is not None:
                out.append(loop)
            run = []
    return out


def touched(h: int, experts: int, units: float) -> int:
    """Experts touched by ``units`` times the traced sequences, h of ``experts`` touched in the trace."""
    if h >= experts or units <= 1:
        return h
    u = 1.0 - h / experts
    return max(h, min(experts, round(experts * (1.0 - u ** units))))


def reroute(step: PhaseStep, ex: Experts, units: float) -> tuple[PhaseStep, list[tuple[int, int]]]:
    """``step`` with each expert loop grown to the experts ``units`` times the sequences touch, its
    per-expert kernels marked with ``route`` (see the module doc), and (h, h') per loop."""
    k = step.kernels.reset_index(drop=True)
    found = loops(k, ex, step.tokens)
    if not found:
        return step, []
    off = k["off_ns"].to_numpy(dtype=float)
    per = block_host_ns(found, off)
    route = np.ones(len(k))
    shift = np.zeros(len(k))
    added: list[pd.DataFrame] = []
    inserted: list[tuple[float, float]] = []  # (measured offset of a loop's last GEMM, host time after it)
    sizes: list[tuple[int, int]] = []
    cum = 0.0
    for lp in found:
        h = lp.touched
        h2 = touched(h, ex.experts, units)
        sizes.append((h, h2))
        shift[lp.first:] = cum
        route[lp.per_expert] = h / h2
        end = off[lp.last] + cum
        for n in range(h2 - h):
            j = n % h
            rows = sorted(r for m, fam in lp.families for r in fam[j * m:(j + 1) * m])
            blk = k.iloc[rows]
            rel = (blk["off_ns"] - blk["off_ns"].min()).clip(upper=per * 0.9) if per > 0 else blk["off_ns"] * 0
            added.append(blk.assign(off_ns=end + n * per + per * 0.05 + rel, route=h / h2, _seq=lp.last + 0.5))
        t = (h2 - h) * per
        inserted.append((off[lp.last], t))
        cum += t
        shift[lp.last + 1:] = cum
    base = k.assign(off_ns=off + shift, route=route, _seq=np.arange(len(k), dtype=float))
    out = pd.concat([base, *added], ignore_index=True).sort_values(["_seq", "off_ns"], kind="stable")
    out = out.drop(columns="_seq").reset_index(drop=True)

    def moved(x: float) -> float:
        return x + sum(t for a, t in inserted if x > a)

    syncs = tuple((moved(a), moved(b)) for a, b in step.syncs)
    grown = replace(step, kernels=out, syncs=syncs, period_ns=step.period_ns + cum,
                    launches=step.launches + len(out) - len(k))
    return grown, sizes


def block_host_ns(found: list[Loop], off: np.ndarray) -> float:
    """Host time one more touched expert adds to a loop: the slope of the loops' spans (first expert
    GEMM's issue to the last's) over their touched experts, where the step's loops touched different
    numbers (a loop that walks every expert spends host time on the untouched ones too, which the
    slope leaves out); else a loop's span per touched expert (an upper bound). Never negative."""
    h = np.array([lp.touched for lp in found], dtype=float)
    span = np.array([off[lp.last] - off[lp.first] for lp in found])
    if len(found) >= 3 and h.max() - h.min() >= max(3.0, 0.1 * h.max()):
        return max(float(np.polyfit(h, span, 1)[0]), 0.0)
    return float(np.median(span / np.maximum(h, 1.0)))


def _loop(run: list[int], shape: np.ndarray, rows: np.ndarray, kind: np.ndarray, ex: Experts,
          tokens: int) -> Loop | None:
    """A run of expert GEMMs as a Loop, or None where its rows are not tokens x top-k per expert."""
    want = tokens * ex.top_k
    if want <= 0:
        return None
    fams: list[tuple[int, tuple[int, ...]]] = []
    hs: set[int] = set()
    for s in sorted(set(shape[run].tolist())):
        calls = [p for p in run if shape[p] == s]
        m = float(rows[calls].sum()) / want
        per = round(m)
        if per < 1 or abs(m / per - 1) > ROWS_TOLERANCE or len(calls) % per:
            return None
        fams.append((per, tuple(calls)))
        hs.add(len(calls) // per)
    if len(hs) != 1:
        return None
    h = hs.pop()
    first, last = run[0], run[-1]
    if h > ex.experts or h < 1:
        return None
    if h > 1:  # other kernel kinds the loop issues a whole multiple of h times run per expert
        inside = np.arange(first, last + 1)
        inside = inside[shape[inside] < 0]
        for kd in sorted(set(kind[inside].tolist())):
            at = tuple(int(p) for p in inside[kind[inside] == kd])
            if len(at) % h == 0:
                fams.append((len(at) // h, at))
    return Loop(tuple(fams), h, first, last)


def _int(d: Mapping[str, Any], *names: str) -> int | None:
    for n in names:
        v = d.get(n)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            return int(v)
    return None
