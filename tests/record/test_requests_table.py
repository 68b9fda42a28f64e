"""tracekit.collectors.tables.requests_table: the recorder's requests table from its host log, values
worked by hand (vLLM's definitions: TTFT to the first token, TPOT = (e2e - TTFT) / (tokens - 1), ITL
each gap between tokens)."""

from __future__ import annotations

import pytest

from tracekit.collectors.hooks import RequestRecord
from tracekit.collectors.tables import percentile, requests_table


def _records() -> list[RequestRecord]:
    # request 0: starts at 1,000 ns; tokens at 1,100 / 1,130 / 1,150 / 1,200; ends at 1,210
    a = RequestRecord(0, "chat-0", 1, 25, 4, 1_000, token_ns=[1_100, 1_130, 1_150, 1_200], end_ns=1_210,
                      complete=True)
    # request 1: one token only (no TPOT, no gap); request 2: no token at all (never reached the host)
    b = RequestRecord(1, "chat-1", 2, 7, 1, 2_000, token_ns=[2_040], end_ns=2_050, complete=True)
    c = RequestRecord(2, "chat-2", 1, 7, 8, 3_000)
    return [a, b, c]


def test_requests_table_values_by_hand() -> None:
    t = requests_table(_records(), offset_ns=5_000, itl=True).to_pydict()
    assert t["request_id"] == [0, 1, 2] and t["name"] == ["chat-0", "chat-1", "chat-2"]
    assert t["batch"] == [1, 2, 1] and t["input_tokens"] == [25, 7, 7] and t["output_tokens"] == [4, 1, 0]
    # start and end move onto the trace clock (host + 5,000); a request that never ended has no end
    assert t["start_ns"] == [6_000, 7_000, 8_000] and t["end_ns"] == [6_210, 7_050, None]
    # TTFT = 1,100 - 1,000 = 100 and 2,040 - 2,000 = 40; e2e = 1,210 - 1,000 = 210 and 50
    assert t["ttft_ns"] == [100, 40, None] and t["e2e_ns"] == [210, 50, None]
    # TPOT = (210 - 100) / (4 - 1) = 36.67; one token has none
    assert t["tpot_ns"][0] == pytest.approx(110 / 3) and t["tpot_ns"][1:] == [None, None]
    assert t["prefill_share"][0] == pytest.approx(100 / 210) and t["prefill_share"][1] == pytest.approx(0.8)
    # ITL: gaps 30, 20, 50 -> sorted 20, 30, 50; rank (n-1)q/100 interpolated: p50 = 30,
    # p90 = 30 + 0.8 * 20 = 46, p99 = 30 + 0.98 * 20 = 49.6
    assert t["itl_p50_ns"] == [30.0, None, None]
    assert t["itl_p90_ns"][0] == pytest.approx(46.0) and t["itl_p99_ns"][0] == pytest.approx(49.6)
    assert t["source"] == ["tracekit"] * 3


def test_requests_table_without_itl_leaves_those_columns_null_and_takes_extra_columns() -> None:
    t = requests_table(_records(), source="engine", extra={"queue_ns": [5, None, 7]}).to_pydict()
    assert t["start_ns"] == [1_000, 2_000, 3_000]  # offset 0: the host clock
    assert t["itl_p50_ns"] == [None] * 3 and t["queue_ns"] == [5, None, 7] and t["source"] == ["engine"] * 3
    with pytest.raises(ValueError, match="unknown columns"):
        requests_table(_records(), extra={"queue_time": [1, 2, 3]})
    assert requests_table([]).num_rows == 0


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([], 50) is None and percentile([7.0], 99) == 7.0
    assert percentile([10.0, 40.0, 20.0, 30.0], 50) == 25.0  # rank 1.5 of 10, 20, 30, 40
    assert percentile([10.0, 40.0, 20.0, 30.0], 100) == 40.0
