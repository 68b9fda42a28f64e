"""Plots as PNGs, with matplotlib's Agg backend (no display needed).

A plot function returns PNG bytes, or None when its table has no data (never an empty axis); the
sweep's plots write their PNG file and return its path. The HTML run report draws the same charts
as SVG without matplotlib (tracekit.report.charts); these PNGs are for the API and notebooks.

Run report:
  phase_timeline_png  steps over time, coloured by kind, with each step's GPU busy share
  split_png           the split (compute / memory / other / idle-host) per phase
  phase_roofline_png  achieved FLOP/s against arithmetic intensity per phase, with the roofs implied
                      by the phases' % of peak (the ceiling the analysis used)
  roofline_png        one point per shape-modelled kernel against a Ceiling
  counters_png        NVML / GPM counters over time
  latency_png         TTFT, decode time and end-to-end per request
Sweep: make_sweep_plots (prefill share, TTFT/TPOT/throughput curves, KV bytes, agent loop, cost, split,
and the latency-throughput curve of the load study with each request's cost at each load).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracekit.model.ceilings import Ceiling
from tracekit.report.charts import (
    KIND_COLORS,
    PHASE_COLOURS,
    SPLIT,
    counter_panels,
    roofline_kernels,
    roofline_phases,
    split_shares,
    timeline_steps,
)
from tracekit.report.view import has_columns, implied_peak


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
    k = roofline_kernels(kernels, max_points)
    xs: list[Any] = [1e-2, 1e4]
    if len(k):
        achieved = k["flops"] / (k["dur_ns"] * 1e-9)
        # kernels outside every step have no phase (NaN; pandas 3 keeps it NaN through astype(str))
        phase = k["phase"].astype(object).fillna("outside steps").astype(str) if "phase" in k else pd.Series(
            "kernels", index=k.index)
        for ph in sorted(phase.unique()):
            m = (phase == ph).to_numpy()
            ax.scatter(k["intensity"][m], achieved[m], s=8, alpha=0.5, label=f"{ph} ({int(m.sum())})",
                       color=PHASE_COLOURS.get(ph))
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


# --- run report ---


# The colour each class has in every view (the Perfetto bound tracks use the same names).
CLASS_COLOURS = {label.split(":")[-1].strip().replace("-bound", ""): c for _, label, c in SPLIT}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def phase_timeline_png(steps: pd.DataFrame) -> bytes | None:
    spans_of = timeline_steps(steps)
    if spans_of is None:
        return None
    s, t0, kinds = spans_of
    plt = _plt()
    fig, ax = plt.subplots(figsize=(11, 2.6))
    for kind, grp in s.groupby(kinds):
        spans = [((a - t0) / 1e6, (b - a) / 1e6) for a, b in zip(grp["_s"], grp["_e"], strict=True)]
        ax.broken_barh(spans, (1, 0.8), color=KIND_COLORS.get(str(kind), "#8c564b"), label=str(kind))
        if "gpu_busy_ns" in grp:
            share = (grp["gpu_busy_ns"] / (grp["_e"] - grp["_s"]).where(lambda d: d > 0)).fillna(0).clip(0, 1)
            busy = [((a - t0) / 1e6, (b - a) / 1e6 * f) for a, b, f in zip(grp["_s"], grp["_e"], share, strict=True)]
            ax.broken_barh(busy, (0, 0.8), color=KIND_COLORS.get(str(kind), "#8c564b"), alpha=0.5)
    ax.set_yticks([0.4, 1.4], ["GPU busy share", "steps"])
    ax.set_xlabel("time since first step (ms)")
    ax.legend(loc="upper right", ncols=3, fontsize=8)
    ax.set_title("Phase timeline")
    return figure_png(fig)


def split_png(phases: pd.DataFrame) -> bytes | None:
    shares = split_shares(phases)
    if shares is None:
        return None
    labels, rows = shares
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.55 * len(labels)))
    left = [0.0] * len(labels)
    for col, label, color, vals in rows:
        ax.barh(labels, vals, left=left, color=color, label=label)
        for y, (x0, v) in enumerate(zip(left, vals, strict=True)):
            if v >= 6:
                ax.text(x0 + v / 2, y, f"{v:.0f}%", ha="center", va="center", fontsize=9,
                        color="black" if col.startswith("idle") or col in ("other_ns", "memcpy_ns") else "white")
        left = [a + b for a, b in zip(left, vals, strict=True)]
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of the phase's wall time")
    ax.invert_yaxis()
    if ax.get_legend_handles_labels()[0]:  # every class empty (no split recorded): no legend to draw
        ax.legend(fontsize=8, ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(labels) < 3 else -0.2))
    ax.set_title("Where each phase's time went: compute / memory / latency-bound kernels, GPU idle by cause")
    return figure_png(fig)


def phase_roofline_png(phases: pd.DataFrame) -> bytes | None:
    ph = roofline_phases(phases)
    if ph is None:
        return None
    ai = ph["flops"] / ph["bytes"]
    achieved = ph["flops"] / (ph["time_ns"] / 1e9) / 1e12
    peak_f = implied_peak(ph, "achieved_tflops", "pct_peak_flops")
    peak_b = implied_peak(ph, "achieved_tbps", "pct_peak_bandwidth")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    lo, hi = max(min(ai.min() / 4, 0.1), 1e-3), max(ai.max() * 4, 1e3)
    if peak_f and peak_b:
        xs = [lo * (hi / lo) ** (i / 100) for i in range(101)]
        ax.plot(xs, [min(peak_f, peak_b * x) for x in xs], color="black", lw=1.5,
                label=f"roof: {peak_f:.0f} TFLOP/s, {peak_b:.2f} TB/s")
        ax.axvline(peak_f / peak_b, color="grey", ls=":", lw=1)
    for (phase, x, y) in zip(ph["phase"].astype(str), ai, achieved, strict=True):
        ax.scatter([x], [y], s=60, color=KIND_COLORS.get(phase, "#8c564b"), label=phase, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved TFLOP/s (over the phase's wall time)")
    ax.set_title("Roofline" + ("" if peak_f and peak_b else " (ceiling not recorded)"))
    ax.legend(fontsize=8)
    return figure_png(fig)


def counters_png(counters: pd.DataFrame, steps: pd.DataFrame | None = None, max_panels: int = 6) -> bytes | None:
    got = counter_panels(counters, steps, max_panels)
    if got is None:
        return None
    c, labels, spans, t0 = got
    plt = _plt()
    fig, axes = plt.subplots(len(labels), 1, figsize=(11, 1.5 * len(labels) + 0.6), sharex=True, squeeze=False)
    shade = _step_shading(spans, t0)
    for ax, label in zip(axes[:, 0], labels, strict=True):
        g = c[c["label"] == label].sort_values("ts_ns")
        if shade is not None:
            shade(ax)
        ax.plot((g["ts_ns"] - t0) / 1e6, g["value"], lw=1.2, color="#333333", marker="." if len(g) < 30 else None)
        ax.set_ylabel(label, fontsize=8, rotation=0, ha="right", va="center")
    axes[-1, 0].set_xlabel("time since the first traced step (ms); shaded: steps (blue prefill, orange decode)"
                           if spans else "time since the first sample (ms)" + (
                               "; not aligned with the steps: the samples' clock does not overlap theirs"
                               if steps is not None and not steps.empty else ""))
    axes[0, 0].set_title("Counters over time")
    return figure_png(fig)


def _step_shading(spans: list[tuple[int, int, str]], t0: float) -> Any:
    """A function that shades every step span over an axes' full height: the pixels of one
    ``axvspan(x0, x1, color, alpha=0.15, lw=0)`` per span, drawn as one collection (a thousand
    steps are a thousand patches otherwise, each with its own transform and limit update)."""
    if not spans:
        return None
    from matplotlib.collections import PolyCollection

    x0 = np.array([(s0 - t0) / 1e6 for s0, _, _ in spans])
    x1 = np.array([(s1 - t0) / 1e6 for _, s1, _ in spans])
    x1 = x0 + (x1 - x0)  # axvspan's rectangle: its start plus its width
    verts = np.zeros((len(spans), 4, 2))
    verts[:, 0, 0] = verts[:, 3, 0] = x0
    verts[:, 1, 0] = verts[:, 2, 0] = x1
    verts[:, 2, 1] = verts[:, 3, 1] = 1.0
    colours = [KIND_COLORS.get(kind, "#8c564b") for _, _, kind in spans]
    limits = np.column_stack([np.concatenate([x0, x1]), np.zeros(2 * len(spans))])

    def shade(ax: Any) -> None:
        ax.add_collection(PolyCollection(list(verts), facecolors=colours, edgecolors=colours, alpha=0.15, linewidths=0,
                                         transform=ax.get_xaxis_transform()), autolim=False)
        ax.update_datalim(limits, updatey=False)  # as axvspan: the spans widen the x limits only

    return shade


def latency_png(requests: pd.DataFrame) -> bytes | None:
    if not has_columns(requests, "e2e_ns"):
        return None
    r = requests.dropna(subset=["e2e_ns"]).reset_index(drop=True)
    names = r["name"].astype(str) if "name" in r else r.index.astype(str)
    ttft = (r["ttft_ns"].fillna(0) if "ttft_ns" in r else pd.Series(0, index=r.index)) / 1e6
    rest = r["e2e_ns"] / 1e6 - ttft
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.4 * len(r)))
    ax.barh(names, ttft, color=KIND_COLORS["prefill"], label="TTFT")
    ax.barh(names, rest, left=ttft, color=KIND_COLORS["decode"], label="after first token")
    ax.set_xlabel("ms")
    ax.invert_yaxis()
    ax.legend(fontsize=8, ncols=2, loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(r) < 3 else -0.1))
    ax.set_title("Per-request latency")
    return figure_png(fig)


# --- sweep ---


def _ok(df: pd.DataFrame, **eq: Any) -> pd.DataFrame:
    m = df["status"] == "complete"
    for k, v in eq.items():
        m &= df[k] == v
    return df[m]


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def plot_prefill_share(s: pd.DataFrame, path: Path) -> Path | None:
    d = _ok(s, group="shapes")
    d = pd.concat([d, _ok(s, group="agent", agent_mode="resend")])
    if d.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    modes = sorted(d["mode"].unique())
    labels = list(dict.fromkeys(d["shape"]))
    w = 0.8 / len(modes)
    for i, mode in enumerate(modes):
        dm = d[d["mode"] == mode].set_index("shape")
        ys = [100 * float(dm["prefill_share"].get(lbl, float("nan"))) for lbl in labels]
        ax.bar([x + i * w for x in range(len(labels))], ys, width=w, label=mode)
    ax.set_xticks([x + w * (len(modes) - 1) / 2 for x in range(len(labels))], labels)
    ax.set_ylabel("prefill share of latency (%)")
    ax.set_title("Prefill share per request shape (batch 1)")
    ax.legend()
    return _save(fig, path)


def _line(s: pd.DataFrame, group: str, x: str, y: str, path: Path, title: str, xlabel: str, ylabel: str,
          logx: bool = False, scale: float = 1.0) -> Path | None:  # fmt: skip
    d = _ok(s, group=group)
    if d.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for mode, dm in d.groupby("mode"):
        dm = dm.sort_values(x)
        ax.plot(dm[x].astype(float), dm[y].astype(float) * scale, marker="o", label=str(mode))
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_asymmetry(s: pd.DataFrame, path: Path) -> Path | None:
    d = s[(s["status"] == "complete") & s["ms_per_input_token"].notna() & s["ms_per_output_token"].notna()]
    d = d[d["agent_mode"].isna()]
    if d.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.8))
    x = range(len(d))
    ax.bar([i - 0.2 for i in x], d["ms_per_input_token"], width=0.4, label="ms per input token (prefill)")
    ax.bar([i + 0.2 for i in x], d["ms_per_output_token"], width=0.4, label="ms per output token (decode)")
    ax.set_yscale("log")
    ax.set_xticks(list(x), d["point_id"], rotation=75, fontsize=6)
    ax.set_ylabel("ms per token (log)")
    ax.set_title("Read/write asymmetry: cost of an input token vs an output token")
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_kv(s: pd.DataFrame, path: Path) -> Path | None:
    d = s[s["status"] == "complete"]
    # dynamic cache (eager): its tensors are the formula
    dyn = d[d["prefill_transient_bytes_per_prompt_token"].notna()]
    cols = [
        (d, "kv_formula_bytes_per_token", "formula"),
        (dyn, "kv_cache_bytes_per_token", "cache tensors"),
        (dyn, "kv_allocated_bytes_per_token", "allocator growth\n/ cached token"),
        (dyn, "kv_peak_bytes_per_token", "peak growth\n/ cached token"),
        (dyn, "prefill_transient_bytes_per_prompt_token", "prefill transient\n/ prompt token"),
    ]
    vals = [(label, float(x[c].dropna().median())) for x, c, label in cols if x[c].notna().any()]
    if not vals:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar([v[0] for v in vals], [v[1] / 1e6 for v in vals])
    ax.set_ylabel("MB (median over dynamic-cache points)")
    ax.set_title("KV cache bytes per token: formula vs measured")
    ax.tick_params(axis="x", labelsize=7)
    return _save(fig, path)


def plot_agent(a: pd.DataFrame, path: Path) -> Path | None:
    if a.empty:
        return None
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    for (mode, am), d in a.groupby(["mode", "agent_mode"]):
        lbl = f"{am} ({mode})"
        ax1.plot(d["step"] + 1, d["cumulative_ms"], marker="o", label=lbl)
        ax2.plot(d["step"] + 1, d["prefilled_tokens"], marker="o", label=f"{lbl} prefilled")
        ax2.plot(d["step"] + 1, d["output_tokens"], linestyle="--", label=f"{lbl} output")
    ax1.set_xlabel("agent step")
    ax1.set_ylabel("cumulative latency (ms)")
    ax1.set_title("Agent loop: cumulative latency")
    ax2.set_xlabel("agent step")
    ax2.set_ylabel("tokens per sequence")
    ax2.set_title("Tokens per step")
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=7)
    return _save(fig, path)


def plot_cost(s: pd.DataFrame, path: Path) -> Path | None:
    d = s[(s["status"] == "complete") & s["cost_vs_chat"].notna() & s["group"].isin(["shapes", "agent"])]
    d = d[d["mode"] == "eager"] if (d["mode"] == "eager").any() else d
    if d.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar([str(x) if a is None or pd.isna(a) else f"agent {a}" for x, a in zip(d["shape"], d["agent_mode"], strict=False)],
           d["cost_vs_chat"])  # fmt: skip
    ax.axhline(1.0, color="grey", linestyle=":")
    ax.set_ylabel("cost / one chat request (128/128)")
    ax.set_title("Cost at API prices, relative to one chat request")
    ax.tick_params(axis="x", labelsize=8)
    return _save(fig, path)


def plot_split(s: pd.DataFrame, path: Path) -> Path | None:
    d = s[(s["status"] == "complete") & s["decode_idle_share"].notna()]
    d = d[d["group"].isin(["shapes", "batch"])]
    if d.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.8))
    labels: list[str] = []
    parts: dict[str, list[float]] = {k: [] for k in ("compute", "memory", "latency", "idle_host", "idle_wait",
                                                     "idle_profiler")}
    for _, r in d.iterrows():
        for ph in ("prefill", "decode"):
            labels.append(f"{r['shape']} b{r['batch']} {r['mode']} {ph}")
            for k in parts:
                parts[k].append(_num(r.get(f"{ph}_{k}_share")))
            if not any(_num(r.get(f"{ph}_{k}_share")) for k in ("idle_host", "idle_wait", "idle_profiler")):
                parts["idle_host"][-1] = _num(r[f"{ph}_idle_share"])  # a summary from before the idle split
    x = range(len(labels))
    bottom = [0.0] * len(labels)
    for k, label in (("compute", "compute-bound"), ("memory", "memory-bound"), ("latency", "latency-bound"),
                     ("idle_host", "idle: host issuing"), ("idle_wait", "idle: waiting"),
                     ("idle_profiler", "idle: profiler")):
        colour = CLASS_COLOURS.get(label.split(":")[-1].strip().replace("-bound", ""))
        ax.bar(x, parts[k], bottom=bottom, label=label, color=colour)
        bottom = [a + b for a, b in zip(bottom, parts[k], strict=True)]
    ax.set_xticks(list(x), labels, rotation=75, fontsize=6)
    ax.set_ylabel("share of phase time")
    ax.set_title("Where prefill and decode time went, by mode and batch")
    ax.legend(fontsize=7)
    return _save(fig, path)


def _num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if f != f else f


def plot_load(s: pd.DataFrame, path: Path) -> Path | None:
    """The latency-throughput curve: TTFT and TPOT p50 / p99 against output tokens/s, one line per mode and
    percentile, each point labelled with its arrival rate; and each request's cost at that load."""
    d = _ok(s, group="load")
    if d.empty or d["throughput_tok_s"].isna().all():
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for mode, dm in d.groupby("mode"):
        dm = dm.sort_values("throughput_tok_s")
        x = dm["throughput_tok_s"].astype(float)
        for ax, metric in ((axes[0], "ttft"), (axes[1], "tpot")):
            for q, style in (("p50", "-o"), ("p99", "--s")):
                ax.plot(x, dm[f"{metric}_{q}_ms"].astype(float), style, label=f"{mode} {q}")
            for xi, yi, r in zip(x, dm[f"{metric}_p99_ms"].astype(float), dm["rate_rps"], strict=True):
                ax.annotate("all" if pd.isna(r) else f"{float(r):g}/s", (xi, yi), fontsize=7,
                            textcoords="offset points", xytext=(3, 3))
        top = dm["rate_rps"].astype(float).max()
        rate = dm["rate_rps"].astype(float).fillna(2 * top if top == top and top > 0 else 1.0).sort_values()
        dm = dm.loc[rate.index]
        axes[2].plot(rate, dm["usd_per_request"].astype(float) * 1e6, "-o", label=f"{mode} µ$ (GPU time)")
        if dm["j_per_request"].notna().any():
            twin = axes[2].twinx()
            twin.plot(rate, dm["j_per_request"].astype(float), "--s", color="#d62728", label=f"{mode} J (NVML)")
            twin.set_ylabel("J per request")
            twin.legend(fontsize=7, loc="upper right")
    for ax, metric in ((axes[0], "TTFT"), (axes[1], "TPOT")):
        ax.set_xlabel("output tokens/s (all requests)")
        ax.set_ylabel(f"{metric} (ms)")
        ax.set_title(f"{metric} against throughput")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[2].set_xlabel("offered load (requests/s; rightmost: all at once)")
    axes[2].set_ylabel("µ$ per request (its share of the steps' time)")
    axes[2].legend(fontsize=7, loc="upper left")
    axes[2].set_title("Cost of one request at each load")
    axes[2].grid(alpha=0.3)
    return _save(fig, path)


PlotFn = Callable[[pd.DataFrame, Path], "Path | None"]


def base_quant(summary: pd.DataFrame) -> pd.DataFrame:
    """The rows of one quantization: ``none`` where present, else the first one listed."""
    if "quant" not in summary.columns or summary["quant"].nunique(dropna=True) <= 1:
        return summary
    q = summary["quant"].fillna("none")
    keep = "none" if (q == "none").any() else q.iloc[0]
    return summary[q == keep]


def plot_quant_tpot(summary: pd.DataFrame, path: Path) -> Path | None:
    """TPOT per point (shape, batch, mode) and quantization, grouped bars; None without two quantizations."""
    if "quant" not in summary.columns:
        return None
    s = summary[summary["tpot_ms"].notna() & (summary["group"] != "load")].copy()
    s["quant"] = s["quant"].fillna("none")
    if s["quant"].nunique() < 2:
        return None
    plt = _plt()
    s["label"] = s["shape"].astype(str) + " b" + s["batch"].astype(str) + " " + s["mode"].astype(str)
    labels = list(dict.fromkeys(s["label"]))
    quants = list(dict.fromkeys(s["quant"]))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(labels) * len(quants) / 2), 4))
    width = 0.8 / len(quants)
    for j, q in enumerate(quants):
        vals = s[s["quant"] == q].groupby("label")["tpot_ms"].median()
        ax.bar([i + j * width for i in range(len(labels))], [float(vals.get(lb, float("nan"))) for lb in labels],
               width, label=q)
    ax.set_xticks([i + width * (len(quants) - 1) / 2 for i in range(len(labels))], labels, rotation=20, fontsize=8)
    ax.set_ylabel("TPOT (ms)")
    ax.set_title("TPOT by quantization")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def make_sweep_plots(summary: pd.DataFrame, agent: pd.DataFrame, plots_dir: Path) -> dict[str, Path]:
    """Every plot the data allows; a study with no points yields no plot, never an empty one.

    With a quant dimension, the per-study plots draw the unquantized points (else the first
    quantization's); ``quant_tpot`` compares TPOT across quantizations."""
    s = base_quant(summary)
    try:
        _plt()
    except ImportError:  # a GPU box without matplotlib: tables and text still get written
        return {}
    made: dict[str, Path | None] = {
        "prefill_share": plot_prefill_share(s, plots_dir / "prefill_share.png"),
        "quant_tpot": plot_quant_tpot(summary, plots_dir / "quant_tpot.png"),
        "ttft_vs_prompt": _line(s, "prompt", "input_tokens", "ttft_ms", plots_dir / "ttft_vs_prompt.png",
                                "TTFT against prompt length", "prompt tokens", "TTFT (ms)", logx=True),
        "prefill_tps_vs_prompt": _line(s, "prompt", "input_tokens", "prefill_tok_s",
                                       plots_dir / "prefill_tps_vs_prompt.png", "Prefill throughput against prompt length",
                                       "prompt tokens", "prefill tok/s", logx=True),
        "tpot_vs_batch": _line(s, "batch", "batch", "tpot_ms", plots_dir / "tpot_vs_batch.png",
                               "TPOT against batch size", "batch", "TPOT (ms)", logx=True),
        "decode_tps_vs_batch": _line(s, "batch", "batch", "decode_tok_s", plots_dir / "decode_tps_vs_batch.png",
                                     "Decode throughput against batch size", "batch", "decode tok/s", logx=True),
        "tpot_vs_output": _line(s, "output", "output_tokens", "tpot_ms", plots_dir / "tpot_vs_output.png",
                                "TPOT against output length", "output tokens", "TPOT (ms)", logx=True),
        "read_write_asymmetry": plot_asymmetry(s, plots_dir / "read_write_asymmetry.png"),
        "kv_bytes_per_token": plot_kv(s, plots_dir / "kv_bytes_per_token.png"),
        "agent_loop": plot_agent(agent, plots_dir / "agent_loop.png"),
        "cost_vs_chat": plot_cost(s, plots_dir / "cost_vs_chat.png"),
        "three_way_split": plot_split(s, plots_dir / "three_way_split.png"),
        "latency_vs_throughput": plot_load(s, plots_dir / "latency_vs_throughput.png"),
    }  # fmt: skip
    return {k: v for k, v in made.items() if v is not None}
