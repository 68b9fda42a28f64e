"""One percentile for the recorder and the analysis: linear between the closest ranks, worked by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracekit.analysis import requests
from tracekit.collectors.hooks import RequestRecord
from tracekit.model.stats import percentile


def test_percentile_interpolates_between_ranks() -> None:
    # [10, 20, 30, 40]: rank (4 - 1) x q / 100; p50 at 1.5 -> 25; p90 at 2.7 -> 37; p99 at 2.97 -> 39.7
    assert percentile([40, 10, 30, 20], 50) == 25.0
    assert percentile([40, 10, 30, 20], 90) == pytest.approx(37.0)
    assert percentile([40, 10, 30, 20], 99) == pytest.approx(39.7)
    assert percentile([7], 99) == 7.0 and percentile([], 99) is None


def test_the_recorder_and_the_analysis_give_one_itl_p99() -> None:
    # GIVEN a request whose tokens arrive at 100, 180, 280 ns after its start at 0: gaps 80 and 100
    rec = RequestRecord(0, "r", 1, 5, 3, 0, [100, 180, 280], 300, True)
    itl = rec.metrics()["itl_ns"]
    # THEN the recorder's p99 is 80 + 0.99 x 20 = 99.8 (not the maximum, 100), its p50 90
    assert itl["p99"] == pytest.approx(99.8) and itl["p50"] == 90.0 and itl["max"] == 100
    # AND the analysis, given the same token times as steps, reports the same percentiles
    st = pd.DataFrame({"step_id": [0, 1, 2], "kind": ["prefill", "decode", "decode"], "q_len": [5, 1, 1],
                       "cpu_start_ns": [0, 150, 250], "cpu_end_ns": [90, 170, 270], "gpu_end_ns": [100, 180, 280],
                       "gpu_busy_ns": 10, "tokens": [5, 1, 1], "batch": 1, "source": "vllm",
                       "request_id": pd.array([None] * 3, dtype="Int64")})
    ks = pd.DataFrame({"row": [], "step_id": pd.array([], dtype="Int64")})
    ann = pd.DataFrame(columns=["ts_ns", "dur_ns", "name", "cat"])
    ops = pd.DataFrame({"ts_ns": [0], "dur_ns": [1], "name": ["aten::empty"], "cat": ["cpu_op"]})
    req, *_ = requests.build(st, ks, ann, ops)
    assert (req.iloc[0].itl_p50_ns, req.iloc[0].itl_p99_ns) == (itl["p50"], itl["p99"])
    assert np.isclose(req.iloc[0].itl_p99_ns, 99.8)
