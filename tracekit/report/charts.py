"""The report's charts as SVG (tracekit.report.svg), laid out without a plotting library: the HTML
report embeds them, the API and the notebook show them (IPython's ``SVG``).

Each function returns the SVG text, or None when its table has no data (never an empty axis):
  split_svg            the split (compute / memory / latency / other / idle by cause) per phase
  latency_svg          TTFT and the time after the first token per request
  phase_timeline_svg   steps over time, coloured by kind, with each step's GPU busy share
  counters_svg         NVML / GPM counters over time, the steps shaded behind them
  phase_roofline_svg   achieved FLOP/s against arithmetic intensity per phase, under the implied roofs
  roofline_svg         one dot per shape-modelled kernel against a Ceiling
Axis ranges have 5% margins (log axes: in decades); the colours here are every view's (one colour per
class), the sweep's charts (tracekit.report.sweep_charts) included.
"""

from __future__ import annotations

import pandas as pd

from tracekit.model.ceilings import Ceiling
from tracekit.report.svg import Axes, Figure, Scale, esc, num, padded, text_width
from tracekit.report.view import OUTSIDE, has_columns, implied_peak, run_phases, shown_phases

KIND_COLORS = {"prefill": "#1f77b4", "decode": "#ff7f0e", "mixed": "#9467bd"}
OTHER_KIND = "#8c564b"
PHASE_COLOURS = {"prefill": "#1f77b4", "decode": "#d62728", "mixed": "#2ca02c", "outside steps": "#7f7f7f"}
SPLIT = (("compute_bound_ns", "compute-bound", "#2ca02c"), ("memory_bound_ns", "memory-bound", "#d62728"),
         ("latency_bound_ns", "latency-bound", "#ff7f0e"),
         ("other_ns", "other", "#7f7f7f"), ("comm_ns", "comm", "#17becf"), ("memcpy_ns", "memcpy", "#bcbd22"),
         ("idle_host_ns", "idle: host issuing", "#dddddd"), ("idle_wait_ns", "idle: waiting", "#c5b0d5"),
         ("idle_before_window_ns", "idle: before the window", "#9edae5"),
         ("idle_profiler_ns", "idle: profiler", "#f7e1a0"))
CYCLE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
# What a performance engineer looks at first; anything else follows in table order.
COUNTER_PRIORITY = ("gpu_util", "dram_bw_util", "sm_util", "tensor_util", "power", "sm_clock", "mem_used",
                    "sm_occupancy", "mem_util", "temperature")
FONT = 13.0  # px: 10 pt at 96 dpi
# Every chart is drawn this wide and shown at the page's width (report CSS: img.plot width 100%), so the
# charts use the page and keep one text size.
WIDTH = 1200.0


def _legend_below(ax: Axes) -> float:
    return ax.legend_size()[1] + 10 if ax.legend and ax.legend_at == "below" else 0.0


def split_shares(phases: pd.DataFrame) -> tuple[list[str], list[tuple[str, str, str, list[float]]]] | None:
    """The phase split bar's rows: (one label per phase with its total, [(column, label, colour, % of each
    phase's wall time)] for each class with any time), or None without phase times. Shares, not ms: a
    40 ms prefill next to an 800 ms decode would be a sliver in ms; the question is what each phase's
    time went to."""
    ph = shown_phases(phases)
    if not has_columns(ph, "time_ns"):
        return None
    labels = [f"{p}  ({t / 1e6:,.1f} ms)" for p, t in zip(ph["phase"].astype(str), ph["time_ns"], strict=True)]
    ph = ph.copy()
    if "idle_host_ns" not in ph or ph["idle_host_ns"].isna().all():  # a table from before the idle split
        ph["idle_host_ns"] = ph.get("idle_ns")
    rows = []
    for col, label, colour in SPLIT:
        if col not in ph or ph[col] is None:
            continue
        vals = [100 * float(v) / float(t) if t else 0.0
                for v, t in zip(pd.to_numeric(ph[col], errors="coerce").fillna(0), ph["time_ns"], strict=True)]
        if any(vals):
            rows.append((col, label, colour, vals))
    return labels, rows


def share_label(v: float) -> str:
    return f"{v:.0f}%" if v >= 10 else f"{v:.1f}%"


def fits(ax: Axes, v: float, text: str) -> bool:
    """A segment of ``v`` % is wide enough (on ``ax``'s 0-100 x axis) to hold ``text`` inside."""
    return v > 0 and ax.w * v / 100 >= text_width(text, 12.0) + 6


def legend_label(label: str, vals: list[float]) -> str:
    """The class's legend entry with its share of each phase (top to bottom), so a segment too narrow for
    its label is still read off the chart."""
    return f"{label}: " + " / ".join(share_label(v) for v in vals)


def split_svg(phases: pd.DataFrame) -> str | None:
    shares = split_shares(phases)
    if shares is None:
        return None
    labels, rows = shares
    return share_bars(labels, rows, "Where each phase's time went: compute / memory / latency-bound kernels, "
                      "GPU idle by cause", "split")


# The CPU split's classes (tracekit.analysis.opclass) in the report's order and colours.
OP_CLASS_COLOURS = (("attention", "attention", "#1f77b4"), ("gemm", "GEMM", "#2ca02c"), ("norm", "norm", "#9467bd"),
                    ("elementwise", "elementwise", "#ff7f0e"), ("sampling", "sampling", "#e377c2"),
                    ("framework", "framework overhead", "#dddddd"))


def op_class_svg(split: pd.DataFrame) -> str | None:
    """A CPU run's split (op_class_split): one bar per phase, each operator class's % of the phase's time."""
    if not has_columns(split, "phase", "op_class", "time_ns"):
        return None
    df = split.assign(t=pd.to_numeric(split["time_ns"], errors="coerce").fillna(0.0))
    order = [p for p in ("prefill", "decode", "mixed", OUTSIDE) if p in set(df["phase"].astype(str))]
    order += sorted(set(df["phase"].astype(str)) - set(order))
    totals = df.groupby(df["phase"].astype(str))["t"].sum()
    order = [p for p in order if totals.get(p, 0) > 0]
    if not order:
        return None
    labels = [f"{p}  ({totals[p] / 1e6:,.1f} ms)" for p in order]
    by = df.groupby([df["phase"].astype(str), df["op_class"].astype(str)])["t"].sum()
    rows = []
    for key, label, colour in OP_CLASS_COLOURS:
        vals = [100 * float(by.get((p, key), 0.0)) / float(totals[p]) for p in order]
        if any(vals):
            rows.append((key, label, colour, vals))
    return share_bars(labels, rows, "Where each phase's time went on the CPU, by operator class", "op-class")


def share_bars(labels: list[str], rows: list[tuple[str, str, str, list[float]]], title: str, name: str) -> str:
    """Horizontal 100% bars, one per label; ``rows`` is (key, legend label, colour, % per bar) per class."""
    n = len(labels)
    left_w = max(text_width(s, FONT) for s in labels) + 16
    width, plot_h = WIDTH, max(70.0, 52.0 * n)
    ax = Axes(left_w, 36, width - left_w - 20, plot_h, Scale("lin", 0.0, 100.0), Scale("lin", n - 0.5, -0.5),
              title=title, xlabel="% of the phase's wall time", yticks=list(enumerate(labels)), legend_at="below",
              legend_cols=3)
    left = [0.0] * n
    for col, label, colour, vals in rows:
        body = ax.rects([(x0, x0 + v, y - 0.4, y + 0.4) for y, (x0, v) in enumerate(zip(left, vals, strict=True))],
                        colour, values=vals)
        ink = "#000000" if col.startswith("idle") or col in ("other_ns", "memcpy_ns", "framework") else "#ffffff"
        body += "".join(ax.text(x0 + v / 2, y, share_label(v), colour=ink) for y, (x0, v) in
                        enumerate(zip(left, vals, strict=True)) if fits(ax, v, share_label(v)))
        ax.series(label, body, column=col)
        ax.legend.append((legend_label(label, vals), colour, "rect"))
        left = [a + b for a, b in zip(left, vals, strict=True)]
    fig = Figure(width, 36 + plot_h + 2 * FONT + 24 + _legend_below(ax), [ax])
    return fig.svg(name)


def latency_svg(requests: pd.DataFrame) -> str | None:
    if not has_columns(requests, "e2e_ns"):
        return None
    r = requests.dropna(subset=["e2e_ns"]).reset_index(drop=True)
    names = [str(x) for x in (r["name"].astype(str) if "name" in r else r.index.astype(str))]
    ttft = ((r["ttft_ns"].fillna(0) if "ttft_ns" in r else pd.Series(0, index=r.index)) / 1e6).astype(float).tolist()
    rest = (r["e2e_ns"] / 1e6).astype(float).tolist()
    rest = [e - t for e, t in zip(rest, ttft, strict=True)]
    n = len(r)
    ends = [t + x for t, x in zip(ttft, rest, strict=True)]
    hi = max([0.0, *ends, *ttft])
    lo = min([0.0, *ttft, *ends])
    lo, hi = (lo, hi * 1.05 if hi > 0 else 1.0) if lo >= 0 else padded(lo, hi)
    left_w = max(text_width(s, FONT) for s in names) + 16
    width, plot_h = WIDTH, max(60.0, 38.0 * n)
    ax = Axes(left_w, 36, width - left_w - 20, plot_h, Scale("lin", lo, hi), Scale("lin", n - 0.5, -0.5),
              title="Per-request latency", xlabel="ms", yticks=list(enumerate(names)), legend_at="below",
              legend_cols=2)
    ax.series("TTFT", ax.rects([(0.0, t, y - 0.4, y + 0.4) for y, t in enumerate(ttft)], KIND_COLORS["prefill"],
                               values=ttft))
    ax.series("after first token", ax.rects([(t, t + x, y - 0.4, y + 0.4) for y, (t, x) in
                                             enumerate(zip(ttft, rest, strict=True))], KIND_COLORS["decode"], values=rest))
    ax.legend += [("TTFT", KIND_COLORS["prefill"], "rect"), ("after first token", KIND_COLORS["decode"], "rect")]
    return Figure(width, 36 + plot_h + 2 * FONT + 24 + _legend_below(ax), [ax]).svg("latency")


def timeline_steps(steps: pd.DataFrame) -> tuple[pd.DataFrame, float, pd.Series] | None:
    """The steps the phase timeline draws: (steps with their span in ``_s``/``_e``, ns: GPU where known,
    else host; the first start; each step's kind), or None without spans."""
    if not (has_columns(steps, "gpu_start_ns", "gpu_end_ns") or has_columns(steps, "cpu_start_ns", "cpu_end_ns")):
        return None
    s = steps.copy()
    start = s["gpu_start_ns"].fillna(s.get("cpu_start_ns")) if "gpu_start_ns" in s else s["cpu_start_ns"]
    end = s["gpu_end_ns"].fillna(s.get("cpu_end_ns")) if "gpu_end_ns" in s else s["cpu_end_ns"]
    s = s.assign(_s=start, _e=end).dropna(subset=["_s", "_e"])
    kinds = s["kind"].astype(str) if "kind" in s else pd.Series(["step"] * len(s), index=s.index)
    return s, s["_s"].min(), kinds


def phase_timeline_svg(steps: pd.DataFrame) -> str | None:
    spans_of = timeline_steps(steps)
    if spans_of is None:
        return None
    s, t0, kinds = spans_of
    groups = []
    for kind, grp in s.groupby(kinds):
        spans = [((a - t0) / 1e6, (b - a) / 1e6) for a, b in zip(grp["_s"], grp["_e"], strict=True)]
        busy = None
        if "gpu_busy_ns" in grp:
            share = (grp["gpu_busy_ns"] / (grp["_e"] - grp["_s"]).where(lambda d: d > 0)).fillna(0).clip(0, 1)
            busy = [((a - t0) / 1e6, (b - a) / 1e6 * f) for a, b, f in zip(grp["_s"], grp["_e"], share, strict=True)]
        groups.append((str(kind), spans, busy))
    xs = [x for _, spans, busy in groups for sp in (spans, busy or []) for a, w in sp for x in (a, a + w)]
    lo, hi = padded(min(xs), max(xs)) if xs else (0.0, 1.0)
    width, plot_h = WIDTH, 150.0
    left_w = text_width("GPU busy share", FONT) + 16
    ax = Axes(left_w, 36, width - left_w - 20, plot_h, Scale("lin", lo, hi), Scale("lin", -0.09, 1.89),
              title="Phase timeline", xlabel="time since first step (ms)",
              yticks=[(0.4, "GPU busy share"), (1.4, "steps")], legend_at="below", legend_cols=3)
    for kind, spans, busy in groups:
        colour = KIND_COLORS.get(kind, OTHER_KIND)
        body = ax.rects([(a, a + w, 1.0, 1.8) for a, w in spans], colour, values=[w for _, w in spans])
        if busy is not None:
            body += ax.rects([(a, a + w, 0.0, 0.8) for a, w in busy], colour, alpha=0.5, values=[w for _, w in busy])
        ax.series(kind, body)
        ax.legend.append((kind, colour, "rect"))
    return Figure(width, 36 + plot_h + 2 * FONT + 26 + _legend_below(ax), [ax]).svg("timeline")


def counter_panels(counters: pd.DataFrame, steps: pd.DataFrame | None = None,
                   max_panels: int = 6) -> tuple[pd.DataFrame, list[str], list[tuple[int, int, str]], float] | None:
    """What the counters chart draws: the samples with their series label, the labels shown (varying
    series first, in COUNTER_PRIORITY order), the step spans on the samples' clock (none when the
    samples never overlap a step: another clock) and the time origin."""
    if not has_columns(counters, "ts_ns", "value", "metric"):
        return None
    c = counters.dropna(subset=["ts_ns", "value"]).copy()
    # Real tables dictionary-encode these columns (pandas categories): build the
    # labels from plain Python strings rather than with Series arithmetic.
    src = c["source"].astype(object).tolist() if "source" in c else [None] * len(c)
    unit = c["unit"].astype(object).tolist() if "unit" in c else [None] * len(c)
    dev = c["device"].astype(object).tolist() if "device" in c else [None] * len(c)
    c["label"] = [
        (f"GPU {int(d)} " if d is not None and not pd.isna(d) else "")
        + (f"{s_}." if isinstance(s_, str) and s_ else "") + str(m) + (f" ({u})" if isinstance(u, str) and u else "")
        for d, s_, m, u in zip(dev, src, c["metric"].astype(object).tolist(), unit, strict=True)
    ]
    # Constant series (clock limits, fp64 at 0) carry no information over time.
    varying = c.groupby("label", sort=False)["value"].agg(lambda v: v.max() > v.min())
    rank = {m: i for i, m in enumerate(COUNTER_PRIORITY)}
    first = c.drop_duplicates("label").set_index("label")["metric"].astype(str)
    labels = sorted(first.index, key=lambda lab: (not varying.get(lab, False), rank.get(first[lab], len(rank))))
    labels = labels[:max_panels]
    spans = step_spans(steps)
    aligned = bool(spans) and min(a for a, _, _ in spans) <= int(c["ts_ns"].max()) and \
        max(b for _, b, _ in spans) >= int(c["ts_ns"].min())
    # Samples that never overlap a step are on another clock (e.g. a recorder's
    # Kineto-relative ns against an ingest's epoch ns): plotting them on the
    # steps' axis would put them a lifetime away, so they get their own axis.
    if not aligned:
        spans = []
    t0 = float(min(s for s, _, _ in spans) if spans else c["ts_ns"].min())
    return c, labels, spans, t0


def step_spans(steps: pd.DataFrame | None) -> list[tuple[int, int, str]]:
    """Each step's (start, end, kind): its GPU span where recorded, else its CPU span."""
    if steps is None or steps.empty:
        return []
    out = []
    for r in steps.to_dict("records"):
        for a, b in (("gpu_start_ns", "gpu_end_ns"), ("cpu_start_ns", "cpu_end_ns")):
            s0, s1 = r.get(a), r.get(b)
            if s0 is not None and s1 is not None and not pd.isna(s0) and not pd.isna(s1):
                out.append((int(s0), int(s1), str(r.get("kind"))))
                break
    return out


def counters_svg(counters: pd.DataFrame, steps: pd.DataFrame | None = None, max_panels: int = 6) -> str | None:
    got = counter_panels(counters, steps, max_panels)
    if got is None:
        return None
    c, labels, spans, t0 = got
    series = []
    for label in labels:
        g = c[c["label"] == label].sort_values("ts_ns")
        series.append((label, ((g["ts_ns"] - t0) / 1e6).astype(float).tolist(), g["value"].astype(float).tolist()))
    shade = [((s0 - t0) / 1e6, (s1 - t0) / 1e6, KIND_COLORS.get(kind, OTHER_KIND)) for s0, s1, kind in spans]
    xs = [x for _, t, _ in series for x in t] + [x for a, b, _ in shade for x in (a, b)]
    xlo, xhi = padded(min(xs), max(xs))
    width, panel_h, gap = WIDTH, 110.0, 14.0
    axes = [Axes(0, 36 + i * (panel_h + gap), width, panel_h, Scale("lin", xlo, xhi), Scale("lin", *padded(min(v), max(v))),
                 ylabel=label, ylabel_horizontal=True, xticks=i == len(series) - 1)
            for i, (label, _, v) in enumerate(series)]
    # the labels sit left of the widest tick labels, as a right-aligned column
    left_w = max(text_width(lab, FONT - 2) for lab in labels) + max(ax.ytick_width() for ax in axes) + 30
    for ax, (label, t, v) in zip(axes, series, strict=True):
        ax.place(left_w, width - left_w - 20)
        if shade:
            ax.marks.append(ax.vspans(shade, 0.15))
        ax.series(label, ax.line(t, v, "#333333", 1.2, dots=2.0 if len(t) < 30 else 0.0))
    axes[0].title = "Counters over time"
    axes[-1].xlabel = ("time since the first traced step (ms); shaded: steps (blue prefill, orange decode)"
                       if spans else "time since the first sample (ms)" + (
                           "; not aligned with the steps: the samples' clock does not overlap theirs"
                           if steps is not None and not steps.empty else ""))
    height = 36 + len(series) * (panel_h + gap) - gap + 2 * FONT + 26
    return Figure(width, height, axes).svg("counters")


def roofline_phases(phases: pd.DataFrame) -> pd.DataFrame | None:
    """The run-level phases the phase roofline draws (FLOPs, bytes and time all finite and > 0; not ``outside``),
    or None where there is none."""
    ph = run_phases(phases)
    if not has_columns(ph, "flops", "bytes", "time_ns"):
        return None
    ph = ph[ph["phase"].astype(str) != OUTSIDE]  # time outside every step is no phase
    vals = ph[["flops", "bytes", "time_ns"]].astype(float)
    ph = ph[((vals > 0) & (vals < float("inf"))).all(axis=1)]  # a log scale needs finite values above 0
    return None if ph.empty else ph


def phase_roofline_svg(phases: pd.DataFrame) -> str | None:
    ph = roofline_phases(phases)
    if ph is None:
        return None
    ai = (ph["flops"] / ph["bytes"]).astype(float).tolist()
    achieved = (ph["flops"] / (ph["time_ns"] / 1e9) / 1e12).astype(float).tolist()
    peak_f = implied_peak(ph, "achieved_tflops", "pct_peak_flops")
    peak_b = implied_peak(ph, "achieved_tbps", "pct_peak_bandwidth")
    lo, hi = max(min(min(ai) / 4, 0.1), 1e-3), max(max(ai) * 4, 1e3)
    xs_all, ys_all = list(ai), list(achieved)
    roof: tuple[list[float], list[float]] | None = None
    if peak_f and peak_b:
        ridge = peak_f / peak_b
        rx = [lo, *([ridge] if lo < ridge < hi else []), hi]
        roof = (rx, [min(peak_f, peak_b * x) for x in rx])
        xs_all += rx
        ys_all += roof[1]
    xlo, xhi = padded(min(xs_all), max(xs_all), "log")
    ylo, yhi = padded(min(ys_all), max(ys_all), "log")
    width, height = WIDTH, 560.0
    ax = Axes(80, 36, width - 100, height - 36 - 2 * FONT - 30, Scale("log", xlo, xhi), Scale("log", ylo, yhi),
              title="Roofline" + ("" if peak_f and peak_b else " (ceiling not recorded)"),
              xlabel="arithmetic intensity (FLOP / byte)", ylabel="achieved TFLOP/s (over the phase's wall time)",
              legend_at="lower right")
    if roof is not None and peak_f and peak_b:
        label = f"roof: {peak_f:.0f} TFLOP/s, {peak_b:.2f} TB/s"
        ax.series(label, ax.line(roof[0], roof[1], "#000000", 1.5) + ax.vline(peak_f / peak_b, "grey", "1.5 2.5"),
                  ridge=repr(peak_f / peak_b))
        ax.legend.append((label, "#000000", "line"))
    for phase, x, y in zip(ph["phase"].astype(str), ai, achieved, strict=True):
        colour = KIND_COLORS.get(phase, OTHER_KIND)
        ax.series(phase, ax.dots([x], [y], colour, 5.0))
        ax.legend.append((phase, colour, "dot"))
    return Figure(width, height, [ax]).svg("phase-roofline")


def roofline_kernels(kernels: pd.DataFrame, max_points: int) -> pd.DataFrame:
    """The kernels a roofline plots: shape-modelled, with FLOPs, a duration and an intensity; a seeded
    sample of ``max_points`` of them where there are more (a readable chart, a small file)."""
    k = kernels
    if len(k):
        k = k[(k.get("model") == "shape") & (k["flops"] > 0) & (k["dur_ns"] > 0) & k["intensity"].notna()]
    return k.sample(max_points, random_state=0) if len(k) > max_points else k


def roofline_svg(kernels: pd.DataFrame, ceiling: Ceiling, *, title: str | None = None, max_points: int = 20000) -> str:
    """A roofline with one dot per shape-modelled kernel, coloured by phase (all one series without a
    ``phase`` column), under the ceiling's roofs (one per distinct peak, fp8 to fp32).

    ``kernels``: bound.kernel_costs/with_steps output with ``intensity``, ``flops``, ``dur_ns``."""
    k = roofline_kernels(kernels, max_points)
    xs: list[float] = [1e-2, 1e4]
    groups: list[tuple[str, str, list[float], list[float]]] = []
    if len(k):
        achieved = k["flops"] / (k["dur_ns"] * 1e-9) / 1e12  # TFLOP/s
        # kernels outside every step have no phase (NaN; pandas 3 keeps it NaN through astype(str))
        phase = k["phase"].astype(object).fillna("outside steps").astype(str) if "phase" in k else pd.Series(
            "kernels", index=k.index)
        spare = iter(CYCLE)
        for ph in sorted(phase.unique()):
            m = (phase == ph).to_numpy()
            colour = PHASE_COLOURS.get(ph) or next(spare)
            groups.append((f"{ph} ({int(m.sum())})", colour, k["intensity"][m].astype(float).tolist(),
                           achieved[m].astype(float).tolist()))
        xs = [min(1e-2, float(k["intensity"].min()) / 2), max(1e4, float(k["intensity"].max()) * 2)]
    bw = ceiling.peak_bytes_per_s
    roofs = []
    seen: set[float] = set()
    for d in (d for d in ("fp8", "fp16", "bf16", "tf32", "fp32") if ceiling.flops(d)):
        peak = ceiling.flops(d) or 0.0
        if peak in seen:
            continue
        seen.add(peak)
        ridge = peak / bw
        rx = [xs[0], *([ridge] if xs[0] < ridge < xs[1] else []), xs[1]]
        roofs.append((f"{d} roof ({peak / 1e12:.0f} TFLOP/s, ridge {peak / bw:.0f})", rx,
                      [min(peak, x * bw) / 1e12 for x in rx]))
    all_x = [x for _, _, gx, _ in groups for x in gx] + [x for _, rx, _ in roofs for x in rx] + xs
    all_y = [y for _, _, _, gy in groups for y in gy] + [y for _, _, ry in roofs for y in ry]
    all_y = [y for y in all_y if y > 0] or [1.0]
    xlo, xhi = padded(min(all_x), max(all_x), "log")
    ylo, yhi = padded(min(all_y), max(all_y), "log")
    width, height = WIDTH, 680.0
    ax = Axes(80, 36, width - 100, height - 36 - 2 * FONT - 44, Scale("log", xlo, xhi), Scale("log", ylo, yhi),
              title=title or f"Roofline: {ceiling.gpu}, {bw / 1e12:.2f} TB/s ({ceiling.kind})",
              xlabel="arithmetic intensity (FLOP/byte)", ylabel="achieved TFLOP/s", grid=True,
              legend_at="lower right", font=FONT)
    for label, colour, gx, gy in groups:
        ax.series(label, ax.dots(gx, gy, colour, 3.0, alpha=0.5))
        ax.legend.append((label, colour, "dot"))
    for i, (label, rx, ry) in enumerate(roofs):
        ax.series(label, ax.line(rx, ry, CYCLE[i % len(CYCLE)], 1.2))
        ax.legend.append((label, CYCLE[i % len(CYCLE)], "line"))
    note = f"ceiling: {ceiling.source}"[:160]
    fig = Figure(width, height, [ax], [f'<text x="8" y="{num(height - 6)}" font-size="9" fill="#555555">'
                                       f'{esc(note)}</text>'])
    return fig.svg("roofline")
