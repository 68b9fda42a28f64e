"""The sweep's reports: plots/*.svg, report.md and report.html, from the summary tables (tracekit.app.sweep).

The charts are SVG (tracekit.report.sweep_charts); the HTML embeds them, so it is one self-contained file.
"""

from __future__ import annotations

from pathlib import Path

from tracekit.app.sweep import summarize
from tracekit.model.pricing import Pricing
from tracekit.report.html import render_sweep_html
from tracekit.report.markdown import render_markdown
from tracekit.report.sweep_charts import make_sweep_charts
from tracekit.store.rundir import atomic_open
from tracekit.store.sweepdir import PLOTS_DIR, REPORT_HTML, REPORT_MD, SUMMARY


def write_all(sweep_dir: Path, pricing: Pricing) -> dict[str, Path]:
    """Summary, agent steps, seed comparison, plots and both reports, from the point run directories."""
    t = summarize(sweep_dir, pricing)
    plots = make_sweep_charts(t.summary, t.agent, sweep_dir / PLOTS_DIR)
    md = render_markdown(t.meta, t.summary, t.seed, t.agent, plots, pricing, Path(PLOTS_DIR))
    with atomic_open(sweep_dir / REPORT_MD) as fh:
        fh.write(md)
    with atomic_open(sweep_dir / REPORT_HTML) as fh:
        fh.write(render_sweep_html(md, plots))
    return {"summary": sweep_dir / SUMMARY, "report_md": sweep_dir / REPORT_MD, "report_html": sweep_dir / REPORT_HTML,
            **{f"plot:{k}": v for k, v in plots.items()}}  # fmt: skip
