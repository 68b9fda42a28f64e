"""The report's verdict and advice with the latency class and idle by cause."""

from __future__ import annotations

import io

import pandas as pd

from tracekit.report.html import build_html
from tracekit.report.terminal import render_terminal
from tracekit.report.view import RunView, phase_rows, verdicts

MS = 1_000_000


def phases() -> pd.DataFrame:
    return pd.DataFrame({
        "request_id": [None, None], "phase": ["prefill", "decode"], "steps": [1, 20], "steps_captured": [1, 4],
        "time_ns": [26 * MS, 100 * MS], "gpu_busy_ns": [7 * MS, 9 * MS],
        "compute_bound_ns": [2.6 * MS, 0.0], "memory_bound_ns": [0.8 * MS, 0.6 * MS],
        "latency_bound_ns": [3.6 * MS, 8.4 * MS], "other_ns": [0.0, 0.0], "comm_ns": [0.0, 0.0],
        "memcpy_ns": [0.0, 0.0], "idle_ns": [19 * MS, 91 * MS], "idle_profiler_ns": [9 * MS, 60 * MS],
        "idle_host_ns": [9.9 * MS, 30 * MS], "idle_wait_ns": [0.1 * MS, 1 * MS],
        "achieved_tbps": [1.5, 0.9], "pct_peak_bandwidth": [31.0, 19.0], "achieved_tflops": [300.0, 1.0],
        "pct_peak_flops": [30.0, 0.1],
    })


def test_host_bound_only_for_host_time_and_the_profilers_share_is_said() -> None:
    v = verdicts(phases())
    # decode: 91% idle, but 60 of its 91 ms are the profiler's: limited by the profiler, not "the host"
    assert v[1].startswith("decode: 20 step(s), 4 with kernels: 100.0 ms (25.00 ms per step). Limited by the profiler")
    assert "GPU idle 91% of the time: 66% of it is the profiler's own cost, 1% waiting" in v[1]
    assert "latency-bound 93%" in v[1]
    assert v[0].startswith("prefill: 1 step(s), 26.0 ms. Limited by the host: GPU idle while the host issues work")
    headers, rows = phase_rows(phases())
    assert headers[4:12] == ["compute", "memory", "latency", "other", "idle (host)", "idle (wait)",
                             "idle (before window)", "idle (profiler)"]
    assert rows[1][6] == "8.4%" and rows[1][8] == "30.0%" and rows[1][10] == "—" and rows[1][11] == "60.0%"


def test_every_view_says_what_would_help() -> None:
    run = RunView("r", {}, {"phases": phases()})
    out = io.StringIO()
    render_terminal([run], out)
    text = out.getvalue()
    assert "what would help: decode: 60% of its 100.0 ms is the profiler's own cost" in " ".join(text.split())
    assert "record fewer steps" in text
    html = build_html([run])
    summary = html[html.index('<div class="summary">'):html.index("</div>")]
    assert summary.count('<p class="advice">') == 2 and "capture CUDA graphs or use torch.compile" in summary
