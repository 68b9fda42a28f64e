"""The self-contained HTML reports: one file, inline CSS, charts as SVG data URIs (the run report's,
tracekit.report.charts; the sweep's, tracekit.report.sweep_charts).

Nothing is fetched when the file is opened (no CDN, no fonts, no scripts from elsewhere), so it can
be mailed or attached to a ticket. Every section copes with its table being absent or empty: it says
"not recorded" instead of drawing an empty axis. Text comes from tracekit.report.view and is
escaped here, once.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from tracekit.model.ceilings import Ceiling
from tracekit.report.charts import (
    counters_svg,
    latency_svg,
    op_class_svg,
    phase_roofline_svg,
    phase_timeline_svg,
    roofline_svg,
    split_svg,
)
from tracekit.report.memory_summary import memory_text
from tracekit.report.view import (
    NO_ROOFLINE,
    NOT_RECORDED,
    RunView,
    advice_lines,
    assisted_rows,
    ceiling_of,
    ceiling_source_line,
    cell,
    cost_rows,
    cpu_split_lines,
    cpu_split_rows,
    has_columns,
    is_cpu_view,
    meta_rows,
    op_rows,
    outside_line,
    over_peak_line,
    phase_rows,
    request_rows,
    shown_phases,
    timed_steps,
    verdicts,
    warmup_line,
    workload_kind,
    workload_text,
)

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px} h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px} h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0;font-size:13px} th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
.note{color:#777;font-style:italic} .warn{color:#a15c00} img{max-width:100%;display:block;margin:8px 0}
img.plot{width:100%;height:auto}
.meta td{text-align:left}
.summary{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:8px 16px;margin:8px 0 16px}
.outside{color:#555;font-size:13px} .summary p{margin:4px 0} .workload{font-weight:600} .ceiling{color:#444} .verdicts li{margin:4px 0}
.advice{color:#0b5a2a}
details{margin:16px 0;font-size:13px}
"""


def _esc(v: Any) -> str:
    return html.escape(str(v))


def _img(svg: str | None, alt: str) -> str:
    if svg is None:
        return f'<p class="note">{_esc(alt)}: {NOT_RECORDED}</p>'
    data = base64.b64encode(svg.encode()).decode("ascii")
    return f'<img class="plot" alt="{_esc(alt)}" src="data:image/svg+xml;base64,{data}">'


def html_table(headers: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _section_table(title: str, headers: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return f'<h3>{_esc(title)}</h3><p class="note">{NOT_RECORDED}</p>'
    return f"<h3>{_esc(title)}</h3>" + html_table(headers, rows)


def summary_html(run: RunView) -> str:
    """The answer first: what ran, against which ceiling, and what limited each phase (on a CPU: that
    there is no roofline, and where each phase's time went by operator class)."""
    if is_cpu_view(run):
        items = "".join(f"<li>{_esc(v)}</li>" for v in cpu_split_lines(run.df("op_class_split")))
        return (f'<div class="summary"><p class="workload">{_esc(workload_text(run.manifest))}</p>'
                f'<p class="ceiling">{_esc(NO_ROOFLINE)}</p><ul class="verdicts">{items}</ul></div>')
    ceiling = ceiling_of(run.df("phases"))
    lines = verdicts(run.df("phases"))
    items = "".join(f"<li>{_esc(v)}</li>" for v in lines) or f"<li>phases: {NOT_RECORDED}</li>"
    helps = "".join(f'<p class="advice">What would help: {_esc(a)}</p>' for a in advice_lines(run.df("phases")))
    helps += "".join(f'<p class="advice">Projected: {_esc(a)}</p>' for a in run.projected)
    mem = "".join(f"<li>{_esc(line.strip())}</li>" for line in memory_text(run.manifest, run.tables.get("step_memory")))
    mem = f'<ul class="memory">{mem}</ul>' if mem else ""
    return (f'<div class="summary"><p class="workload">{_esc(workload_text(run.manifest))}</p>'
            f'<p class="ceiling">{_esc(ceiling.text())}</p><ul class="verdicts">{items}</ul>{helps}{mem}</div>')


def kernel_roofline_svg(run: RunView) -> str | None:
    """The roofline with one dot per kernel, when the run has the bound pass's kernel_bound table.

    Its ceiling is the one the bound pass used, as the phases table records it (name, dtype, peaks).
    """
    k, c = run.df("kernel_bound"), ceiling_of(run.df("phases"))
    if not has_columns(k, "intensity", "flops", "dur_ns") or not (c.tflops and c.tbps):
        return None
    name = c.name or "unnamed ceiling"
    kind = "measured" if "(measured)" in name else "datasheet" if "(datasheet)" in name else "recorded"
    ceiling = Ceiling(gpu=name.split(" (")[0], peak_flops={c.dtype or "fp16": c.tflops * 1e12},
                      peak_bytes_per_s=c.tbps * 1e12, source=f"{name}, as the phases table records it", kind=kind)
    return roofline_svg(k, ceiling)


def run_section(run: RunView) -> str:
    m = run.manifest
    parts = [f'<section class="run" id="run-{_esc(run.run_id)}"><h2>Run {_esc(run.run_id)}</h2>']
    parts.append(summary_html(run))
    for w in m.get("warnings") or []:
        parts.append(f'<p class="warn">warning: {_esc(w)}</p>')
    if is_cpu_view(run):
        split = run.df("op_class_split")
        parts.append(_section_table("Where the time went (CPU, share of each phase by operator class)",
                                    *cpu_split_rows(split)))
        parts.append(_img(op_class_svg(split), "time split per phase by operator class"))
    else:
        parts.append(_section_table("Phases: three-way split", *phase_rows(run.df("phases"))))
    for line in (outside_line(run.df("phases")), warmup_line(run), ceiling_source_line(run), over_peak_line(run)):
        if line:
            parts.append(f'<p class="outside">{_esc(line)}</p>')
    if not is_cpu_view(run):
        parts.append(_img(split_svg(run.df("phases")), "time split per phase"))
    ops = op_rows(run.df("kernel_ops"))
    if ops[1]:
        parts.append(_section_table("Largest ops by kernel time", *ops))
    parts.append(_section_table("Per-request latency", *request_rows(run.df("requests"), run.warmups, workload_kind(run.manifest)[0])))
    for title, (headers, rows) in (("Each request's cost inside the batch", cost_rows(run.df("requests"))),
                                   ("Speculative decoding", assisted_rows(run.df("requests"), run.df("steps")))):
        if rows:
            parts.append(_section_table(title, headers, rows))
    parts.append(_img(latency_svg(run.df("requests")), "per-request latency"))
    parts.append("<h3>Phase timeline</h3>" + _img(phase_timeline_svg(run.df("steps")), "phase timeline"))
    parts.append("<h3>Counters</h3>" + _img(counters_svg(run.df("counters"), run.df("steps")), "counters over time"))
    if is_cpu_view(run):
        parts.append('<h3>Roofline</h3><p class="note">none: a CPU has no roofline here (no kernels, no ceilings)</p>')
    else:
        parts.append("<h3>Roofline</h3>" + _img(kernel_roofline_svg(run) or phase_roofline_svg(run.df("phases")),
                                                "roofline"))
    parts.append("<details><summary>run.json</summary>" + html_table(["field", "value"], meta_rows(m), "meta")
                 + "</details>")
    parts.append("</section>")
    return "\n".join(parts)


def comparison(runs: list[RunView]) -> str:
    headers = ["run", "phase", "steps", "time (ms)", "ms / step", "idle share"]
    rows = []
    notes = []
    for run in runs:
        for r in shown_phases(run.df("phases")).to_dict("records"):
            t, n = r.get("time_ns"), timed_steps(r)
            rows.append([str(run.run_id), str(r.get("phase")), cell(n), cell(t, "ms"),
                         cell(t / n, "ms") if t and n else "—",
                         cell(r["idle_ns"] / t, "pct") if t and r.get("idle_ns") is not None else "—"])
        for line in (outside_line(run.df("phases")), warmup_line(run), over_peak_line(run)):
            if line:
                notes.append(f'<p class="outside">{_esc(run.run_id)}: {_esc(line)}</p>')
    return _section_table("Runs compared", headers, rows) + "".join(notes)


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


def render_sweep_html(markdown_text: str, plots: dict[str, Path]) -> str:
    """A self-contained page: the Markdown as preformatted sections, plots embedded as data URIs."""
    body: list[str] = []
    table: list[str] = []

    def flush() -> None:
        if not table:
            return
        rows = [r for r in table if not set(r.replace("|", "").strip()) <= {"-", " "}]
        cells = [[html.escape(c.strip()) for c in r.strip().strip("|").split("|")] for r in rows]
        h = "".join(f"<th>{c}</th>" for c in cells[0])
        b = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in cells[1:])
        body.append(f"<table><thead><tr>{h}</tr></thead><tbody>{b}</tbody></table>")
        table.clear()

    by_name = {p.name: p for p in plots.values()}
    for line in markdown_text.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        flush()
        if line.startswith("!["):
            name = line[line.index("(") + 1 : -1].rsplit("/", 1)[-1]
            p = by_name.get(name)
            if p is not None:
                data = base64.b64encode(p.read_bytes()).decode()
                mime = "image/svg+xml" if p.suffix == ".svg" else "image/png"
                body.append(f'<figure><img alt="{html.escape(name)}" src="data:{mime};base64,{data}"></figure>')
        elif line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")), 4)
            body.append(f"<h{level}>{html.escape(line.lstrip('#').strip())}</h{level}>")
        elif line.strip():
            body.append(f"<p>{html.escape(line)}</p>")
    flush()
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:12px;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 6px}"
        "img{max-width:100%}"
    )
    return f"<!doctype html><html><head><meta charset='utf-8'><title>tracekit sweep</title><style>{style}</style></head><body>{''.join(body)}</body></html>\n"
