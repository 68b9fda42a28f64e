from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracekit.cli import main
from tracekit.errors import UsageError
from tracekit.model import ceilings
from tracekit.store import calibration


@pytest.mark.parametrize(
    ("name", "key", "bw_tbps", "fp16_tflops"),
    [
        ("NVIDIA H200", "NVIDIA H200", 4.8, 989.5),
        ("NVIDIA H200 NVL", "NVIDIA H200 NVL", 4.8, 835.5),
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", 3.35, 989.5),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", 2.0, 756),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", 2.039, 312),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", 1.555, 312),
        ("NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe", 1.935, 312),
        ("NVIDIA A100-PCIE-40GB", "NVIDIA A100-PCIE-40GB", 1.555, 312),
        ("NVIDIA A10G", "NVIDIA A10G", 0.6, 70),
        ("NVIDIA A10", "NVIDIA A10", 0.6, 125),
        ("NVIDIA L4", "NVIDIA L4", 0.3, 121),
        ("NVIDIA L40S", "NVIDIA L40S", 0.864, 362),
        ("Tesla T4", "Tesla T4", 0.32, 65),
        ("Tesla V100-SXM2-32GB", "Tesla V100-SXM2", 0.9, 125),
        ("Tesla V100-PCIE-16GB", "Tesla V100-PCIE", 0.9, 112),
        ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090", 1.008, 165.2),
        ("NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090", 0.936, 71),
        ("NVIDIA B200", "NVIDIA B200", 8.0, 2250),
    ],
)
def test_lookup_by_reported_name(name: str, key: str, bw_tbps: float, fp16_tflops: float) -> None:
    c = ceilings.datasheet(name)
    assert c is not None and c.gpu == key
    assert c.peak_bytes_per_s == pytest.approx(bw_tbps * 1e12)
    assert c.flops("fp16") == pytest.approx(fp16_tflops * 1e12)
    assert c.source and c.date and c.kind == "datasheet"


def test_unknown_gpu_has_no_datasheet() -> None:
    assert ceilings.datasheet("Radeon Instinct MI50") is None
    with pytest.raises(UsageError):
        calibration.resolve("Radeon Instinct MI50", prefer_measured=False)


def test_ridge_point_per_dtype() -> None:
    h200 = ceilings.datasheet("NVIDIA H200")
    assert h200 is not None
    assert h200.ridge_point("fp16") == pytest.approx(989.5e12 / 4.8e12)
    assert h200.ridge_point("fp32") == pytest.approx(67e12 / 4.8e12)
    assert h200.ridge_point("fp8") == pytest.approx(1979e12 / 4.8e12)
    t4 = ceilings.datasheet("Tesla T4")
    assert t4 is not None and t4.ridge_point("bf16") is None  # Turing has no bf16 tensor cores
    assert set(h200.ridge_points()) >= {"fp16", "bf16", "fp32", "tf32", "fp8", "int8"}
    assert "NVIDIA H200" in h200.describe() and "source" in h200.describe()


def test_every_entry_sane() -> None:
    for c in ceilings.DATASHEET.values():
        assert c.source and c.date
        assert 0.2e12 <= c.peak_bytes_per_s <= 10e12
        assert c.flops("fp32") and c.flops("fp16")
        # dense tensor fp16 beats fp32 CUDA-core rate on every GPU listed
        assert c.flops("fp16") > c.flops("fp32")  # type: ignore[operator]


def test_measured_roundtrip_and_resolve_prefers_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path))
    m = {"copy_bytes_per_s": 4.1e12, "matmul_flops_per_s": {"bf16": 700e12, "fp16": 720e12}, "date": "2026-01-01"}
    c = ceilings.measured_ceiling("NVIDIA H200", m)
    assert c.kind == "measured" and c.flops("fp16") == 720e12
    assert c.flops("fp8") == pytest.approx(1979e12)  # not measured: datasheet, and the source says so
    assert "measured" in c.source and "fp8" in c.source
    path = calibration.save_measured(c)
    assert path == tmp_path / "ceilings" / "nvidia-h200.json"
    assert json.loads(path.read_text())["ridge_points"]["fp16"] == pytest.approx(720 / 4.1)
    got = calibration.resolve("NVIDIA H200")
    assert got.kind == "measured" and got.flops("fp16") == 720e12
    # the copy's 4.1 TB/s is under the H200's published read stream (4.48): the ceiling takes that
    assert calibration.load(path).peak_bytes_per_s == 4.1e12 and got.peak_bytes_per_s == 4.48e12
    assert calibration.resolve("NVIDIA H200", prefer_measured=False).kind == "achievable"
    assert calibration.resolve("NVIDIA H200", kind="datasheet").kind == "datasheet"


def test_calibrate_without_gpu_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["calibrate", "--out", "/tmp/never-written.json"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("tracekit: error: calibrate needs") and "\n" not in err
    assert not Path("/tmp/never-written.json").exists()


@pytest.mark.gpu
def test_calibrate_on_gpu(tmp_path: Path) -> None:
    import torch

    from tracekit.collectors.calibrate import CalibrateConfig, measure

    m = measure(CalibrateConfig(copy_mib=128, matmul_n=2048, repeats=3, dtypes=("fp16",)))
    assert m["copy_bytes_per_s"] > 1e10 and m["matmul_flops_per_s"]["fp16"] > 1e12
    ds = ceilings.datasheet(torch.cuda.get_device_name(0))
    if ds is None:
        pytest.skip("no datasheet entry for this GPU")
    # physical for the GPU found (an H200: 4.8 TB/s, 989 dense fp16 TFLOP/s): never above its peak, and
    # these small sizes (a 128 MiB copy, 2048^3 matmuls) still reach a fifth of the bandwidth and a tenth
    # of the matmul peak; tests/gpu/test_gpu_real.py holds the full-size measurement to 50% and 40%
    assert 0.2 * ds.peak_bytes_per_s <= m["copy_bytes_per_s"] <= 1.05 * ds.peak_bytes_per_s, m
    assert 0.1 * ds.peak_flops["fp16"] <= m["matmul_flops_per_s"]["fp16"] <= 1.05 * ds.peak_flops["fp16"], m


def test_fp4_runs_at_the_fp4_rate_where_the_gpu_has_one_else_at_fp8() -> None:
    b200 = ceilings.datasheet("NVIDIA B200")
    assert b200 is not None and b200.flops("fp4") == 9000e12 and b200.flops("fp8") == 4500e12
    h200 = ceilings.datasheet("NVIDIA H200")
    assert h200 is not None and h200.flops("fp4") == h200.flops("fp8") == 1979e12  # no fp4 tensor cores
    assert b200.ridge_point("fp4") == pytest.approx(9000 / 8.0)  # FLOP per byte at 8 TB/s


def test_the_b200s_achievable_fp4_rate_is_the_published_figure() -> None:
    from tracekit.model.achievable import achievable

    b200 = achievable("NVIDIA B200")
    assert b200 is not None and b200.flops("fp4") == pytest.approx(5912e12) and b200.is_achieved("fp4")
    h100 = achievable("NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.flops("fp4") == h100.flops("fp8") and h100.is_achieved("fp4")
