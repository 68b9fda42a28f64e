"""The advice sentence for hand-made phase rows: the largest cause, its numbers, the fix."""

from __future__ import annotations

from tracekit.analysis.advice import advice, shares

MS = 1e6


def test_memory_bound_decode_with_per_step_time_and_bandwidth() -> None:
    row = {"phase": "decode", "time_ns": 100 * MS, "steps": 10, "memory_bound_ns": 50 * MS,
           "compute_bound_ns": 10 * MS, "latency_bound_ns": 5 * MS, "idle_ns": 35 * MS, "idle_host_ns": 30 * MS,
           "idle_wait_ns": 5 * MS, "achieved_tbps": 3.2, "pct_peak_bandwidth": 67}
    assert advice(row) == ("decode: 50% of its 100.0 ms is memory-bound kernels, 5.00 ms per step (the busy GPU moves "
                           "3.20 TB/s, 67% of peak); quantize the weights or the KV cache, or raise the batch so each "
                           "byte read serves more tokens.")


def test_host_idle_with_and_without_the_profilers_share() -> None:
    old = {"phase": "prefill", "time_ns": 40 * MS, "steps": 1, "compute_bound_ns": 10 * MS, "idle_ns": 30 * MS}
    assert shares(old)["idle_host_ns"] == 30 * MS  # no idle split: all of it the host's
    assert advice(old) == ("prefill: 75% of its 40.0 ms is GPU idle while the host issues work (Python, framework, "
                           "kernel launches) (the profiler's share is unknown: no unprofiled timing pass); capture "
                           "CUDA graphs or use torch.compile (static cache) to cut launch overhead.")
    split = {"phase": "decode", "time_ns": 10 * MS, "steps_captured": 2, "steps": 5, "idle_ns": 8 * MS,
             "idle_host_ns": 6 * MS, "idle_profiler_ns": 2 * MS, "idle_wait_ns": 0}
    assert shares(split)["idle_host_ns"] == 6 * MS
    assert advice(split) == ("decode: 60% of its 10.0 ms is GPU idle while the host issues work (Python, framework, "
                             "kernel launches), 3.00 ms per step (of the 80% idle, 25% is the profiler's); capture CUDA "
                             "graphs or use torch.compile (static cache) to cut launch overhead.")


def test_latency_compute_and_communication() -> None:
    lat = {"phase": "decode", "time_ns": 10 * MS, "latency_bound_ns": 6 * MS, "gpu_busy_ns": 8 * MS,
           "pct_peak_bandwidth": 12, "idle_ns": 2 * MS, "idle_host_ns": 2 * MS, "idle_wait_ns": 0}
    assert advice(lat) == ("decode: 60% of its 10.0 ms is latency-bound kernels (under the latency line of both "
                           "peak compute and peak bandwidth) (75% of the GPU's busy time, the busy GPU reaches 12% of peak bandwidth); "
                           "fuse kernels, capture CUDA graphs or raise the batch so each launch does more work.")
    comp = {"phase": "prefill", "time_ns": 10 * MS, "compute_bound_ns": 9 * MS, "achieved_tflops": 700,
            "pct_peak_flops": 71}
    assert advice(comp) == ("prefill: 90% of its 10.0 ms is compute-bound kernels (the busy GPU runs 700 TFLOP/s, 71% "
                            "of peak); use lower precision (fp8) or better kernels.")
    assert advice({"time_ns": 1 * MS, "comm_ns": 0.5 * MS}) == (
        "phase: 50% of its 1.0 ms is exposed communication; overlap communication with compute or shard less.")
    assert advice({"time_ns": 0, "comm_ns": 5}) is None
    assert advice({"time_ns": 10, "idle_ns": 0}) is None  # no time in any cause
