"""What a new user reads: the numbers read back from the HTML report and the terminal say one thing."""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from tracekit.model import schema
from tracekit.report.charts import WIDTH, phase_timeline_svg, split_svg
from tracekit.report.html import CSS, build_html
from tracekit.report.terminal import render_terminal, table_of
from tracekit.report.view import NO_ROOFLINE, load_view, phase_rows
from tracekit.store.rundir import RunDir

MS = 1_000_000
NS = "{http://www.w3.org/2000/svg}"


class _Tables(HTMLParser):
    """Every <table> of a page as {first header cell: rows of cell text}, and the <h3> before each."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[tuple[str, list[list[str]]]] = []
        self._h3, self._title, self._row, self._cell, self._in = "", "", None, None, ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "h3":
            self._in, self._h3 = "h3", ""
        elif tag == "table":
            self.tables.append((self._h3, []))
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "h3":
            self._in = ""
        elif tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None and self.tables:
            self.tables[-1][1].append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._in == "h3":
            self._h3 += data
        if self._cell is not None:
            self._cell += data


def _cpu_run(root: Path) -> RunDir:
    run = RunDir.create(root / "cpu", workload={"model": "tiny", "dtype": "fp32", "device": "cpu", "batch": 1},
                        model={"preset": "tiny", "parameters": 1_790_000})
    ns = {"prefill": {"attention": 32, "gemm": 109, "norm": 16, "elementwise": 9, "sampling": 0, "framework": 28},
          "decode": {"attention": 185, "gemm": 776, "norm": 33, "elementwise": 50, "sampling": 0, "framework": 161}}
    rows = [{"phase": p, "op_class": c, "time_ns": v * MS, "share": v / sum(d.values()),
             "steps": 1 if p == "prefill" else 7} for p, d in ns.items() for c, v in d.items()]
    run.write_table("op_class_split", schema.from_pandas("op_class_split", pd.DataFrame(rows)))
    phases = pd.DataFrame({"phase": ["prefill", "decode"], "steps": [1, 7], "steps_captured": [1, 7],
                           "time_ns": [194 * MS, 1205 * MS]})
    run.write_table("phases", schema.from_pandas("phases", phases))
    return run


def test_a_cpu_report_leads_with_the_operator_split_and_says_there_is_no_roofline(tmp_path: Path) -> None:
    view = load_view(_cpu_run(tmp_path))
    page = build_html([view])
    parser = _Tables()
    parser.feed(page)
    summary = page.split('<div class="summary">', 1)[1].split("</div>", 1)[0]
    assert NO_ROOFLINE in summary.replace("&#x27;", "'")
    # decode: 776 / 1205 ms is GEMM = 64.4%; framework overhead 161 / 1205 = 13.4%
    assert "decode: 7 step(s), 1,205.0 ms (172.14 ms per step): GEMM 64.4%, attention 15.4%, framework overhead " \
           "13.4%, elementwise 4.1%, norm 2.7%" in summary
    (_title, rows), = [t for t in parser.tables if t[0].startswith("Where the time went")]
    head, *body = rows
    assert head == ["phase", "steps", "time (ms)", "ms / step", "attention", "GEMM", "norm", "elementwise",
                    "sampling", "framework overhead"]
    got = {r[0]: dict(zip(head, r, strict=True)) for r in body}
    assert got["prefill"]["GEMM"] == "56.2%" and got["prefill"]["time (ms)"] == "194.00"
    assert got["decode"]["ms / step"] == "172.14" and got["decode"]["framework overhead"] == "13.4%"
    assert not any(t[0].startswith("Phases: three-way split") for t in parser.tables)
    assert "none: a CPU has no roofline here" in page
    # the terminal says the same
    out = io.StringIO()
    render_terminal([view], out)
    text = out.getvalue()
    assert "CPU run: a CPU has no roofline here" in text and "GEMM 64.4%" in text
    assert re.search(r"│ decode\s+│\s+7 │\s+1,205.00 │\s+172.14 │\s+15.4% │\s+64.4% │", text)
    assert "three-way split" not in text


def test_phase_steps_say_which_steps_the_time_covers() -> None:
    ph = pd.DataFrame({"phase": ["prefill"], "steps": [3], "steps_captured": [1], "time_ns": [26.79 * MS],
                       "request_id": [None]})
    headers, (row,) = phase_rows(ph)
    cells = dict(zip(headers, row, strict=False))
    assert (cells["steps"], cells["time (ms)"], cells["ms / step"]) == ("1 of 3", "26.79", "26.79")


def test_terminal_headers_are_never_cut_at_200_columns() -> None:
    from rich.console import Console

    ph = pd.DataFrame({"phase": ["prefill", "decode"], "steps": [1, 7], "time_ns": [26 * MS, 200 * MS],
                       "compute_bound_ns": [5 * MS, 1 * MS], "memory_bound_ns": [2 * MS, 10 * MS],
                       "latency_bound_ns": [1 * MS, 3 * MS], "other_ns": [0, 0], "idle_ns": [18 * MS, 186 * MS],
                       "idle_host_ns": [18 * MS, 186 * MS], "idle_wait_ns": [0, 0], "idle_profiler_ns": [0, 0]})
    headers, rows = phase_rows(ph)
    for width in (200, 160):
        out = io.StringIO()
        table_of(Console(file=out, width=width), "phases", headers, rows)
        text = out.getvalue()
        assert "…" not in text
        for word in {w for h in headers for w in h.split()}:
            assert word in text, (width, word)


def _legend_labels(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    (legend,) = [g for g in root.iter(f"{NS}g") if g.get("class") == "legend"]
    return ["".join(t.itertext()) for t in legend.iter(f"{NS}text")]


def test_every_split_segment_is_labelled_and_the_charts_fill_the_page() -> None:
    ph = pd.DataFrame({"phase": ["prefill", "decode"], "steps": [1, 7], "time_ns": [100 * MS, 100 * MS],
                       "compute_bound_ns": [60 * MS, 10 * MS], "latency_bound_ns": [4.9 * MS, 3 * MS],
                       "idle_host_ns": [35.1 * MS, 87 * MS]})
    svg = split_svg(ph)
    assert svg is not None
    labels = _legend_labels(svg)
    assert "latency-bound: 4.9% / 3.0%" in labels and "compute-bound: 60% / 10%" in labels
    assert float(ET.fromstring(svg).get("width", 0)) == WIDTH
    assert "img.plot{width:100%;height:auto}" in CSS and "max-width:1400px" in CSS


def test_the_timeline_legend_sits_below_the_steps() -> None:
    steps = pd.DataFrame({"kind": ["prefill", "decode", "decode"], "cpu_start_ns": [0, 30 * MS, 60 * MS],
                          "cpu_end_ns": [25 * MS, 55 * MS, 85 * MS]})
    svg = phase_timeline_svg(steps)
    assert svg is not None
    root = ET.fromstring(svg)
    (ax,) = [g for g in root.iter(f"{NS}g") if g.get("class") == "axes"]
    (legend,) = [g for g in root.iter(f"{NS}g") if g.get("class") == "legend"]
    box = next(legend.iter(f"{NS}rect"))
    step_rects = [float(r.get("y", 0)) + float(r.get("height", 0)) for g in ax.iter(f"{NS}g")
                  if g.get("class") == "series" for r in g.iter(f"{NS}rect")]
    assert float(box.get("y", 0)) > max(step_rects)
    assert float(root.get("height", 0)) >= float(box.get("y", 0)) + float(box.get("height", 0))


@pytest.mark.parametrize("params, text", [(1_790_000, "1.79 M params"), (1_100_048_384, "1.10 B params"),
                                          (512, "512 params")])
def test_parameter_counts_keep_their_digits(params: int, text: str) -> None:
    from tracekit.report.view import params_text

    assert params_text(params) == text
