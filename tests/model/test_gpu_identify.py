"""The GPU from Kineto's deviceProperties when its name is empty or generic, and the AMD / newer NVIDIA
datasheet entries (dense figures, cited)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from helpers import FIXTURES

from tracekit.model import ceilings
from tracekit.model.ceilings import GENERIC_NAMES, datasheet, identify


@pytest.mark.parametrize(
    ("name", "key", "bw_tbps", "bf16_tflops", "fp8_tflops"),
    [
        ("AMD Instinct MI300X", "AMD Instinct MI300X", 5.3, 1307.4, 2614.9),
        ("AMD Instinct MI325X", "AMD Instinct MI325X", 6.0, 1307.4, 2614.9),
        ("AMD Instinct MI355X", "AMD Instinct MI355X", 8.0, 2516.6, 5033.2),
        ("NVIDIA GB200", "NVIDIA GB200", 8.0, 2500, 5000),
        ("NVIDIA H20", "NVIDIA H20", 4.0, 148, 296),
        ("NVIDIA B200", "NVIDIA B200", 8.0, 2250, 4500),
    ],
)
def test_new_datasheet_entries(name: str, key: str, bw_tbps: float, bf16_tflops: float, fp8_tflops: float) -> None:
    c = datasheet(name)
    assert c is not None and c.gpu == key
    assert c.peak_bytes_per_s == pytest.approx(bw_tbps * 1e12)
    assert c.flops("bf16") == pytest.approx(bf16_tflops * 1e12) and c.flops("fp8") == pytest.approx(fp8_tflops * 1e12)
    assert c.source and c.date and c.kind == "datasheet"
    assert "dense" in c.source or "dense" in c.notes


def test_names_do_not_cross() -> None:
    assert datasheet("NVIDIA H20").gpu == "NVIDIA H20"  # type: ignore[union-attr]
    assert datasheet("NVIDIA H200").gpu == "NVIDIA H200"  # type: ignore[union-attr]
    assert datasheet("NVIDIA GB200").gpu == "NVIDIA GB200"  # type: ignore[union-attr]
    assert datasheet("NVIDIA B200").gpu == "NVIDIA B200"  # type: ignore[union-attr]
    assert datasheet("AMD Instinct MI300A") is None and datasheet("AMD Instinct MI350X") is None
    assert ceilings.datasheet("AMD Instinct MI355X").flops("tf32") is None  # type: ignore[union-attr]  # CDNA 4


def _props(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))["deviceProperties"][0]


def test_identify_from_real_device_properties(corpus_dir: Path) -> None:
    # the compiled H200 fixture's own deviceProperties, with its name blanked
    h200 = {**_props(FIXTURES / "gpu" / "d_compiled.json.gz"), "name": ""}
    assert identify(h200)[0] == "NVIDIA H200"
    # the corpus's ROCm 6.2 trace: one MI250 GCD that calls itself "AMD Radeon Graphics"
    mi250 = _props(corpus_dir / "hta" / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert GENERIC_NAMES.match(mi250["name"])
    name, note = identify(mi250)
    assert name == "AMD Instinct MI250 (1 GCD)" and "MI210" in note
    gcd = datasheet(name)  # one GCD: half the module's 362.1 TFLOP/s fp16 and 3.2768 TB/s
    assert gcd is not None and gcd.flops("fp16") == pytest.approx(181.05e12)
    assert gcd.peak_bytes_per_s == pytest.approx(1.6384e12) and gcd.flops("tf32") is None


@pytest.mark.parametrize(
    ("name", "gpu"),
    [("AMD Instinct MI250X", "AMD Instinct MI250X (1 GCD)"), ("AMD Instinct MI250X/MI250", "AMD Instinct MI250X (1 GCD)"),
     ("AMD Instinct MI250", "AMD Instinct MI250 (1 GCD)"), ("AMD Instinct MI210", "AMD Instinct MI210")],
)
def test_cdna2_names(name: str, gpu: str) -> None:
    assert datasheet(name).gpu == gpu  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("props", "name"),
    [
        ({"warpSize": 64, "computeMajor": 9, "computeMinor": 4, "numSms": 304, "totalGlobalMem": 192 * 2**30,
          "maxSharedMemoryPerMultiProcessor": 65536}, "AMD Instinct MI300X"),
        ({"warpSize": 64, "computeMajor": 9, "computeMinor": 4, "numSms": 304, "totalGlobalMem": 256 * 2**30,
          "maxSharedMemoryPerMultiProcessor": 65536}, "AMD Instinct MI325X"),
        ({"warpSize": 64, "computeMajor": 9, "computeMinor": 5, "numSms": 256, "totalGlobalMem": 288 * 2**30,
          "maxSharedMemoryPerMultiProcessor": 163840}, "AMD Instinct MI355X"),
        ({"warpSize": 32, "computeMajor": 9, "computeMinor": 0, "numSms": 78, "totalGlobalMem": 95 * 2**30,
          "sharedMemPerBlockOptin": 232448}, "NVIDIA H20"),
        ({"warpSize": 32, "computeMajor": 10, "computeMinor": 0, "numSms": 148, "totalGlobalMem": int(178.4 * 2**30),
          "sharedMemPerBlockOptin": 232448}, "NVIDIA B200"),
        ({"warpSize": 32, "computeMajor": 10, "computeMinor": 0, "numSms": 148, "totalGlobalMem": int(184.0 * 2**30),
          "sharedMemPerBlockOptin": 232448}, "NVIDIA GB200"),
        ({"warpSize": 32, "computeMajor": 9, "computeMinor": 0, "numSms": 132, "totalGlobalMem": int(79.2 * 2**30),
          "sharedMemPerBlockOptin": 232448}, "NVIDIA H100 SXM"),
        # never by compute major alone: NVIDIA cc 9.0 and AMD gfx9 both say 9
        ({"warpSize": 64, "computeMajor": 9, "computeMinor": 0, "numSms": 132, "totalGlobalMem": 80 * 2**30,
          "maxSharedMemoryPerMultiProcessor": 65536}, None),
        ({"warpSize": 64, "computeMajor": 9, "computeMinor": 4, "numSms": 38, "totalGlobalMem": 24 * 2**30,
          "maxSharedMemoryPerMultiProcessor": 65536}, None),  # a CPX partition
        ({"runtimeMajorVersion": 1}, None),  # MTIA's keys
    ],
)
def test_identify(props: dict, name: str | None) -> None:
    got, note = identify(props)
    assert got == name
    if name is None:
        assert note  # says why
