"""The self-contained HTML report: one file, inline CSS, plots as PNG data URIs.

Nothing is fetched when the file is opened (no CDN, no fonts, no scripts from
elsewhere), so it can be mailed or attached to a ticket. matplotlib draws on
the Agg backend (no display). Every section copes with its table being absent
or empty: it says "not recorded" instead of drawing an empty axis.

Plots (each one function returning PNG bytes, or None when there is no data):
  phase_timeline_png  steps over time, coloured by kind, with each step's GPU busy share
  split_png           the three-way split (compute / memory / other / idle-host) per phase
  roofline_png        achieved FLOP/s against arithmetic intensity per phase, with the
                      roofs implied by the phases' % of peak (the ceiling the analysis used)
  counters_png        NVML / GPM counters over time
  latency_png         TTFT, decode time and end-to-end per request

The roofline helper's tracekit.report.plots is not used: it did not exist when this was
written; ``roofline_png`` here is a small, self-contained stand-in.
"""

from __future__ import annotations

import base64
import html
import io
import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

KIND_COLORS = {"prefill": "#1f77b4", "decode": "#ff7f0e", "mixed": "#9467bd"}
SPLIT = (("compute_bound_ns", "compute-bound", "#2ca02c"), ("memory_bound_ns", "memory-bound", "#d62728"),
         ("other_ns", "other", "#7f7f7f"), ("comm_ns", "comm", "#17becf"), ("memcpy_ns", "memcpy", "#bcbd22"),
         ("idle_ns", "idle (host-bound)", "#dddddd"))
NOT_RECORDED = "not recorded"


@dataclass
class RunView:
    """What the report needs from one run: its id, manifest and tables (absent ones empty)."""

    run_id: str
    manifest: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    def df(self, name: str) -> pd.DataFrame:
        return self.tables.get(name, pd.DataFrame())


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


def _has(df: pd.DataFrame, *cols: str) -> bool:
    return not df.empty and all(c in df and df[c].notna().any() for c in cols)


def run_phases(phases: pd.DataFrame) -> pd.DataFrame:
    """The whole-run rows of the phases table (request_id null), else all rows."""
    if phases.empty or "phase" not in phases:
        return pd.DataFrame()
    if "request_id" in phases and phases["request_id"].isna().any():
        return phases[phases["request_id"].isna()].reset_index(drop=True)
    return phases.reset_index(drop=True)


def shown_phases(phases: pd.DataFrame) -> pd.DataFrame:
    """Whole-run phase rows that hold time (the empty "outside" row is noise in a summary)."""
    ph = run_phases(phases)
    if ph.empty or "time_ns" not in ph:
        return ph
    return ph[ph["time_ns"].fillna(0) > 0].reset_index(drop=True)


# Where a phase's time can go (they add up to the phase's wall time), and how a
# summary names the one that dominates.
LIMITERS = (("idle_ns", "the host: GPU idle (Python, kernel launches, sync)"),
            ("memory_bound_ns", "memory bandwidth: memory-bound kernels"),
            ("compute_bound_ns", "compute: compute-bound kernels"),
            ("other_ns", "kernels without a cost model"),
            ("comm_ns", "communication"), ("memcpy_ns", "memcpy"))
SHORT_LIMITER = {"idle_ns": "host (GPU idle)", "memory_bound_ns": "memory BW", "compute_bound_ns": "compute",
                 "other_ns": "unmodelled kernels", "comm_ns": "communication", "memcpy_ns": "memcpy"}


def _f(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def limiter(r: dict[Any, Any]) -> tuple[str, float] | None:
    """The column that holds most of the phase's time and its share of it."""
    t = _f(r.get("time_ns"))
    if not t:
        return None
    best = max(((c, _f(r.get(c)) or 0.0) for c, _ in LIMITERS), key=lambda cv: cv[1])
    return (best[0], best[1] / t) if best[1] > 0 else None


@dataclass(frozen=True)
class CeilingInfo:
    name: str | None
    dtype: str | None
    tflops: float | None
    tbps: float | None

    def text(self) -> str:
        if not (self.name or self.tflops or self.tbps):
            return f"ceiling: {NOT_RECORDED}"
        peaks = ", ".join(x for x in (f"{self.tflops:,.0f} TFLOP/s" if self.tflops else "",
                                      f"{self.tbps:.2f} TB/s" if self.tbps else "") if x)
        ridge = f", ridge {self.tflops / self.tbps:.0f} FLOP/byte" if self.tflops and self.tbps else ""
        dtype = f" {self.dtype}" if self.dtype else ""
        return f"ceiling: {self.name or 'unnamed'}{dtype}: {peaks}{ridge}"


def ceiling_of(phases: pd.DataFrame) -> CeilingInfo:
    """The ceiling the bound pass used: its name from the table, its peaks implied by achieved / % of peak."""
    ph = run_phases(phases)
    if ph.empty:
        return CeilingInfo(None, None, None, None)

    def first(col: str) -> str | None:
        if col not in ph:
            return None
        vals = ph[col].dropna()
        return str(vals.iloc[0]) if len(vals) else None

    return CeilingInfo(first("ceiling"), first("ceiling_dtype"), _implied_peak(ph, "achieved_tflops", "pct_peak_flops"),
                       _implied_peak(ph, "achieved_tbps", "pct_peak_bandwidth"))


def workload_text(m: dict[str, Any]) -> str:
    """One line: what ran, on what (from run.json's workload, model and environment)."""
    w, model, env = m.get("workload") or {}, m.get("model") or {}, m.get("environment") or {}
    if not isinstance(w, dict):
        w = {}
    if not isinstance(model, dict):
        model = {"preset": model}
    parts = []
    name = w.get("model") or model.get("preset")
    if name:
        params = model.get("parameters")
        extra = ", ".join(str(x) for x in (model.get("model_type"),
                                           f"{params / 1e9:.2f} B params" if isinstance(params, int | float) else None,
                                           f"{model['weights']} weights" if model.get("weights") else None) if x)
        parts.append(f"{name} ({extra})" if extra else str(name))
    for key, fmt in (("dtype", "{}"), ("shape", "shape {}"), ("batch", "batch {}"), ("requests", "{} request(s)")):
        if w.get(key) is not None:
            parts.append(fmt.format(w[key]))
    if w.get("input_tokens") is not None:
        parts.append(f"{w['input_tokens']} in / {w.get('output_tokens', '?')} out tokens")
    for key, fmt in (("gpu", "{}"), ("driver", "driver {}"), ("torch", "torch {}"), ("transformers", "transformers {}")):
        if isinstance(env, dict) and env.get(key):
            parts.append(fmt.format(env[key]))
    return " · ".join(parts) if parts else "workload: not recorded"


def verdicts(phases: pd.DataFrame) -> list[str]:
    """One sentence per phase: what limited it, and how close the GPU got to the ceiling while busy."""
    out = []
    for r in shown_phases(phases).to_dict("records"):
        t, n = _f(r.get("time_ns")), _f(r.get("steps"))
        head = f"{r.get('phase')}: {int(n) if n is not None else '?'} step(s), {t / 1e6:,.1f} ms" if t else str(r.get("phase"))
        if t and n and n > 1:
            head += f" ({t / n / 1e6:,.2f} ms per step)"
        lim = limiter(r)
        if lim is None:
            out.append(head + "; split not recorded")
            continue
        col, share = lim
        text = f"{head}. Limited by {dict(LIMITERS)[col]}, {100 * share:.0f}% of the time"
        busy = _f(r.get("gpu_busy_ns"))
        cb, mb = _f(r.get("compute_bound_ns")), _f(r.get("memory_bound_ns"))
        if busy:
            bits = []
            if mb is not None and cb is not None:
                bits.append(f"memory-bound {100 * mb / busy:.0f}%, compute-bound {100 * cb / busy:.0f}% of it")
            tb, ptb = _f(r.get("achieved_tbps")), _f(r.get("pct_peak_bandwidth"))
            tf, ptf = _f(r.get("achieved_tflops")), _f(r.get("pct_peak_flops"))
            if tb is not None and ptb is not None:
                bits.append(f"{tb:.2f} TB/s = {ptb:.0f}% of peak bandwidth")
            if tf is not None and ptf is not None:
                bits.append(f"{tf:,.1f} TFLOP/s = {ptf:.1f}% of peak compute")
            text += f". GPU busy {100 * busy / t:.0f}% of the time" + (": " + "; ".join(bits) if bits else "") if t else ""
        out.append(text)
    return out


# --- plots ------------------------------------------------------------------


def phase_timeline_png(steps: pd.DataFrame) -> bytes | None:
    if not (_has(steps, "gpu_start_ns", "gpu_end_ns") or _has(steps, "cpu_start_ns", "cpu_end_ns")):
        return None
    s = steps.copy()
    start = s["gpu_start_ns"].fillna(s.get("cpu_start_ns")) if "gpu_start_ns" in s else s["cpu_start_ns"]
    end = s["gpu_end_ns"].fillna(s.get("cpu_end_ns")) if "gpu_end_ns" in s else s["cpu_end_ns"]
    s = s.assign(_s=start, _e=end).dropna(subset=["_s", "_e"])
    t0 = s["_s"].min()
    plt = _plt()
    fig, ax = plt.subplots(figsize=(11, 2.6))
    kinds = s["kind"].astype(str) if "kind" in s else pd.Series(["step"] * len(s), index=s.index)
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
    ph = shown_phases(phases)
    if not _has(ph, "time_ns"):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.55 * len(ph)))
    # Shares, not ms: a 40 ms prefill next to an 800 ms decode would be a sliver
    # in ms; the question is what each phase's time went to. Totals are labelled.
    left = [0.0] * len(ph)
    labels = [f"{p}  ({t / 1e6:,.1f} ms)" for p, t in zip(ph["phase"].astype(str), ph["time_ns"], strict=True)]
    for col, label, color in SPLIT:
        if col not in ph:
            continue
        vals = [100 * float(v) / float(t) if t else 0.0 for v, t in zip(ph[col].fillna(0), ph["time_ns"], strict=True)]
        if not any(vals):
            continue
        ax.barh(labels, vals, left=left, color=color, label=label)
        for y, (x0, v) in enumerate(zip(left, vals, strict=True)):
            if v >= 6:
                ax.text(x0 + v / 2, y, f"{v:.0f}%", ha="center", va="center", fontsize=9,
                        color="black" if col in ("idle_ns", "other_ns", "memcpy_ns") else "white")
        left = [a + b for a, b in zip(left, vals, strict=True)]
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of the phase's wall time")
    ax.invert_yaxis()
    ax.legend(fontsize=8, ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(ph) < 3 else -0.2))
    ax.set_title("Where each phase's time went: compute-bound / memory-bound / GPU idle (host-bound)")
    return figure_png(fig)


def roofline_png(phases: pd.DataFrame) -> bytes | None:
    ph = run_phases(phases)
    if not _has(ph, "flops", "bytes", "time_ns"):
        return None
    ph = ph[(ph["bytes"] > 0) & (ph["time_ns"] > 0) & (ph["flops"] > 0)]
    if ph.empty:
        return None
    ai = ph["flops"] / ph["bytes"]
    achieved = ph["flops"] / (ph["time_ns"] / 1e9) / 1e12
    peak_f = _implied_peak(ph, "achieved_tflops", "pct_peak_flops")
    peak_b = _implied_peak(ph, "achieved_tbps", "pct_peak_bandwidth")
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


def _implied_peak(ph: pd.DataFrame, achieved: str, pct: str) -> float | None:
    # The analysis stored achieved and % of peak; their ratio is the ceiling it used.
    if not _has(ph, achieved, pct):
        return None
    ok = ph[(ph[pct] > 0) & ph[achieved].notna()]
    if ok.empty:
        return None
    v = float((ok[achieved] * 100 / ok[pct]).median())
    return v if math.isfinite(v) and v > 0 else None


# What a performance engineer looks at first; anything else follows in table order.
COUNTER_PRIORITY = ("gpu_util", "dram_bw_util", "sm_util", "tensor_util", "power", "sm_clock", "mem_used",
                    "sm_occupancy", "mem_util", "temperature")


def counters_png(counters: pd.DataFrame, steps: pd.DataFrame | None = None, max_panels: int = 6) -> bytes | None:
    if not _has(counters, "ts_ns", "value", "metric"):
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
    spans = _step_spans(steps)
    aligned = bool(spans) and _overlaps(spans, int(c["ts_ns"].min()), int(c["ts_ns"].max()))
    # Samples that never overlap a step are on another clock (e.g. a recorder's
    # Kineto-relative ns against an ingest's epoch ns): plotting them on the
    # steps' axis would put them a lifetime away, so they get their own axis.
    if not aligned:
        spans = []
    t0 = min(s for s, _, _ in spans) if spans else c["ts_ns"].min()
    plt = _plt()
    fig, axes = plt.subplots(len(labels), 1, figsize=(11, 1.5 * len(labels) + 0.6), sharex=True, squeeze=False)
    for ax, label in zip(axes[:, 0], labels, strict=True):
        g = c[c["label"] == label].sort_values("ts_ns")
        for s0, s1, kind in spans:
            ax.axvspan((s0 - t0) / 1e6, (s1 - t0) / 1e6, color=KIND_COLORS.get(kind, "#8c564b"), alpha=0.15, lw=0)
        ax.plot((g["ts_ns"] - t0) / 1e6, g["value"], lw=1.2, color="#333333", marker="." if len(g) < 30 else None)
        ax.set_ylabel(label, fontsize=8, rotation=0, ha="right", va="center")
    axes[-1, 0].set_xlabel("time since the first traced step (ms); shaded: steps (blue prefill, orange decode)"
                           if spans else "time since the first sample (ms)" + (
                               "; not aligned with the steps: the samples' clock does not overlap theirs"
                               if steps is not None and not steps.empty else ""))
    axes[0, 0].set_title("Counters over time")
    return figure_png(fig)


def _overlaps(spans: list[tuple[int, int, str]], lo: int, hi: int) -> bool:
    return min(a for a, _, _ in spans) <= hi and max(b for _, b, _ in spans) >= lo


def _step_spans(steps: pd.DataFrame | None) -> list[tuple[int, int, str]]:
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


def latency_png(requests: pd.DataFrame) -> bytes | None:
    if not _has(requests, "e2e_ns"):
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


# --- HTML -------------------------------------------------------------------

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px} h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px} h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0;font-size:13px} th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
.note{color:#777;font-style:italic} .warn{color:#a15c00} img{max-width:100%;display:block;margin:8px 0}
.meta td{text-align:left}
.summary{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:8px 16px;margin:8px 0 16px}
.summary p{margin:4px 0} .workload{font-weight:600} .ceiling{color:#444} .verdicts li{margin:4px 0}
details{margin:16px 0;font-size:13px}
"""


def _esc(v: Any) -> str:
    return html.escape(str(v))


def _img(png: bytes | None, alt: str) -> str:
    if png is None:
        return f'<p class="note">{_esc(alt)}: {NOT_RECORDED}</p>'
    data = base64.b64encode(png).decode("ascii")
    return f'<img class="plot" alt="{_esc(alt)}" src="data:image/png;base64,{data}">'


def _num(v: Any, kind: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "—"
    if kind == "ms":
        return f"{float(v) / 1e6:,.2f}"
    if kind == "pct":
        return f"{100 * float(v):.1f}%"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return _esc(v)


def html_table(headers: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def phase_rows(phases: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    ph = shown_phases(phases)
    headers = ["phase", "steps", "time (ms)", "ms / step", "compute", "memory", "other", "idle (host)", "limited by",
               "TFLOP/s", "% peak", "TB/s", "% peak"]
    rows = []

    def share(r: dict[Any, Any], c: str) -> str:
        t, v = _f(r.get("time_ns")), _f(r.get(c))
        return _num(v / t, "pct") if t and v is not None else "—"

    def pct(v: Any) -> str:
        x = _f(v)
        return "—" if x is None else f"{x:.1f}%"

    for r in ph.to_dict("records"):
        t, n = _f(r.get("time_ns")), _f(r.get("steps"))
        other = sum(x for x in (_f(r.get(c)) for c in ("other_ns", "comm_ns", "memcpy_ns")) if x is not None)
        lim = limiter(r)
        rows.append([_esc(r.get("phase")), _num(r.get("steps")), _num(t, "ms"), _num(t / n, "ms") if t and n else "—",
                     share(r, "compute_bound_ns"), share(r, "memory_bound_ns"),
                     _num(other / t, "pct") if t else "—", share(r, "idle_ns"),
                     _esc(SHORT_LIMITER[lim[0]]) if lim else "—",
                     _num(r.get("achieved_tflops")), pct(r.get("pct_peak_flops")),
                     _num(r.get("achieved_tbps")), pct(r.get("pct_peak_bandwidth"))])
    return headers, rows


def request_rows(requests: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    headers = ["request", "batch", "input tok", "output tok", "TTFT (ms)", "TPOT (ms)", "ITL p90 (ms)", "e2e (ms)",
               "decode tok/s", "prefill share"]
    rows = []
    for r in requests.to_dict("records") if not requests.empty else []:
        rows.append([_esc(r.get("name", r.get("request_id"))), _num(r.get("batch")), _num(r.get("input_tokens")),
                     _num(r.get("output_tokens")), _num(r.get("ttft_ns"), "ms"), _num(r.get("tpot_ns"), "ms"),
                     _num(r.get("itl_p90_ns"), "ms"), _num(r.get("e2e_ns"), "ms"), _num(r.get("decode_tok_s")),
                     _num(r.get("prefill_share"), "pct")])
    return headers, rows


def _section_table(title: str, headers: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return f'<h3>{_esc(title)}</h3><p class="note">{NOT_RECORDED}</p>'
    return f"<h3>{_esc(title)}</h3>" + html_table(headers, rows)


def summary_html(run: RunView) -> str:
    """The answer first: what ran, against which ceiling, and what limited each phase."""
    ceiling = ceiling_of(run.df("phases"))
    lines = verdicts(run.df("phases"))
    items = "".join(f"<li>{_esc(v)}</li>" for v in lines) or f"<li>phases: {NOT_RECORDED}</li>"
    return (f'<div class="summary"><p class="workload">{_esc(workload_text(run.manifest))}</p>'
            f'<p class="ceiling">{_esc(ceiling.text())}</p><ul class="verdicts">{items}</ul></div>')


def _meta_rows(m: dict[str, Any]) -> list[list[str]]:
    rows = [[_esc(k), _esc(v)] for k, v in m.items() if isinstance(v, str | int | float) and v != ""]
    for group in ("workload", "environment", "profiler"):
        sub = m.get(group)
        if isinstance(sub, dict):
            rows += [[_esc(f"{group}.{k}"), _esc(v)] for k, v in sub.items() if isinstance(v, str | int | float)]
    return rows[:40]


def kernel_roofline_png(run: RunView) -> bytes | None:
    """tracekit.report.plots' roofline, one point per kernel, when the run has the bound pass's kernel_bound table.

    Its ceiling is the one the bound pass used, as the phases table records it (name, dtype, peaks).
    """
    k, c = run.df("kernel_bound"), ceiling_of(run.df("phases"))
    if not _has(k, "intensity", "flops", "dur_ns") or not (c.tflops and c.tbps):
        return None
    from tracekit.model.ceilings import Ceiling
    from tracekit.report.plots import roofline_png as plots_roofline_png

    name = c.name or "unnamed ceiling"
    kind = "measured" if "(measured)" in name else "datasheet" if "(datasheet)" in name else "recorded"
    ceiling = Ceiling(gpu=name.split(" (")[0], peak_flops={c.dtype or "fp16": c.tflops * 1e12},
                      peak_bytes_per_s=c.tbps * 1e12, source=f"{name}, as the phases table records it", kind=kind)
    return plots_roofline_png(k, ceiling)


def run_section(run: RunView) -> str:
    m = run.manifest
    parts = [f'<section class="run" id="run-{_esc(run.run_id)}"><h2>Run {_esc(run.run_id)}</h2>']
    parts.append(summary_html(run))
    for w in m.get("warnings") or []:
        parts.append(f'<p class="warn">warning: {_esc(w)}</p>')
    parts.append(_section_table("Phases: three-way split", *phase_rows(run.df("phases"))))
    parts.append(_img(split_png(run.df("phases")), "time split per phase"))
    parts.append(_section_table("Per-request latency", *request_rows(run.df("requests"))))
    parts.append(_img(latency_png(run.df("requests")), "per-request latency"))
    parts.append("<h3>Phase timeline</h3>" + _img(phase_timeline_png(run.df("steps")), "phase timeline"))
    parts.append("<h3>Counters</h3>" + _img(counters_png(run.df("counters"), run.df("steps")), "counters over time"))
    parts.append("<h3>Roofline</h3>" + _img(kernel_roofline_png(run) or roofline_png(run.df("phases")), "roofline"))
    parts.append("<details><summary>run.json</summary>" + html_table(["field", "value"], _meta_rows(m), "meta")
                 + "</details>")
    parts.append("</section>")
    return "\n".join(parts)


def comparison(runs: list[RunView]) -> str:
    headers = ["run", "phase", "steps", "time (ms)", "ms / step", "idle share"]
    rows = []
    for run in runs:
        for r in run_phases(run.df("phases")).to_dict("records"):
            t, n = r.get("time_ns"), r.get("steps")
            rows.append([_esc(run.run_id), _esc(r.get("phase")), _num(n), _num(t, "ms"),
                         _num(t / n, "ms") if t and n else "—",
                         _num(r["idle_ns"] / t, "pct") if t and r.get("idle_ns") is not None else "—"])
    return _section_table("Runs compared", headers, rows)


# Marks each image once the browser has decoded it: a test (and a reader with
# devtools) can tell a drawn plot from a broken one in the DOM alone.
_MARK_DRAWN = (
    "<script>window.addEventListener('load',function(){document.querySelectorAll('img.plot').forEach("
    "function(i){i.setAttribute('data-drawn',i.complete&&i.naturalWidth>0?i.naturalWidth+'x'+i.naturalHeight:'no');});"
    "document.body.setAttribute('data-loaded','1');});</script>"
)


def build_html(runs: list[RunView], title: str = "tracekit report") -> str:
    body = [f"<h1>{_esc(title)}</h1>"]
    if len(runs) > 1:
        body.append(comparison(runs))
    body += [run_section(r) for r in runs]
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{_esc(title)}</title><style>{CSS}</style></head><body>"
        + "\n".join(body)
        + _MARK_DRAWN
        + "</body></html>\n"
    )
