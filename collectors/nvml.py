"""NVML sampler: GPU counters from a child process while a workload runs.

``NvmlSampler`` reads the basic NVML metrics at ``interval_s`` (default 10 ms,
100 Hz) and GPM, energy and PCIe at ``gpm_interval_s`` (default 100 ms); the
loops themselves are in ``collectors.nvml_sampling``.

By default the loops run in a child process (``mode="process"``): a fresh
Python interpreter that imports only the standard library, pynvml and the
sampling module (never torch or pyarrow). Why: every pynvml call goes through
ctypes, which releases and re-takes the GIL; on a thread of a busy workload
each re-take waits for the main thread (docs/nvml.md measures how far such a
thread falls behind). The child
appends fixed-size records to a file in a private temporary directory, which
the parent reads in ``counters()``; control and status go over the child's
stdin/stdout as JSON lines. The child stops when told to, when its stdin
closes (the parent exited) or when its parent process changes; it ignores
SIGINT, so Ctrl-C stops the workload and the parent then stops the sampler
with every sample kept.

We start the child with ``subprocess`` rather than ``multiprocessing``'s spawn:
spawn re-imports the parent's ``__main__`` in the child, which for a user
script that calls ``tracekit.record()`` at top level would run the workload
again. The child gets the parent's ``sys.path``, so it imports the same
tracekit (installed or mapped).

Every sample is stamped with ``time.time_ns()``, the same host clock in both
processes; the recorder maps it to the trace's clock. A metric that NVML
reports as not supported (or not permitted) is recorded in ``status()`` and
never asked again. Nothing here raises because NVML or a GPU is missing:
``status()`` says why and ``counters()`` is an empty, valid table.

Tests inject a fake NVML: ``nvml=<object>`` runs the loops on threads of this
process (``mode="thread"``); ``nvml="module:attr"`` names a fake the child can
import (process mode with a fake).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np
import pyarrow as pa

from tracekit.model import schema

from .gpm import GPM_MIN_INTERVAL_S, nvml_error_text
from .nvml_sampling import (
    FAST_READERS,
    METRIC_NAMES,
    METRICS,
    RECORD,
    SLOW_READERS,
    ListSink,
    SamplingCore,
)

__all__ = [
    "FAST_READERS",
    "METRICS",
    "SLOW_READERS",
    "NvmlSampler",
    "nvml_index_for_torch_device",
]

# The child's records, read back without a Python loop.
_RECORD_DTYPE = np.dtype([("ts", "<i8"), ("code", "<u2"), ("value", "<f8")])
assert _RECORD_DTYPE.itemsize == RECORD.size
# How long start() waits for the child to import pynvml and open the device.
_START_TIMEOUT_S = 60.0
# How long stop() waits for the child's last tick (a slow tick reads PCIe for 40 ms).
_STOP_TIMEOUT_S = 15.0
_BOOT = (
    "import sys, json; c = json.loads(sys.argv[1]); sys.path[:] = c['sys_path']; "
    "from tracekit.collectors.nvml_sampling import child_main; sys.exit(child_main(c))"
)


class NvmlSampler:
    """Samples NVML (and GPM where supported) for one device, in a child process.

    >>> with NvmlSampler(device_index=0) as s:   # doctest: +SKIP
    ...     run_workload()
    >>> s.counters()   # pyarrow Table, schema "counters"
    >>> s.status()     # what worked, what did not and why, cost per tick

    ``device_index`` is NVML's index; for a torch device use ``for_torch_device``.
    """

    def __init__(
        self,
        device_index: int = 0,
        interval_s: float = 0.01,
        gpm_interval_s: float = 0.1,
        *,
        gpm: bool = True,
        nvml: Any = None,
        mode: str | None = None,
        exclude: tuple[str, ...] = (),
        cpu_affinity: tuple[int, ...] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        if gpm_interval_s < GPM_MIN_INTERVAL_S:
            raise ValueError(
                f"gpm_interval_s must be >= {GPM_MIN_INTERVAL_S} (NVML's GPM minimum), got {gpm_interval_s}"
            )
        if mode is None:
            mode = "thread" if nvml is not None and not isinstance(nvml, str) else "process"
        if mode not in ("thread", "process"):
            raise ValueError(f"mode must be 'thread' or 'process', got {mode!r}")
        if mode == "process" and nvml is not None and not isinstance(nvml, str):
            raise ValueError("process mode needs nvml=None or a 'module:attr' string the child can import")
        self.device_index = device_index
        self.interval_s = interval_s
        self.gpm_interval_s = gpm_interval_s
        self.mode = mode
        self._want_gpm = gpm
        self._exclude = tuple(exclude)  # metric names never read (e.g. the 20 ms PCIe calls)
        if cpu_affinity is not None and mode != "process":
            raise ValueError("cpu_affinity pins the sampler process: it needs mode='process'")
        # CPUs the child runs on (None: the parent's, which it inherits).
        self.cpu_affinity = None if cpu_affinity is None else tuple(sorted(set(cpu_affinity)))
        self._nvml_spec = nvml
        self._state = "new"  # new -> running -> stopped
        self._lock = threading.Lock()
        self._preset_reason: str | None = None  # set by for_torch_device when the mapping failed
        self.torch_device: int | None = None
        self._extra: dict[str, Any] = {}
        # thread mode
        self._core: SamplingCore | None = None
        self._list_sink: ListSink | None = None
        # process mode
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmpdir: str | None = None
        self._data_path: str | None = None
        self._data: bytes | None = None  # the child's samples, read at stop
        self._child_status: dict[str, Any] | None = None
        self._out_buf = b""
        self._io_lock = threading.Lock()

    @classmethod
    def for_torch_device(cls, torch_index: int, **kwargs: Any) -> NvmlSampler:
        """A sampler for torch's ``cuda:<torch_index>``, mapped through CUDA_VISIBLE_DEVICES.

        If the mapping fails (a hidden device, a UUID NVML does not know), the
        sampler still constructs: it samples nothing and ``status()`` says why.
        """
        nvml = kwargs.get("nvml")
        try:
            index = nvml_index_for_torch_device(
                torch_index, nvml=nvml if nvml is not None and not isinstance(nvml, str) else None
            )
            reason = None
        except Exception as exc:
            index, reason = torch_index, f"cannot map torch cuda:{torch_index} to an NVML device: {exc}"
        sampler = cls(device_index=index, **kwargs)
        sampler.torch_device = torch_index
        sampler._preset_reason = reason
        return sampler

    # --- lifecycle -------------------------------------------------------
    def __enter__(self) -> NvmlSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start sampling and return once the first readings are possible; without NVML, only record why."""
        with self._lock:
            if self._state != "new":
                raise RuntimeError(f"NvmlSampler.start() called on a {self._state} sampler")
            self._state = "running"
            if self._preset_reason is not None:
                return
            if self.mode == "thread":
                self._start_thread(self._nvml_spec)
            else:
                self._start_process()

    def stop(self) -> None:
        """Stop sampling and release NVML. Safe to call twice, or before start()."""
        with self._lock:
            if self._state == "stopped":
                return
            was_running = self._state == "running"
            self._state = "stopped"
            if self._core is not None:
                self._core.stop()
            if was_running and self._proc is not None and self._data is None:
                self._stop_process()

    def pause(self) -> None:
        """Stop sampling until ``resume()``: no NVML call and no wake-up; returns once no tick runs.

        For measurements that compare work with and without sampling back to back, without the
        child's ~0.2 s start between them. No-op when nothing samples.
        """
        self._control("pause", "paused")

    def resume(self) -> None:
        """Sample again after ``pause()``."""
        self._control("resume", "resumed")

    def _control(self, command: str, reply: str) -> None:
        with self._lock:
            if self._state != "running":
                raise RuntimeError(f"NvmlSampler.{command}() on a {self._state} sampler")
            if self._core is not None:
                if command == "pause":
                    self._core.pause()
                else:
                    self._core.resume()
                return
            proc = self._proc
            if proc is None or proc.poll() is not None or proc.stdin is None:
                return
            with self._io_lock:
                try:
                    proc.stdin.write(command.encode() + b"\n")
                    proc.stdin.flush()
                except (OSError, ValueError):
                    return
            if self._read_message(reply, _STOP_TIMEOUT_S) is None:
                raise RuntimeError(f"the sampler process did not answer {command!r}")

    # --- results ---------------------------------------------------------
    def counters(self) -> pa.Table:
        """All samples so far, schema "counters" (callable while running)."""
        if self._list_sink is not None:
            return self._table_from_rows(list(self._list_sink.rows))  # a copy; the loops only append
        data = self._data if self._data is not None else self._read_data_file()
        if not data:
            return schema.empty("counters")
        n = len(data) // RECORD.size  # a record cut short by a kill is left out
        rec = np.frombuffer(data, dtype=_RECORD_DTYPE, count=n)
        codes = rec["code"].astype(np.int32)
        names = pa.array(METRIC_NAMES, pa.string())
        units = pa.array([METRICS[m][0] for m in METRIC_NAMES], pa.string())
        sources = pa.array([METRICS[m][1] for m in METRIC_NAMES], pa.string())
        idx = pa.array(codes)
        return schema.from_columns(
            "counters",
            {
                "ts_ns": pa.array(rec["ts"]),
                "device": pa.array(np.full(n, self.device_index, dtype=np.int32)),
                "metric": pa.DictionaryArray.from_arrays(idx, names),
                "value": pa.array(rec["value"]),
                "unit": pa.DictionaryArray.from_arrays(idx, units),
                "source": pa.DictionaryArray.from_arrays(idx, sources),
            },
        )

    def status(self) -> dict[str, Any]:
        """JSON-ready description for run.json: availability, metrics, GPM, cost per tick."""
        base: dict[str, Any] = {"state": self._state, "mode": self.mode, **self._extra}
        if self.torch_device is not None:
            base["torch_device"] = self.torch_device
        if self._core is not None:
            st = self._core.status()
            st["samples"] = len(self._list_sink.rows) if self._list_sink is not None else 0
            return {**base, **st}
        if self._proc is not None:
            st = dict(self._child_status or {})
            if self._state == "running":
                st = self._ask_status() or st
            st["samples"] = self._sample_count()
            return {**base, **st}
        reason = self._preset_reason or ("not started" if self._state == "new" else "not sampled")
        return {
            **base,
            "available": False,
            "reason": reason,
            "device_index": self.device_index,
            "interval_s": self.interval_s,
            "gpm_interval_s": self.gpm_interval_s,
            "metrics_ok": [],
            "metrics_failed": {},
            "gpm_supported": False,
            "gpm_reason": "disabled by the caller" if not self._want_gpm else "NVML unavailable",
            "gpm_metrics_ok": [],
            "gpm_metrics_failed": {},
            "samples": 0,
            "ticks": 0,
            "tick_us_mean": None,
            "tick_us_p99": None,
            "rate_hz": None,
        }

    # --- thread mode -----------------------------------------------------
    def _start_thread(self, nvml: Any) -> None:
        self._list_sink = ListSink()
        self._core = SamplingCore(
            self.device_index,
            self.interval_s,
            self.gpm_interval_s,
            gpm=self._want_gpm,
            nvml=nvml,
            sink=self._list_sink,
            exclude=self._exclude,
        )
        self._core.start()

    def _table_from_rows(self, rows: list[tuple[int, str, float]]) -> pa.Table:
        if not rows:
            return schema.empty("counters")
        ts, metric, value = zip(*rows, strict=True)
        return schema.from_columns(
            "counters",
            {
                "ts_ns": ts,
                "device": [self.device_index] * len(rows),
                "metric": metric,
                "value": value,
                "unit": [METRICS[m][0] for m in metric],
                "source": [METRICS[m][1] for m in metric],
            },
        )

    # --- process mode ----------------------------------------------------
    def _start_process(self) -> None:
        self._tmpdir = tempfile.mkdtemp(prefix="tracekit-nvml-")
        self._data_path = os.path.join(self._tmpdir, "samples.bin")
        config = {
            "sys_path": list(sys.path),
            "nvml": self._nvml_spec,
            "device_index": self.device_index,
            "interval_s": self.interval_s,
            "gpm_interval_s": self.gpm_interval_s,
            "gpm": self._want_gpm,
            "exclude": list(self._exclude),
            "data_path": self._data_path,
            "cpu_affinity": None if self.cpu_affinity is None else list(self.cpu_affinity),
        }
        t0 = time.perf_counter()
        stderr_path = os.path.join(self._tmpdir, "stderr.txt")
        try:
            with open(stderr_path, "wb") as err:
                self._proc = subprocess.Popen(
                    [sys.executable, "-c", _BOOT, json.dumps(config)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    close_fds=True,
                )
        except OSError as exc:
            self._process_failed(f"could not start the sampler process: {exc}")
            return
        msg = self._read_message("ready", _START_TIMEOUT_S)
        self._extra["process_start_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
        if msg is None:
            why = self._child_stderr_tail() or "no reply"
            self._kill_process()
            self._process_failed(f"sampler process did not start: {why}")
            return
        self._extra["pid"] = msg.get("pid")
        self._child_status = msg["status"]
        if not self._child_status.get("available"):
            self._stop_process()  # nothing to sample: do not keep an idle process around

    def _process_failed(self, reason: str) -> None:
        """The child could not run: sample on threads instead, and say so (better than no counters)."""
        self._extra["process_error"] = reason
        if self._nvml_spec is not None:  # a named fake: load it here
            from .nvml_sampling import resolve_nvml

            nvml: Any = resolve_nvml(self._nvml_spec)
        else:
            nvml = None
        self.mode = "thread"
        self._proc = None
        self._start_thread(nvml)

    def _stop_process(self) -> None:
        proc = self._proc
        assert proc is not None
        try:
            with self._io_lock:
                assert proc.stdin is not None
                proc.stdin.write(b"stop\n")
                proc.stdin.flush()
                proc.stdin.close()
        except (OSError, ValueError):
            pass  # it already exited: what it wrote is in the file
        msg = self._read_message("stopped", _STOP_TIMEOUT_S)
        if msg is not None:
            self._child_status = msg["status"]
        try:
            code = proc.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._kill_process()
            code = proc.returncode
        if msg is None:
            self._child_status = dict(self._child_status or {})
            self._child_status.setdefault("thread_errors", []).append(
                f"sampler process ended without a final status (exit code {code}): "
                f"{self._child_stderr_tail() or 'no message'}"
            )
        self._data = self._read_data_file()
        if proc.stdout is not None:
            proc.stdout.close()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    def _kill_process(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def _read_data_file(self) -> bytes:
        if self._data_path is None:
            return b""
        try:
            with open(self._data_path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""

    def _sample_count(self) -> int:
        if self._data is not None:
            return len(self._data) // RECORD.size
        if self._data_path is None:
            return 0
        try:
            return os.path.getsize(self._data_path) // RECORD.size
        except OSError:
            return 0

    def _ask_status(self) -> dict[str, Any] | None:
        proc = self._proc
        if proc is None or proc.poll() is not None or proc.stdin is None:
            return None
        with self._io_lock:
            try:
                proc.stdin.write(b"status\n")
                proc.stdin.flush()
            except (OSError, ValueError):
                return None
        msg = self._read_message("status", 5.0)
        return None if msg is None else msg["status"]

    def _read_message(self, event: str, timeout_s: float) -> dict[str, Any] | None:
        """The next JSON line from the child with this event, or None on timeout / exit."""
        proc = self._proc
        if proc is None or proc.stdout is None:
            return None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\n" in self._out_buf:
                line, self._out_buf = self._out_buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue  # not ours (a library printing to stdout)
                if isinstance(msg, dict) and msg.get("event") == event:
                    return msg
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            readable, _, _ = select.select([fd], [], [], left)
            if not readable:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None  # the child exited
            self._out_buf += chunk

    def _child_stderr_tail(self) -> str:
        if self._tmpdir is None:
            return ""
        with contextlib.suppress(OSError):
            with open(os.path.join(self._tmpdir, "stderr.txt"), "rb") as f:
                lines = f.read().decode(errors="replace").strip().splitlines()
            return lines[-1] if lines else ""
        return ""


# --- torch device -> NVML index -----------------------------------------------


def _visible_entries(value: str) -> list[str]:
    """CUDA_VISIBLE_DEVICES entries as CUDA reads them: up to the first invalid one."""
    out: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if entry.isdigit() or entry.startswith(("GPU-", "MIG-")):
            out.append(entry)
        else:  # CUDA: devices from the first invalid entry on are hidden ("-1" hides all)
            break
    return out


def nvml_index_for_torch_device(torch_index: int, *, nvml: Any = None, visible: str | None = None) -> int:
    """NVML's index of the GPU that torch calls ``cuda:<torch_index>``.

    torch numbers only the devices in CUDA_VISIBLE_DEVICES, in its order; NVML
    ignores that variable and numbers all GPUs in PCI bus order. Integer
    entries are NVML indices as they are (exact where CUDA_DEVICE_ORDER is
    PCI_BUS_ID, or on a machine of one GPU model, where CUDA's default
    fastest-first order falls back to PCI order); ``GPU-<uuid>`` and
    ``MIG-<uuid>`` entries (or a unique prefix of one) are looked up through
    NVML, a MIG instance giving its parent GPU. ``visible`` defaults to the
    environment's CUDA_VISIBLE_DEVICES; unset means torch and NVML agree.
    Raises ValueError for an index torch cannot see, LookupError for a UUID
    NVML does not know.
    """
    if torch_index < 0:
        raise ValueError(f"torch device index must be >= 0, got {torch_index}")
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return torch_index
    entries = _visible_entries(visible)
    if torch_index >= len(entries):
        raise ValueError(
            f"cuda:{torch_index} is not visible: CUDA_VISIBLE_DEVICES={visible!r} shows {len(entries)} device(s)"
        )
    entry = entries[torch_index]
    if entry.isdigit():
        return int(entry)
    if nvml is None:
        import pynvml  # nvidia-ml-py

        nvml = pynvml
    nvml.nvmlInit()
    try:
        return _index_of_uuid(nvml, entry)
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _index_of_uuid(nvml: Any, uuid: str) -> int:
    try:
        handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
    except Exception as exc:
        handle = _handle_by_uuid_prefix(nvml, uuid)
        if handle is None:
            raise LookupError(f"NVML knows no device {uuid}: {nvml_error_text(nvml, exc)}") from exc
    if uuid.startswith("MIG-"):
        # A MIG instance has no NVML index of its own; its parent GPU's counters are what NVML reads.
        handle = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
    return int(nvml.nvmlDeviceGetIndex(handle))


def _handle_by_uuid_prefix(nvml: Any, prefix: str) -> Any:
    """CUDA accepts a unique UUID prefix; NVML's lookup wants the whole UUID."""
    if not prefix.startswith("GPU-"):
        return None
    found = []
    for i in range(int(nvml.nvmlDeviceGetCount())):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        uuid = nvml.nvmlDeviceGetUUID(h)
        uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        if uuid.startswith(prefix):
            found.append(h)
    return found[0] if len(found) == 1 else None
