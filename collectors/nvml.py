"""NVML sampler: GPU counters on a background thread while a workload runs.

Two daemon threads, so that a slow query never delays the fast ones:

* the fast thread reads the basic NVML metrics every ``interval_s`` (default
  10 ms, 100 Hz): utilisation, memory, power, energy, clocks, temperature and
  the clock-event (throttle) reasons;
* the slow thread, every ``gpm_interval_s`` (default 100 ms, the least NVML
  allows for GPM), reads the GPM metrics (``collectors.gpm``) and PCIe
  throughput. PCIe is here because nvmlDeviceGetPcieThroughput measures a byte
  counter over 20 ms before it returns: two of those per fast tick would cap
  the fast thread near 25 Hz.

Every sample is stamped with ``time.time_ns()`` on the host; the recorder maps
that clock to the trace's. A metric that NVML reports as not supported (or not
permitted) is recorded in ``status()`` and never asked again. Nothing here
raises because NVML or a GPU is missing: ``status()`` says why and
``counters()`` is an empty, valid table.

pynvml is imported inside ``_open`` only (DESIGN.md: only collectors import it,
and only inside functions); tests pass a fake module through ``nvml=``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import pyarrow as pa

from tracekit import schema

from .gpm import GPM_METRICS, GPM_MIN_INTERVAL_S, GPM_UNIT, GpmReader, error_code, nvml_error_text

# NVML return codes after which asking again is pointless (nvml.h).
_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND = 3, 4, 13
_PERMANENT = {_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND}
# Other errors (a timeout, a GPU busy resetting) may pass; give up after this many in a row.
_MAX_CONSECUTIVE_ERRORS = 5
# NVML's "KB/s" for PCIe throughput is KiB/s (nvidia-smi and nvitop read it so).
_KIB = 1024


@dataclass(frozen=True)
class _Reader:
    """One NVML call yielding one or more metrics, with its unit conversion."""

    key: str  # names the call in status()
    metrics: tuple[str, ...]
    read: Callable[[Any, Any], tuple[float, ...]]  # (nvml, handle) -> values in our units


def _utilization(nvml: Any, h: Any) -> tuple[float, ...]:
    u = nvml.nvmlDeviceGetUtilizationRates(h)
    return float(u.gpu), float(u.memory)


def _temperature(nvml: Any, h: Any) -> tuple[float, ...]:
    # nvmlDeviceGetTemperature is deprecated (to go in CUDA 14); bindings that drop it have the V form.
    fn = getattr(nvml, "nvmlDeviceGetTemperature", None) or nvml.nvmlDeviceGetTemperatureV
    return (float(fn(h, nvml.NVML_TEMPERATURE_GPU)),)


def _clock_event_reasons(nvml: Any, h: Any) -> tuple[float, ...]:
    # Renamed from "throttle" to "event" reasons in NVML 12.2; older bindings only have the old name.
    fn = (
        getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    return (float(fn(h)),)


FAST_READERS: tuple[_Reader, ...] = (
    _Reader("utilization", ("gpu_util", "mem_util"), _utilization),
    _Reader("memory", ("mem_used",), lambda n, h: (float(n.nvmlDeviceGetMemoryInfo(h).used),)),
    _Reader("power", ("power",), lambda n, h: (n.nvmlDeviceGetPowerUsage(h) / 1e3,)),  # mW -> W
    _Reader("energy", ("energy",), lambda n, h: (n.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3,)),  # mJ -> J
    _Reader("sm_clock", ("sm_clock",), lambda n, h: (float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),)),
    _Reader(
        "mem_clock", ("mem_clock",), lambda n, h: (float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),)
    ),
    _Reader("temperature", ("temperature",), _temperature),
    _Reader("clock_event_reasons", ("clock_event_reasons",), _clock_event_reasons),
)
SLOW_READERS: tuple[_Reader, ...] = (
    _Reader(
        "pcie_tx",
        ("pcie_tx",),
        lambda n, h: (n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES) * _KIB,),
    ),
    _Reader(
        "pcie_rx",
        ("pcie_rx",),
        lambda n, h: (n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES) * _KIB,),
    ),
)

# metric -> (unit, source). The one place that says what each counter means.
METRICS: dict[str, tuple[str, str]] = {
    "gpu_util": ("%", "nvml"),  # time a kernel ran, over NVML's own 1/6 s..1 s window
    "mem_util": ("%", "nvml"),  # time device memory was read or written, same window
    "mem_used": ("bytes", "nvml"),
    "power": ("W", "nvml"),
    "energy": ("J", "nvml"),  # since the driver loaded; differences give energy per phase
    "sm_clock": ("MHz", "nvml"),
    "mem_clock": ("MHz", "nvml"),
    "temperature": ("C", "nvml"),
    "clock_event_reasons": ("bitmask", "nvml"),  # nvmlClocksEventReason* bits; 0 or 1 (idle) is normal
    "pcie_tx": ("bytes/s", "nvml"),  # over a 20 ms window starting at the sample
    "pcie_rx": ("bytes/s", "nvml"),
    **{name: (GPM_UNIT, "gpm") for name, _ in GPM_METRICS},  # over the interval starting at the sample
}


class _Loop:
    """A periodic loop that sleeps to the next deadline and times each tick."""

    def __init__(self, name: str, interval_s: float, tick: Callable[[], None], stop: threading.Event) -> None:
        self.interval_s = interval_s
        self._tick = tick
        self._stop = stop
        self.wall_ns: list[int] = []
        self.cpu_ns: list[int] = []
        self.starts_ns: list[int] = []  # perf_counter_ns at each tick start, for the achieved rate
        self.missed = 0
        self.error: str | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        interval = self.interval_s
        deadline = time.perf_counter()
        try:
            while not self._stop.is_set():
                t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
                self._tick()
                self.wall_ns.append(time.perf_counter_ns() - t0)
                self.cpu_ns.append(time.thread_time_ns() - c0)
                self.starts_ns.append(t0)
                deadline += interval
                now = time.perf_counter()
                if deadline <= now:
                    # Fell behind: drop the missed ticks rather than burst to catch up.
                    behind = int((now - deadline) // interval) + 1
                    self.missed += behind
                    deadline += behind * interval
                # Event.wait blocks on a lock with a timeout: no busy wait, and stop() wakes it at once.
                self._stop.wait(deadline - now)
        except BaseException as exc:  # never die silently: status() reports it
            self.error = f"sampler thread stopped: {type(exc).__name__}: {exc}"

    def stats(self, prefix: str) -> dict[str, Any]:
        wall = sorted(self.wall_ns)
        n = len(wall)
        starts = self.starts_ns
        span = (starts[-1] - starts[0]) / 1e9 if len(starts) > 1 else 0.0
        return {
            f"{prefix}ticks": n,
            f"{prefix}tick_us_mean": round(sum(wall) / n / 1e3, 2) if n else None,
            f"{prefix}tick_us_p99": round(wall[min(n - 1, int(0.99 * n))] / 1e3, 2) if n else None,
            f"{prefix}tick_us_max": round(wall[-1] / 1e3, 2) if n else None,
            f"{prefix}tick_cpu_us_mean": round(sum(self.cpu_ns) / n / 1e3, 2) if n else None,
            f"{prefix}rate_hz": round((len(starts) - 1) / span, 2) if span > 0 else None,
            f"{prefix}target_rate_hz": round(1.0 / self.interval_s, 2),
            f"{prefix}missed_deadlines": self.missed,
        }


class NvmlSampler:
    """Samples NVML (and GPM where supported) for one device on background threads.

    >>> with NvmlSampler(device_index=0) as s:   # doctest: +SKIP
    ...     run_workload()
    >>> s.counters()   # pyarrow Table, schema "counters"
    >>> s.status()     # what worked, what did not and why, cost per tick
    """

    def __init__(
        self,
        device_index: int = 0,
        interval_s: float = 0.01,
        gpm_interval_s: float = 0.1,
        *,
        gpm: bool = True,
        nvml: Any = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        if gpm_interval_s < GPM_MIN_INTERVAL_S:
            raise ValueError(
                f"gpm_interval_s must be >= {GPM_MIN_INTERVAL_S} (NVML's GPM minimum), got {gpm_interval_s}"
            )
        self.device_index = device_index
        self.interval_s = interval_s
        self.gpm_interval_s = gpm_interval_s
        self._want_gpm = gpm
        self._nvml: Any = nvml  # None: import pynvml on first use
        self._handle: Any = None
        self._opened = False
        self._initialised = False  # nvmlInit succeeded, so stop() owes an nvmlShutdown
        self._available = False
        self._reason: str | None = None
        self._info: dict[str, Any] = {}
        self._fast: list[_Reader] = []
        self._slow: list[_Reader] = []
        self._failed: dict[str, str] = {}  # metric -> why it is no longer read
        self._errors: dict[str, int] = {}  # reader key -> consecutive errors
        self._gpm: GpmReader | None = None
        self._gpm_reason: str | None = "not started" if gpm else "disabled by the caller"
        self._gpm_last_ts: int | None = None  # time of the last GPM snapshot
        # (ts_ns, metric, value); one tuple per append keeps appends atomic across threads.
        self._rows: list[tuple[int, str, float]] = []
        self._stop_event = threading.Event()
        self._loops: list[_Loop] = []
        self._state = "new"  # new -> running -> stopped
        self._lock = threading.Lock()

    # --- lifecycle -------------------------------------------------------
    def __enter__(self) -> NvmlSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Open NVML and start the sampling threads; without NVML, only record why."""
        with self._lock:
            if self._state != "new":
                raise RuntimeError(f"NvmlSampler.start() called on a {self._state} sampler")
            self._state = "running"
            self._open()
            if not self._available:
                return
            self._loops.append(_Loop("tracekit-nvml", self.interval_s, self._fast_tick, self._stop_event))
            if self._slow or (self._gpm is not None and self._gpm.supported):
                self._loops.append(
                    _Loop("tracekit-nvml-slow", self.gpm_interval_s, self._slow_tick, self._stop_event)
                )
            for loop in self._loops:
                loop.thread.start()

    def stop(self) -> None:
        """Stop the threads and release NVML. Safe to call twice, or before start()."""
        with self._lock:
            if self._state == "stopped":
                return
            self._state = "stopped"
            self._stop_event.set()
            for loop in self._loops:
                loop.thread.join()
            if self._gpm is not None:
                self._gpm.close()
            if self._initialised:
                self._initialised = False
                # Shutting down: the samples are already safe in memory.
                with contextlib.suppress(Exception):
                    self._nvml.nvmlShutdown()

    # --- results ---------------------------------------------------------
    def counters(self) -> pa.Table:
        """All samples so far, schema "counters" (callable while running)."""
        rows = list(self._rows)  # a copy under the GIL; the threads only append
        if not rows:
            return schema.empty("counters")
        ts, metric, value = zip(*rows, strict=True)
        units = [METRICS[m][0] for m in metric]
        sources = [METRICS[m][1] for m in metric]
        return schema.from_columns(
            "counters",
            {
                "ts_ns": ts,
                "device": [self.device_index] * len(rows),
                "metric": metric,
                "value": value,
                "unit": units,
                "source": sources,
            },
        )

    def status(self) -> dict[str, Any]:
        """JSON-ready description for run.json: availability, metrics, GPM, cost per tick."""
        ok = [m for r in (*self._fast, *self._slow) for m in r.metrics if m not in self._failed]
        out: dict[str, Any] = {
            "state": self._state,
            "available": self._available,
            "reason": self._reason,
            "device_index": self.device_index,
            **self._info,
            "interval_s": self.interval_s,
            "gpm_interval_s": self.gpm_interval_s,
            "metrics_ok": ok,
            "metrics_failed": dict(self._failed),
            "gpm_supported": bool(self._gpm is not None and self._gpm.supported),
            "gpm_reason": self._gpm_reason,
            "gpm_metrics_ok": list(self._gpm.ok) if self._gpm is not None else [],
            "gpm_metrics_failed": dict(self._gpm.failed or {}) if self._gpm is not None else {},
            "samples": len(self._rows),
        }
        names = ("", "slow_")
        for loop, prefix in zip(self._loops, names, strict=False):
            out.update(loop.stats(prefix))
            if loop.error:
                out.setdefault("thread_errors", []).append(loop.error)
        if not self._loops:
            out.update({"ticks": 0, "tick_us_mean": None, "tick_us_p99": None, "rate_hz": None})
        return out

    # --- internals -------------------------------------------------------
    def _open(self) -> None:
        if self._opened:
            return
        self._opened = True
        if self._nvml is None:
            try:
                import pynvml  # nvidia-ml-py
            except ImportError as exc:
                self._unavailable(f"pynvml not importable (pip install nvidia-ml-py): {exc}")
                return
            self._nvml = pynvml
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:  # no driver, no library, a container without the GPU
            self._unavailable(f"nvmlInit failed: {nvml_error_text(nvml, exc)}")
            return
        self._initialised = True
        try:
            self._handle = nvml.nvmlDeviceGetHandleByIndex(self.device_index)
        except Exception as exc:
            self._unavailable(f"no device {self.device_index}: {nvml_error_text(nvml, exc)}")
            return
        self._info["driver_version"] = _text(_try(lambda: nvml.nvmlSystemGetDriverVersion()))
        self._info["nvml_version"] = _text(_try(lambda: nvml.nvmlSystemGetNVMLVersion()))
        self._info["device_name"] = _text(_try(lambda: nvml.nvmlDeviceGetName(self._handle)))
        self._available = True
        # Probe every reader once now, so status() is complete even before the first tick.
        self._fast = [r for r in FAST_READERS if self._probe(r)]
        self._slow = [r for r in SLOW_READERS if self._probe(r)]
        if self._want_gpm:
            self._gpm = GpmReader(nvml, self._handle)
            self._gpm.open()
            self._gpm_reason = self._gpm.reason

    def _unavailable(self, reason: str) -> None:
        self._available = False
        self._reason = reason
        if self._want_gpm:
            self._gpm_reason = "NVML unavailable"

    def _probe(self, reader: _Reader) -> bool:
        try:
            reader.read(self._nvml, self._handle)
        except Exception as exc:
            if error_code(exc) in _PERMANENT or not isinstance(exc, getattr(self._nvml, "NVMLError", ())):
                self._disable(reader, exc)
                return False
        return True

    def _disable(self, reader: _Reader, exc: BaseException) -> None:
        why = f"{reader.key}: {nvml_error_text(self._nvml, exc)}"
        for m in reader.metrics:
            self._failed[m] = why

    def _read_all(self, readers: list[_Reader], ts: int) -> None:
        nvml, h, rows, errors = self._nvml, self._handle, self._rows, self._errors
        dropped: list[_Reader] = []
        for r in readers:
            try:
                values = r.read(nvml, h)
            except Exception as exc:
                code = error_code(exc)
                n = self._errors.get(r.key, 0) + 1
                self._errors[r.key] = n
                if code in _PERMANENT or n >= _MAX_CONSECUTIVE_ERRORS:
                    self._disable(r, exc)
                    if code not in _PERMANENT:
                        for m in r.metrics:
                            self._failed[m] += f" ({n} times in a row)"
                    dropped.append(r)
                continue
            if errors and r.key in errors:
                del errors[r.key]
            # One C-level extend: cheap, and atomic under the GIL against the other thread's appends.
            rows.extend(zip(repeat(ts), r.metrics, values))
        for r in dropped:
            readers.remove(r)  # only this loop's thread touches its list

    def _fast_tick(self) -> None:
        self._read_all(self._fast, time.time_ns())

    def _slow_tick(self) -> None:
        ts = time.time_ns()
        gpm = self._gpm
        if gpm is not None and gpm.supported:
            try:
                values = gpm.read()
            except Exception as exc:
                gpm.supported = False
                gpm.close()
                self._gpm_reason = f"GPM stopped: {nvml_error_text(self._nvml, exc)}"
            else:
                # The values cover (previous sample, now]: stamp them at the interval's start, so
                # a step-style counter track shows each value over the time it describes.
                start = self._gpm_last_ts
                if start is not None:
                    for m, v in values.items():
                        self._rows.append((start, m, v))
            self._gpm_last_ts = ts
        self._read_all(self._slow, ts)


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)
