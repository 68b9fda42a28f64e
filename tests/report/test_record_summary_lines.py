"""The record summary: the CPU split first, the profiler cost read by its sign, the repeats' spread, and
the CPU load warnings with what to set."""

from __future__ import annotations

import pytest

from tracekit.collectors import hostload
from tracekit.report.record_summary import (
    cpu_split_lines,
    overhead_reading,
    render,
    repeat_lines,
    warning_lines,
)


@pytest.mark.parametrize("over, reads", [
    ({"ttft_pct": 44.0, "tpot_pct": 57.6, "e2e_pct": 55.6}, "the traced run is slower"),
    ({"ttft_pct": -96.6, "tpot_pct": -10.0, "e2e_pct": -20.0}, "the traced run was faster, so run-to-run noise"),
    ({"ttft_pct": -72.0, "tpot_pct": 12.7, "e2e_pct": -18.3}, "mixed signs"),
])
def test_the_profiler_cost_is_read_by_its_sign(over: dict, reads: str) -> None:
    assert reads in overhead_reading(over)
    text = render({"status": "complete", "timings": {"profiler_overhead": over}}, "run")
    line = next(ln for ln in text.splitlines() if "profiler cost" in ln)
    assert reads in line and ("slower" not in line or all(v >= 0 for v in over.values()))


def test_a_cpu_run_summary_leads_with_the_split_and_keeps_warnings_apart() -> None:
    m = {"status": "complete", "warnings": ["the machine was loaded"],
         "cpu_split": [{"phase": "prefill", "steps": 1, "time_ns": 200_000_000,
                        "classes": {"gemm": 112_000_000, "attention": 32_000_000, "framework": 56_000_000}},
                       {"phase": "decode", "steps": 7, "time_ns": 1_400_000_000,
                        "classes": {"gemm": 700_000_000, "attention": 350_000_000, "framework": 350_000_000}}]}
    lines = render(m, "run", with_warnings=False).splitlines()
    assert lines[1].startswith("  where the time went (CPU: no roofline")
    assert lines[2] == "  prefill         200.0 ms: GEMM 56%, framework overhead 28%, attention 16%"
    assert lines[3] == "  decode          1,400.0 ms, 200.00 ms/step: GEMM 50%, attention 25%, framework overhead 25%"
    assert not any("warning" in ln for ln in lines)
    assert warning_lines(m) == ["  warning         the machine was loaded"]
    assert cpu_split_lines({}) == []


def test_repeats_show_median_and_spread() -> None:
    ms = [{"timings": {"unprofiled": {"aggregate": {"ttft_ns": v * 1e6, "tpot_ns": 10e6}}}} for v in (12.0, 30.0, 15.0)]
    lines = repeat_lines(ms, "runs/a")
    assert lines[0] == "repeats         3 runs under runs/a (repeat-1 ... repeat-3)"
    assert "median 15.00 ms, 12.00 to 30.00 ms, max/min 2.50x  (12.00, 30.00, 15.00)" in lines[1]
    assert lines[-1].startswith("  compare         tracekit diff runs/a OTHER")


def test_load_and_threads_warn_with_what_to_set() -> None:
    quiet = {"cores": 4, "load_1m": 0.3, "torch_threads": 4}
    assert hostload.warnings(quiet, {"cpu_share": 0.95}) == []
    loaded = hostload.warnings({"cores": 2, "load_1m": 9.1, "torch_threads": 2}, {"cpu_share": 0.10})
    assert len(loaded) == 2
    assert "load average 9.10 on 2 cores" in loaded[0] and "OMP_NUM_THREADS=1" in loaded[0]
    assert "got 10% of the CPU their 2 thread(s) asked for" in loaded[1]
    over = hostload.warnings({"cores": 2, "load_1m": 0.0, "torch_threads": 8}, {})
    assert over == ["torch runs 8 threads on 2 cores: threads oversubscribed; set OMP_NUM_THREADS=2 "
                    "(or torch.set_num_threads) before recording"]


def test_a_window_measures_the_cpu_the_process_got() -> None:
    with hostload.Window(threads=1) as w:
        x = 0
        for i in range(200_000):
            x += i
    assert w.result["wall_s"] >= 0 and w.result["cpu_s"] >= 0 and w.result["cpu_share"] is not None
