"""The CPU split by operator class and the bootstrap that tells a change from noise, on hand-built tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracekit.analysis import noise, opclass


def _ops(rows: list[tuple[int, float | None, str, int, int]], tid: int = 7) -> pd.DataFrame:
    """(op_id, parent_id, name, ts_ns, dur_ns) on one thread."""
    df = pd.DataFrame(rows, columns=["op_id", "parent_id", "name", "ts_ns", "dur_ns"])
    df["tid"] = tid
    return df


def test_each_step_splits_into_classes_that_add_up_to_its_window() -> None:
    steps = pd.DataFrame({"step_id": [0, 1], "kind": ["prefill", "decode"],
                          "cpu_start_ns": [0, 1000], "cpu_end_ns": [1000, 1500]})
    ops = _ops([
        # prefill: linear 300 (its mm 250 counts as gemm too), sdpa 200 with a matmul inside (attention),
        # an RMSNorm written out (pow 20 + mean 30 + rsqrt 10 = norm), add 40 (elementwise)
        (0, None, "aten::linear", 10, 300), (1, 0, "aten::mm", 20, 250),
        (2, None, "aten::scaled_dot_product_attention", 400, 200), (3, 2, "aten::matmul", 410, 150),
        (4, None, "aten::pow", 700, 20), (5, None, "aten::mean", 730, 30), (6, None, "aten::rsqrt", 770, 10),
        (7, None, "aten::add", 800, 40),
        # decode: mm 100, argmax 50; between the steps (outside): isin 30
        (8, None, "aten::mm", 1100, 100), (9, None, "aten::argmax", 1300, 50), (10, None, "aten::isin", 1600, 30),
    ])
    # another thread (less op time inside the steps) is not the steps' thread: its op is left out
    ops = pd.concat([ops, _ops([(11, None, "aten::mm", 50, 200)], tid=8)], ignore_index=True)
    per = opclass.step_op_classes(ops, steps, span=(0, 2000))
    got = {(r["step_id"], r["op_class"]): r["time_ns"] for r in per.to_pylist()}
    assert got[(0, "gemm")] == 300 and got[(0, "attention")] == 200 and got[(0, "norm")] == 60
    assert got[(0, "elementwise")] == 40 and got[(0, "framework")] == 1000 - 600
    assert got[(1, "gemm")] == 100 and got[(1, "sampling")] == 50 and got[(1, "framework")] == 350
    # outside: 2000 - 1000 - 500 = 500 ns, 30 of them the isin
    assert got[(-1, "sampling")] == 30 and got[(-1, "framework")] == 470
    split = opclass.split(per).to_pandas().set_index(["phase", "op_class"])
    assert split.loc[("prefill", "gemm"), "share"] == pytest.approx(0.3)
    assert split.loc[("decode", "framework"), "share"] == pytest.approx(0.7)
    assert split.loc[("outside", "framework"), "steps"] == 0
    assert split.groupby(level=0)["share"].sum().tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert list(split.xs("prefill").index) == list(opclass.CLASSES)


def test_op_names_fall_in_their_classes() -> None:
    names = pd.Series(["aten::linear", "aten::bmm", "aten::_scaled_dot_product_flash_attention_for_cpu",
                       "aten::softmax", "aten::layer_norm", "aten::rms_norm", "aten::argmax", "aten::topk",
                       "aten::silu", "aten::cat", "my_module::thing"])
    assert opclass.op_classes(names).tolist() == ["gemm", "gemm", "attention", "attention", "norm", "norm",
                                                  "sampling", "sampling", "elementwise", "elementwise",
                                                  "elementwise"]


def test_a_gpu_run_gets_no_cpu_split() -> None:
    assert opclass.is_cpu_run(pd.DataFrame()) and not opclass.is_cpu_run(pd.DataFrame({"ts_ns": [1]}))


def _steps(kind: str, durations: list[float]) -> pd.DataFrame:
    start = np.cumsum([0.0, *durations[:-1]])
    return pd.DataFrame({"kind": kind, "cpu_start_ns": start, "cpu_end_ns": start + np.array(durations)})


def test_the_same_distribution_on_both_sides_is_within_noise() -> None:
    rng = np.random.default_rng(1)
    a = [_steps("decode", list(rng.normal(100, 10, 30))) for _ in range(3)]
    b = [_steps("decode", list(rng.normal(100, 10, 30))) for _ in range(3)]
    (row,) = noise.phase_changes(a, b, rounds=500).to_dict("records")
    assert row["verdict"] == noise.WITHIN and row["ratio_lo"] < 1.0 < row["ratio_hi"]
    assert (row["runs_a"], row["steps_b"]) == (3, 90)


def test_a_real_change_is_named_and_its_interval_holds_the_ratio() -> None:
    a = [_steps("decode", [100.0, 102, 98, 101, 99]) for _ in range(3)]
    b = [_steps("decode", [150.0, 153, 147, 151, 149]) for _ in range(3)]
    (row,) = noise.phase_changes(a, b, rounds=500).to_dict("records")
    assert row["ratio"] == pytest.approx(1.5) and row["ratio_lo"] <= 1.5 <= row["ratio_hi"]
    assert row["verdict"] == "B slower" and row["ratio_lo"] > 1.4


def test_run_to_run_noise_widens_the_interval() -> None:
    # each run is steady inside, but the runs differ by 2x: the change of 1.2x is within that noise
    a = [_steps("prefill", [100.0, 100, 100]), _steps("prefill", [200.0, 200, 200])]
    b = [_steps("prefill", [120.0, 120, 120]), _steps("prefill", [240.0, 240, 240])]
    (row,) = noise.phase_changes(a, b, rounds=1000).to_dict("records")
    assert row["ratio"] == pytest.approx(1.2) and row["verdict"] == noise.WITHIN


def test_one_step_a_side_has_no_noise_estimate_and_one_run_says_so() -> None:
    (row,) = noise.phase_changes([_steps("prefill", [100.0])], [_steps("prefill", [50.0])]).to_dict("records")
    assert row["verdict"] == noise.NO_ESTIMATE and np.isnan(row["ratio_lo"]) and row["ratio"] == 0.5
    one = noise.phase_changes([_steps("decode", [100.0, 101, 99])], [_steps("decode", [200.0, 201, 199])])
    assert one["verdict"].iloc[0] == "B slower (step noise only)"
