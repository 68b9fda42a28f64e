"""What would help: one sentence per phase, from its split, with the numbers behind it."""

from __future__ import annotations

from tracekit.analysis.advice import advice

MS = 1_000_000


def row(**ns: float) -> dict:
    base = {"phase": "decode", "steps": 10, "time_ns": 100 * MS, "gpu_busy_ns": 0, "idle_ns": 0}
    return {**base, **ns}


def test_each_cause_gets_its_fix() -> None:
    lat = advice(row(latency_bound_ns=60 * MS, memory_bound_ns=10 * MS, gpu_busy_ns=70 * MS,
                     pct_peak_bandwidth=21.0, idle_ns=30 * MS, idle_host_ns=30 * MS, idle_wait_ns=0))
    assert lat is not None and lat.startswith("decode: 60% of its 100.0 ms is latency-bound kernels")
    assert "6.00 ms per step" in lat and "86% of the GPU's busy time" in lat and "21% of peak bandwidth" in lat
    assert "fuse kernels" in lat and "CUDA graphs" in lat and "raise the batch" in lat
    mem = advice(row(memory_bound_ns=80 * MS, achieved_tbps=3.9, pct_peak_bandwidth=81.0))
    assert mem is not None and "3.90 TB/s, 81% of peak" in mem and "quantize" in mem
    comp = advice(row(phase="prefill", steps=1, compute_bound_ns=70 * MS, achieved_tflops=650.0, pct_peak_flops=66.0))
    assert comp is not None and comp.startswith("prefill: 70%") and "lower precision" in comp and "650 TFLOP/s" in comp
    host = advice(row(idle_ns=90 * MS, idle_host_ns=70 * MS, idle_wait_ns=5 * MS, idle_profiler_ns=15 * MS))
    assert host is not None and "host issues work" in host and "torch.compile" in host
    assert "of the 90% idle, 17% is the profiler's" in host
    prof = advice(row(idle_ns=90 * MS, idle_host_ns=20 * MS, idle_wait_ns=5 * MS, idle_profiler_ns=65 * MS))
    assert prof is not None and "profiler's own cost" in prof and "record fewer steps" in prof
    wait = advice(row(idle_ns=90 * MS, idle_host_ns=10 * MS, idle_wait_ns=80 * MS, idle_profiler_ns=0))
    assert wait is not None and "synchronisations" in wait


def test_unknown_profiler_share_is_said_and_old_rows_still_work() -> None:
    unk = advice(row(idle_ns=90 * MS, idle_host_ns=85 * MS, idle_wait_ns=5 * MS, idle_profiler_ns=None))
    assert unk is not None and "profiler's share is unknown" in unk
    old = advice(row(idle_ns=90 * MS, memory_bound_ns=10 * MS))  # a table written before the idle split
    assert old is not None and "host issues work" in old


def test_no_split_no_advice() -> None:
    assert advice({"phase": "decode", "time_ns": None}) is None
    assert advice(row()) is None  # nothing recorded in any class
