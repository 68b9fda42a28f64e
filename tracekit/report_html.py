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

The roofline helper's tracekit.plots is not used: it did not exist when this was
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
    ph = run_phases(phases)
    if not _has(ph, "time_ns"):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.7 + 0.6 * len(ph)))
    left = [0.0] * len(ph)
    labels = ph["phase"].astype(str).tolist()
    for col, label, color in SPLIT:
        if col not in ph:
            continue
        vals = (ph[col].fillna(0) / 1e6).tolist()
        if not any(vals):
            continue
        ax.barh(labels, vals, left=left, color=color, label=label)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    ax.set_xlabel("ms")
    ax.legend(fontsize=8, ncols=3, loc="lower right")
    ax.set_title("Where each phase's time went")
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


def counters_png(counters: pd.DataFrame, max_panels: int = 6) -> bytes | None:
    if not _has(counters, "ts_ns", "value", "metric"):
        return None
    c = counters.dropna(subset=["ts_ns", "value"]).copy()
    c["label"] = (c["source"].astype(str) + "." if "source" in c else "") + c["metric"].astype(str)
    if "unit" in c:
        c["label"] += " (" + c["unit"].astype(str) + ")"
    if "device" in c:
        c["label"] = "GPU " + c["device"].astype("Int64").astype(str) + " " + c["label"]
    labels = list(dict.fromkeys(c["label"]))[:max_panels]
    t0 = c["ts_ns"].min()
    plt = _plt()
    fig, axes = plt.subplots(len(labels), 1, figsize=(11, 1.6 * len(labels)), sharex=True, squeeze=False)
    for ax, label in zip(axes[:, 0], labels, strict=True):
        g = c[c["label"] == label].sort_values("ts_ns")
        ax.plot((g["ts_ns"] - t0) / 1e6, g["value"], lw=1.2, marker="." if len(g) < 30 else None)
        ax.set_ylabel(label, fontsize=8, rotation=0, ha="right")
    axes[-1, 0].set_xlabel("time since first sample (ms)")
    axes[0, 0].set_title("Counters over time")
    return figure_png(fig)


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
    ax.legend(fontsize=8)
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
    ph = run_phases(phases)
    headers = ["phase", "steps", "time (ms)", "compute", "memory", "other", "idle (host)", "TFLOP/s", "TB/s"]
    rows = []
    def share(r: dict[Any, Any], c: str) -> str:
        t, v = r.get("time_ns"), r.get(c)
        return _num(v / t, "pct") if t and v is not None and not pd.isna(v) else "—"

    for r in ph.to_dict("records"):
        t = r.get("time_ns")
        rows.append([_esc(r.get("phase")), _num(r.get("steps")), _num(t, "ms"), share(r, "compute_bound_ns"),
                     share(r, "memory_bound_ns"), share(r, "other_ns"), share(r, "idle_ns"),
                     _num(r.get("achieved_tflops")), _num(r.get("achieved_tbps"))])
    return headers, rows


def request_rows(requests: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    headers = ["request", "input tok", "output tok", "TTFT (ms)", "TPOT (ms)", "e2e (ms)", "prefill share"]
    rows = []
    for r in requests.to_dict("records") if not requests.empty else []:
        rows.append([_esc(r.get("name", r.get("request_id"))), _num(r.get("input_tokens")), _num(r.get("output_tokens")),
                     _num(r.get("ttft_ns"), "ms"), _num(r.get("tpot_ns"), "ms"), _num(r.get("e2e_ns"), "ms"),
                     _num(r.get("prefill_share"), "pct")])
    return headers, rows


def _section_table(title: str, headers: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return f'<h3>{_esc(title)}</h3><p class="note">{NOT_RECORDED}</p>'
    return f"<h3>{_esc(title)}</h3>" + html_table(headers, rows)


def run_section(run: RunView) -> str:
    m = run.manifest
    meta_rows = [[_esc(k), _esc(v)] for k, v in m.items()
                 if k not in ("warnings",) and isinstance(v, str | int | float) and v != ""][:20]
    parts = [f'<section class="run" id="run-{_esc(run.run_id)}"><h2>Run {_esc(run.run_id)}</h2>']
    parts.append(html_table(["field", "value"], meta_rows, "meta"))
    for w in m.get("warnings") or []:
        parts.append(f'<p class="warn">warning: {_esc(w)}</p>')
    parts.append(_section_table("Phases: three-way split", *phase_rows(run.df("phases"))))
    parts.append(_img(split_png(run.df("phases")), "time split per phase"))
    parts.append("<h3>Phase timeline</h3>" + _img(phase_timeline_png(run.df("steps")), "phase timeline"))
    parts.append("<h3>Roofline</h3>" + _img(roofline_png(run.df("phases")), "roofline"))
    parts.append("<h3>Counters</h3>" + _img(counters_png(run.df("counters")), "counters over time"))
    parts.append(_section_table("Per-request latency", *request_rows(run.df("requests"))))
    parts.append(_img(latency_png(run.df("requests")), "per-request latency"))
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
