"""Classes taken against the ceiling in use: achievable rates, --ceiling, and kernels modelled above the peak.

Hand-worked: a bf16 GEMM of M = N = K = 8192 does 2 x 8192^3 = 1.0995e12 FLOPs and moves 3 x 8192^2 x 2 =
402.65 MB; its duration sets its rate exactly (no per-kernel overhead, no L2 rule).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tracekit.analysis import bound
from tracekit.app.ceiling import resolve_ceiling
from tracekit.model.achievable import ACHIEVABLE, BANDWIDTH, achievable
from tracekit.model.ceilings import Ceiling, datasheet
from tracekit.report.view import RunView, over_peak_line
from tracekit.store import calibration

BF16 = "c10::BFloat16"
N = 8192
GEMM = ("aten::mm", [[N, N], [N, N]], [BF16, BF16])
GEMM_FLOPS = 2 * N**3  # 1.0995e12
GEMM_BYTES = 3 * N * N * 2  # 402.65 MB
EXACT = bound.BoundOptions(kernel_overhead_ns=0.0, l2_resident=False)
MI300X = {"environment": {"gpu": "AMD Instinct MI300X"}}


def kernels(ops: list[tuple[tuple[str, list, list], float, str]], ceiling: Ceiling,
            options: bound.BoundOptions = EXACT) -> pd.DataFrame:
    """One kernel per (op, duration in ns, kernel name), launched by that op."""
    cpu = pd.DataFrame([{"op_id": i, "name": op[0], "input_dims": json.dumps(op[1]), "input_types": json.dumps(op[2]),
                         "parent_id": None} for i, (op, _, _) in enumerate(ops)])
    gpu = pd.DataFrame([{"ts_ns": 10_000_000 * i, "dur_ns": round(dur), "name": name, "op_id": i, "kind": "kernel",
                         "stream": 7} for i, (_, dur, name) in enumerate(ops)])
    return bound.kernel_costs(gpu, cpu, ceiling, options)


def gemm_at(tflops: float) -> tuple[tuple[str, list, list], float, str]:
    return GEMM, GEMM_FLOPS / (tflops * 1e12) * 1e9, "Cijk_Alik_Bljk_BBS_BH_MT256x256x64"


def test_mi300x_gemm_latency_against_the_datasheet_is_compute_against_what_it_reaches() -> None:
    ds, ach = datasheet("AMD Instinct MI300X"), achievable("AMD Instinct MI300X")
    assert ds is not None and ach is not None
    assert ach.kind == "achievable" and ach.flops("bf16") == 708e12 and ds.flops("bf16") == 1307.4e12
    # 500 TFLOP/s: 500 / 1307.4 = 38.2% of the datasheet (under its 60% line: latency),
    # 500 / 708 = 70.6% of the achievable rate (over its 65% line: compute)
    k_ds = kernels([gemm_at(500)], ds)
    k_ach = kernels([gemm_at(500)], ach)
    assert k_ds["flops_pct_of_peak"].iloc[0] == pytest.approx(100 * 500 / 1307.4, rel=1e-4)
    assert k_ach["flops_pct_of_peak"].iloc[0] == pytest.approx(100 * 500 / 708, rel=1e-4)
    assert k_ds["bound"].iloc[0] == "latency" and k_ach["bound"].iloc[0] == "compute"
    # 474 and 633 TFLOP/s (67% and 89% of 708): compute; 440 (62%): latency
    k = kernels([gemm_at(474), gemm_at(633), gemm_at(440)], ach)
    assert list(k["bound"]) == ["compute", "compute", "latency"]
    # the roofs are the ceiling's: the bf16 ridge is 708e12 / 4.26e12 = 166 FLOP/byte, not 1307.4 / 5.3 = 247
    assert k_ach["ridge"].iloc[0] == pytest.approx(708 / 4.26)
    assert not k_ach["over_peak"].any()


def test_the_ceiling_option_changes_the_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))  # no calibration cached
    by_default, _ = resolve_ceiling(MI300X)
    assert by_default.kind == "achievable"
    on_datasheet, _ = resolve_ceiling(MI300X, "datasheet")
    assert on_datasheet.kind == "datasheet" and on_datasheet.gpu == "AMD Instinct MI300X"
    by_name, _ = resolve_ceiling(MI300X, "AMD Instinct MI325X")  # MI325X: bf16 843 achievable
    # a ceiling file: a measured bf16 rate of 1,000 TFLOP/s (500 is 50% of it: latency)
    f = tmp_path / "ceiling.json"
    f.write_text(json.dumps({"gpu": "AMD Instinct MI300X", "kind": "measured", "peak_bytes_per_s": 4.0e12,
                             "peak_flops": {"bf16": 1000e12, "fp32": 100e12}}))
    from_file, _ = resolve_ceiling(MI300X, str(f))
    assert from_file.is_achieved("bf16") and from_file.is_achieved("bandwidth")
    got = {c.kind + ":" + c.gpu: kernels([gemm_at(500)], c)["bound"].iloc[0]
           for c in (by_default, on_datasheet, by_name, from_file)}
    # 500/708 = 71% compute; 500/1307.4 = 38% latency; 500/843 = 59% < 65% latency; 500/1000 = 50% latency
    assert got == {"achievable:AMD Instinct MI300X": "compute", "datasheet:AMD Instinct MI300X": "latency",
                   "achievable:AMD Instinct MI325X": "latency", "measured:AMD Instinct MI300X": "latency"}


def test_a_rate_without_an_achievable_figure_keeps_the_datasheet_line() -> None:
    # the MI300X table has no fp32 figure: fp32 stays the datasheet's 163.4 TFLOP/s at the 60% line
    ach = achievable("AMD Instinct MI300X")
    assert ach is not None and not ach.is_achieved("fp32") and ach.is_achieved("bf16")
    assert ach.flops("fp32") == 163.4e12 and "Datasheet for" in ach.source and "fp32" in ach.source
    f32 = ("aten::mm", [[N, N], [N, N]], ["float", "float"])
    # 101 TFLOP/s fp32 on the CUDA cores: 61.8% of 163.4: over the 60% line (compute), though under 65%
    k = kernels([(f32, GEMM_FLOPS / 101e12 * 1e9, "Cijk_Ailk_Bljk_SB")], ach)
    assert k["flops_pct_of_peak"].iloc[0] == pytest.approx(100 * 101 / 163.4, rel=1e-4)
    assert k["bound"].iloc[0] == "compute"


def test_over_peak_is_flagged_and_is_no_evidence() -> None:
    # a made-up GPU (no datasheet entry): bf16 1,000 TFLOP/s, 0.1 TB/s, both achieved rates
    c = Ceiling(gpu="Test GPU", peak_flops={"bf16": 1000e12, "fp32": 50e12}, peak_bytes_per_s=0.1e12,
                source="test", kind="achievable", achieved=("bf16", "bandwidth"))
    gemv = ("aten::mm", [[1, N], [N, N]], [BF16, BF16])  # 2 x 8192^2 FLOPs, (8192 + 8192^2 + 8192) x 2 bytes
    gemv_bytes = (N + N * N + N) * 2
    k = kernels([
        gemm_at(700),  # 70% of bf16; bytes 402.65 MB in 1.5707 ms = 0.256 TB/s = 256% of the bandwidth
        (gemv, gemv_bytes / 0.2e12 * 1e9, "gemv2T_kernel"),  # 200% of the bandwidth, FLOPs ~0.1%
        (gemv, gemv_bytes / 0.08e12 * 1e9, "gemv2T_kernel"),  # 80%: under the peak, memory
    ], c)
    assert list(k["over_peak"]) == [True, True, False]
    assert k["bw_pct_of_peak"].iloc[0] == pytest.approx(100 * GEMM_BYTES / (GEMM_FLOPS / 700e12) / 0.1e12, rel=1e-4)
    # the GEMM's roof is memory (intensity 2731 FLOP/B under the 10,000 ridge: the over-counted bytes);
    # its FLOPs at 70% reach the line: compute. The over-peak GEMV has no evidence left: other.
    assert k["roof"].iloc[0] == "memory" and k["bound"].iloc[0] == "compute"
    assert k["bound"].iloc[1] == "other" and k["model"].iloc[1] == "shape"
    assert k["bound"].iloc[2] == "memory"


def test_an_over_peak_elementwise_kernel_takes_the_size_rule() -> None:
    h200 = achievable("NVIDIA H200")
    assert h200 is not None and h200.peak_bytes_per_s == 4.48e12
    add = ("aten::add", [[16384, 4096], [16384, 4096]], ["c10::Half", "c10::Half"])
    nbytes = 3 * 16384 * 4096 * 2  # 402.65 MB: over the 60 MiB L2
    # 6 TB/s: over the achievable 4.48 and the datasheet's 4.8 -> over the peak; 67 us: the size rule says memory,
    # 12 TB/s: 33.6 us, also memory by size; a 24 MiB add at 6 TB/s fits in L2 (0.4 of it): not flagged, and
    # the DRAM share of its bytes (0.4 x 134% of the bandwidth) is under the line: latency
    small = ("aten::add", [[1024, 4096], [1024, 4096]], ["c10::Half", "c10::Half"])
    k = kernels([(add, nbytes / 6e12 * 1e9, "vectorized_elementwise_kernel"),
                 (small, 3 * 1024 * 4096 * 2 / 6e12 * 1e9, "vectorized_elementwise_kernel")], h200,
                bound.BoundOptions(kernel_overhead_ns=0.0))
    assert list(k["over_peak"]) == [True, False]
    assert k["bound"].iloc[0] == "memory"  # by the size rule (67 us > 20 us), not by its rate
    assert k["bound"].iloc[1] == "latency"  # L2-resident
    short = kernels([(add, nbytes / 6e12 * 1e9 / 5, "vectorized_elementwise_kernel")], h200,
                    bound.BoundOptions(kernel_overhead_ns=0.0))
    assert short["over_peak"].iloc[0] and short["bound"].iloc[0] == "latency"  # 13.4 us < 20 us


def test_over_peak_is_counted_for_the_report() -> None:
    view = RunView("r", {"analysis": {"kernels_over_peak": 3}})
    assert over_peak_line(view) == ("3 kernels modelled above the peak: their model over-counts "
                                    "(kernel_bound.over_peak; that rate is left out of their class)")
    assert over_peak_line(RunView("r", {"analysis": {"kernels_over_peak": 0}})) is None


def test_every_achievable_figure_has_a_source_and_is_under_the_datasheet() -> None:
    for gpu, e in ACHIEVABLE.items():
        ds = datasheet(gpu)
        assert ds is not None and ds.gpu == gpu
        for rate, fig in e.figures.items():
            assert fig.source and fig.value > 0, (gpu, rate)
            peak = ds.peak_bytes_per_s / 1e12 if rate == BANDWIDTH else (ds.flops(rate) or 0) / 1e12
            assert fig.value <= peak, (gpu, rate, fig.value, peak)
        c = achievable(gpu)
        assert c is not None and set(c.achieved) == set(e.figures)


def test_resolve_prefers_a_measured_ceiling_then_achievable_then_datasheet(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path))
    assert calibration.resolve("NVIDIA H100 80GB HBM3").kind == "achievable"  # Azure's STREAM and fp8 figures
    assert calibration.resolve("NVIDIA H100 80GB HBM3").peak_bytes_per_s == 3.18e12
    assert calibration.resolve("Tesla T4").kind == "datasheet"  # no achievable figures
    from tracekit.model.ceilings import measured_ceiling
    m = measured_ceiling("NVIDIA H100 80GB HBM3", {"copy_bytes_per_s": 3.0e12, "matmul_flops_per_s": {"bf16": 7e14}})
    assert m.achieved == ("bf16", "bandwidth")
    calibration.save_measured(m)
    got = calibration.resolve("NVIDIA H100 80GB HBM3")
    assert got.kind == "measured" and got.is_achieved("bf16") and not got.is_achieved("fp8")
    # its copy (3.0 TB/s) is under the H100's published read stream (3.18): the cached ceiling takes 3.18
    assert got.peak_bytes_per_s == 3.18e12 and "over the 3.00 measured" in got.source
    assert calibration.resolve("NVIDIA H100 80GB HBM3", kind="achievable").kind == "achievable"


def test_an_fp32_gemm_may_run_at_the_tf32_rate_without_being_over_the_peak() -> None:
    # H200 datasheet: fp32 67, tf32 494.5 TFLOP/s. An fp32 GEMM at 300 TFLOP/s ran on TF32 tensor cores
    # (allow_tf32): not over the peak; at 600 it is over every rate an fp32 GEMM can run at.
    h200 = datasheet("NVIDIA H200")
    assert h200 is not None
    f32 = ("aten::mm", [[N, N], [N, N]], ["float", "float"])
    k = kernels([(f32, GEMM_FLOPS / 300e12 * 1e9, "sm90_xmma_gemm_tf32f32_tf32f32_f32"),
                 (f32, GEMM_FLOPS / 600e12 * 1e9, "sm90_xmma_gemm_tf32f32_tf32f32_f32")], h200)
    assert list(k["over_peak"]) == [False, True]
