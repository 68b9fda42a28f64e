"""Measured constants of the what-if projections (pure data; how each was measured: docs/whatif.md).

The graph, static-cache and profiler constants are tracekit.analysis.whatif_calib.calibrate over the
committed what-if runs (benchmarks/whatif/data: H100 sweeps of three models, an H200 recording;
Hugging Face generate, torch 2.11, transformers 5.17); the quantization costs come from H200 runs.
``Constants`` bundles them so that a caller (the benchmark's leave-one-out check) can pass others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class QuantCost:
    """What a torchao quantized linear costs beyond its fp16 GEMM, per call: host ns (eager: the
    tensor subclass' dispatch and the extra ops it issues) and GPU ns as c0 + c1 x batch (the
    dequantizing kernels)."""

    host_ns: float
    gpu_ns: float
    gpu_ns_per_seq: float = 0.0
    # the fp16 eager decode step's host time per linear call on the host ``host_ns`` was measured on: a
    # run on another host scales ``host_ns`` by its own (the dispatch runs at the host's pace)
    host_ref_ns_per_linear: float = 124_400.0
    # the quantized GEMM's compute rate with many rows, as a fraction of the GPU's bf16 peak (None: at
    # least the fp16 GEMM's): a linear's GPU time is at least its FLOPs at this rate
    rate_of_peak: float | None = None


# whatif_calib.static_decode over the committed H100 sweeps (TinyLlama-1.1B and Llama-3.2-1B, compiled,
# batch 1 / 8 / 32, a 1,040-slot static cache): the slope of the decode step's non-GEMM GPU time.
STATIC_DECODE_NS_PER_BYTE = 0.000777


@dataclass(frozen=True)
class Constants:
    # Host time of one decode step under CUDA graphs outside the graph's GPU work (generate's loop,
    # sampling, the graph launch), ns, without the profiler.
    graph_host_ns: float = 2_030_000.0
    # What a prefill costs more under the static cache a compiled decode needs (eager prefill either
    # way), ns: compiled TTFT - eager TTFT of the same point.
    static_prefill_ns: float = 4_940_000.0
    # Gap between two kernels of one CUDA graph replay, ns.
    graph_gap_ns: float = 448.0
    # A compiled decode step over a static cache: its non-GEMM GPU time per byte of the keys and values
    # attention reads at the query heads' count over every slot (batch x slots x query heads x head dim
    # x layers x 2 B), ns per byte (whatif_calib.static_decode).
    static_decode_ns_per_byte: float = STATIC_DECODE_NS_PER_BYTE
    # The profiler's cost (record_shapes on), ns of host time: per CPU op it records and per kernel
    # launch (its CUPTI activity); least squares over the host-bound steps of runs with both timers
    # (whatif_calib).
    profiler_ns_per_op: float = 764.0
    profiler_ns_per_launch: float = 8_479.0
    # (mode, execution) -> cost per quantized linear call; a pair absent here cannot be projected.
    quant: Mapping[tuple[str, str], QuantCost] = field(default_factory=lambda: dict(QUANT))


# Eager: scripts/gpu/quant_gemm.py on an H100 (torchao 0.18, one nn.Linear per call, weights 4096 x
# 4096, 11008 x 4096 and 4096 x 11008): the host time per call over bf16's, the median of the three
# shapes (int8 69.7, int4 19.7, fp8 320.1 us), on the reference host's scale (x 124.4 / 85.2: the
# fp16 eager decode step's host time per linear call on the H200 sweep's host, docs/sweep.md, and on
# the H100's, its TinyLlama sweep); and the rate of its GEMM at 4,096 rows, the median of the three
# shapes over the H100's achievable bf16 rate (794.5 TFLOP/s: int8 512, int4 30.2, fp8 444 TFLOP/s).
# Compiled: docs/sweep.md's H200 table (TinyLlama-1.1B, 155 linear calls per step, 128 prompt / 16
# answer tokens), (quantized TPOT - fp16 TPOT) / 155 at batch 1 (and 16 for the per-sequence term).
QUANT: dict[tuple[str, str], QuantCost] = {
    ("int8", "eager"): QuantCost(host_ns=101_900.0, gpu_ns=0.0, rate_of_peak=0.645),
    ("int4", "eager"): QuantCost(host_ns=28_700.0, gpu_ns=0.0, rate_of_peak=0.038),
    ("fp8", "eager"): QuantCost(host_ns=467_600.0, gpu_ns=0.0, rate_of_peak=0.558),
    ("int8", "compiled"): QuantCost(host_ns=0.0, gpu_ns=19_200.0, gpu_ns_per_seq=1_000.0),
    ("int4", "compiled"): QuantCost(host_ns=0.0, gpu_ns=15_900.0, gpu_ns_per_seq=1_100.0),
}

DEFAULT = Constants()
