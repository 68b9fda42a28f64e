"""The sweep's charts (SVG) plot the summary's values: read back from the marks, worked by hand."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from tracekit.analysis import sweep as sa
from tracekit.report.sweep_charts import make_sweep_charts


def _point(pid: str, group: str, shape: str, i: int, o: int, ttft_ms: float, e2e_ms: float,
           phases: pd.DataFrame | None = None) -> sa.PointData:
    point = {"id": pid, "group": group, "shape": shape, "input_tokens": i, "output_tokens": o, "batch": 1,
             "mode": "eager", "agent": None}
    req = pd.DataFrame([{"request_id": 0, "batch": 1, "input_tokens": i, "output_tokens": o, "ttft_ns": ttft_ms * 1e6,
                         "e2e_ns": e2e_ms * 1e6, "tpot_ns": (e2e_ms - ttft_ms) * 1e6 / (o - 1)}])
    return sa.PointData(point, "complete", {"timings": {"prefilled_tokens": i}}, req, phases)


def _values(svg: str, label: str) -> list[float]:
    body = re.search(rf'<g class="series" data-label="{re.escape(label)}"[^>]*>(.*?)</g></g>', svg, re.S)
    assert body, label
    return [float(v) for v in re.findall(r'data-v="([^"]+)"', body.group(1))]


def test_sweep_charts_draw_the_summary(tmp_path: Path) -> None:
    # GIVEN a chat point (TTFT 10 ms of 1,280 ms e2e: 0.78% prefill) and a RAG point (TTFT 500 of 1,000 ms: 50%),
    # the chat point's decode split 10% compute, 20% memory, 70% idle; two prompt-length points
    phases = pd.DataFrame([{"request_id": None, "phase": "decode", "time_ns": 100, "compute_bound_ns": 10,
                            "memory_bound_ns": 20, "idle_ns": 70}])
    points = [_point("c", "shapes", "chat", 128, 128, 10.0, 1280.0, phases), _point("r", "shapes", "rag", 1205, 60, 500.0, 1000.0),
              _point("p1", "prompt", "p", 64, 8, 20.0, 90.0), _point("p2", "prompt", "p", 512, 8, 60.0, 130.0)]
    summary = sa.summarize(points, input_price=0.15, output_price=0.6)
    made = make_sweep_charts(summary, pd.DataFrame(), tmp_path)
    # THEN each chart the data allows is an SVG file, named by its chart
    assert {"prefill_share", "ttft_vs_prompt", "three_way_split", "cost_vs_chat"} <= set(made)
    assert all(p == tmp_path / f"{k}.svg" and p.read_text().startswith("<svg ") for k, p in made.items())
    # the prefill share bars: 100 x 10 / 1280 and 100 x 500 / 1000, in the shapes' order
    share = _values(made["prefill_share"].read_text(), "eager")
    assert share == pytest.approx([100 * 10 / 1280, 50.0])
    # the TTFT curve: one line through (64, 20) and (512, 60) on a log x axis
    ttft = made["ttft_vs_prompt"].read_text()
    assert 'data-x="log ' in ttft and '<g class="series" data-label="eager"' in ttft
    # the split of the chat point's decode: compute 0.1, memory 0.2, idle (host) 0.7
    split = made["three_way_split"].read_text()
    assert _values(split, "compute-bound")[1] == pytest.approx(0.1)
    assert _values(split, "memory-bound")[1] == pytest.approx(0.2)
    assert _values(split, "idle: host issuing")[1] == pytest.approx(0.7)
