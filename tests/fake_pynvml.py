"""A fake pynvml: the NVML library calls only, everything else is the real module.

Constants, NVMLError and its subclasses, and the ctypes structures (the GPM
request struct among them) come from the installed nvidia-ml-py, so the
sampler is tested against the real binding's types; only what needs a GPU
(the library functions) is faked. Names the fake does not define and that are
not constants, errors or structs raise AttributeError, like an old binding
that lacks a function.
"""

from __future__ import annotations

import ctypes
import time
from collections import Counter
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import pynvml as _real

# What the fake device reads, in NVML's own units.
UTIL_GPU, UTIL_MEM = 37, 12  # %
MEM_USED = 5 * 2**30  # bytes
POWER_MW = 250_500  # mW
ENERGY_START_MJ, ENERGY_STEP_MJ = 1_000_000, 1_234  # mJ, per call
SM_MHZ, MEM_MHZ = 1980, 2619
TEMP_C = 45
EVENT_REASONS = 0x1 | 0x4
PCIE_TX_KBS, PCIE_RX_KBS = 1000, 2000  # KB/s
GPM_VALUES = {  # metric id -> % over any interval between consecutive samples
    _real.NVML_GPM_METRIC_DRAM_BW_UTIL: 88.0,
    _real.NVML_GPM_METRIC_SM_UTIL: 71.5,
    _real.NVML_GPM_METRIC_SM_OCCUPANCY: 40.25,
    _real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 63.0,
    _real.NVML_GPM_METRIC_HMMA_TENSOR_UTIL: 60.0,
    _real.NVML_GPM_METRIC_FP16_UTIL: 3.0,
    _real.NVML_GPM_METRIC_FP32_UTIL: 9.5,
    _real.NVML_GPM_METRIC_FP64_UTIL: 0.0,
    _real.NVML_GPM_METRIC_INTEGER_UTIL: 12.0,
    _real.NVML_GPM_METRIC_GRAPHICS_UTIL: 99.0,
}
# Added to a GPM value when the two samples are not consecutive snapshots, so a
# sampler that pairs the wrong samples reads visibly wrong numbers.
GPM_PAIRING_ERROR = 1000.0


class FakeNvml:
    """Stands in for the pynvml module. Every library call is counted in ``calls``."""

    def __init__(
        self,
        *,
        init_error: int | None = None,
        errors: dict[str, int] | None = None,  # function name -> NVML error code it always raises
        gpm_supported: bool = True,
        gpm_query_error: int | None = None,
        gpm_failing: Iterable[int] = (),  # GPM metric ids whose per-metric status is NOT_SUPPORTED
        pcie_delay_s: float = 0.02,  # the real call measures over 20 ms before returning
        device_count: int = 1,
    ) -> None:
        self.init_error = init_error
        self.errors = dict(errors or {})
        self.gpm_supported = gpm_supported
        self.gpm_query_error = gpm_query_error
        self.gpm_failing = set(gpm_failing)
        self.pcie_delay_s = pcie_delay_s
        self.device_count = device_count
        self.calls: Counter[str] = Counter()
        self.initialised = 0
        self.energy_mj = ENERGY_START_MJ
        self.samples: dict[int, int] = {}  # sample address -> snapshot sequence number
        self.freed: list[int] = []
        self._seq = 0
        self._next_addr = 0x1000

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not defined here: borrow data, never library calls.
        if name.startswith(("NVML_", "c_", "NVMLError")):
            return getattr(_real, name)
        raise AttributeError(name)

    def _call(self, name: str) -> None:
        self.calls[name] += 1
        if name in self.errors:
            raise _real.NVMLError(self.errors[name])

    # --- init -------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._call("nvmlInit")
        if self.init_error is not None:
            raise _real.NVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")
        self.initialised -= 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._call("nvmlDeviceGetHandleByIndex")
        if index >= self.device_count:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return SimpleNamespace(index=index)

    def nvmlSystemGetDriverVersion(self) -> str:
        self._call("nvmlSystemGetDriverVersion")
        return "999.99"

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._call("nvmlSystemGetNVMLVersion")
        return "13.999"

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        return self.device_count

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._call("nvmlDeviceGetUUID")
        return gpu_uuid(handle.index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> Any:
        self._call("nvmlDeviceGetHandleByUUID")
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for i in range(self.device_count):
            if text == gpu_uuid(i):
                return SimpleNamespace(index=i)
            if text == mig_uuid(i):
                return SimpleNamespace(index=None, parent=i)
        raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Any) -> Any:
        self._call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        return SimpleNamespace(index=handle.parent)

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        self._call("nvmlDeviceGetIndex")
        if handle.index is None:  # a MIG handle has no index of its own
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return int(handle.index)

    def nvmlDeviceGetName(self, handle: Any) -> bytes:
        self._call("nvmlDeviceGetName")
        return b"Fake H200"

    # --- basic metrics ----------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        self._call("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=UTIL_GPU, memory=UTIL_MEM)

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        self._call("nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(used=MEM_USED, total=141 * 2**30, free=141 * 2**30 - MEM_USED)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        self._call("nvmlDeviceGetPowerUsage")
        return POWER_MW

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        self._call("nvmlDeviceGetTotalEnergyConsumption")
        self.energy_mj += ENERGY_STEP_MJ
        return self.energy_mj

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> int:
        self._call(f"nvmlDeviceGetClockInfo[{clock}]")
        return {_real.NVML_CLOCK_SM: SM_MHZ, _real.NVML_CLOCK_MEM: MEM_MHZ}[clock]

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        self._call("nvmlDeviceGetTemperature")
        return TEMP_C

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        self._call("nvmlDeviceGetCurrentClocksEventReasons")
        return EVENT_REASONS

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:
        self._call(f"nvmlDeviceGetPcieThroughput[{counter}]")
        if self.pcie_delay_s:
            time.sleep(self.pcie_delay_s)
        return {_real.NVML_PCIE_UTIL_TX_BYTES: PCIE_TX_KBS, _real.NVML_PCIE_UTIL_RX_BYTES: PCIE_RX_KBS}[
            counter
        ]

    # --- GPM ----------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        self._call("nvmlGpmQueryDeviceSupport")
        if self.gpm_query_error is not None:
            raise _real.NVMLError(self.gpm_query_error)
        support = _real.c_nvmlGpmSupport_t()
        support.version = _real.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(self.gpm_supported)
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._call("nvmlGpmSampleAlloc")
        addr = self._next_addr
        self._next_addr += 0x100
        self.samples[addr] = -1
        # A real c_nvmlGpmSample_t, so it fits the real request struct; the fake keys on its address.
        return ctypes.cast(ctypes.c_void_p(addr), _real.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._call("nvmlGpmSampleFree")
        self.freed.append(_addr(sample))

    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any:
        self._call("nvmlGpmSampleGet")
        self.samples[_addr(sample)] = self._seq
        self._seq += 1
        return sample

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        self._call("nvmlGpmMetricsGet")
        if request.version != _real.NVML_GPM_METRICS_GET_VERSION:
            raise _real.NVMLError(_real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        s1, s2 = self.samples.get(_addr(request.sample1), -1), self.samples.get(_addr(request.sample2), -1)
        if s1 < 0 or s2 <= s1:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        for i in range(request.numMetrics):
            m = request.metrics[i]
            if m.metricId in self.gpm_failing or m.metricId not in GPM_VALUES:
                m.nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED
                m.value = 0.0
            else:
                m.nvmlReturn = _real.NVML_SUCCESS
                m.value = GPM_VALUES[m.metricId] + (s2 - s1 - 1) * GPM_PAIRING_ERROR
        return request


def gpu_uuid(index: int) -> str:
    return f"GPU-{index:08x}-1111-2222-3333-444455556666"


def mig_uuid(parent: int) -> str:
    return f"MIG-{parent:08x}-aaaa-bbbb-cccc-ddddeeeeffff"


# Factories the sampler's child process can name ("fake_pynvml:name") and call.
def gpm_unsupported() -> FakeNvml:
    return FakeNvml(gpm_supported=False, pcie_delay_s=0.0)


def no_library() -> FakeNvml:
    return FakeNvml(init_error=_real.NVML_ERROR_LIBRARY_NOT_FOUND)


def temperature_not_supported() -> FakeNvml:
    return FakeNvml(errors={"nvmlDeviceGetTemperature": _real.NVML_ERROR_NOT_SUPPORTED})


def _addr(sample: Any) -> int:
    return int(ctypes.cast(sample, ctypes.c_void_p).value or 0)


def modules_probe() -> FakeNvml:
    """A fake whose device name lists the heavy modules loaded in the process that made it."""
    import sys

    heavy = sorted(m for m in ("torch", "pyarrow", "pandas", "transformers") if m in sys.modules)

    class Probe(FakeNvml):
        def nvmlDeviceGetName(self, handle: Any) -> bytes:
            return f"heavy modules: {', '.join(heavy) or 'none'}".encode()

    return Probe(pcie_delay_s=0.0)
