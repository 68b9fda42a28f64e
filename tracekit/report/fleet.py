"""A fleet's summary: one row per (run, rank) of a dataset, from one SQL query across its tables.

``fleet_rows(root)`` joins fleet_runs (status, GPU, workload) with each run's requests (TTFT p50, TPOT
p50 and p99), steps and whole-run phase rows (GPU busy and the bound split, percent of GPU busy);
``render_fleet`` prints them as a terminal table and ``fleet_markdown`` as a Markdown table. Runs of a
dataset that fleet analysis never saw (ingest only) have no fleet_runs row and are not listed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracekit.app.query import run_query

FLEET_SQL = """
with req as (
  select run_id, rank, count(*) as requests, median(ttft_ns) / 1e6 as ttft_p50_ms,
         median(tpot_ns) / 1e6 as tpot_p50_ms, quantile_cont(tpot_ns, 0.99) / 1e6 as tpot_p99_ms
  from requests group by run_id, rank),
st as (select run_id, rank, count(*) as steps from steps group by run_id, rank),
ph as (
  select run_id, rank, sum(gpu_busy_ns) / 1e6 as gpu_busy_ms,
         100.0 * sum(compute_bound_ns) / nullif(sum(gpu_busy_ns), 0) as compute_pct,
         100.0 * sum(memory_bound_ns) / nullif(sum(gpu_busy_ns), 0) as memory_pct,
         100.0 * sum(latency_bound_ns) / nullif(sum(gpu_busy_ns), 0) as latency_pct
  from phases where request_id is null and phase <> 'outside' group by run_id, rank)
select f.run_id, f.rank, f.status, f.gpu, f.workload, st.steps, req.requests, req.ttft_p50_ms,
       req.tpot_p50_ms, req.tpot_p99_ms, ph.gpu_busy_ms, ph.compute_pct, ph.memory_pct, ph.latency_pct,
       f.peak_rss_bytes / 2^20 as task_peak_mib, f.error
from fleet_runs f
left join req using (run_id, rank) left join st using (run_id, rank) left join ph using (run_id, rank)
order by f.run_id, f.rank
"""


def fleet_rows(root: Path, notes: list[str] | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = run_query(FLEET_SQL, root, notes).to_pylist()
    return rows


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def fleet_markdown(rows: list[dict[str, Any]]) -> str:
    from tracekit.report.text import visible

    if not rows:
        return "(no analysed runs)\n"
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    lines += ["| " + " | ".join(visible(_fmt(r[c])).replace("|", "\\|") for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def render_fleet(rows: list[dict[str, Any]], out: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    from tracekit.report.text import cell

    failed = sum(1 for r in rows if r["status"] != "complete")
    table = Table(show_header=True, header_style="bold",
                  title=f"{len({r['run_id'] for r in rows})} runs, {len(rows)} (run, rank) rows, {failed} failed")
    cols = [c for c in (rows[0] if rows else {}) if c != "error"]
    for c in cols:
        table.add_column(cell(c))
    for r in rows:
        table.add_row(*(cell(_fmt(r[c])) for c in cols))
    Console(file=out, width=240).print(table)
    from tracekit.report.text import visible

    for r in rows:
        if r["error"]:
            out.write(visible(f"failed: {r['run_id']}: {r['error']}") + "\n")


def fleet_html(rows: list[dict[str, Any]], title: str) -> str:
    """A self-contained HTML page of the rows (one table)."""
    import html

    cols = list(rows[0]) if rows else []
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r[c]))}</td>" for c in cols) + "</tr>" for r in rows)
    return (f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif}td,th{padding:2px 8px;border-bottom:1px solid #ddd;"
            "text-align:right}</style>"
            f"<h1>{html.escape(title)}</h1><table><tr>{head}</tr>{body}</table>\n")
