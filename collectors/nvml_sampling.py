"""The NVML sampling loops, free of pyarrow and torch so that a child process can run them cheaply.

``collectors.nvml.NvmlSampler`` runs a ``SamplingCore`` either in a child process
(the default: ``child_main`` below) or, with an injected fake NVML, on threads of
the calling process. The core has two loops, so that a slow query never delays
the fast ones:

* fast, every ``interval_s`` (default 10 ms): the metrics NVML answers in about
  a microsecond (utilisation, memory, power, clocks, temperature, clock-event
  reasons);
* slow, every ``gpm_interval_s`` (default 100 ms, the least GPM allows): GPM,
  the energy counter and PCIe throughput. Energy is here because
  nvmlDeviceGetTotalEnergyConsumption costs milliseconds of CPU per call
  (docs/nvml.md); PCIe because nvmlDeviceGetPcieThroughput measures over 20 ms
  before it returns.

Why a process: every pynvml call goes through ctypes, which drops and re-takes
the GIL. On a thread of the workload, each re-take waits for the busy main
thread's switch interval: a sampling thread inside ``tracekit record`` falls far
behind its rate and the workload pays for every switch (docs/nvml.md has the
measurement). A child process has its own GIL.

Imports: the standard library and ``.gpm`` only; pynvml inside functions.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Protocol

from .gpm import GPM_METRICS, GPM_UNIT, GpmReader, error_code, nvml_error_text

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
    _Reader("sm_clock", ("sm_clock",), lambda n, h: (float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),)),
    _Reader(
        "mem_clock", ("mem_clock",), lambda n, h: (float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),)
    ),
    _Reader("temperature", ("temperature",), _temperature),
    _Reader("clock_event_reasons", ("clock_event_reasons",), _clock_event_reasons),
)
SLOW_READERS: tuple[_Reader, ...] = (
    _Reader("energy", ("energy",), lambda n, h: (n.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3,)),  # mJ -> J
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
# Metric codes in the child's sample file: the position in this tuple.
METRIC_NAMES: tuple[str, ...] = tuple(METRICS)
METRIC_CODE: dict[str, int] = {m: i for i, m in enumerate(METRIC_NAMES)}
# One sample in the child's file: ts_ns int64, metric code uint16, value float64; little-endian, packed.
RECORD = struct.Struct("<qHd")


class Sink(Protocol):
    def add(self, ts: int, metrics: tuple[str, ...], values: tuple[float, ...]) -> None: ...


class ListSink:
    """Samples in memory as (ts_ns, metric, value) tuples (thread mode)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, float]] = []

    def add(self, ts: int, metrics: tuple[str, ...], values: tuple[float, ...]) -> None:
        # One C-level extend: atomic under the GIL against the other loop's appends.
        self.rows.extend(zip(repeat(ts), metrics, values))


class FileSink:
    """Samples appended to a file as fixed-size records (process mode).

    Buffered and written about every ``flush_s``, so the parent (which reads the
    file) loses at most that much if this process is killed.
    """

    def __init__(self, path: str, flush_s: float = 0.25) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._flush_s = flush_s
        self._last = time.monotonic()
        self.count = 0

    def add(self, ts: int, metrics: tuple[str, ...], values: tuple[float, ...]) -> None:
        packed = b"".join(RECORD.pack(ts, METRIC_CODE[m], v) for m, v in zip(metrics, values, strict=True))
        with self._lock:
            self._buf += packed
            self.count += len(metrics)
            now = time.monotonic()
            if now - self._last >= self._flush_s:
                self._write()
                self._last = now

    def _write(self) -> None:
        if self._buf:
            os.write(self._fd, self._buf)  # O_APPEND: whole records, in order
            self._buf.clear()

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                self._write()
                os.close(self._fd)
                self._fd = -1


class _Loop:
    """A periodic loop that sleeps to the next deadline and times each tick."""

    def __init__(
        self,
        name: str,
        interval_s: float,
        tick: Callable[[], None],
        stop: threading.Event,
        active: threading.Event | None = None,
    ) -> None:
        self.interval_s = interval_s
        self._tick = tick
        self._stop = stop
        self._active = active  # cleared: paused (no tick, no wake-up) until set again
        self.idle = threading.Event()  # set while not inside a tick
        self.idle.set()
        self.paused_ns = 0  # time spent paused, left out of the achieved rate
        self.wall_ns: list[int] = []
        self.cpu_ns: list[int] = []
        self.starts_ns: list[int] = []  # perf_counter_ns at each tick start, for the achieved rate
        self.missed = 0
        self.error: str | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        interval = self.interval_s
        deadline = time.perf_counter()
        pending_pause = 0
        try:
            while not self._stop.is_set():
                active = self._active
                if active is not None and not active.is_set():
                    p0 = time.perf_counter_ns()
                    active.wait()  # stop() sets it too, so a paused loop still ends
                    # Counted once a tick follows: the rate spans first to last tick, and a pause
                    # before the first or after the last lies outside that span.
                    if self.starts_ns:
                        pending_pause += time.perf_counter_ns() - p0
                    deadline = time.perf_counter()
                    continue
                self.idle.clear()
                if active is not None and not active.is_set():  # paused between the check and here
                    self.idle.set()
                    continue
                t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
                self.paused_ns += pending_pause
                pending_pause = 0
                try:
                    self._tick()
                finally:
                    self.idle.set()
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
        span = (starts[-1] - starts[0] - self.paused_ns) / 1e9 if len(starts) > 1 else 0.0
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


class SamplingCore:
    """Opens NVML for one device and runs the fast and slow loops into a sink."""

    def __init__(
        self,
        device_index: int,
        interval_s: float,
        gpm_interval_s: float,
        *,
        gpm: bool,
        nvml: Any,
        sink: Sink,
        thread_prefix: str = "tracekit-nvml",
        exclude: tuple[str, ...] = (),
    ) -> None:
        self.device_index = device_index
        self._exclude = frozenset(exclude)
        self.interval_s = interval_s
        self.gpm_interval_s = gpm_interval_s
        self._want_gpm = gpm
        self._nvml: Any = nvml  # None: import pynvml on open
        self._sink = sink
        self._prefix = thread_prefix
        self._handle: Any = None
        self._initialised = False  # nvmlInit succeeded, so stop() owes an nvmlShutdown
        self.available = False
        self.reason: str | None = None
        self.info: dict[str, Any] = {}
        self._fast: list[_Reader] = []
        self._slow: list[_Reader] = []
        self._failed: dict[str, str] = {}  # metric -> why it is no longer read
        self._errors: dict[str, int] = {}  # reader key -> consecutive errors
        self._gpm: GpmReader | None = None
        self._gpm_reason: str | None = "not started" if gpm else "disabled by the caller"
        self._gpm_last_ts: int | None = None  # time of the last GPM snapshot
        self._stop_event = threading.Event()
        self._active = threading.Event()  # cleared by pause()
        self._active.set()
        self._loops: list[_Loop] = []

    def start(self) -> None:
        self._open()
        if not self.available:
            return
        self._loops.append(
            _Loop(self._prefix, self.interval_s, self._fast_tick, self._stop_event, self._active)
        )
        if self._slow or (self._gpm is not None and self._gpm.supported):
            self._loops.append(
                _Loop(
                    f"{self._prefix}-slow",
                    self.gpm_interval_s,
                    self._slow_tick,
                    self._stop_event,
                    self._active,
                )
            )
        for loop in self._loops:
            loop.thread.start()

    def pause(self, timeout_s: float = 5.0) -> bool:
        """Stop ticking (no NVML call, no wake-up) until ``resume``; returns once no tick is running.

        A tick in flight finishes first (a slow tick reads PCIe for 40 ms): after ``pause`` returns,
        nothing of the sampler runs. False if a tick did not finish within ``timeout_s``.
        """
        self._active.clear()
        return all(loop.idle.wait(timeout_s) for loop in self._loops)

    def resume(self) -> None:
        """Tick again from now (the missed time is not counted as missed deadlines)."""
        self._active.set()

    @property
    def paused(self) -> bool:
        return not self._active.is_set()

    def stop(self) -> None:
        self._stop_event.set()
        self._active.set()  # wake paused loops so they see the stop
        for loop in self._loops:
            loop.thread.join()
        if self._gpm is not None:
            self._gpm.close()
        if self._initialised:
            self._initialised = False
            # Shutting down: the samples are already safe.
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()

    def status(self) -> dict[str, Any]:
        """Availability, metrics, GPM and cost per tick (JSON-ready)."""
        ok = [m for r in (*self._fast, *self._slow) for m in r.metrics if m not in self._failed]
        out: dict[str, Any] = {
            "available": self.available,
            "reason": self.reason,
            "device_index": self.device_index,
            **self.info,
            "interval_s": self.interval_s,
            "gpm_interval_s": self.gpm_interval_s,
            "metrics_ok": ok,
            "metrics_failed": dict(self._failed),
            "gpm_supported": bool(self._gpm is not None and self._gpm.supported),
            "gpm_reason": self._gpm_reason,
            "gpm_metrics_ok": list(self._gpm.ok) if self._gpm is not None else [],
            "gpm_metrics_failed": dict(self._gpm.failed or {}) if self._gpm is not None else {},
        }
        for loop, prefix in zip(self._loops, ("", "slow_"), strict=False):
            out.update(loop.stats(prefix))
            if loop.error:
                out.setdefault("thread_errors", []).append(loop.error)
        if not self._loops:
            out.update({"ticks": 0, "tick_us_mean": None, "tick_us_p99": None, "rate_hz": None})
        return out

    # --- internals -------------------------------------------------------
    def _open(self) -> None:
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
        self.info["driver_version"] = _text(_try(lambda: nvml.nvmlSystemGetDriverVersion()))
        self.info["nvml_version"] = _text(_try(lambda: nvml.nvmlSystemGetNVMLVersion()))
        self.info["device_name"] = _text(_try(lambda: nvml.nvmlDeviceGetName(self._handle)))
        self.available = True
        # Probe every reader once now, so status() is complete even before the first tick.
        # Excluded metrics are never called: a caller can leave out a costly read (PCIe blocks 20 ms).
        wanted = [r for r in (*FAST_READERS, *SLOW_READERS) if not set(r.metrics) & self._exclude]
        self._fast = [r for r in FAST_READERS if r in wanted and self._probe(r)]
        self._slow = [r for r in SLOW_READERS if r in wanted and self._probe(r)]
        if self._want_gpm:
            self._gpm = GpmReader(nvml, self._handle)
            self._gpm.open()
            self._gpm_reason = self._gpm.reason

    def _unavailable(self, reason: str) -> None:
        self.available = False
        self.reason = reason
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

    def _read_all(self, readers: list[_Reader], ts: int | None) -> None:
        """Read each reader; ``ts`` None stamps each reading with its own time (slow loop)."""
        nvml, h, sink, errors = self._nvml, self._handle, self._sink, self._errors
        dropped: list[_Reader] = []
        for r in readers:
            t = time.time_ns() if ts is None else ts
            try:
                values = r.read(nvml, h)
            except Exception as exc:
                code = error_code(exc)
                n = errors.get(r.key, 0) + 1
                errors[r.key] = n
                if code in _PERMANENT or n >= _MAX_CONSECUTIVE_ERRORS:
                    self._disable(r, exc)
                    if code not in _PERMANENT:
                        for m in r.metrics:
                            self._failed[m] += f" ({n} times in a row)"
                    dropped.append(r)
                continue
            if errors and r.key in errors:
                del errors[r.key]
            sink.add(t, r.metrics, values)
        for r in dropped:
            readers.remove(r)  # only this loop's thread touches its list

    def _fast_tick(self) -> None:
        # All fast readings cost about a microsecond: one timestamp for the tick.
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
                if start is not None and values:
                    names = tuple(values)
                    self._sink.add(start, names, tuple(values[m] for m in names))
            self._gpm_last_ts = ts
        # Energy after GPM (1.4 ms) and PCIe (20 ms each): stamp each with its own time.
        self._read_all(self._slow, None)


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


class NullNvml:
    """An NVML stand-in that never calls the driver: every reading is a constant, GPM unsupported.

    For the overhead benchmark's control arm: a sampler child running this
    (``NvmlSampler(nvml="tracekit.collectors.nvml_sampling:NullNvml")``) has the
    same process, threads, wake-ups and sample file as the real one, without a
    single NVML call. A slowdown it shares with the real sampler comes from the
    process; one it does not, from NVML.
    """

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_TEMPERATURE_GPU = 0
    NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1

    class NVMLError(Exception):
        pass

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlSystemGetDriverVersion(self) -> str:
        return "none (NullNvml)"

    def nvmlSystemGetNVMLVersion(self) -> str:
        return "none (NullNvml)"

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return "NullNvml (no driver calls)"

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        return _NULL_UTIL

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        return _NULL_MEM

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return 0

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> int:
        return 0

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return 0

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        return 0

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:
        return 0

    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        return _NULL_NO_GPM


class _Values:
    def __init__(self, **kw: int) -> None:
        self.__dict__.update(kw)


_NULL_UTIL = _Values(gpu=0, memory=0)
_NULL_MEM = _Values(used=0, total=0, free=0)
_NULL_NO_GPM = _Values(isSupportedDevice=0)


def resolve_nvml(spec: str | None) -> Any:
    """``None``: None (the core imports pynvml). ``"module:attr"``: that object, called if it is a
    class or function (a fake NVML for tests, importable in the child)."""
    if spec is None:
        return None
    module, _, attr = spec.partition(":")
    obj = importlib.import_module(module)
    if attr:
        obj = getattr(obj, attr)
        if callable(obj):
            obj = obj()
    return obj


# --- the child process -----------------------------------------------------------


def _set_affinity(cpus: list[int] | None) -> dict[str, Any]:
    """Pin this process to ``cpus`` (None: leave it); what it runs on, and any error, for status()."""
    out: dict[str, Any] = {}
    if cpus is not None:
        try:
            os.sched_setaffinity(0, cpus)
        except (OSError, ValueError) as exc:  # a CPU this machine lacks: sample anyway, say why
            out["cpu_affinity_error"] = f"sched_setaffinity({sorted(cpus)}): {exc}"
    with contextlib.suppress(OSError, AttributeError):
        out["cpu_affinity"] = sorted(os.sched_getaffinity(0))
    return out


def _send(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg, default=str) + "\n")
    sys.stdout.flush()


def child_main(config: dict[str, Any]) -> int:
    """Entry point of the sampler process: sample until told to stop, stdin closes, or the parent goes.

    Protocol: one JSON line out at start (``ready``) and at the end (``stopped``), each with the
    status; lines in: ``status`` (reply ``status``), ``pause`` (reply ``paused`` once no tick
    runs), ``resume`` (reply ``resumed``), ``stop``. Samples go to ``config["data_path"]``.
    """
    # Ctrl-C in a terminal reaches the whole process group: the parent decides when to stop,
    # after it has handled the interrupt, so samples up to that point are kept.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    # Before any thread starts, so the loops inherit it. A child inherits its parent's CPUs;
    # pinning it elsewhere keeps its wake-ups off the workload's cores.
    affinity = _set_affinity(config.get("cpu_affinity"))
    try:
        nvml = resolve_nvml(config.get("nvml"))
    except Exception as exc:
        _send({"event": "ready", "status": {"available": False, "reason": f"cannot load NVML: {exc}"}})
        return 1
    sink = FileSink(config["data_path"])
    core = SamplingCore(
        config["device_index"],
        config["interval_s"],
        config["gpm_interval_s"],
        gpm=config["gpm"],
        nvml=nvml,
        sink=sink,
        exclude=tuple(config.get("exclude", ())),
    )
    core.start()
    core.info.update(affinity)
    _send({"event": "ready", "status": core.status(), "pid": os.getpid()})
    pending = b""
    try:
        while True:
            readable, _, _ = select.select([0], [], [], 1.0)
            if not readable:
                if os.getppid() != parent:  # the parent died without closing our stdin
                    break
                continue
            chunk = os.read(0, 4096)
            if not chunk:  # the parent closed the pipe or died
                break
            pending += chunk
            lines = pending.split(b"\n")
            pending = lines.pop()
            commands = [c.strip() for c in lines]
            for c in commands:
                if c == b"status":
                    _send({"event": "status", "status": core.status(), "samples": sink.count})
                elif c == b"pause":
                    _send({"event": "paused", "ok": core.pause()})
                elif c == b"resume":
                    core.resume()
                    _send({"event": "resumed"})
            if b"stop" in commands:
                break
    finally:
        core.stop()
        sink.close()
    # The parent may be gone (stdout closed): then nobody needs the final status.
    with contextlib.suppress(OSError, ValueError):
        _send({"event": "stopped", "status": core.status(), "samples": sink.count})
    return 0
