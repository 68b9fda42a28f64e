"""diff: the latency class and the idle split per phase, and kernel time per bound class."""

from __future__ import annotations

import pandas as pd
import pytest

from tracekit.analysis.diff import diff_runs


def tables(latency: float, memory: float, prof: float | None) -> dict[str, pd.DataFrame]:
    ph = pd.DataFrame({"request_id": [None], "phase": ["decode"], "steps": [10], "time_ns": [100.0],
                       "compute_bound_ns": [0.0], "memory_bound_ns": [memory], "latency_bound_ns": [latency],
                       "idle_ns": [100.0 - latency - memory], "idle_profiler_ns": [prof],
                       "idle_host_ns": [100.0 - latency - memory - (prof or 0.0)], "idle_wait_ns": [0.0],
                       "other_ns": [0.0]})
    kb = pd.DataFrame({"phase": ["decode"] * 3 + [None], "bound": ["latency", "latency", "memory", "latency"],
                       "dur_ns": [latency / 2, latency / 2, memory, 5.0]})
    return {"phases": ph, "kernel_bound": kb}


def test_latency_and_idle_causes_per_phase_and_bound_scope() -> None:
    # GIVEN batch 1 (mostly latency-bound kernels) against batch 64 (memory-bound) and only A timed unprofiled
    df = diff_runs(tables(30.0, 10.0, 20.0), tables(5.0, 60.0, None))
    ph = df[df["scope"] == "phase"].set_index("metric")
    assert ph.loc["latency_bound_ns", "a"] == 30 and ph.loc["latency_bound_ns", "b"] == 5
    assert ph.loc["latency_bound_ns", "share_a"] == pytest.approx(0.3)
    assert ph.loc["idle_profiler_ns", "a"] == 20 and pd.isna(ph.loc["idle_profiler_ns", "b"])  # unknown, not 0
    b = df[(df["scope"] == "bound") & (df["metric"] == "time_ns")].set_index(["phase", "key"])
    assert b.loc[("decode", "latency"), "a"] == 30 and b.loc[("decode", "memory"), "b"] == 60
    assert b.loc[("all", "latency"), "a"] == 35  # plus the kernel outside every step
    assert b.loc[("outside", "latency"), "b"] == 5
    assert b.loc[("decode", "latency"), "share_a"] == pytest.approx(30 / 40)


def test_runs_without_the_bound_pass_have_no_bound_rows() -> None:
    ph = pd.DataFrame({"request_id": [None], "phase": ["decode"], "steps": [1], "time_ns": [10.0], "idle_ns": [5.0]})
    df = diff_runs({"phases": ph}, {"phases": ph})
    assert "bound" not in set(df["scope"]) and "latency_bound_ns" not in set(df["metric"])
