"""GPM: Hopper-and-later GPU performance metrics read through NVML.

GPM works on pairs of samples: nvmlGpmSampleGet snapshots the device's
counters into a sample, and nvmlGpmMetricsGet turns two snapshots into rates
over the time between them (NVML wants them at least 100 ms apart). Every
metric read here is a percentage, 0-100, averaged over that interval.

This module does not import pynvml: the caller passes the module (real or
fake) in, so that ``collectors.nvml`` decides once how NVML is loaded.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

# Ordered: (our metric name, pynvml constant name). Names are looked up on the
# module at run time, because older nvidia-ml-py releases lack some of them.
GPM_METRICS: tuple[tuple[str, str], ...] = (
    ("dram_bw_util", "NVML_GPM_METRIC_DRAM_BW_UTIL"),
    ("sm_util", "NVML_GPM_METRIC_SM_UTIL"),
    ("sm_occupancy", "NVML_GPM_METRIC_SM_OCCUPANCY"),
    ("tensor_util", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
    ("hmma_tensor_util", "NVML_GPM_METRIC_HMMA_TENSOR_UTIL"),
    ("fp16_util", "NVML_GPM_METRIC_FP16_UTIL"),
    ("fp32_util", "NVML_GPM_METRIC_FP32_UTIL"),
    ("fp64_util", "NVML_GPM_METRIC_FP64_UTIL"),
    ("integer_util", "NVML_GPM_METRIC_INTEGER_UTIL"),
    ("graphics_util", "NVML_GPM_METRIC_GRAPHICS_UTIL"),
)
GPM_UNIT = "%"
GPM_MIN_INTERVAL_S = 0.1  # NVML: samples closer than this give unreliable rates


def nvml_error_text(nvml: Any, exc: BaseException) -> str:
    """A short, stable description of an NVML (or other) error."""
    if isinstance(exc, getattr(nvml, "NVMLError", ())):
        code = getattr(exc, "value", None)
        try:
            text = str(exc)
        except Exception:  # str() itself calls into NVML, which may be gone
            text = "NVML error"
        return f"{text} (NVML error {code})"
    return f"{type(exc).__name__}: {exc}"


def error_code(exc: BaseException) -> int | None:
    code = getattr(exc, "value", None)
    return code if isinstance(code, int) else None


@dataclass
class GpmReader:
    """Reads the GPM metrics of one device; one instance per sampler thread.

    ``open()`` checks support and allocates two samples; each ``read()``
    takes the next snapshot and returns the metrics over the interval between
    the two, keyed by our metric name. Metrics whose per-metric status is an
    error are dropped from later reads and recorded in ``failed``.
    """

    nvml: Any
    handle: Any
    supported: bool = False
    reason: str | None = None
    ok: tuple[str, ...] = ()
    failed: dict[str, str] | None = None
    _ids: tuple[tuple[str, int], ...] = ()
    _prev: Any = None
    _cur: Any = None
    _request: Any = None
    _active: bool = False
    _primed: bool = False

    def open(self) -> bool:
        nvml = self.nvml
        self.failed = {}
        ids: list[tuple[str, int]] = []
        for name, const in GPM_METRICS:
            metric_id = getattr(nvml, const, None)
            if metric_id is None:
                self.failed[name] = f"this nvidia-ml-py has no {const}"
            else:
                ids.append((name, int(metric_id)))
        self._ids = tuple(ids)
        try:
            support = nvml.nvmlGpmQueryDeviceSupport(self.handle)
        except Exception as exc:  # an old driver lacks the function: NVML_ERROR_FUNCTION_NOT_FOUND
            self.reason = f"nvmlGpmQueryDeviceSupport failed: {nvml_error_text(nvml, exc)}"
            return False
        if not getattr(support, "isSupportedDevice", 0):
            self.reason = "device does not support GPM (needs Hopper or later, and not a vGPU)"
            return False
        try:
            self._prev = nvml.nvmlGpmSampleAlloc()
            self._cur = nvml.nvmlGpmSampleAlloc()
        except Exception as exc:
            self.reason = f"GPM sampling failed: {nvml_error_text(nvml, exc)}"
            self.close()
            return False
        # One request struct, reused: it holds NVML_GPM_METRIC_MAX entries (~20 KB).
        self._request = nvml.c_nvmlGpmMetricsGet_t()
        self.supported = self._active = True
        self.ok = tuple(name for name, _ in self._ids)
        return True

    def read(self) -> dict[str, float]:
        """Snapshot now and return each metric over (previous snapshot, now).

        The first call only takes the first snapshot and returns nothing: the
        caller's loop then spaces the snapshots by its own interval.
        """
        if not self._active or not self._ids:
            return {}
        nvml = self.nvml
        assert self.failed is not None
        if not self._primed:
            nvml.nvmlGpmSampleGet(self.handle, self._prev)
            self._primed = True
            return {}
        nvml.nvmlGpmSampleGet(self.handle, self._cur)
        req = self._request
        req.version = nvml.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(self._ids)
        req.sample1 = self._prev
        req.sample2 = self._cur
        for i, (_, metric_id) in enumerate(self._ids):
            req.metrics[i].metricId = metric_id
        # Swap before the call: whatever happens, the newest snapshot starts the next interval.
        self._prev, self._cur = self._cur, self._prev
        nvml.nvmlGpmMetricsGet(req)
        out: dict[str, float] = {}
        keep: list[tuple[str, int]] = []
        for i, (name, metric_id) in enumerate(self._ids):
            m = req.metrics[i]
            ret = int(m.nvmlReturn)
            if ret == 0:
                out[name] = float(m.value)
                keep.append((name, metric_id))
            else:
                self.failed[name] = f"nvmlGpmMetricsGet returned NVML error {ret}"
        if len(keep) != len(self._ids):
            self._ids = tuple(keep)
            self.ok = tuple(name for name, _ in keep)
        return out

    def close(self) -> None:
        for sample in (self._prev, self._cur):
            if sample is not None:
                # Freeing at shutdown: nothing useful to do with an error.
                with contextlib.suppress(Exception):
                    self.nvml.nvmlGpmSampleFree(sample)
        self._prev = self._cur = None
        self._active = False
