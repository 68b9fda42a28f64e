"""The sweep's charts as SVG files (tracekit.report.svg, the report's one chart stack).

``make_sweep_charts`` writes every chart the summary allows into a folder and returns their paths; a
study with no complete points yields no chart, never an empty one. Categories (shapes, points) are
rows of horizontal bars, so long labels need no rotation; curves are lines with a dot per point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from tracekit.report.charts import CYCLE, FONT, SPLIT, WIDTH
from tracekit.report.svg import Axes, Figure, Scale, padded, text_width
from tracekit.store.rundir import atomic_open

Series = tuple[str, list[float]]  # (legend label, one value per category; NaN: none)
Line = tuple[str, list[float], list[float]]  # (legend label, xs, ys)


def _ok(df: pd.DataFrame, **eq: Any) -> pd.DataFrame:
    m = df["status"] == "complete"
    for k, v in eq.items():
        m &= df[k] == v
    return df[m]


def _num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if f != f else f


def _finite(vals: Sequence[float]) -> list[float]:
    return [v for v in vals if isinstance(v, int | float) and math.isfinite(v)]


def _save(svg: str, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path) as fh:
        fh.write(svg)
    return path


def hbars(labels: list[str], series: list[Series], title: str, xlabel: str, name: str, *, log: bool = False,
          stacked: bool = False, ref: float | None = None, colours: Sequence[str] = CYCLE) -> str | None:
    """Horizontal bars, one row per label: side by side per series, or ``stacked``; None without a value."""
    vals = _finite([v for _, vs in series for v in vs])
    if not labels or not vals or (log and not [v for v in vals if v > 0]):
        return None
    n, k = len(labels), len(series)
    if stacked:
        ends = [sum(_num(vs[i]) for _, vs in series) for i in range(n)]
        lo, hi = 0.0, max([*ends, 1e-12]) * 1.05
    elif log:
        pos = [v for v in vals if v > 0]
        lo, hi = padded(min(pos), max(pos), "log")
    else:
        lo, hi = min(0.0, *vals), max(0.0, *vals, ref or 0.0) * 1.05 or 1.0
    left_w = max(text_width(s, FONT) for s in labels) + 16
    row = 22.0 if stacked or k == 1 else 14.0 * k + 8
    plot_h = max(70.0, row * n)
    ax = Axes(left_w, 36, WIDTH - left_w - 20, plot_h, Scale("log" if log else "lin", lo, hi),
              Scale("lin", n - 0.5, -0.5), title=title, xlabel=xlabel, yticks=list(enumerate(labels)),
              legend_at="below", legend_cols=3, grid=True)
    base = lo if log else 0.0
    left = [0.0] * n
    for j, (label, vs) in enumerate(series):
        colour = colours[j % len(colours)]
        if stacked:
            spans = [(left[i], left[i] + _num(v), i - 0.4, i + 0.4) for i, v in enumerate(vs)]
            left = [a + _num(v) for a, v in zip(left, vs, strict=True)]
        else:
            h = 0.8 / k
            spans = [(base, v, i - 0.4 + j * h, i - 0.4 + (j + 1) * h) for i, v in enumerate(vs)
                     if isinstance(v, int | float) and math.isfinite(v) and (v > 0 or not log)]
        ax.series(label, ax.rects(spans, colour, values=[s[1] - s[0] if stacked else s[1] for s in spans]))
        if k > 1 or stacked:
            ax.legend.append((label, colour, "rect"))
    if ref is not None:
        ax.marks.append(ax.vline(ref, "#7f7f7f", dash="3 3"))
    legend = ax.legend_size()[1] + 10 if ax.legend else 0.0
    return Figure(WIDTH, 36 + plot_h + 2 * FONT + 24 + legend, [ax]).svg(name)


def lines(panels: list[tuple[str, str, str, list[Line]]], name: str, *,
          logx: bool = False, labels: list[list[tuple[float, float, str]]] | None = None) -> str | None:
    """Side-by-side panels of (title, xlabel, ylabel, [(label, xs, ys)]): a line with dots per series."""
    drawn = [(t, xl, yl, [s for s in ss if _finite(s[1]) and _finite(s[2])]) for t, xl, yl, ss in panels]
    drawn = [p for p in drawn if p[3]]
    if not drawn:
        return None
    gap, h = 90.0, 300.0
    w = (WIDTH - 20 - gap * len(drawn)) / len(drawn)
    axes = []
    for i, (title, xlabel, ylabel, ss) in enumerate(drawn):
        xs = [x for s in ss for x in _finite(s[1]) if not logx or x > 0]
        ys = _finite([y for s in ss for y in s[2]])
        kind = "log" if logx and xs else "lin"
        x_lo, x_hi = padded(min(xs), max(xs), kind)
        y_lo, y_hi = padded(min(0.0, *ys), max(ys))
        ax = Axes(gap * (i + 1) + w * i, 36, w, h, Scale(kind, x_lo, x_hi), Scale("lin", y_lo, y_hi), title=title,
                  xlabel=xlabel, ylabel=ylabel, grid=True, legend_at="below", legend_cols=2)
        for j, (label, sx, sy) in enumerate(ss):
            colour = CYCLE[j % len(CYCLE)]
            ax.series(label, ax.line(sx, sy, colour, dots=3.0, dash="5 3" if "p99" in label else ""))
            ax.legend.append((label, colour, "line"))
        for x, y, text in (labels[i] if labels and i < len(labels) else []):
            if math.isfinite(x) and math.isfinite(y):
                ax.marks.append(ax.text(x, y, text, size=FONT - 3, anchor="start"))
        axes.append(ax)
    legend = max(ax.legend_size()[1] for ax in axes) + 10
    return Figure(WIDTH, 36 + h + 2 * FONT + 24 + legend, axes).svg(name)


# --- the sweep's charts -------------------------------------------------------------------------


def prefill_share(s: pd.DataFrame) -> str | None:
    d = pd.concat([_ok(s, group="shapes"), _ok(s, group="agent", agent_mode="resend")])
    if d.empty:
        return None
    labels = [str(x) for x in dict.fromkeys(d["shape"])]
    series = []
    for mode in sorted(d["mode"].unique()):
        dm = d[d["mode"] == mode].drop_duplicates("shape").set_index("shape")["prefill_share"]
        series.append((str(mode), [100 * _num(dm.get(lbl, float("nan"))) if lbl in dm.index else float("nan")
                                   for lbl in labels]))
    return hbars(labels, series, "Prefill share per request shape (batch 1)", "prefill share of latency (%)",
                 "prefill_share")


def curve(s: pd.DataFrame, group: str, x: str, y: str, title: str, xlabel: str, ylabel: str, name: str) -> str | None:
    d = _ok(s, group=group)
    if d.empty:
        return None
    ss = [(str(mode), dm.sort_values(x)[x].astype(float).tolist(), dm.sort_values(x)[y].astype(float).tolist())
          for mode, dm in d.groupby("mode")]
    return lines([(title, xlabel, ylabel, ss)], name, logx=True)


def asymmetry(s: pd.DataFrame) -> str | None:
    d = s[(s["status"] == "complete") & s["ms_per_input_token"].notna() & s["ms_per_output_token"].notna()]
    d = d[d["agent_mode"].isna()]
    if d.empty:
        return None
    return hbars([str(p) for p in d["point_id"]],
                 [("ms per input token (prefill)", d["ms_per_input_token"].astype(float).tolist()),
                  ("ms per output token (decode)", d["ms_per_output_token"].astype(float).tolist())],
                 "Read/write asymmetry: cost of an input token vs an output token", "ms per token (log)",
                 "read_write_asymmetry", log=True)


def kv_bytes(s: pd.DataFrame) -> str | None:
    d = s[s["status"] == "complete"]
    dyn = d[d["prefill_transient_bytes_per_prompt_token"].notna()]  # dynamic cache (eager): its tensors are the formula
    cols = [(d, "kv_formula_bytes_per_token", "formula"), (dyn, "kv_cache_bytes_per_token", "cache tensors"),
            (dyn, "kv_allocated_bytes_per_token", "allocator growth / cached token"),
            (dyn, "kv_peak_bytes_per_token", "peak growth / cached token"),
            (dyn, "prefill_transient_bytes_per_prompt_token", "prefill transient / prompt token")]
    vals = [(label, float(x[c].dropna().median())) for x, c, label in cols if x[c].notna().any()]
    if not vals:
        return None
    return hbars([v[0] for v in vals], [("MB", [v[1] / 1e6 for v in vals])],
                 "KV cache bytes per token: formula vs measured", "MB (median over dynamic-cache points)",
                 "kv_bytes_per_token")


def agent_loop(a: pd.DataFrame) -> str | None:
    if a.empty:
        return None
    cum, tok = [], []
    for (mode, am), d in a.groupby(["mode", "agent_mode"]):
        step = (d["step"] + 1).astype(float).tolist()
        cum.append((f"{am} ({mode})", step, d["cumulative_ms"].astype(float).tolist()))
        tok.append((f"{am} ({mode}) prefilled", step, d["prefilled_tokens"].astype(float).tolist()))
        tok.append((f"{am} ({mode}) output", step, d["output_tokens"].astype(float).tolist()))
    return lines([("Agent loop: cumulative latency", "agent step", "cumulative latency (ms)", cum),
                  ("Tokens per step", "agent step", "tokens per sequence", tok)], "agent_loop")


def cost_vs_chat(s: pd.DataFrame) -> str | None:
    d = s[(s["status"] == "complete") & s["cost_vs_chat"].notna() & s["group"].isin(["shapes", "agent"])]
    d = d[d["mode"] == "eager"] if (d["mode"] == "eager").any() else d
    if d.empty:
        return None
    labels = [str(x) if a is None or pd.isna(a) else f"agent {a}" for x, a in zip(d["shape"], d["agent_mode"], strict=True)]
    return hbars(labels, [("cost", d["cost_vs_chat"].astype(float).tolist())],
                 "Cost at API prices, relative to one chat request", "cost / one chat request (128/128)",
                 "cost_vs_chat", ref=1.0)


def three_way_split(s: pd.DataFrame) -> str | None:
    d = s[(s["status"] == "complete") & s["decode_idle_share"].notna()]
    d = d[d["group"].isin(["shapes", "batch"])]
    if d.empty:
        return None
    keys = ("compute", "memory", "latency", "idle_host", "idle_wait", "idle_profiler")
    labels: list[str] = []
    parts: dict[str, list[float]] = {k: [] for k in keys}
    for _, r in d.iterrows():
        for ph in ("prefill", "decode"):
            labels.append(f"{r['shape']} b{r['batch']} {r['mode']} {ph}")
            for k in keys:
                parts[k].append(_num(r.get(f"{ph}_{k}_share")))
            if not any(_num(r.get(f"{ph}_{k}_share")) for k in ("idle_host", "idle_wait", "idle_profiler")):
                parts["idle_host"][-1] = _num(r[f"{ph}_idle_share"])  # a summary from before the idle split
    colour = {label: c for _, label, c in SPLIT}
    named = (("compute", "compute-bound"), ("memory", "memory-bound"), ("latency", "latency-bound"),
             ("idle_host", "idle: host issuing"), ("idle_wait", "idle: waiting"), ("idle_profiler", "idle: profiler"))
    return hbars(labels, [(label, parts[k]) for k, label in named],
                 "Where prefill and decode time went, by mode and batch", "share of phase time",
                 "three_way_split", stacked=True, colours=[colour[label] for _, label in named])


def load_curve(s: pd.DataFrame) -> str | None:
    """The latency-throughput curve: TTFT and TPOT p50 / p99 against output tokens/s per mode, each p99
    point labelled with its arrival rate; and each request's cost (and energy) at each load."""
    d = _ok(s, group="load")
    if d.empty or d["throughput_tok_s"].isna().all():
        return None
    ttft: list[Line] = []
    tpot: list[Line] = []
    cost: list[Line] = []
    energy: list[Line] = []
    notes: list[list[tuple[float, float, str]]] = [[], [], [], []]
    for mode, dm in d.groupby("mode"):
        dm = dm.sort_values("throughput_tok_s")
        x = dm["throughput_tok_s"].astype(float).tolist()
        for i, (out, metric) in enumerate(((ttft, "ttft"), (tpot, "tpot"))):
            for q in ("p50", "p99"):
                out.append((f"{mode} {q}", x, dm[f"{metric}_{q}_ms"].astype(float).tolist()))
            notes[i] += [(xi, float(yi), "all" if pd.isna(r) else f"{float(r):g}/s")
                         for xi, yi, r in zip(x, dm[f"{metric}_p99_ms"], dm["rate_rps"], strict=True)]
        top = dm["rate_rps"].astype(float).max()
        rate = dm["rate_rps"].astype(float).fillna(2 * top if top == top and top > 0 else 1.0).sort_values()
        dm = dm.loc[rate.index]
        cost.append((f"{mode} µ$ (GPU time)", rate.tolist(), (dm["usd_per_request"].astype(float) * 1e6).tolist()))
        if dm["j_per_request"].notna().any():
            energy.append((f"{mode} J (NVML)", rate.tolist(), dm["j_per_request"].astype(float).tolist()))
    panels = [("TTFT against throughput", "output tokens/s (all requests)", "TTFT (ms)", ttft),
              ("TPOT against throughput", "output tokens/s (all requests)", "TPOT (ms)", tpot),
              ("Cost of one request at each load", "offered load (requests/s; rightmost: all at once)",
               "µ$ per request (its share of the steps' time)", cost),
              ("Energy of one request at each load", "offered load (requests/s)", "J per request", energy)]
    keep = [i for i, p in enumerate(panels) if p[3]]
    return lines([panels[i] for i in keep], "latency_vs_throughput", labels=[notes[i] for i in keep])


def base_quant(summary: pd.DataFrame) -> pd.DataFrame:
    """The rows of one quantization: ``none`` where present, else the first one listed."""
    if "quant" not in summary.columns or summary["quant"].nunique(dropna=True) <= 1:
        return summary
    q = summary["quant"].fillna("none")
    keep = "none" if (q == "none").any() else q.iloc[0]
    return summary[q == keep]


def quant_tpot(summary: pd.DataFrame) -> str | None:
    """TPOT per point (shape, batch, mode) and quantization, grouped bars; None without two quantizations."""
    if "quant" not in summary.columns:
        return None
    s = summary[summary["tpot_ms"].notna() & (summary["group"] != "load")].copy()
    s["quant"] = s["quant"].fillna("none")
    if s["quant"].nunique() < 2:
        return None
    s["label"] = s["shape"].astype(str) + " b" + s["batch"].astype(str) + " " + s["mode"].astype(str)
    labels = [str(x) for x in dict.fromkeys(s["label"])]
    series = []
    for q in dict.fromkeys(s["quant"]):
        vals = s[s["quant"] == q].groupby("label")["tpot_ms"].median()
        series.append((str(q), [float(vals.get(lb, float("nan"))) for lb in labels]))
    return hbars(labels, series, "TPOT by quantization", "TPOT (ms)", "quant_tpot")


def make_sweep_charts(summary: pd.DataFrame, agent: pd.DataFrame, charts_dir: Path) -> dict[str, Path]:
    """Every chart the data allows, as ``charts_dir/<name>.svg``.

    With a quant dimension, the per-study charts draw the unquantized points (else the first
    quantization's); ``quant_tpot`` compares TPOT across quantizations."""
    s = base_quant(summary)
    made: dict[str, str | None] = {
        "prefill_share": prefill_share(s),
        "quant_tpot": quant_tpot(summary),
        "ttft_vs_prompt": curve(s, "prompt", "input_tokens", "ttft_ms", "TTFT against prompt length", "prompt tokens",
                                "TTFT (ms)", "ttft_vs_prompt"),
        "prefill_tps_vs_prompt": curve(s, "prompt", "input_tokens", "prefill_tok_s",
                                       "Prefill throughput against prompt length", "prompt tokens", "prefill tok/s",
                                       "prefill_tps_vs_prompt"),
        "tpot_vs_batch": curve(s, "batch", "batch", "tpot_ms", "TPOT against batch size", "batch", "TPOT (ms)",
                               "tpot_vs_batch"),
        "decode_tps_vs_batch": curve(s, "batch", "batch", "decode_tok_s", "Decode throughput against batch size",
                                     "batch", "decode tok/s", "decode_tps_vs_batch"),
        "tpot_vs_output": curve(s, "output", "output_tokens", "tpot_ms", "TPOT against output length",
                                "output tokens", "TPOT (ms)", "tpot_vs_output"),
        "read_write_asymmetry": asymmetry(s),
        "kv_bytes_per_token": kv_bytes(s),
        "agent_loop": agent_loop(agent),
        "cost_vs_chat": cost_vs_chat(s),
        "three_way_split": three_way_split(s),
        "latency_vs_throughput": load_curve(s),
    }
    return {k: _save(v, charts_dir / f"{k}.svg") for k, v in made.items() if v is not None}
