"""``tracekit doctor``'s probes: what this machine can record and measure, and how to fix what is missing.

``diagnose()`` returns one ``Check`` per line: the Python stack (torch, its CUDA build, transformers),
the GPUs torch sees, NVML and the driver, GPM per GPU, Nsight Compute and whether hardware counters
are permitted, the ingest scanner (the C extension or the DuckDB fallback), the measured ceiling
cached for each GPU, and write access to the runs folder. A check is ``ok``, ``warn`` (a capability
is missing: recording still works, with less) or ``fail`` (recording cannot proceed). Every check
that is not ``ok`` carries a ``fix``.

Every probe takes what it touches as an argument (torch, the pynvml module, where ncu is, the
driver's parameter file, a command runner) so the tests can hand in fakes (tests/fake_pynvml.py);
nothing here raises because a library, a GPU or a tool is absent.

Counters (Nsight Compute): by default the answer comes from the driver's setting
(``RmProfilingAdminOnly`` in /proc/driver/nvidia/params) and whether we run as root, which is what
decides ERR_NVGPUCTRPERM; ``probe_counters=True`` runs ncu for real on one small kernel, which also
catches runtimes where ncu cannot load at all (``LibraryNotLoaded``).
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

OK, WARN, FAIL = "ok", "warn", "fail"
PARAMS = Path("/proc/driver/nvidia/params")
NCU_DOC = "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
# One kernel on the GPU, the smallest thing ncu can profile (torch launches it).
COUNTER_PROBE = "import torch; x = torch.ones(8, device='cuda'); x.add_(1); torch.cuda.synchronize()"
Runner = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class Check:
    """One line of the doctor's screen."""

    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str | None = None
    data: dict[str, Any] = field(default_factory=dict)  # what the line says, for --json


@dataclass(frozen=True)
class Diagnosis:
    checks: tuple[Check, ...]

    @property
    def can_record(self) -> bool:
        """No check failed: ``tracekit record`` can run (on the GPU where one is ok, else on the CPU)."""
        return all(c.status != FAIL for c in self.checks)

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"can_record": self.can_record, "checks": [asdict(c) for c in self.checks]}


# --- torch, transformers, GPUs ------------------------------------------------------


def probe_python(torch: Any = None, transformers: Any = None) -> tuple[list[Check], list[str]]:
    """(checks for torch, CUDA, transformers and the GPUs, the names of the GPUs torch sees)."""
    checks = [Check("python", OK, f"{platform.python_version()} ({sys.executable})")]
    if torch is None:
        try:
            import torch as torch_mod

            torch = torch_mod
        except Exception as exc:  # absent, or broken (a CUDA library it cannot load)
            checks.append(Check("torch", FAIL, f"not importable ({type(exc).__name__}: {exc})",
                                "pip install 'tracekit-llm[record]' (or a torch build for your CUDA from pytorch.org)"))
            torch = None
    gpus: list[str] = []
    if torch is not None:
        cuda = getattr(torch.version, "cuda", None)
        checks.append(Check("torch", OK, f"{torch.__version__}, CUDA build {cuda or 'none (CPU-only build)'}",
                            data={"version": torch.__version__, "cuda": cuda}))
        err: str | None = None
        try:
            n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        except Exception as exc:  # a broken driver: torch raises instead of answering
            n, err = 0, f"{type(exc).__name__}: {exc}"
        if n:
            for i in range(n):
                name = torch.cuda.get_device_name(i)
                cap = torch.cuda.get_device_capability(i)
                mem = torch.cuda.get_device_properties(i).total_memory
                gpus.append(name)
                checks.append(Check(f"GPU {i}", OK, f"{name}, compute capability {cap[0]}.{cap[1]}, "
                                    f"{mem / 2**30:.0f} GiB", data={"name": name, "capability": f"{cap[0]}.{cap[1]}"}))
        else:
            why = err or ("a CPU-only torch build" if not cuda else "torch sees no CUDA device")
            checks.append(Check("GPU", WARN, f"none ({why}): recording runs on the CPU, without kernels or GPU counters",
                                "a CUDA build of torch and an NVIDIA driver; check nvidia-smi and CUDA_VISIBLE_DEVICES"
                                if cuda else "install a CUDA build of torch (pytorch.org) on a machine with an NVIDIA GPU"))
    if transformers is None:
        if importlib.util.find_spec("transformers") is None:
            checks.append(Check("transformers", FAIL, "not installed", "pip install 'tracekit-llm[record]'"))
            return checks, gpus
        try:
            import transformers as tf_mod

            transformers = tf_mod
        except Exception as exc:
            checks.append(Check("transformers", FAIL, f"not importable ({type(exc).__name__}: {exc})",
                                "pip install --upgrade transformers"))
            return checks, gpus
    checks.append(Check("transformers", OK, str(transformers.__version__), data={"version": transformers.__version__}))
    return checks, gpus


# --- NVML, driver, GPM --------------------------------------------------------------


def probe_nvml(nvml: Any = None) -> list[Check]:
    """The driver, NVML and GPM per GPU, through ``nvml`` (the pynvml module, or a fake)."""
    from tracekit.collectors.gpm import nvml_error_text

    fix_lib = "pip install nvidia-ml-py (part of 'tracekit-llm[record]')"
    if nvml is None:
        try:
            import pynvml as nvml_mod

            nvml = nvml_mod
        except ImportError:
            return [Check("NVML", WARN, "pynvml not installed: no GPU counters (utilisation, power, clocks)", fix_lib),
                    Check("GPM", WARN, "not checked: needs NVML", fix_lib)]
    try:
        nvml.nvmlInit()
    except Exception as exc:
        text = nvml_error_text(nvml, exc)
        fix = ("install the NVIDIA driver (libnvidia-ml.so comes with it); in a container, run it with the "
               "GPU runtime (--gpus all)")
        return [Check("NVML", WARN, f"not available: {text}: no GPU counters", fix),
                Check("GPM", WARN, "not checked: needs NVML", fix)]
    checks: list[Check] = []
    try:
        drv = _text(nvml.nvmlSystemGetDriverVersion())
        lib = _text(_call(nvml, "nvmlSystemGetNVMLVersion")) or "?"
        n = int(nvml.nvmlDeviceGetCount())
        checks.append(Check("driver", OK, f"NVIDIA {drv}", data={"driver": drv}))
        checks.append(Check("NVML", OK, f"NVML {lib}, {n} GPU(s): utilisation, memory, power, energy, clocks",
                            data={"version": lib, "devices": n}))
        for i in range(n):
            checks.append(_gpm_check(nvml, i))
        if n == 0:
            checks.append(Check("GPM", WARN, "no GPU", "no NVIDIA GPU is visible to the driver"))
    except Exception as exc:
        checks.append(Check("NVML", WARN, f"failed after init: {nvml_error_text(nvml, exc)}",
                            "check nvidia-smi; the driver may be in a bad state"))
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    return checks


def _gpm_check(nvml: Any, index: int) -> Check:
    from tracekit.collectors.gpm import nvml_error_text

    label = f"GPM {index}"
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = _text(nvml.nvmlDeviceGetName(handle))
    except Exception as exc:
        return Check(label, WARN, f"cannot open GPU {index}: {nvml_error_text(nvml, exc)}", "check nvidia-smi")
    if not hasattr(nvml, "nvmlGpmQueryDeviceSupport"):
        return Check(label, WARN, f"{name}: this nvidia-ml-py has no GPM calls", "pip install --upgrade nvidia-ml-py")
    try:
        support = nvml.nvmlGpmQueryDeviceSupport(handle)
    except Exception as exc:  # an old driver: NVML_ERROR_FUNCTION_NOT_FOUND
        return Check(label, WARN, f"{name}: GPM query failed ({nvml_error_text(nvml, exc)})",
                     "a driver of the R520 series or later")
    if not getattr(support, "isSupportedDevice", 0):
        return Check(label, WARN, f"{name}: not supported (GPM needs Hopper or later, and not a vGPU): no DRAM "
                     "bandwidth or tensor-core utilisation counters", "a Hopper (H100/H200) or later GPU")
    return Check(label, OK, f"{name}: DRAM bandwidth, SM and tensor-core utilisation (>= 100 ms samples)",
                 data={"name": name})


def _call(nvml: Any, fn: str) -> Any:
    try:
        return getattr(nvml, fn)()
    except Exception:  # an old binding or driver without it: the line says '?'
        return None


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else ("" if v is None else str(v))


# --- Nsight Compute ----------------------------------------------------------------


def find_ncu(env: dict[str, str] | None = None) -> str | None:
    """$TRACEKIT_NCU, ncu on PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, the newest /opt/nvidia/nsight-compute/*/."""
    env = dict(os.environ) if env is None else env
    candidates = [env.get("TRACEKIT_NCU"), shutil.which("ncu", path=env.get("PATH"))]
    for home in (env.get("CUDA_HOME"), env.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            candidates.append(str(Path(home) / "bin" / "ncu"))
    installed: list[str] = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), key=_version_key, reverse=True)
    candidates.extend(installed)
    return next((c for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", Path(path).parent.name)[:4])


def counters_setting(params: Path = PARAMS, euid: int | None = None) -> tuple[str | None, str]:
    """(True/False/None as ok/not/unknown, why): whether this user may read GPU performance counters."""
    euid = os.geteuid() if euid is None and hasattr(os, "geteuid") else euid
    try:
        text = params.read_text()
    except OSError:
        return None, f"{params} unreadable (no NVIDIA driver here, or not Linux)"
    m = re.search(r"RmProfilingAdminOnly:\s*(\d+)", text)
    if m is None:
        return None, f"{params} has no RmProfilingAdminOnly"
    if m.group(1) == "0":
        return "yes", "RmProfilingAdminOnly=0: every user may"
    if euid == 0:
        return "yes", "RmProfilingAdminOnly=1, running as root"
    return "no", "RmProfilingAdminOnly=1 and not root: ncu fails with ERR_NVGPUCTRPERM"


COUNTERS_FIX = (f"run as root (sudo $(which ncu) ...), or set NVreg_RestrictProfilingToAdminUsers=0 for the nvidia "
                f"module and reload it; in a container, --privileged or CAP_SYS_ADMIN ({NCU_DOC})")


def probe_ncu(
    ncu: str | None = None,
    *,
    params: Path = PARAMS,
    euid: int | None = None,
    run: Runner = subprocess.run,
    probe_counters: bool = False,
    have_gpu: bool = True,
    python: str = sys.executable,
) -> list[Check]:
    """Nsight Compute: where and which version, and whether its hardware counters can be read."""
    path = ncu if ncu is not None else find_ncu()
    if path is None:
        fix = "install Nsight Compute (it comes with the CUDA toolkit) or put ncu on PATH / set TRACEKIT_NCU"
        return [Check("Nsight Compute", WARN, "ncu not found: no per-kernel hardware counters", fix),
                Check("counters", WARN, "not checked: needs ncu", fix)]
    version = "?"
    try:
        out = run([path, "--version"], capture_output=True, text=True, timeout=20)
        m = re.search(r"Version\s+([\d.]+)", out.stdout or "")
        version = m.group(1) if m else (out.stdout or out.stderr or "?").strip().splitlines()[-1][:60]
    except (OSError, subprocess.SubprocessError) as exc:
        return [Check("Nsight Compute", WARN, f"{path} does not run: {type(exc).__name__}: {exc}",
                      "reinstall Nsight Compute"),
                Check("counters", WARN, "not checked: ncu does not run", "reinstall Nsight Compute")]
    checks = [Check("Nsight Compute", OK, f"{version} at {path}", data={"path": path, "version": version})]
    if not have_gpu:
        checks.append(Check("counters", WARN, "not checked: no GPU", "a machine with an NVIDIA GPU"))
        return checks
    if probe_counters:
        checks.append(_probe_counters(path, run, python))
        return checks
    ok, why = counters_setting(params, euid)
    if ok == "yes":
        checks.append(Check("counters", OK, f"permitted ({why}); --probe-counters runs ncu to be sure",
                            data={"permitted": True, "how": "driver setting"}))
    elif ok == "no":
        checks.append(Check("counters", WARN, f"not permitted: {why}", COUNTERS_FIX, data={"permitted": False}))
    else:
        checks.append(Check("counters", WARN, f"unknown ({why})", "tracekit doctor --probe-counters runs ncu once"))
    return checks


def _probe_counters(ncu: str, run: Runner, python: str) -> Check:
    """ncu on one torch kernel, one single-pass metric: the real answer to "may I read counters"."""
    cmd = [ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "-c", "1", python, "-c",
           COUNTER_PROBE]
    try:
        out = run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("counters", WARN, f"ncu probe did not finish: {type(exc).__name__}: {exc}", COUNTERS_FIX)
    text = (out.stdout or "") + (out.stderr or "")
    if "ERR_NVGPUCTRPERM" in text:
        return Check("counters", WARN, "not permitted: ncu says ERR_NVGPUCTRPERM", COUNTERS_FIX,
                     data={"permitted": False, "how": "ncu probe"})
    if "LibraryNotLoaded" in text:
        return Check("counters", WARN, "ncu cannot load its profiler library here (LibraryNotLoaded): no hardware "
                     "counters on this runtime", "a VM or bare-metal machine (seen under gVisor)",
                     data={"permitted": False, "how": "ncu probe"})
    m = re.search(r"gpu__time_duration\.sum\s+\S+\s+([\d,.]+)", text)
    if out.returncode == 0 and m:
        return Check("counters", OK, f"permitted: ncu read gpu__time_duration of a probe kernel ({m.group(1)})",
                     data={"permitted": True, "how": "ncu probe"})
    last = next((ln for ln in reversed(text.strip().splitlines()) if ln.strip()), "no output")
    return Check("counters", WARN, f"ncu probe inconclusive (exit {out.returncode}): {last[:160]}", COUNTERS_FIX,
                 data={"permitted": None, "how": "ncu probe"})


# --- tracekit's own parts -------------------------------------------------------------


def probe_scanner() -> Check:
    from tracekit.ingest import native

    if native.available():
        return Check("ingest", OK, "C scanner built (tracekit.ingest._kscan): the fast trace reader")
    if os.environ.get("TRACEKIT_INGEST_ENGINE", "").lower() == "duckdb":
        return Check("ingest", WARN, "DuckDB reader chosen by TRACEKIT_INGEST_ENGINE=duckdb (slower, same tables)",
                     "unset TRACEKIT_INGEST_ENGINE")
    return Check("ingest", WARN, "C scanner not built: the DuckDB reader reads traces (slower, same tables)",
                 "install a C compiler (gcc) and reinstall tracekit: pip install --force-reinstall --no-deps tracekit-llm")


def probe_calibration(gpus: Sequence[str]) -> list[Check]:
    from tracekit.model.ceilings import datasheet
    from tracekit.store.calibration import cache_path, load

    if not gpus:
        return [Check("ceiling", OK, "no GPU: nothing to calibrate")]
    out = []
    for name in dict.fromkeys(gpus):
        p = cache_path(name)
        if p.is_file():
            try:
                c = load(p)
            except Exception as exc:
                out.append(Check("ceiling", WARN, f"{name}: cached ceiling {p} unreadable ({exc})",
                                 "tracekit calibrate (rewrites it)"))
                continue
            out.append(Check("ceiling", OK, f"{name}: measured, {c.peak_bytes_per_s / 1e12:.2f} TB/s ({p})",
                             data={"path": str(p), "kind": "measured"}))
        elif datasheet(name) is not None:
            out.append(Check("ceiling", WARN, f"{name}: no measured ceiling cached; the datasheet's peaks are used",
                             "tracekit calibrate (a minute on this GPU)", data={"kind": "datasheet"}))
        else:
            out.append(Check("ceiling", WARN, f"{name}: no measured ceiling and no datasheet entry: no roofline split",
                             "tracekit calibrate (a minute on this GPU)", data={"kind": None}))
    return out


def probe_runs(runs: Path) -> Check:
    """Write access to the runs folder (created if it does not exist, as record would)."""
    target = runs if runs.exists() else next((p for p in runs.parents if p.exists()), Path("."))
    if runs.exists() and not runs.is_dir():
        return Check("runs folder", FAIL, f"{runs} is a file, not a folder", "remove it, or record with --out DIR")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tracekit-doctor-", dir=target)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        return Check("runs folder", FAIL, f"cannot write in {target.resolve()}: {exc.strerror or exc}",
                     "run from a folder you can write to, or record with --out DIR")
    state = "exists" if runs.exists() else f"will be created in {target.resolve()}"
    return Check("runs folder", OK, f"{runs} writable ({state})", data={"path": str(runs.resolve())})


# --- all of it ---------------------------------------------------------------------


def diagnose(
    runs: Path = Path("runs"),
    *,
    torch: Any = None,
    transformers: Any = None,
    nvml: Any = None,
    ncu: str | None = None,
    params: Path = PARAMS,
    euid: int | None = None,
    run: Runner = subprocess.run,
    probe_counters: bool = False,
) -> Diagnosis:
    """Every check, in the order the screen shows them. A warning a library raises while being probed
    (torch's "CUDA initialization: ..." says why it sees no GPU) becomes a line of its own."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        py, gpus = probe_python(torch, transformers)
        checks = [*py, *probe_nvml(nvml)]
    checks += probe_ncu(ncu, params=params, euid=euid, run=run, probe_counters=probe_counters, have_gpu=bool(gpus))
    checks += [probe_scanner(), *probe_calibration(gpus), probe_runs(runs)]
    seen: set[str] = set()
    for w in caught:
        text = str(w.message).strip().splitlines()[0][:200] if str(w.message).strip() else w.category.__name__
        if text not in seen and issubclass(w.category, UserWarning | RuntimeWarning):
            seen.add(text)
            checks.append(Check("library", WARN, f"{w.category.__name__}: {text}",
                                "the library's own advice, raised while it was probed"))
    return Diagnosis(tuple(checks))


def to_json(d: Diagnosis) -> str:
    return json.dumps(d.to_dict(), indent=2)
