"""Two hand-made runs compared: phase, kernel-class and bound rows, every value worked out by hand."""

from __future__ import annotations

import math

import pandas as pd

from tracekit.analysis import diff


def _phases(pre: tuple, dec: tuple) -> pd.DataFrame:
    # (time_ns, steps, compute_bound_ns, memory_bound_ns, idle_ns); plus a request's row, left out
    cols = ["request_id", "phase", "time_ns", "steps", "compute_bound_ns", "memory_bound_ns", "idle_ns"]
    return pd.DataFrame([(None, "prefill", *pre), (None, "decode", *dec), (0, "prefill", 1, 1, 1, 1, 1)],
                        columns=cols)


def _gpu(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["name", "kind", "ts_ns", "dur_ns"])


STEPS = pd.DataFrame({"kind": ["prefill", "decode"], "gpu_start_ns": [0, 1000], "gpu_end_ns": [1000, 2000]})


def test_diff_of_two_runs() -> None:
    a = {"phases": _phases((1000, 1, 600, 300, 100), (3000, 3, 0, 900, 2100)), "steps": STEPS,
         "gpu_activity": _gpu([("sm90_gemm", "kernel", 100, 400), ("vectorized_elementwise_kernel", "kernel", 1100, 100),
                               ("sm90_gemm", "kernel", 1500, 300), ("Memcpy HtoD", "memcpy", 5000, 50)]),
         "kernel_bound": pd.DataFrame({"bound": ["compute", "memory", "memory"], "dur_ns": [400, 100, 300],
                                       "phase": ["prefill", "decode", None]})}
    b = {"phases": _phases((500, 1, 400, 50, 50), (3000, 6, 0, 600, 2400)), "steps": STEPS,
         "gpu_activity": _gpu([("sm90_gemm", "kernel", 100, 200)]),
         "kernel_bound": pd.DataFrame({"bound": ["latency"], "dur_ns": [200], "phase": ["prefill"]})}
    d = diff.diff_runs(a, b)
    row = {(r.scope, r.phase, r.key, r.metric): r for r in d.itertuples()}

    t = row[("phase", "prefill", "prefill", "time_ns")]
    assert (t.a, t.b, t.delta, t.ratio) == (1000, 500, -500, 0.5)
    assert (t.share_a, t.share_b) == (1000 / 4000, 500 / 3500)  # of the run's total time
    ps = row[("phase", "decode", "decode", "time_per_step_ns")]
    assert (ps.a, ps.b, ps.ratio) == (1000, 500, 0.5) and math.isnan(ps.share_a)
    m = row[("phase", "decode", "decode", "memory_bound_ns")]
    assert (m.a, m.b, m.delta, m.share_a, m.share_b) == (900, 600, -300, 0.3, 0.2)  # of the phase's time
    c = row[("phase", "decode", "decode", "compute_bound_ns")]
    assert (c.a, c.b, c.delta) == (0, 0, 0) and math.isnan(c.ratio)  # no ratio to a zero
    assert not any(k[3] == "latency_bound_ns" for k in row)  # neither run has the column: no row

    g = row[("kernel_class", "all", "gemm", "time_ns")]
    assert (g.a, g.b, g.share_a, g.share_b) == (700, 200, 700 / 850, 1.0)
    gd = row[("kernel_class", "decode", "gemm", "time_ns")]
    assert (gd.a, gd.share_a) == (300, 0.75) and math.isnan(gd.b)  # not run: null, not 0
    assert row[("kernel_class", "decode", "elementwise", "kernels")].a == 1
    assert row[("kernel_class", "outside", "copy", "time_ns")].a == 50  # outside every step's GPU span
    assert math.isnan(row[("kernel_class", "all", "gemm", "kernels")].share_a)

    bd = row[("bound", "all", "memory", "time_ns")]
    assert (bd.a, bd.share_a) == (400, 0.5) and math.isnan(bd.b)
    assert row[("bound", "outside", "memory", "kernels")].a == 1
    assert row[("bound", "prefill", "latency", "time_ns")].b == 200


def test_a_bound_table_in_one_run_only_is_still_compared() -> None:
    # run a was analysed without the bound pass; run b's prefill had 200 ns of latency-bound kernels
    b = {"kernel_bound": pd.DataFrame({"bound": ["latency"], "dur_ns": [200], "phase": ["prefill"]})}
    row = {(r.scope, r.phase, r.key, r.metric): r for r in diff.diff_runs({}, b).itertuples()}
    r = row[("bound", "prefill", "latency", "time_ns")]
    assert r.b == 200 and math.isnan(r.a)


def test_run_phases_sums_request_rows_when_there_is_no_run_row() -> None:
    ph = pd.DataFrame({"request_id": [0, 1, 1], "phase": ["decode", "decode", "prefill"], "time_ns": [10, 30, 5],
                       "steps": [1, 3, 0]})
    out = diff.run_phases(ph).set_index("phase")
    assert out.loc["decode", "time_ns"] == 40 and out.loc["decode", "time_per_step_ns"] == 10
    assert math.isnan(out.loc["prefill", "time_per_step_ns"])  # no steps: no per-step time
    assert diff.run_phases(None).empty and diff.bound_time(None).empty and diff.kernel_time(None, None).empty
    # a phases table without a steps column (or without time) gives no per-step time, and no error
    no_steps = diff.run_phases(ph.drop(columns=["steps"])).set_index("phase")
    assert no_steps.loc["decode", "time_ns"] == 40 and "time_per_step_ns" not in no_steps
    assert "time_per_step_ns" not in diff.run_phases(ph.drop(columns=["time_ns"]))
