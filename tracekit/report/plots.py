"""Roofline chart: kernels of each phase on log axes against the ceiling. Returns PNG bytes; callers write them.

x: arithmetic intensity (FLOP/byte, from the op models); y: achieved FLOP/s
(the kernel's modelled FLOPs over its duration). The roof is min(peak FLOP/s,
intensity × peak bytes/s) for each dtype present; the ridge point is where they meet.
matplotlib's Agg backend: no display needed, nothing global changed.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pandas as pd

from tracekit.model.ceilings import Ceiling

_PHASE_COLOURS = {"prefill": "#1f77b4", "decode": "#d62728", "mixed": "#2ca02c", "outside steps": "#7f7f7f"}


def roofline_png(kernels: pd.DataFrame, ceiling: Ceiling, *, title: str | None = None, max_points: int = 20000) -> bytes:
    """PNG of a roofline with one point per shape-modelled kernel, coloured by phase.

    ``kernels``: bound.kernel_costs/with_steps output with ``intensity``, ``flops``,
    ``dur_ns`` and optionally ``phase`` (else all points are one series).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    k = kernels
    if len(k):
        k = k[(k.get("model") == "shape") & (k["flops"] > 0) & (k["dur_ns"] > 0) & k["intensity"].notna()]
    if len(k) > max_points:  # keep the chart readable and the PNG small
        k = k.sample(max_points, random_state=0)
    xs: list[Any] = [1e-2, 1e4]
    if len(k):
        achieved = k["flops"] / (k["dur_ns"] * 1e-9)
        # kernels outside every step have no phase (NaN; pandas 3 keeps it NaN through astype(str))
        phase = k["phase"].astype(object).fillna("outside steps").astype(str) if "phase" in k else pd.Series(
            "kernels", index=k.index)
        for ph in sorted(phase.unique()):
            m = (phase == ph).to_numpy()
            ax.scatter(k["intensity"][m], achieved[m], s=8, alpha=0.5, label=f"{ph} ({int(m.sum())})",
                       color=_PHASE_COLOURS.get(ph))
        xs = [min(1e-2, float(k["intensity"].min()) / 2), max(1e4, float(k["intensity"].max()) * 2)]
    x = np.logspace(np.log10(xs[0]), np.log10(xs[1]), 200)
    bw = ceiling.peak_bytes_per_s
    dtypes = [d for d in ("fp8", "fp16", "bf16", "tf32", "fp32") if ceiling.flops(d)]
    seen: set[float] = set()
    for d in dtypes:
        peak = ceiling.flops(d) or 0.0
        if peak in seen:
            continue
        seen.add(peak)
        ax.plot(x, np.minimum(peak, x * bw), lw=1.2, label=f"{d} roof ({peak / 1e12:.0f} TFLOP/s, ridge {peak / bw:.0f})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(title or f"Roofline: {ceiling.gpu}, {bw / 1e12:.2f} TB/s ({ceiling.kind})", fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=7, loc="lower right")
    fig.text(0.01, 0.005, f"ceiling: {ceiling.source}"[:160], fontsize=6, color="#555")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
