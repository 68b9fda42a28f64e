"""Warm-ups left out of the run's phase totals, and the first-use rule; every value worked out by hand."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from tracekit.analysis import warmup

NA = pd.NA
COLS = ["request_id", "phase", "steps", "steps_captured", "time_ns", "gpu_busy_ns", "compute_bound_ns",
        "memory_bound_ns", "idle_ns", "flops", "bytes", "energy_j", "energy_j_per_token", "achieved_tflops",
        "achieved_tbps", "achieved_tflops_wall", "achieved_tbps_wall", "pct_peak_flops", "pct_peak_bandwidth",
        "gpm_dram_bw_util_pct", "gpm_dram_tbps", "kernels_modelled"]


def _rebase(phases: Any, **kw: Any) -> Any:
    """warmup.rebase, its Arrow table read back as a frame (a frame it hands back unchanged as it is)."""
    out = warmup.rebase(phases, **kw)
    return out.to_pandas() if isinstance(out, pa.Table) else out


def _phases() -> pd.DataFrame:
    rows = [
        # the run's prefill: requests 0 and 1; 6 J over 30 tokens; 2 TFLOP/s = 2% of peak, 1 TB/s = 20%
        (NA, "prefill", 3, 3, 600, 300, 100, 100, 300, 6e5, 3e5, 6.0, 0.2, 2.0, 1.0, 1.0, 0.5, 2.0, 20.0, 50.0, 2.5, 9),
        (0, "prefill", 1, 1, 300, 200, 80, 50, 100, 4e5, 1e5, 3.0, 0.3, 2.0, 0.5, 4 / 3, 1 / 3, 2.0, 10.0, 80.0, 4.0, 3),
        (1, "prefill", 2, 2, 300, 100, 20, 50, 200, 2e5, 2e5, 3.0, 0.15, 2.0, 2.0, 2 / 3, 2 / 3, 2.0, 40.0, 20.0, 1.0, 6),
        (NA, "decode", 4, 4, 400, 40, 0, 40, 360, 0.0, 4e4, 1.0, 0.25, 0.0, 1.0, 0.0, 0.1, 0.0, 20.0, 10.0, 0.5, 4),
        (0, "decode", 4, 4, 400, 40, 0, 40, 360, 0.0, 4e4, 1.0, 0.25, 0.0, 1.0, 0.0, 0.1, 0.0, 20.0, 10.0, 0.5, 4),
        (NA, "outside", 0, 0, 50, 10, None, None, 40, None, None, None, None, None, None, None, None, None, None,
         None, None, None),
    ]
    df = pd.DataFrame(rows, columns=COLS)
    df["request_id"] = df["request_id"].astype("Int64")
    return df


def test_rebase_leaves_the_warmup_out_of_the_run_rows() -> None:
    before = _phases()
    out = _rebase(before, remove=[0])
    pd.testing.assert_frame_equal(before, _phases())  # input untouched
    # the decode run row held only request 0: dropped; the outside row is nobody's
    assert [(None if pd.isna(r) else int(r), p) for r, p in zip(out["request_id"], out["phase"], strict=True)] == \
        [(None, "prefill"), (0, "prefill"), (1, "prefill"), (0, "decode"), (None, "outside")]
    run = out.iloc[0]
    sums = ["steps", "steps_captured", "time_ns", "gpu_busy_ns", "compute_bound_ns", "memory_bound_ns", "idle_ns",
            "flops", "bytes", "energy_j", "kernels_modelled"]
    assert [run[c] for c in sums] == [2, 2, 300, 100, 20, 50, 200, 2e5, 2e5, 3.0, 6]
    assert run["energy_j_per_token"] == pytest.approx(3.0 / 20)  # 30 tokens less request 0's 10
    # 2e5 FLOP and 2e5 B over 100 ns busy, 300 ns wall
    assert (run["achieved_tflops"], run["achieved_tbps"]) == pytest.approx((2.0, 2.0))
    assert (run["achieved_tflops_wall"], run["achieved_tbps_wall"]) == pytest.approx((2 / 3, 2 / 3))
    # % of peak scales with the rate: 1% per TFLOP/s, 20% per TB/s
    assert (run["pct_peak_flops"], run["pct_peak_bandwidth"]) == pytest.approx((2.0, 40.0))
    # DRAM utilisation time-weighted: (50 x 600 - 80 x 300) / 300 = 20%; 0.05 TB/s per %
    assert (run["gpm_dram_bw_util_pct"], run["gpm_dram_tbps"]) == pytest.approx((20.0, 1.0))
    assert out.iloc[4]["time_ns"] == 50 and out.iloc[1]["steps"] == 1  # untouched rows
    # adding the request back gives the totals again
    back = _rebase(out, add=[0])
    assert [back.iloc[0][c] for c in sums] == [3, 3, 600, 300, 100, 100, 300, 6e5, 3e5, 6.0, 9]
    assert back.iloc[0]["energy_j_per_token"] == pytest.approx(0.2)
    assert back.iloc[0]["gpm_dram_bw_util_pct"] == pytest.approx(50.0)
    assert _rebase(before) is before


def _requests() -> pd.DataFrame:
    ms = 1_000_000
    return pd.DataFrame({"request_id": [0, 1, 2, 3], "start_ns": [0, 10, 20, 30],
                         "ttft_ns": [900 * ms, 100 * ms, 120 * ms, 110 * ms], "input_tokens": [50, 50, 60, 40]})


def test_first_use_rule() -> None:
    req = _requests()
    assert warmup.first_use_flags(req) == [{"request_id": 0, "ttft_ns": 900e6, "others_ttft_ns": 110e6}]
    assert warmup.first_use_flags(req, warmups=[0]) == []  # request 1: 100 ms against 115 ms
    # exactly 3 x the others' median is flagged; just under is not
    at = req.assign(ttft_ns=[330e6, 100e6, 120e6, 110e6])
    assert [f["request_id"] for f in warmup.first_use_flags(at)] == [0]
    assert warmup.first_use_flags(req.assign(ttft_ns=[329e6, 100e6, 120e6, 110e6])) == []
    # a prompt more than twice the others' median (50) explains a long TTFT; exactly twice does not
    assert warmup.first_use_flags(req.assign(input_tokens=[101, 50, 60, 40])) == []
    assert len(warmup.first_use_flags(req.assign(input_tokens=[100, 50, 60, 40]))) == 1
    assert warmup.first_use_flags(req.iloc[:1]) == []  # nobody else to compare with
    # TTFTs of a few ns still compare: 5 ns against a median of 1 ns
    tiny = req.assign(ttft_ns=[5, 1, 1, 1])
    assert warmup.first_use_flags(tiny) == [{"request_id": 0, "ttft_ns": 5.0, "others_ttft_ns": 1.0}]
    assert warmup.first_use_flags(req.assign(ttft_ns=[5, 0, 0, 0])) == []  # no median to compare with
    # the first by start time, not by id
    late = req.assign(start_ns=[40, 10, 20, 30])
    assert warmup.first_use_flags(late) == []


def test_warmup_ids_and_the_pass() -> None:
    req = _requests()
    assert warmup.first_requests(req, 2) == [0, 1]
    assert warmup.first_requests(req.assign(start_ns=[5, 5, 0, 1]), 3) == [2, 3, 0]  # ties by id
    assert warmup.first_requests(req, 0) == []
    assert warmup.warmup_ids(req, marked=[2, 99], first_n=1) == [0, 2]  # 99 is no request of the run
    out = warmup.warmup_pass(req, _phases(), manifest={"warmup_requests": [0]}, warmup_first=None)
    assert out["warmup"] == {"requests": [0], "first_n": None, "flagged": []}
    assert out["warnings"] == [] and len(out["phases"]) == 5
    flagged = warmup.warmup_pass(req, _phases(), manifest={}, warmup_first=None)
    assert flagged["warmup"]["flagged"] == [0] and len(flagged["warnings"]) == 1 and "phases" not in flagged
    # leaving request 1 out instead: (50 x 600 - 20 x 300) / 300 = 80%
    assert _rebase(_phases(), remove=[1]).iloc[0]["gpm_dram_bw_util_pct"] == pytest.approx(80.0)


def test_adding_a_request_without_energy_adds_none() -> None:
    # request 1 back into a run row that holds only request 0; its energy was not measured (NaN)
    out = _rebase(_phases(), remove=[1])
    assert (out.iloc[0]["energy_j"], out.iloc[0]["flops"]) == (3.0, 4e5)
    out.loc[out["request_id"].eq(1).fillna(False), "energy_j"] = float("nan")
    back = _rebase(out, add=[1])
    assert (back.iloc[0]["energy_j"], back.iloc[0]["flops"], back.iloc[0]["steps"]) == (3.0, 6e5, 3)
    # and taking it out again takes no energy away
    assert _rebase(back, remove=[1]).iloc[0]["energy_j"] == 3.0
