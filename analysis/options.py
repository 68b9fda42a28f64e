"""Options of the bound pass (tracekit.analysis.bound): plain values, no tables.

``BoundOptions`` holds the classification's rules and thresholds; ``ROOFLINE_ONLY`` is the roofline's
compute | memory split alone (no latency class).
"""

from __future__ import annotations

from dataclasses import dataclass

SOL_THRESHOLD_PCT = 60.0  # Nsight Compute's SpeedOfLight rule: under 60% of peak on both -> latency issue


@dataclass(frozen=True)
class BoundOptions:
    # Elementwise / reduction / copy kernels without shapes are on the memory side of the ridge on
    # every GPU in the ceilings table (their intensity is < 2 FLOP/byte, ridges are > 8): classify
    # them by the size rule below, as "kernel_class"-modelled. False: "other".
    class_fallback_memory: bool = True
    assume_causal: bool = True  # see opmodels: profiler shapes do not carry is_causal
    max_parent_depth: int = 64
    # A modelled kernel whose achieved FLOP/s and bytes/s are both under the line on each is
    # latency-bound (Nsight Compute: under 60% of the theoretical peak on both "typically indicate
    # latency issues"). The line is this fraction of a datasheet rate ... None: no latency class,
    # only the roof (intensity against the ridge).
    latency_threshold: float | None = 0.6
    # ... and this fraction of an achievable rate (measured by calibrate or published: what the
    # GPU's best kernels reach). Nsight Compute's 60% of the theoretical peak, on parts whose best
    # streaming kernel reaches ~93% of it (H200: 4.48 of 4.8 TB/s), is 0.6 / 0.93 = 0.65 of what they
    # reach (docs/roofline.md §2).
    achievable_threshold: float = 0.65
    # Size rule for kernels classified by name only (no bytes to rate): shorter than this, latency;
    # longer, memory. On the H200 no modelled elementwise/reduction/copy kernel under 20 us reached
    # 60% of peak bandwidth in a 1,000-token prefill and decode (docs/roofline.md).
    short_kernel_ns: int = 20_000
    # Counter class: under this % of peak on both memory and compute throughput -> latency.
    counter_threshold_pct: float = SOL_THRESHOLD_PCT
    # Fixed GPU time of every kernel that the trace's kernel duration leaves out (launch, first wave's
    # start, drain) and Nsight Compute's gpu__time_duration includes; achieved rates are taken over
    # duration + this. On the H200: median 1.31 us (IQR 1.12-1.57) over 1,514 kernels, flat from 1 to
    # 50 us kernels (docs/roofline.md section 2, "Latency-bound").
    kernel_overhead_ns: float = 1300.0
    # An elementwise / reduction / copy kernel whose modelled bytes fit in the GPU's L2 cache reads
    # operands the previous kernels left there and writes into lines the allocator reuses: DRAM serves
    # only its footprint's share of the L2 of its bytes, and its class is rated on that share (latency
    # unless that or its FLOPs reach the line). False: rate every kernel's bytes against DRAM.
    l2_resident: bool = True


ROOFLINE_ONLY = BoundOptions(latency_threshold=None)  # the roofline classification alone: compute | memory
