"""Achievable ceilings: the rates a GPU's best kernels reach, per dtype and for DRAM bandwidth, with a source each.

A datasheet peak is what the silicon could do at its boost clock; what kernels reach is lower, and by
how much depends on the part (an MI300X's best bf16 GEMM reaches 54% of its datasheet figure, an H200's
80%). Classes are taken against what the GPU can reach, so for GPUs tracekit cannot calibrate this
table gives published measurements: vendors' max-achievable tables, cloud vendors' microbenchmarks,
tracekit's own calibration on a GPU it ran on. Every figure names its source; a rate with no published
figure keeps the datasheet's, and the ceiling says which rates those are (``Ceiling.achieved``).

Bandwidth is the best streaming kernel the source measured (read-mostly kernels such as STREAM's dot
reach more than a copy, which mixes reads and writes). FLOP/s are dense GEMM rates (the best size the
source measured). Values in TFLOP/s and TB/s. docs/roofline.md §6 lists the table with its sources.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from tracekit.model.ceilings import TB, Ceiling, T, datasheet

BANDWIDTH = "bandwidth"  # the key of the DRAM bandwidth figure in ``Entry.figures``


@dataclass(frozen=True)
class Figure:
    """One achievable rate (TFLOP/s, or TB/s for bandwidth) and where it was published."""

    value: float
    source: str
    note: str = ""


@dataclass(frozen=True)
class Entry:
    """The achievable figures of one GPU, keyed by dtype or BANDWIDTH; ``gpu`` is its datasheet entry's name."""

    gpu: str
    figures: Mapping[str, Figure]
    note: str = ""


_MAF = ("AMD ROCm blog 'Measuring Max-Achievable FLOPs - Part 2', AMD MAF results (rocm.blogs.amd.com/"
        "software-tools-optimization/measuring-max-achievable-flops-part2/), as tabulated by AMD's TraceLens "
        "(AMD-AGI/TraceLens, TraceLens/Agent/Analysis/utils/arch/README.md: matrix_bf16 708, matrix_fp16 654, "
        "matrix_fp8 1273)")
_MAMF = ("Stas Bekman's Maximum Achievable Matmul FLOPS table (github.com/stas00/ml-engineering, "
         "compute/accelerator/README.md, mamf-finder.py: mean of 100 matmuls at the best shape found), {}")
_TL_SPECS = ("AMD TraceLens platform specs (AMD-AGI/TraceLens, AgenticMode platform_specs: max_achievable_tflops, "
             "after the AMD MAF blog)")
_TL_MI355X = "AMD TraceLens arch file TraceLens/Agent/Analysis/utils/arch/MI355X.json (max_achievable_tflops)"
_TL_B200 = ("AMD TraceLens arch file TraceLens/Agent/Analysis/utils/arch/B200.json ('benchmark derived peak flops "
            "and bw')")
_AZ = "Azure AI-benchmarking-guide (github.com/Azure/AI-benchmarking-guide), Azure_Results/{}: {}"
_TK_H200 = ("tracekit calibrate on an H200 (torch 2.11 + CUDA 13; docs/roofline.md §8): 8192^3 matmul, median of "
            "10 after 3 warm-ups")
_ONE_RATE = "the {} figure: this part's tensor cores run bf16 and fp16 at one rate (datasheet)"

ACHIEVABLE: dict[str, Entry] = {
    e.gpu: e
    for e in [
        Entry("AMD Instinct MI300X", {
            "bf16": Figure(708, _MAF, note="the MAMF table gives 668.4 (ROCm 6.3) and earlier 781.9 (ROCm 6.2)"),
            "fp16": Figure(654, _MAF), "fp8": Figure(1273, _MAF),
            BANDWIDTH: Figure(4.26, _AZ.format("ND_MI300X_v5_results.md (as kept in the fork "
                                               "samuel-bohman/AI-benchmarking-guide)",
                                               "HBM STREAM mul 4.26 TB/s (copy 4.11, add 4.14, triad 4.09, dot 3.87)")),
        }),
        Entry("AMD Instinct MI325X", {
            "bf16": Figure(843, _TL_SPECS, note="the MAMF table gives 784.9 (1000 W, TunableOp)"),
            "fp16": Figure(794, _TL_SPECS), "fp8": Figure(1519, _TL_SPECS),
        }, note="no bandwidth figure found: datasheet"),
        Entry("AMD Instinct MI355X", {
            "bf16": Figure(1613, _TL_MI355X, note="TraceLens' platform specs give 1686, the MAMF table 1565"),
            "fp16": Figure(1518, _TL_MI355X), "fp8": Figure(2905, _TL_MI355X, note="TraceLens' platform specs: 3567"),
        }, note="no bandwidth figure found: datasheet"),
        Entry("AMD Instinct MI250X (1 GCD)", {
            "bf16": Figure(147.0, _MAMF.format("AMD MI250X, one GCD, ROCm 6.2 (an earlier version of the table)")),
            "fp16": Figure(147.0, _MAMF.format("AMD MI250X, one GCD, ROCm 6.2 (an earlier version of the table)"),
                           note=_ONE_RATE.format("bf16")),
        }, note="no bandwidth figure found: datasheet"),
        Entry("NVIDIA B200", {
            "bf16": Figure(1745.0, _MAMF.format("NVIDIA B200 SXM, torch 2.7.1+cu128"),
                           note="TraceLens' B200.json gives 1401"),
            "fp16": Figure(1347, _TL_B200), "fp8": Figure(3432.5, _MAMF.format("NVIDIA B200 SXM, FP8 e4m3")),
            "int8": Figure(2927, _TL_B200), "fp4": Figure(5912, _TL_B200), BANDWIDTH: Figure(7.476, _TL_B200),
        }),
        Entry("NVIDIA GB200", {
            "bf16": Figure(1822.0, _MAMF.format("NVIDIA GB200 SXM, torch 2.10 dev + cu130")),
            "fp8": Figure(3615.6, _MAMF.format("NVIDIA GB200 SXM, FP8 e4m3"),
                          note="Azure ND GB200 v6: cuBLASLt FP8 2906.9 at 16384^3"),
        }, note="no bandwidth figure found: datasheet"),
        Entry("NVIDIA H200", {
            "bf16": Figure(788, _TK_H200, note="the MAMF table gives the H100's 794.5 for it"),
            "fp16": Figure(735, _TK_H200), "tf32": Figure(400, _TK_H200), "fp32": Figure(50.6, _TK_H200),
            "fp8": Figure(1453.4, _MAMF.format("NVIDIA H200 SXM, FP8 e4m3"),
                          note="Azure ND H200 v5: cuBLASLt FP8 1366.3"),
            BANDWIDTH: Figure(4.48, _AZ.format("ND_H200_v5_results.md",
                                               "HBM STREAM dot 4.48 TB/s (copy 4.01, add/triad 4.15)"),
                              note="tracekit calibrate's device copy (read + write) measured 4.04"),
        }),
        Entry("NVIDIA H100 SXM", {
            "bf16": Figure(794.5, _MAMF.format("NVIDIA H100 SXM, torch 2.7.0+cu126")),
            "fp16": Figure(760.0, "torch matmul benchmark on an NVIDIA H100 80GB HBM3, torch 2.7.0+cu128, 4096^2 "
                                  "(github.com/zzc0721/torch-performance-test-data issue #79; bf16 797.5 there)"),
            "fp8": Figure(1402.6, _MAMF.format("NVIDIA H100 SXM, FP8 e4m3"),
                          note="Azure ND H100 v5: cuBLASLt FP8 1382.2"),
            BANDWIDTH: Figure(3.18, _AZ.format("ND_H100_v5_results.md",
                                               "HBM STREAM dot 3.18 TB/s (copy 2.90, add/triad 2.97)")),
        }),
        Entry("NVIDIA A100-SXM4-80GB", {
            "bf16": Figure(271.2, _MAMF.format("NVIDIA A100 SXM, torch 2.6.0+cu126")),
            "fp16": Figure(256.5, _AZ.format("ND_A100_v4_results.md", "cuBLASLt FP16 GEMM 16384^3")),
            BANDWIDTH: Figure(1.75, _AZ.format("ND_A100_v4_results.md",
                                               "HBM STREAM dot 1.75 TB/s (copy 1.61, add/triad 1.70)")),
        }),
    ]
}


def entry(device_name: str) -> Entry | None:
    """The achievable figures for a device name as NVML/torch report it (matched as ``datasheet`` matches), or None."""
    ds = datasheet(device_name)
    return ACHIEVABLE.get(ds.gpu) if ds is not None else None


def with_published_bandwidth(ceiling: Ceiling) -> Ceiling:
    """A measured ceiling with the published achievable bandwidth of its GPU where that is higher.

    ``tracekit calibrate`` times a device copy (reads and writes), which reaches less than a read-mostly
    stream (on the H200 4.04 against 4.48 TB/s); the ceiling is what the GPU can reach, so the higher
    figure is taken and the source says so. Unchanged where the table has no bandwidth figure for it."""
    e = entry(ceiling.gpu)
    bw = e.figures.get(BANDWIDTH) if e is not None else None
    if bw is None or bw.value * TB <= ceiling.peak_bytes_per_s:
        return ceiling
    return dataclasses.replace(
        ceiling, peak_bytes_per_s=bw.value * TB,
        source=f"{ceiling.source}; bandwidth {bw.value:g} TB/s, over the {ceiling.peak_bytes_per_s / TB:.2f} "
               f"measured ({bw.source})",
        achieved=tuple(dict.fromkeys((*ceiling.achieved, BANDWIDTH))))


def achievable(device_name: str) -> Ceiling | None:
    """The achievable ceiling of a GPU (kind ``achievable``), or None where the table has no entry for it.

    Rates with a figure take it; the others keep the datasheet's, and ``source`` says which is which.
    ``achieved`` names the rates (dtypes, and ``bandwidth``) that are achievable figures.
    """
    ds = datasheet(device_name)
    e = ACHIEVABLE.get(ds.gpu) if ds is not None else None
    if ds is None or e is None:
        return None
    flops = dict(ds.peak_flops)
    flops.update({d: f.value * T for d, f in e.figures.items() if d != BANDWIDTH})
    bw = e.figures.get(BANDWIDTH)
    parts = [f"{d} {f.value:g}" + (" TB/s" if d == BANDWIDTH else "") + f" ({f.source}"
             + (f"; {f.note}" if f.note else "") + ")" for d, f in e.figures.items()]
    rest = sorted(set(ds.peak_flops) - set(e.figures)) + ([] if bw else [BANDWIDTH])
    source = "achievable: " + "; ".join(parts) + (f". Datasheet for {', '.join(rest)}: {ds.source}" if rest else "")
    return dataclasses.replace(
        ds, peak_flops=flops, peak_bytes_per_s=bw.value * TB if bw else ds.peak_bytes_per_s, source=source,
        kind="achievable", notes=e.note, achieved=tuple(e.figures))
