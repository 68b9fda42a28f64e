"""The real GPU paths, with physical assertions: run on the H200 by scripts/gpu/run.sh (`pytest -m gpu`).

Each test skips without CUDA (conftest). Thresholds are physical (what any current data-centre GPU
must show) or relative to the datasheet of the GPU found, never constants tuned to one machine.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu


def _datasheet():  # type: ignore[no-untyped-def]
    import torch

    from tracekit.model.ceilings import datasheet

    return datasheet(torch.cuda.get_device_name(0))


def test_calibration_lands_near_the_datasheet(tmp_path: Path) -> None:
    from tracekit.collectors.calibrate import CalibrateConfig, measure

    m = measure(CalibrateConfig(copy_mib=1024, matmul_n=8192, repeats=5, dtypes=("fp16",)))
    ds = _datasheet()
    if ds is None:
        pytest.skip("no datasheet entry for this GPU")
    # copy bandwidth: 50-105% of the datasheet HBM rate; dense fp16 matmul: 40-105% of the peak
    assert 0.5 * ds.peak_bytes_per_s <= m["copy_bytes_per_s"] <= 1.05 * ds.peak_bytes_per_s, m
    assert 0.4 * ds.peak_flops["fp16"] <= m["matmul_flops_per_s"]["fp16"] <= 1.05 * ds.peak_flops["fp16"], m


def test_nvml_samples_are_physical_under_load() -> None:
    import torch

    from tracekit.collectors.nvml import NvmlSampler

    sampler = NvmlSampler.for_torch_device(0, interval_s=0.01)
    sampler.start()
    try:
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
        t_end = time.time() + 1.5
        while time.time() < t_end:
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    finally:
        sampler.stop()
    import pandas as pd

    table = sampler.counters()
    df = pd.DataFrame({"metric": table.column("metric").cast("string").to_pylist(),
                       "value": table.column("value").to_pylist()})
    assert len(df) > 50, sampler.status()
    by = df.groupby("metric")["value"]
    lo, hi = by.min(), by.max()
    total = torch.cuda.get_device_properties(0).total_memory
    assert lo["gpu_util"] >= 0 and hi["gpu_util"] <= 100 and hi["gpu_util"] >= 50  # the matmuls kept it busy
    assert lo["power"] >= 20 and hi["power"] <= 2000  # W
    assert lo["sm_clock"] >= 100 and hi["sm_clock"] <= 3500  # MHz
    assert lo["mem_used"] > 0 and hi["mem_used"] <= total
    assert lo["temperature"] >= 0 and hi["temperature"] <= 110  # C
    if "dram_bw_util" in hi:  # GPM (Hopper and later)
        assert lo["dram_bw_util"] >= 0 and hi["dram_bw_util"] <= 100
        assert hi["tensor_util"] > 10  # fp16 matmuls run on the tensor cores


def test_cuda_events_agree_with_host_timers_within_one_percent(tmp_path: Path) -> None:
    from tracekit.cli import main
    from tracekit.store.rundir import RunDir

    out = tmp_path / "rec"
    assert main(["record", "--model", "tinyllama-1.1b", "--shape", "smoke", "--no-nvml", "--quiet",
                 "--out", str(out)]) == 0
    t = RunDir.open(out).read_manifest()["timings"]["unprofiled"]
    host, events = t["aggregate"], t["cuda_events"]["aggregate"]
    for key in ("ttft_ns", "tpot_ns", "e2e_ns"):
        assert abs(host[key] - events[key]) <= 0.01 * events[key], (key, host[key], events[key])
