"""The NVML/GPM sampler, against a fake NVML (tests/fake_pynvml.py) and the real machine."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import fake_pynvml as fk
import pyarrow as pa
import pynvml
import pytest
from helpers import REPO

from tracekit.collectors.nvml import METRICS, NvmlSampler, nvml_index_for_torch_device
from tracekit.model import schema

BASIC = [
    "gpu_util",
    "mem_util",
    "mem_used",
    "power",
    "energy",
    "sm_clock",
    "mem_clock",
    "temperature",
    "clock_event_reasons",
]
PCIE = ["pcie_tx", "pcie_rx"]
GPM = [
    "dram_bw_util",
    "sm_util",
    "sm_occupancy",
    "tensor_util",
    "hmma_tensor_util",
    "fp16_util",
    "fp32_util",
    "fp64_util",
    "integer_util",
    "graphics_util",
]


def run_for(sampler: NvmlSampler, seconds: float) -> pa.Table:
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    return sampler.counters()


def by_metric(table: pa.Table) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for ts, m, v in zip(
        table.column("ts_ns").to_pylist(),
        table.column("metric").to_pylist(),
        table.column("value").to_pylist(),
        strict=True,
    ):
        out.setdefault(m, []).append((ts, v))
    return out


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tracekit-nvml")]



def assert_units_from_registry(table: Any) -> None:
    """Each counters row's unit and source match the one registry others read (METRICS)."""
    for m, unit, source in zip(
        table.column("metric").to_pylist(),
        table.column("unit").to_pylist(),
        table.column("source").to_pylist(),
        strict=True,
    ):
        assert (unit, source) == METRICS[m]

def test_basic_metrics_are_converted_to_the_units_the_table_names() -> None:
    fake = fk.FakeNvml()
    table = run_for(NvmlSampler(nvml=fake, interval_s=0.01), 0.3)
    rows = by_metric(table)
    assert set(BASIC + PCIE + GPM) == set(rows)

    def values(m: str) -> set[float]:
        return {v for _, v in rows[m]}

    assert values("gpu_util") == {fk.UTIL_GPU}
    assert values("mem_util") == {fk.UTIL_MEM}
    assert values("mem_used") == {fk.MEM_USED}
    assert values("power") == {fk.POWER_MW / 1000}  # mW -> W
    assert values("sm_clock") == {fk.SM_MHZ} and values("mem_clock") == {fk.MEM_MHZ}
    assert values("temperature") == {fk.TEMP_C}
    assert values("clock_event_reasons") == {fk.EVENT_REASONS}
    assert values("pcie_tx") == {fk.PCIE_TX_KBS * 1024}  # KB/s -> bytes/s
    assert values("pcie_rx") == {fk.PCIE_RX_KBS * 1024}
    energy = [v for _, v in rows["energy"]]
    # mJ -> J; the probe at start() took the first reading, so the first sample is the second call.
    assert energy[0] == pytest.approx((fk.ENERGY_START_MJ + 2 * fk.ENERGY_STEP_MJ) / 1000)
    assert energy == sorted(energy) and energy[1] - energy[0] == pytest.approx(fk.ENERGY_STEP_MJ / 1000)
    assert_units_from_registry(table)
    assert METRICS["power"] == ("W", "nvml") and METRICS["dram_bw_util"] == ("%", "gpm")


def test_counters_table_has_the_counters_schema_empty_or_not() -> None:
    fake = fk.FakeNvml()
    sampler = NvmlSampler(device_index=0, nvml=fake)
    assert sampler.counters().schema == schema.schema("counters")
    assert sampler.counters().num_rows == 0
    table = run_for(sampler, 0.15)
    assert table.schema == schema.schema("counters")
    assert table.num_rows > 0
    assert table.column("rank").null_count == table.num_rows
    assert set(table.column("device").to_pylist()) == {0}
    assert set(table.column("source").to_pylist()) == {"nvml", "gpm"}
    # Host wall clock: within this test's window.
    ts = table.column("ts_ns").to_pylist()
    assert time.time_ns() - 10**10 < min(ts) <= max(ts) <= time.time_ns()


def test_device_index_goes_into_every_row() -> None:
    table = run_for(NvmlSampler(device_index=2, nvml=fk.FakeNvml(device_count=3), gpm=False), 0.05)
    assert table.num_rows > 0 and set(table.column("device").to_pylist()) == {2}


def test_fast_metrics_run_at_the_configured_rate_and_slow_ones_at_theirs() -> None:
    fake = fk.FakeNvml()
    sampler = NvmlSampler(nvml=fake, interval_s=0.01, gpm_interval_s=0.1)
    t0 = time.perf_counter()
    rows = by_metric(run_for(sampler, 1.0))
    elapsed = time.perf_counter() - t0
    st = sampler.status()
    # 100 Hz for ~1 s. A loaded machine may miss deadlines (any number of them: no lower bound on the
    # clock's account), never add ticks.
    assert 2 <= st["ticks"] <= elapsed / 0.01 + 2
    assert st["rate_hz"] <= 105
    assert st["target_rate_hz"] == 100
    assert len(rows["gpu_util"]) == st["ticks"]
    gaps = sorted(b[0] - a[0] for a, b in zip(rows["gpu_util"], rows["gpu_util"][1:], strict=False))
    assert gaps[len(gaps) // 2] > 7e6  # median spacing ~10 ms: never faster than asked
    # Slow loop at 10 Hz: ~10 PCIe samples, GPM one fewer (its first tick only primes).
    assert 1 <= len(rows["pcie_tx"]) <= elapsed / 0.1 + 2
    assert len(rows["dram_bw_util"]) <= len(rows["pcie_tx"]) - 1
    assert st["slow_ticks"] == len(rows["pcie_tx"])
    # Energy (3.4 ms per call on the H200) is read by the slow loop only.
    assert len(rows["energy"]) == st["slow_ticks"]
    # Cost per tick is measured and plausible (the fake's calls cost microseconds).
    assert 0 < st["tick_us_mean"] <= st["tick_us_p99"] <= st["tick_us_max"]
    assert st["tick_us_mean"] < 5000
    # The slow tick includes two 20 ms PCIe reads.
    assert st["slow_tick_us_mean"] >= 2 * fake.pcie_delay_s * 1e6


def test_sampling_sleeps_between_ticks_instead_of_spinning() -> None:
    fake = fk.FakeNvml(pcie_delay_s=0.0)
    sampler = NvmlSampler(nvml=fake, interval_s=0.01)
    c0 = time.process_time()
    run_for(sampler, 0.5)
    cpu = time.process_time() - c0
    # ~50 ticks of microseconds each; a busy wait would burn ~0.5 s of CPU.
    assert cpu < 0.2, cpu
    assert sampler.status()["tick_cpu_us_mean"] < 2000


def test_unsupported_and_forbidden_metrics_are_recorded_and_not_retried() -> None:
    fake = fk.FakeNvml(
        errors={
            "nvmlDeviceGetTemperature": pynvml.NVML_ERROR_NOT_SUPPORTED,
            "nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NO_PERMISSION,
            f"nvmlDeviceGetPcieThroughput[{pynvml.NVML_PCIE_UTIL_RX_BYTES}]": pynvml.NVML_ERROR_NOT_SUPPORTED,
        }
    )
    sampler = NvmlSampler(nvml=fake, interval_s=0.01)
    rows = by_metric(run_for(sampler, 0.3))
    st = sampler.status()
    assert st["available"] is True
    assert set(st["metrics_failed"]) == {"temperature", "power", "pcie_rx"}
    assert "Not Supported" in st["metrics_failed"]["temperature"]
    assert "Insufficient Permissions" in st["metrics_failed"]["power"]
    assert "temperature" not in st["metrics_ok"] and "gpu_util" in st["metrics_ok"]
    # Asked once (at start), never again; the rest kept sampling.
    assert fake.calls["nvmlDeviceGetTemperature"] == 1
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 1
    assert "temperature" not in rows and "power" not in rows and "pcie_rx" not in rows
    assert len(rows["gpu_util"]) >= 15 and len(rows["pcie_tx"]) >= 2


def test_a_metric_that_keeps_failing_transiently_is_dropped_after_a_few_tries() -> None:
    fake = fk.FakeNvml(errors={"nvmlDeviceGetUtilizationRates": pynvml.NVML_ERROR_TIMEOUT})
    sampler = NvmlSampler(nvml=fake, interval_s=0.01, gpm=False)
    rows = by_metric(run_for(sampler, 0.3))
    st = sampler.status()
    assert "gpu_util" not in rows and "mem_util" not in rows
    assert "5 times in a row" in st["metrics_failed"]["gpu_util"]
    # One probe at start (a timeout may pass, so it stays), then five tries in the loop.
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 6
    assert len(rows["sm_clock"]) >= 15


def test_a_binding_without_the_new_clock_event_function_falls_back_to_the_old_name() -> None:
    class OldBinding(fk.FakeNvml):
        nvmlDeviceGetCurrentClocksEventReasons = None  # type: ignore[assignment]

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: object) -> int:
            self._call("nvmlDeviceGetCurrentClocksThrottleReasons")
            return 0x8

    rows = by_metric(run_for(NvmlSampler(nvml=OldBinding(), gpm=False), 0.05))
    assert {v for _, v in rows["clock_event_reasons"]} == {0x8}


def test_gpm_metrics_are_computed_between_consecutive_samples() -> None:
    failing = pynvml.NVML_GPM_METRIC_FP64_UTIL
    fake = fk.FakeNvml(gpm_failing=[failing], pcie_delay_s=0.0)
    sampler = NvmlSampler(nvml=fake, interval_s=0.05, gpm_interval_s=0.1)
    t_start = time.time_ns()
    rows = by_metric(run_for(sampler, 0.55))
    st = sampler.status()
    assert st["gpm_supported"] is True and st["gpm_reason"] is None
    assert set(st["gpm_metrics_failed"]) == {"fp64_util"}
    assert "fp64_util" not in st["gpm_metrics_ok"] and "dram_bw_util" in st["gpm_metrics_ok"]
    assert "fp64_util" not in rows
    # Each value is the fake's rate for consecutive samples; a wrong pairing adds 1000.
    assert {v for _, v in rows["dram_bw_util"]} == {88.0}
    assert {v for _, v in rows["tensor_util"]} == {63.0}
    assert {v for _, v in rows["sm_occupancy"]} == {40.25}
    assert 3 <= len(rows["dram_bw_util"]) <= 6
    # Stamped at the start of the interval each value covers: ~100 ms apart, after start().
    ts = [t for t, _ in rows["dram_bw_util"]]
    assert ts[0] >= t_start
    assert all(80e6 < b - a < 200e6 for a, b in itertools.pairwise(ts))
    # Both GPM samples were freed at stop.
    assert len(fake.freed) == 2


def test_gpm_unsupported_device_is_reported_and_basic_metrics_go_on() -> None:
    fake = fk.FakeNvml(gpm_supported=False)
    sampler = NvmlSampler(nvml=fake)
    rows = by_metric(run_for(sampler, 0.2))
    st = sampler.status()
    assert st["gpm_supported"] is False
    assert "Hopper" in st["gpm_reason"]
    assert not set(GPM) & set(rows)
    assert "gpu_util" in rows and fake.calls["nvmlGpmSampleGet"] == 0


def test_gpm_on_a_driver_without_the_function_is_reported() -> None:
    fake = fk.FakeNvml(gpm_query_error=pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    sampler = NvmlSampler(nvml=fake)
    run_for(sampler, 0.05)
    st = sampler.status()
    assert st["gpm_supported"] is False
    assert "Function Not Found" in st["gpm_reason"]


def test_gpm_can_be_turned_off() -> None:
    fake = fk.FakeNvml()
    sampler = NvmlSampler(nvml=fake, gpm=False)
    rows = by_metric(run_for(sampler, 0.15))
    assert not set(GPM) & set(rows)
    assert sampler.status()["gpm_reason"] == "disabled by the caller"
    assert fake.calls["nvmlGpmQueryDeviceSupport"] == 0


def test_excluded_metrics_are_never_read() -> None:
    # PCIe throughput blocks ~20 ms per call on the H200: a caller must be able to leave it out.
    fake = fk.FakeNvml()
    sampler = NvmlSampler(nvml=fake, exclude=("pcie_tx", "pcie_rx", "energy"))
    rows = by_metric(run_for(sampler, 0.25))
    assert "gpu_util" in rows
    assert not {"pcie_tx", "pcie_rx", "energy"} & set(rows)
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 0


def test_stop_is_idempotent_and_releases_nvml_once() -> None:
    fake = fk.FakeNvml()
    sampler = NvmlSampler(nvml=fake)
    sampler.stop()  # before start: nothing to do
    assert fake.calls["nvmlInit"] == 0
    fake2 = fk.FakeNvml()
    with NvmlSampler(nvml=fake2) as s2:
        time.sleep(0.05)
        assert len(sampler_threads()) == 2
        mid = s2.counters().num_rows
        assert mid > 0  # readable while running
    assert sampler_threads() == []
    n = s2.counters().num_rows
    s2.stop()
    s2.stop()
    assert fake2.calls["nvmlShutdown"] == 1 and fake2.initialised == 0
    assert s2.counters().num_rows == n >= mid
    assert s2.status()["state"] == "stopped"
    with pytest.raises(RuntimeError):
        s2.start()


def test_nvml_library_missing_is_reported_not_raised() -> None:
    fake = fk.FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    sampler = NvmlSampler(nvml=fake)
    table = run_for(sampler, 0.05)
    st = sampler.status()
    assert st["available"] is False
    assert "NVML Shared Library Not Found" in st["reason"]
    assert st["ticks"] == 0 and sampler_threads() == []
    assert table.num_rows == 0 and table.schema == schema.schema("counters")
    assert fake.calls["nvmlShutdown"] == 0  # never initialised, so never shut down


def test_missing_device_is_reported() -> None:
    fake = fk.FakeNvml(device_count=1)
    sampler = NvmlSampler(device_index=3, nvml=fake)
    run_for(sampler, 0.02)
    st = sampler.status()
    assert st["available"] is False and "no device 3" in st["reason"]
    assert fake.calls["nvmlShutdown"] == 1


def test_pynvml_not_installed_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    sampler = NvmlSampler(mode="thread")  # the child process would import its own pynvml
    table = run_for(sampler, 0.02)
    st = sampler.status()
    assert st["available"] is False and "pynvml not importable" in st["reason"]
    assert table.num_rows == 0


def test_bad_intervals_are_refused() -> None:
    with pytest.raises(ValueError):
        NvmlSampler(interval_s=0)
    with pytest.raises(ValueError):
        NvmlSampler(gpm_interval_s=0.05)  # GPM needs samples >= 100 ms apart


def test_real_nvml_on_this_machine_does_not_raise() -> None:
    # No fake: whatever this machine has. Here (CPU only) NVML is missing and
    # status says why; on a GPU machine it samples.
    sampler = NvmlSampler(interval_s=0.01)
    table = run_for(sampler, 0.1)
    st = sampler.status()
    assert table.schema == schema.schema("counters")
    if st["available"]:
        assert table.num_rows > 0 and st["ticks"] > 0 and st["device_name"]
    else:
        assert st["reason"] and table.num_rows == 0 and st["gpm_supported"] is False
    assert sampler_threads() == []


def _load_script(rel: str) -> Any:
    path = REPO / rel
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpm_validate_keeps_only_samples_that_describe_the_phase() -> None:
    gv = _load_script("scripts/gpu/gpm.py")
    ms = 1_000_000
    t0, t1 = 1000 * ms, 2000 * ms
    rows = [
        # NVML utilisation lags: samples in the first 200 ms still describe the previous phase.
        {"ts_ns": t0 + 100 * ms, "metric": "gpu_util", "value": 0.0, "unit": "%", "source": "nvml"},
        {"ts_ns": t0 + 300 * ms, "metric": "gpu_util", "value": 90.0, "unit": "%", "source": "nvml"},
        {"ts_ns": t0 + 900 * ms, "metric": "gpu_util", "value": 100.0, "unit": "%", "source": "nvml"},
        # GPM stamped at interval start: the interval must lie wholly inside [t0, t1].
        {"ts_ns": t0 - 50 * ms, "metric": "dram_bw_util", "value": 10.0, "unit": "%", "source": "gpm"},
        {"ts_ns": t0 + 50 * ms, "metric": "dram_bw_util", "value": 80.0, "unit": "%", "source": "gpm"},
        {"ts_ns": t0 + 850 * ms, "metric": "dram_bw_util", "value": 90.0, "unit": "%", "source": "gpm"},
        {"ts_ns": t1 - 50 * ms, "metric": "dram_bw_util", "value": 5.0, "unit": "%", "source": "gpm"},
        {"ts_ns": t0 + 10 * ms, "metric": "energy", "value": 100.0, "unit": "J", "source": "nvml"},
        {"ts_ns": t1 - 10 * ms, "metric": "energy", "value": 340.0, "unit": "J", "source": "nvml"},
    ]
    out = gv.phase_means(rows, t0, t1, 100 * ms)
    assert out["gpu_util"]["mean"] == 95.0 and out["gpu_util"]["n"] == 2
    assert out["dram_bw_util"]["mean"] == 85.0 and out["dram_bw_util"]["n"] == 2
    assert out["energy_delta"]["mean"] == 240.0 and out["energy_delta"]["seconds"] == pytest.approx(0.98)


# benchmarks/overhead.py on the tiny CPU model: 3 rounds of 4-token blocks, no warm-up.
TINY_OVERHEAD_ARGV = ("--tiny", "--device", "cpu", "--blocks", "3", "--warmup", "0", "--new-tokens", "4", "--settle", "0")


@pytest.mark.slow
def test_overhead_benchmark_runs_all_three_arms_on_cpu(tmp_path: Path) -> None:
    ov = _load_script("benchmarks/overhead.py")
    argv = list(TINY_OVERHEAD_ARGV)
    rc = ov.main([*argv, "--bootstrap", "200", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "overhead.json").read_text())
    (exp,) = result["experiments"]
    assert exp["label"] == "eager" and result["compiled"] == {"requested": False}
    for arm in ("off_a", "on", "off_b"):
        assert len(exp["per_block_median_s"][arm]) == 3
        assert all(t > 0 for t in exp["per_block_median_s"][arm])
    r = exp["ratio_on_off"]
    tpot = {a: [sum(b) / len(b) for b in exp["blocks_s"][a]] for a in ("on", "off_a")}
    logs = [math.log(x / y) for x, y in zip(tpot["on"], tpot["off_a"], strict=True)]
    assert r["point"] == pytest.approx(math.exp(sum(logs) / len(logs)))
    pm = exp["ratios"]["on"]["pooled_median"]
    assert pm["point"] == pytest.approx(exp["median_token_s"]["on"] / exp["median_token_s"]["off_a"])
    assert r["ci95"][0] <= r["ci95"][1]
    assert exp["verdict"] in ("within", "exceeded", "not resolved") and exp["verdict_text"]
    # This machine has no NVML: the sampler said so instead of failing the run.
    if not exp["nvml_available"]:
        assert exp["nvml_reason"]


def test_overhead_blocks_rotate_so_every_arm_takes_every_position() -> None:
    ov = _load_script("benchmarks/overhead.py")
    order = ov.block_order(6)
    rounds = [order[i : i + 3] for i in range(0, 18, 3)]
    assert all(sorted(r) == sorted(ov.ARMS) for r in rounds)
    for pos in range(3):
        assert sorted(r[pos] for r in rounds) == sorted(ov.ARMS * 2)


def test_overhead_bootstrap_resolves_a_5pct_shift_and_not_pure_noise() -> None:
    import numpy as np

    ov = _load_script("benchmarks/overhead.py")
    rng = np.random.default_rng(0)
    base = [list(0.016 * (1 + 0.02 * rng.standard_normal(31))) for _ in range(24)]
    same = [list(0.016 * (1 + 0.02 * rng.standard_normal(31))) for _ in range(24)]
    slow = [[x * 1.05 for x in b] for b in same]
    point, lo, hi = ov.bootstrap_ratio(same, base, 500, 0)
    assert lo <= 1.0 <= hi and hi - lo < 0.02 and ov.verdict(lo, hi, 1.0) == "within"
    point, lo, hi = ov.bootstrap_ratio(slow, base, 500, 0)
    assert 1.03 < lo <= point <= hi and ov.verdict(lo, hi, 1.0) == "exceeded"
    assert ov.verdict(0.995, 1.02, 1.0) == "not resolved"
    # the H200's eager run: on/off CI above +1% but inside the A/A floor is no effect
    assert ov.final_verdict((1.014, 1.384), (0.975, 1.088), 1.0) == "not resolved"
    assert ov.final_verdict((1.10, 1.20), (0.99, 1.01), 1.0) == "exceeded"
    assert ov.final_verdict((0.995, 1.005), (0.97, 1.03), 1.0) == "within"


# --- process mode: the loops run in a child process -------------------------------

FAKE = "fake_pynvml:FakeNvml"  # importable in the child: it gets this process's sys.path


def test_process_mode_samples_every_metric_in_a_child_process() -> None:
    sampler = NvmlSampler(nvml=FAKE, interval_s=0.01, gpm_interval_s=0.1)
    assert sampler.mode == "process"
    sampler.start()
    try:
        time.sleep(0.6)
        # Readable while running: the child flushes its file every 0.25 s.
        mid = sampler.counters().num_rows
        live = sampler.status()
        assert sampler_threads() == []  # no sampling thread in this process
    finally:
        sampler.stop()
    table = sampler.counters()
    st = sampler.status()
    assert st["mode"] == "process" and st["state"] == "stopped"
    assert isinstance(st["pid"], int) and st["pid"] != os.getpid()
    assert live["state"] == "running" and live["ticks"] > 0
    assert 0 < mid <= table.num_rows == st["samples"]
    assert table.schema == schema.schema("counters")
    rows = by_metric(table)
    assert set(rows) == set(BASIC + PCIE + GPM)
    assert {v for _, v in rows["power"]} == {fk.POWER_MW / 1000}
    assert {v for _, v in rows["pcie_rx"]} == {fk.PCIE_RX_KBS * 1024}
    assert {v for _, v in rows["dram_bw_util"]} == {88.0}
    assert_units_from_registry(table)
    # The cost per tick is measured in the child and comes back in status().
    assert st["ticks"] >= 30 and st["slow_ticks"] >= 3
    assert 0 < st["tick_us_mean"] < 5000 and st["slow_tick_us_mean"] >= 2 * 0.02 * 1e6
    assert len(rows["gpu_util"]) == st["ticks"] and len(rows["energy"]) == st["slow_ticks"]
    # Same host clock as this process.
    ts = table.column("ts_ns").to_pylist()
    assert time.time_ns() - 10**10 < min(ts) <= max(ts) <= time.time_ns()
    assert st["process_start_ms"] > 0


def test_the_child_imports_neither_torch_nor_pyarrow() -> None:
    with NvmlSampler(nvml="fake_pynvml:modules_probe", gpm=False) as sampler:
        pass
    # The probe names the heavy modules loaded in the child as its device name.
    assert sampler.status()["device_name"] == "heavy modules: none"


def test_process_mode_without_nvml_reports_why_and_leaves_no_process() -> None:
    sampler = NvmlSampler(nvml="fake_pynvml:no_library")
    sampler.start()
    proc = sampler._proc
    assert proc is not None and proc.poll() is not None  # the idle child was stopped at once
    sampler.stop()
    st = sampler.status()
    assert st["available"] is False and "NVML Shared Library Not Found" in st["reason"]
    assert sampler.counters().num_rows == 0


def test_process_mode_gpm_unsupported_goes_on_with_basic_metrics() -> None:
    with NvmlSampler(nvml="fake_pynvml:gpm_unsupported") as sampler:
        time.sleep(0.3)
    st = sampler.status()
    rows = by_metric(sampler.counters())
    assert st["gpm_supported"] is False and "Hopper" in st["gpm_reason"]
    assert "gpu_util" in rows and not set(GPM) & set(rows)


def test_the_child_stops_when_its_parent_pipe_closes_and_keeps_its_samples() -> None:
    sampler = NvmlSampler(nvml=FAKE, interval_s=0.01)
    sampler.start()
    time.sleep(0.3)
    proc = sampler._proc
    assert proc is not None and proc.stdin is not None
    proc.stdin.close()  # what the child sees when the parent dies
    assert proc.wait(timeout=5) == 0
    sampler.stop()
    assert by_metric(sampler.counters())["gpu_util"]


def test_a_killed_child_is_reported_and_its_flushed_samples_kept() -> None:
    sampler = NvmlSampler(nvml=FAKE, interval_s=0.01)
    sampler.start()
    time.sleep(0.6)
    proc = sampler._proc
    assert proc is not None
    proc.kill()
    proc.wait()
    sampler.stop()
    st = sampler.status()
    assert any("without a final status" in e for e in st["thread_errors"])
    assert sampler.counters().num_rows > 0  # what it flushed before the kill


def test_ctrl_c_does_not_stop_the_child_before_the_parent_does() -> None:
    sampler = NvmlSampler(nvml=FAKE, interval_s=0.01)
    sampler.start()
    proc = sampler._proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGINT)
    time.sleep(0.3)
    assert proc.poll() is None
    sampler.stop()
    assert sampler.status()["state"] == "stopped" and "thread_errors" not in sampler.status()
    assert sampler.counters().num_rows > 0


def test_a_module_object_cannot_go_to_a_child() -> None:
    with pytest.raises(ValueError):
        NvmlSampler(nvml=fk.FakeNvml(), mode="process")
    with pytest.raises(ValueError):
        NvmlSampler(mode="fork")


# --- torch device index -> NVML index ------------------------------------------------


def test_without_cuda_visible_devices_torch_and_nvml_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvml_index_for_torch_device(0) == 0 and nvml_index_for_torch_device(3) == 3


def test_integer_entries_map_directly() -> None:
    assert nvml_index_for_torch_device(0, visible="1") == 1
    assert nvml_index_for_torch_device(1, visible="3, 0") == 0
    # CUDA hides everything from the first invalid entry on.
    assert nvml_index_for_torch_device(0, visible="2,-1,1") == 2
    with pytest.raises(ValueError, match="not visible"):
        nvml_index_for_torch_device(1, visible="2,-1,1")
    with pytest.raises(ValueError):
        nvml_index_for_torch_device(0, visible="")


def test_uuid_and_mig_entries_are_looked_up_through_nvml() -> None:
    fake = fk.FakeNvml(device_count=4)
    visible = f"{fk.gpu_uuid(2)},{fk.mig_uuid(3)},{fk.gpu_uuid(1)[:12]}"
    assert nvml_index_for_torch_device(0, nvml=fake, visible=visible) == 2
    assert nvml_index_for_torch_device(1, nvml=fake, visible=visible) == 3  # the MIG's parent GPU
    assert nvml_index_for_torch_device(2, nvml=fake, visible=visible) == 1  # a unique UUID prefix
    assert fake.initialised == 0  # every lookup shut NVML down again
    with pytest.raises(LookupError):
        nvml_index_for_torch_device(0, nvml=fake, visible="GPU-ffffffff-0000")


def test_for_torch_device_samples_the_mapped_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    fake = fk.FakeNvml(device_count=3)
    sampler = NvmlSampler.for_torch_device(0, nvml=fake, gpm=False)
    table = run_for(sampler, 0.05)
    st = sampler.status()
    assert st["device_index"] == 2 and st["torch_device"] == 0
    assert set(table.column("device").to_pylist()) == {2}


def test_for_torch_device_that_cannot_be_mapped_samples_nothing_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    sampler = NvmlSampler.for_torch_device(1, nvml=fk.FakeNvml())
    table = run_for(sampler, 0.02)
    st = sampler.status()
    assert st["available"] is False and "cannot map torch cuda:1" in st["reason"]
    assert table.num_rows == 0


# --- pinning the child, and the driver-free control -------------------------------


def _allowed_cpus(pid: int) -> set[int]:
    """The kernel's own record of where a process may run (not what the sampler reports)."""
    with open(f"/proc/{pid}/status") as f:
        line = next(x for x in f if x.startswith("Cpus_allowed_list:"))
    cpus: set[int] = set()
    for part in line.split(":", 1)[1].strip().split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux CPU affinity")
def test_cpu_affinity_pins_the_child_and_not_the_parent() -> None:
    mine = os.sched_getaffinity(0)
    cpu = max(mine)
    sampler = NvmlSampler(nvml=FAKE, interval_s=0.01, cpu_affinity=(cpu,))
    sampler.start()
    try:
        proc = sampler._proc
        assert proc is not None
        assert _allowed_cpus(proc.pid) == {cpu}
        time.sleep(0.2)
    finally:
        sampler.stop()
    st = sampler.status()
    assert st["cpu_affinity"] == [cpu] and "cpu_affinity_error" not in st
    assert os.sched_getaffinity(0) == mine
    assert by_metric(sampler.counters())["gpu_util"]  # it sampled while pinned
    # Unpinned, the child inherits the parent's CPUs.
    with NvmlSampler(nvml=FAKE, gpm=False) as unpinned:
        pass
    assert set(unpinned.status()["cpu_affinity"]) == mine


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux CPU affinity")
def test_a_cpu_that_does_not_exist_is_reported_and_sampling_goes_on() -> None:
    with NvmlSampler(nvml=FAKE, interval_s=0.01, cpu_affinity=(100_000,)) as sampler:
        time.sleep(0.2)
    st = sampler.status()
    assert "100000" in st["cpu_affinity_error"]
    assert set(st["cpu_affinity"]) == os.sched_getaffinity(0)
    assert by_metric(sampler.counters())["gpu_util"]


def test_cpu_affinity_needs_the_process_mode() -> None:
    with pytest.raises(ValueError, match="mode='process'"):
        NvmlSampler(nvml=fk.FakeNvml(), cpu_affinity=(0,))


def test_null_nvml_runs_the_same_loops_without_a_driver() -> None:
    spec = "tracekit.collectors.nvml_sampling:NullNvml"
    with NvmlSampler(nvml=spec, interval_s=0.01) as sampler:
        time.sleep(0.4)
    st = sampler.status()
    assert st["available"] is True and st["mode"] == "process"
    assert st["device_name"] == "NullNvml (no driver calls)"
    assert st["gpm_supported"] is False and st["metrics_failed"] == {}
    rows = by_metric(sampler.counters())
    assert set(rows) == set(BASIC + PCIE)
    assert all(v == 0.0 for r in rows.values() for _, v in r)
    assert st["ticks"] >= 20 and st["slow_ticks"] >= 2 and len(rows["gpu_util"]) == st["ticks"]


def test_overhead_paired_bootstrap_cancels_drift_the_arms_share() -> None:
    import numpy as np

    ov = _load_script("benchmarks/overhead.py")
    rng = np.random.default_rng(3)
    # Each round drifts by up to ±30% (a noisy host), the same for both arms of that round;
    # the "on" arm is 2% slower in every round.
    drift = 1 + 0.3 * rng.uniform(-1, 1, 40)
    off = [list(0.014 * d * (1 + 0.01 * rng.standard_normal(31))) for d in drift]
    on = [list(0.014 * d * 1.02 * (1 + 0.01 * rng.standard_normal(31))) for d in drift]
    _, plo, phi = ov.bootstrap_ratio(on, off, 500, 0, paired=True)
    _, ulo, uhi = ov.bootstrap_ratio(on, off, 500, 0)
    assert 1.01 < plo < 1.02 < phi < 1.03  # the 2% is found, narrowly
    assert ulo < 1.0 < uhi and (uhi - ulo) > 5 * (phi - plo)  # independent resampling cannot see it
    with pytest.raises(ValueError, match="one block per round"):
        ov.bootstrap_ratio(on, off[:-1], 10, 0, paired=True)


@pytest.mark.slow
def test_overhead_control_arms_and_pinning_on_cpu(tmp_path: Path) -> None:
    ov = _load_script("benchmarks/overhead.py")
    cpu = max(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    argv = list(TINY_OVERHEAD_ARGV)
    argv += ["--arms", "off_a,on,null,fast,off_b", "--pin-sampler", str(cpu), "--bootstrap", "100"]
    try:
        assert ov.main([*argv, "--out", str(tmp_path)]) == 0
    finally:
        os.sched_setaffinity(0, before)
    (exp,) = json.loads((tmp_path / "overhead.json").read_text())["experiments"]
    assert exp["arms"] == ["off_a", "on", "null", "fast", "off_b"]
    assert sorted(exp["order"][:5]) == sorted(exp["arms"]) and len(exp["order"]) == 15
    assert set(exp["ratios"]) == {"on", "null", "fast", "off_b"}
    for arm in exp["arms"]:
        assert len(exp["per_block_median_s"][arm]) == 3
        assert exp["host_per_token"][arm]["cpu_ns"] > 0
    null = exp["control_status_last"]["null"]
    assert null["device_name"] == "NullNvml (no driver calls)" and null["cpu_affinity"] == [cpu]
    assert exp["pin_sampler"] == [cpu]
    with pytest.raises(SystemExit):
        ov.main(["--tiny", "--arms", "off_a,off_b"])  # no "on" arm: nothing to judge
    assert ov.parse_cpus("0-2,5") == (0, 1, 2, 5)


@pytest.mark.parametrize("spec", [None, FAKE], ids=["thread", "process"])
def test_pause_stops_every_read_until_resume(spec: str | None) -> None:
    fake = fk.FakeNvml() if spec is None else None
    sampler = NvmlSampler(nvml=fake if spec is None else spec, interval_s=0.01, gpm_interval_s=0.1)
    sampler.start()
    try:
        time.sleep(0.3)
        sampler.pause()  # returns once no tick runs
        paused_at = time.time_ns()
        time.sleep(0.5)  # the window in which nothing may be read, however slow the machine
        resumed_at = time.time_ns()  # before the call: the first tick runs before resume() returns
        sampler.resume()
        time.sleep(0.3)
    finally:
        sampler.stop()
    ts = sampler.counters().column("ts_ns").to_pylist()
    # Nothing is stamped inside the paused window; ticks before and after it.
    assert not [t for t in ts if paused_at <= t < resumed_at]
    assert [t for t in ts if t < paused_at] and [t for t in ts if t >= resumed_at]
    if fake is not None:
        assert fake.calls["nvmlDeviceGetPowerUsage"] >= 2
    st = sampler.status()
    # The achieved rate leaves the pause out: above the rate over the whole span with the pause in it
    # (whatever the load did to the ticks; nothing compared with a wall clock).
    ticks = sorted(set(ts))
    assert st["rate_hz"] > (len(ticks) - 1) / ((ticks[-1] - ticks[0]) / 1e9), st
    with pytest.raises(RuntimeError, match="stopped"):
        sampler.resume()


def test_a_paused_sampler_still_stops() -> None:
    sampler = NvmlSampler(nvml=FAKE, interval_s=0.01)
    sampler.start()
    sampler.pause()
    sampler.stop()  # wakes the paused loop: it ends rather than waiting out a timeout
    assert sampler.status()["state"] == "stopped"
    assert "thread_errors" not in sampler.status()


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_overhead_order_balances_positions_and_predecessors(n: int) -> None:
    from collections import Counter

    ov = _load_script("benchmarks/overhead.py")
    arms = tuple(f"a{i}" for i in range(n))
    rows = len(ov.williams_rows(n))
    order = ov.block_order(rows, arms)
    rounds = [order[i : i + n] for i in range(0, len(order), n)]
    assert all(sorted(r) == sorted(arms) for r in rounds)
    positions = Counter((pos, arm) for r in rounds for pos, arm in enumerate(r))
    assert set(positions.values()) == {rows // n} and len(positions) == n * n
    # Within rounds, every arm follows every other arm equally often (carry-over balanced).
    follows = Counter((r[i - 1], r[i]) for r in rounds for i in range(1, n))
    assert len(follows) == n * (n - 1) and len(set(follows.values())) == 1


def test_overhead_segments_switch_the_sampler_only_between_on_and_off_segments() -> None:
    # GIVEN a Williams order of segments and a sampler that records pause/resume
    ov = _load_script("benchmarks/overhead.py")
    calls: list[str] = []

    class Fake:
        def pause(self) -> None:
            calls.append("pause")

        def resume(self) -> None:
            calls.append("resume")

    order = ["on", "off_a", "off_b", "off_b", "on", "off_a"]
    clock = ov.SegmentClock(order, 2, Fake())
    # WHEN generate hands over the prompt, then 12 tokens, then ends
    clock.put("prompt")
    for i in range(12):
        clock.put(i)
        calls.append(f"t{i}")
    clock.end()
    # THEN the switch happens when a segment's last token arrives (inside put, before the next
    # token): pause after "on" ends, resume when "on" comes next, nothing between two "off" segments
    assert calls == ["t0", "pause", "t1", "t2", "t3", "t4", "t5", "t6", "resume", "t7", "t8", "pause", "t9",
                     "t10", "t11"]
    assert [len(s) for s in clock.segments] == [2] * 6


@pytest.mark.slow
def test_overhead_segment_design_runs_on_cpu(tmp_path: Path) -> None:
    ov = _load_script("benchmarks/overhead.py")
    assert ov.main(["--tiny", "--segment-tokens", "4", "--new-tokens", "24", "--blocks", "4", "--bootstrap", "50",
                    "--out", str(tmp_path)]) == 0
    exp = json.loads((tmp_path / "overhead.json").read_text())["experiments"][0]
    assert exp["design"].startswith("segments of 4 tokens") and exp["blocks_per_arm"] == 4
    # every segment of every arm kept its 3 inner intervals; the switch intervals are in none
    assert all(len(b) == 4 for b in exp["per_block_median_s"].values())
    assert sorted(exp["order"][:3]) == ["off_a", "off_b", "on"]


def test_overhead_paired_tpot_ratio_holds_under_two_speed_decode() -> None:
    """Decode that switches between two speeds for whole stretches (as the H200's compiled decode
    did, 3.2 vs 2.8 ms per token) throws the pooled medians of two identical arms apart; the
    paired per-round TPOT ratio stays at 1 and still finds a 0.5% effect that only hits the mean."""
    import numpy as np

    ov = _load_script("benchmarks/overhead.py")
    rng = np.random.default_rng(7)
    rounds = 300
    speed = np.where(np.repeat(rng.random(rounds // 10) < 0.5, 10), 0.0032, 0.0028)  # 10-round stretches

    def blocks(scale: float, stall_every: int = 0) -> list[list[float]]:
        out = []
        for s in speed:
            x = s * scale * (1 + 0.01 * rng.standard_normal(31))
            if stall_every:
                x[::stall_every] *= 1.05  # every 10th token 5% late: TPOT +0.5%, median unmoved
            out.append(list(x))
        return out

    off_a, off_b = blocks(1.0), blocks(1.0)
    p, lo, hi = ov.paired_tpot_ratio(off_b, off_a, 1000, 0)
    assert lo < 1.0 < hi and hi - lo < 0.004 and ov.verdict(lo, hi, 1.0) == "within"
    stalled = blocks(1.0, stall_every=10)
    p, lo, hi = ov.paired_tpot_ratio(stalled, off_a, 1000, 0)
    assert 1.003 < lo < p < hi < 1.008
    # The pooled median sits in the gap between the two speeds, where a few tokens move it a lot:
    # its CI is several times wider than the whole effect.
    _, mlo, mhi = ov.bootstrap_ratio(stalled, off_a, 300, 0, paired=True)
    assert mhi - mlo > 4 * (hi - lo)
    with pytest.raises(ValueError, match="one block per round"):
        ov.paired_tpot_ratio(off_a, off_b[:-1], 10, 0)
