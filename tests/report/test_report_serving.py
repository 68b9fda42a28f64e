"""The report's serving tables: each request's cost next to its latency, and speculative decoding."""

from __future__ import annotations

import pandas as pd

from tracekit.report.html import build_html
from tracekit.report.view import RunView, assisted_rows, cost_rows

MS = 1_000_000


def _requests() -> pd.DataFrame:
    return pd.DataFrame({
        "request_id": [0, 1], "name": ["chat-0.plain", "chat-0"], "ttft_ns": [20 * MS, 30 * MS],
        "tpot_ns": [10 * MS, 6 * MS], "e2e_ns": [300 * MS, 150 * MS], "queue_ns": [None, None],
        "steps": [30, 20], "mean_step_share": [1.0, 1.0], "step_time_ns": [290 * MS, 140 * MS],
        "gpu_time_ns": [100 * MS, 80 * MS], "compute_bound_ns": [25 * MS, 40 * MS],
        "memory_bound_ns": [50 * MS, 20 * MS], "flops": [2.2e12, 2.5e12], "bytes": [66e9, 44e9],
        "energy_j": [40.0, 30.0], "assistant": [None, "layers:8"], "proposed_tokens": [None, 40],
        "accepted_tokens": [None, 10], "acceptance_rate": [None, 0.25], "plain_request_id": [None, 0],
        "speedup": [None, 2.0],
    })


def test_cost_rows_put_each_requests_cost_beside_its_latency() -> None:
    headers, rows = cost_rows(_requests())
    r = dict(zip(headers, rows[1], strict=True))
    assert (r["TTFT (ms)"], r["e2e (ms)"], r["GPU time (ms)"]) == ("30.00", "150.00", "80.00")
    assert (r["compute"], r["memory"], r["GFLOP"], r["GB"], r["J"]) == ("50.0%", "25.0%", "2,500", "44", "30")
    assert cost_rows(pd.DataFrame({"request_id": [0], "ttft_ns": [1]}))[1] == []


def test_assisted_rows_split_the_time_into_draft_verify_and_host() -> None:
    steps = pd.DataFrame({"step_id": range(5), "request_id": [1, 1, 1, 1, 0],
                          "kind": ["draft", "prefill", "draft", "verify", "prefill"],
                          "cpu_start_ns": [0, 10 * MS, 30 * MS, 50 * MS, 0],
                          "cpu_end_ns": [10 * MS, 30 * MS, 50 * MS, 60 * MS, 5 * MS]})
    headers, rows = assisted_rows(_requests(), steps)
    assert len(rows) == 1
    r = dict(zip(headers, rows[0], strict=True))
    assert (r["draft (ms)"], r["verify (ms)"], r["host (ms)"]) == ("30.00", "30.00", "90.00")
    assert (r["acceptance"], r["plain e2e (ms)"], r["speed-up"]) == ("25.0%", "300.00", "2.00x")


def test_html_has_the_serving_sections_only_where_they_apply() -> None:
    view = RunView("r", {"status": "complete"}, {"requests": _requests()})
    html = build_html([view])
    assert "Each request&#x27;s cost inside the batch" in html or "Each request's cost inside the batch" in html
    assert "Speculative decoding" in html
    plain = RunView("p", {"status": "complete"}, {"requests": _requests().drop(columns=["assistant"])})
    assert "Speculative decoding" not in build_html([plain])
