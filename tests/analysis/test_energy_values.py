"""Energy and DRAM utilisation over step windows from hand-made counter samples; values worked out by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracekit.analysis import energy
from tracekit.model.ceilings import Ceiling

MS = 1_000_000


def _counters() -> pd.DataFrame:
    rows = []
    # device 0: the energy counter moves in 13 J jumps at 20 and 40 ms; power 100/200/200/100/100 W
    for t, e, p in zip([0, 10, 20, 30, 40], [100, 100, 113, 113, 126], [100, 200, 200, 100, 100], strict=True):
        rows += [(t * MS, "energy", e, 0), (t * MS, "power", p, 0)]
    for t, u in zip([0, 10, 20], [10, 30, 50], strict=True):
        rows.append((t * MS, "dram_bw_util", u, 0))
    # device 1: other values, never read for device 0
    rows += [(t * MS, m, 9999, 1) for t in (0, 50) for m in ("energy", "power", "dram_bw_util")]
    return pd.DataFrame(rows, columns=["ts_ns", "metric", "value", "device"])


def test_window_energy_from_the_counter_else_from_power() -> None:
    w = np.array([[25, 35], [5, 15], [35, 45], [10, 20]], dtype=np.int64) * MS
    e = energy.window_energy_j(_counters(), w, device=0)
    # [25, 35] ms lies between the counter's updates at 20 and 40 ms: 13 J x 10 / 20
    assert e[0] == pytest.approx(6.5)
    # [5, 15] ms starts before the first update: power 150 -> 200 W over 5 ms, then 200 W over 5 ms
    assert e[1] == pytest.approx((150 + 200) / 2 * 0.005 + 200 * 0.005)
    assert np.isnan(e[2])  # past the last sample: no extrapolation
    # [10, 20] ms: not after the first update either: power 200 W throughout
    assert e[3] == pytest.approx(2.0)


def test_window_mean_holds_each_sample_until_the_next() -> None:
    c = _counters()
    w = np.array([[5, 15], [18, 25]], dtype=np.int64) * MS
    # 10% for 5 ms, 30% for 5 ms, 30% for 2 ms, 50% for 5 ms
    assert energy.window_mean(c, "dram_bw_util", w, 0) == pytest.approx((50 + 150 + 60 + 250) / 17)
    assert np.isnan(energy.window_mean(c, "dram_bw_util", np.array([[35, 40]]) * MS, 0))  # after the last hold
    assert np.isnan(energy.window_mean(c, "dram_bw_util", np.array([[-5, -1]]) * MS, 0))  # before the first
    assert energy.window_mean(c, "dram_bw_util", np.array([[25, 30]]) * MS, 0) == pytest.approx(50)


def _steps() -> pd.DataFrame:
    return pd.DataFrame({"step_id": [0, 1], "request_id": [0, 0], "kind": ["prefill", "decode"],
                         "cpu_start_ns": [25 * MS, 5 * MS], "cpu_end_ns": [35 * MS, 15 * MS], "tokens": [10, 2]})


def _phases() -> pd.DataFrame:
    return pd.DataFrame({"request_id": pd.array([None, 0, None], dtype="Int64"),
                         "phase": ["prefill", "prefill", "decode"]})


def test_phase_energy_and_dram_columns() -> None:
    ph = energy.phase_energy(_phases(), _steps(), _counters(), 0).to_pandas()
    assert ph["energy_j"].tolist() == pytest.approx([6.5, 6.5, 1.875])
    assert ph["energy_j_per_token"].tolist() == pytest.approx([0.65, 0.65, 1.875 / 2])
    g = energy.gpm_dram_columns(ph, _steps(), _counters(), 0, 4e12).to_pandas()
    assert g["gpm_dram_bw_util_pct"].tolist() == pytest.approx([50, 50, 20])
    assert g["gpm_dram_tbps"].tolist() == pytest.approx([2.0, 2.0, 0.8])  # that share of 4 TB/s
    assert energy.phase_energy(_phases(), _steps(), _counters().iloc[:0])["energy_j"].null_count == len(_phases())


def test_energy_pass() -> None:
    gpu = pd.DataFrame({"device": [0, 0, 1]})
    toy = Ceiling("toy", {"fp16": 1e14}, 4e12, "test")
    out = energy.energy_pass(gpu, _steps(), _phases(), _counters(), bound_ran=True, ceiling=toy)
    assert out is not None
    out = out.to_pandas()
    assert out is not None
    assert out["energy_j"].tolist() == pytest.approx([6.5, 6.5, 1.875])
    assert out["gpm_dram_tbps"].tolist() == pytest.approx([2.0, 2.0, 0.8])
    assert energy.energy_pass(gpu, _steps(), _phases(), _counters(), bound_ran=False, ceiling=toy) is None
    assert energy.energy_pass(gpu, _steps(), _phases(), _counters(), bound_ran=True, ceiling=None) is None


def test_a_window_right_after_the_last_sample_holds_it_one_period() -> None:
    c = _counters()
    # the last DRAM sample (20 ms) holds until 30 ms, one sampling period: a window opening at 30 ms still
    # reads it; one opening later does not
    assert energy.window_mean(c, "dram_bw_util", np.array([[30, 35]]) * MS, 0) == pytest.approx(50)
    assert np.isnan(energy.window_mean(c, "dram_bw_util", np.array([[31, 35]]) * MS, 0))
    # a window that opens before the first sample is not read at all (nothing says what came before)
    assert np.isnan(energy.window_mean(c, "dram_bw_util", np.array([[-5, 15]]) * MS, 0))


def test_no_counters_at_all_give_nan_not_an_error() -> None:
    # A run recorded without a sampler: no counters table (None) or one without a single column.
    w = np.array([[5, 15]], dtype=np.int64) * MS
    for none in (None, pd.DataFrame()):
        assert np.isnan(energy.window_energy_j(none, w)).all()  # type: ignore[arg-type]
        assert np.isnan(energy.window_mean(none, "dram_bw_util", w))  # type: ignore[arg-type]
        g = energy.gpm_dram_columns(_phases(), _steps(), none, 0, 4e12).to_pandas()  # type: ignore[arg-type]
        assert g["gpm_dram_bw_util_pct"].isna().all() and g["gpm_dram_tbps"].isna().all()


def test_power_with_exactly_two_samples_integrates() -> None:
    # 100 W at 0 ms and 300 W at 10 ms: over [0, 10] ms the mean is 200 W -> 2 J (no energy counter)
    c = pd.DataFrame({"ts_ns": [0, 10 * MS], "metric": ["power", "power"], "value": [100.0, 300.0], "device": 0})
    assert energy.window_energy_j(c, np.array([[0, 10 * MS]]))[0] == pytest.approx(2.0)
