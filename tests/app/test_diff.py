"""`tracekit diff` and analysis.diff: per phase and per kernel class, A against B."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from helpers import KERNELS, make_run

from tracekit.analysis.diff import diff_runs, kernel_classes
from tracekit.cli import main


def _tables(run) -> dict[str, pd.DataFrame]:
    return {t: run.read_df(t) for t in ("phases", "steps", "gpu_activity")}


def test_phase_rows_match_the_phases_tables(tmp_path: Path) -> None:
    # GIVEN batch 1 and batch 8 runs, B 1.3x slower per step
    a, b = make_run(tmp_path, "bs1"), make_run(tmp_path, "bs8", batch=8, scale=1.3)
    ta, tb = _tables(a), _tables(b)
    before = {k: v.copy() for k, v in ta.items()}
    df = diff_runs(ta, tb)
    for k in ta:  # pure: inputs untouched
        pd.testing.assert_frame_equal(ta[k], before[k])
    pa_, pb_ = ta["phases"].set_index("phase"), tb["phases"].set_index("phase")
    ph = df[df["scope"] == "phase"].set_index(["key", "metric"])
    for phase in ("prefill", "decode"):
        for m in ("time_ns", "idle_ns", "compute_bound_ns", "memory_bound_ns", "other_ns"):
            r = ph.loc[(phase, m)]
            assert r["a"] == pa_.loc[phase, m] and r["b"] == pb_.loc[phase, m]
            assert r["delta"] == pytest.approx(pb_.loc[phase, m] - pa_.loc[phase, m])
            assert r["ratio"] == pytest.approx(pb_.loc[phase, m] / pa_.loc[phase, m])
        # the split's shares are of the phase's own time
        r = ph.loc[(phase, "idle_ns")]
        assert r["share_a"] == pytest.approx(pa_.loc[phase, "idle_ns"] / pa_.loc[phase, "time_ns"])
        assert ph.loc[(phase, "time_per_step_ns")]["b"] == pytest.approx(pb_.loc[phase, "time_ns"] / pb_.loc[phase, "steps"])
    # time_ns shares over phases sum to 1
    assert ph.xs("time_ns", level="metric")["share_b"].sum() == pytest.approx(1.0)


def test_kernel_classes_per_phase(tmp_path: Path) -> None:
    a, b = make_run(tmp_path, "fp16"), make_run(tmp_path, "bf16", scale=0.5)
    ta, tb = _tables(a), _tables(b)
    df = diff_runs(ta, tb)
    k = df[(df["scope"] == "kernel_class") & (df["metric"] == "time_ns")].set_index(["phase", "key"])
    g = ta["gpu_activity"].assign(cls=kernel_classes(ta["gpu_activity"]["name"].astype(object)))
    expect_all = g.groupby("cls")["dur_ns"].sum()
    assert set(k.loc["all"].index) == set(expect_all.index) == {c for _, c, _ in KERNELS}
    for cls, v in expect_all.items():
        assert k.loc[("all", cls), "a"] == v
        assert k.loc[("all", cls), "share_a"] == pytest.approx(v / expect_all.sum())
    # per phase: kernels inside prefill steps' GPU spans
    st = ta["steps"]
    pre = st[st["kind"] == "prefill"]
    inside = g[[any(s <= t < e for s, e in zip(pre["gpu_start_ns"], pre["gpu_end_ns"], strict=True)) for t in g["ts_ns"]]]
    for cls, v in inside.groupby("cls")["dur_ns"].sum().items():
        assert k.loc[("prefill", cls), "a"] == v
    assert (k.loc["all", "ratio"] < 0.6).all()  # B is the half-time run
    counts = df[(df["scope"] == "kernel_class") & (df["metric"] == "kernels") & (df["phase"] == "all")]
    assert counts["a"].sum() == len(ta["gpu_activity"])


def test_one_side_missing_is_null_not_zero(tmp_path: Path) -> None:
    a = make_run(tmp_path, "full")
    df = diff_runs(_tables(a), {})
    assert len(df) > 0
    assert df["b"].isna().all() and df["delta"].isna().all() and df["ratio"].isna().all()
    assert df["a"].notna().all()
    assert diff_runs({}, {}).empty


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_cli_terminal_and_table(tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str) -> None:
    a, b = make_run(tmp_path, "bs1"), make_run(tmp_path, "bs8", batch=8, scale=1.3)
    out = tmp_path / f"d{suffix}"
    assert main(["diff", str(a.path), str(b.path), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "per phase" in text and "per kernel class" in text and "gemm" in text and "1.30×" in text
    got = pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), diff_runs(_tables(a), _tables(b)), check_dtype=False)


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = make_run(tmp_path, "x")
    assert main(["diff", str(a.path), str(tmp_path / "nope")]) == 2
    assert main(["diff", str(a.path), str(a.path), "--out", str(tmp_path / "d.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("tracekit: error:") == 2


def test_sweep_point_kernels_are_placed_by_trace_steps(tmp_path: Path) -> None:
    # GIVEN a sweep point: ``steps`` timed on the host clock (no GPU spans), the traced steps in ``trace_steps``
    from tracekit.app.diff import load
    from tracekit.model.schema import from_pandas
    from tracekit.store.rundir import write_table

    run = make_run(tmp_path, "point")
    traced = run.read_df("steps")
    host = traced.drop(columns=["gpu_start_ns", "gpu_end_ns", "gpu_busy_ns"]).assign(
        cpu_start_ns=traced["cpu_start_ns"] - traced["cpu_start_ns"].min(),
        cpu_end_ns=traced["cpu_end_ns"] - traced["cpu_start_ns"].min(), source="host")
    write_table(run.table_path("trace_steps"), from_pandas("steps", traced))
    run.write_table("steps", from_pandas("steps", host))
    # WHEN its kernels are attributed to phases
    df = diff_runs(load(run), load(run))
    k = df[(df["scope"] == "kernel_class") & (df["metric"] == "kernels")]
    # THEN every kernel sits in a prefill or decode step, none "outside"
    n_kernels = len(run.read_df("gpu_activity"))
    assert k[k["phase"] == "all"]["a"].sum() == n_kernels
    assert k[k["phase"].isin(["prefill", "decode"])]["a"].sum() == n_kernels
    assert "outside" not in set(k["phase"])
