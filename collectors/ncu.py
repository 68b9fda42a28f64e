"""Nsight Compute around a run's workload: ``tracekit counters RUN`` and ``tracekit record --counters``.

``collect(run_dir, opts)`` re-runs the run's workload (the built-in preset from run.json's
``workload``, or the user's script from its argv) as a child process under ``ncu``, profiling only a
window of steps, exports the report to CSV, reads it (tracekit.ingest.ncu), writes the run's
``ncu_counters`` table and re-analyses the run, so kernel_bound, step_bound and phases take the
counters' classes. Nothing is written to the run unless the counters were read and at least one
kernel joined; every failure (no ncu, no GPU, counters not permitted, ncu crash or timeout, counters
that match nothing) is one line, the run untouched.

The child (``python -m tracekit.collectors.ncu RUN --steps A:B``) replays the workload exactly
(same warm-up, unprofiled pass and requests, so step ids match the recorded run's) and wraps each
step of the window in an NVTX range ``tracekit.step id=N``, between cudaProfilerStart and
cudaProfilerStop: ncu, started with ``--profile-from-start off --nvtx``, profiles exactly those
kernels and names each one's step. ncu and torch.profiler cannot share a process (CUPTI takes one
subscriber), so the child runs without the profiler.

ncu options: ``--clock-control none`` (never lock clocks), kernel replay with the one-pass metric set
(no save/restore of device memory; ~20-27 ms per kernel on an H200), ``--cache-control none``,
``--import-sass no`` (a 40x smaller report), ``--graph-profiling node`` (each CUDA-graph kernel node
its own result). Measurements behind these: docs/roofline.md, "Measured counters".
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.collectors.profiler import StepWindow, parse_trace_steps
from tracekit.errors import TracekitError, UsageError

PER_KERNEL_S = 0.025  # one-pass kernel replay, per kernel (docs/measurements/2026-12-07-docstring-figures.md)
DEFAULT_STEPS = "0:2"  # the first prefill and the first decode step of a generate
CSV_NAME = "ncu_counters.csv"


class CountersError(TracekitError):
    """Nsight Compute could not measure the run: one line, the run untouched."""


@dataclass(frozen=True)
class CountersOptions:
    steps: StepWindow | None = None  # None: DEFAULT_STEPS
    metric_set: str = "one-pass"  # tracekit.ingest.ncu.METRIC_SETS
    timeout_s: float = 1800.0
    ncu: str | None = None  # an explicit ncu executable
    csv: Path | None = None  # join this existing CSV instead of running ncu
    extra_env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CountersResult:
    kernels: int  # profiled kernels read from the report
    matched: int  # joined to the trace's kernels
    steps: str  # the window
    elapsed_s: float
    lines: tuple[str, ...]  # the join report and anything else worth saying
    csv: Path


# --- finding and running ncu ---------------------------------------------------------


def find_ncu(explicit: str | None = None) -> str | None:
    """ncu on PATH, else $CUDA_HOME/bin/ncu, /usr/local/cuda/bin/ncu, the newest /opt/nvidia/nsight-compute/*/ncu."""
    if explicit:
        return explicit if (Path(explicit).is_file() or shutil.which(explicit)) else None
    found = shutil.which("ncu")
    if found:
        return found
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for home in homes:
        if home and (Path(home) / "bin" / "ncu").is_file():
            return str(Path(home) / "bin" / "ncu")
    installs = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), key=_version_key)
    return installs[-1] if installs else None


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", Path(path).parent.name)) or (0,)


def ncu_command(ncu: str, out_base: Path, log: Path, metrics: Sequence[str], child: Sequence[str]) -> list[str]:
    """The profiling command: only the window's kernels, only ``metrics``, kernel replay."""
    return [ncu, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
            "--nvtx", "--replay-mode", "kernel", "--graph-profiling", "node", "--cache-control", "none",
            "--import-sass", "no", "--metrics", ",".join(metrics), "--log-file", str(log), "-f",
            "-o", str(out_base), *child]


def export_command(ncu: str, report: Path, metrics: Sequence[str]) -> list[str]:
    """The CSV export tracekit.ingest.ncu reads: raw page, base units, mangled names."""
    return [ncu, "-i", str(report), "--csv", "--page", "raw", "--print-units", "base",
            "--print-kernel-base", "mangled", "--metrics", ",".join(metrics)]


PERMISSION_HELP = (
    "GPU performance counters are restricted to admin users on this machine (ERR_NVGPUCTRPERM): run "
    "`sudo -E env PATH=$PATH tracekit counters ...`, or let every user read them: put "
    "`options nvidia NVreg_RestrictProfilingToAdminUsers=0` in a file under /etc/modprobe.d/, reload the "
    "nvidia module (or reboot) and check `grep RmProfilingAdminOnly /proc/driver/nvidia/params` says 0 "
    "(in a container: run it with CAP_SYS_ADMIN); https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)


def _last_error(log: str) -> str | None:
    """The workload's own last error line (a traceback's final ``SomeError: ...``), if its output has one."""
    lines = [ln.strip() for ln in log.splitlines() if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", ln)]
    return lines[-1][:200] if lines else None


def failure(rc: int, log: str) -> str | None:
    """The one line a failed ncu run deserves, from its exit code and log; None if it succeeded."""
    if "ERR_NVGPUCTRPERM" in log:
        return PERMISSION_HELP
    if "LibraryNotLoaded" in log or "Failed to initialize the profiler" in log:
        return ("hardware counters are not available on this machine (ncu: failed to initialise the profiler; "
                "a sandboxed container runtime such as gVisor cannot read them)")
    if re.search(r"No (supported )?(CUDA-capable |NVIDIA )?(GPU|device)s? (was |were )?(found|detected)", log, re.I) or \
            "no CUDA-capable device" in log:
        return "no NVIDIA GPU visible to ncu: counters need the GPU the run was recorded on"
    app = re.search(r"The application returned an error code \((\d+)\)", log)
    if app:
        last = _last_error(log)
        return (f"the workload failed under ncu (exit code {app.group(1)})" + (f": {last}" if last else "")
                + "; see the ncu log")
    if "No kernels were profiled" in log:
        return "ncu profiled no kernels: the step window was never reached"
    errors = [ln.strip() for ln in log.splitlines() if ln.startswith("==ERROR==")]
    if rc != 0 or errors:
        first = errors[0].removeprefix("==ERROR==").strip() if errors else f"exit code {rc}"
        return f"ncu failed: {first}"
    return None


def _run(cmd: Sequence[str], timeout_s: float, env: dict[str, str], stdout: Any = None) -> int:
    """Run ``cmd`` in its own process group; on timeout kill the group (ncu and the workload)."""
    proc = subprocess.Popen(list(cmd), stdout=stdout if stdout is not None else subprocess.DEVNULL,
                            stderr=subprocess.STDOUT if stdout is None else subprocess.DEVNULL, env=env,
                            start_new_session=True)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


# --- the use case ----------------------------------------------------------------------


def child_argv(run_dir: Path, window: StepWindow) -> list[str]:
    """The re-run's command. ``-P``: the working directory is not put on sys.path, so a source checkout
    there cannot shadow the installed package (a script workload's own folder is added by the re-run)."""
    return [sys.executable, "-P", "-m", "tracekit.collectors.ncu", str(run_dir), "--steps", str(window)]


def check_rerunnable(manifest: dict[str, Any]) -> None:
    """The run's workload can be re-run here: a GPU run of the built-in workload or of a script."""
    w = manifest.get("workload")
    if not isinstance(w, dict):
        raise CountersError("run.json has no workload to re-run (an ingested trace?): measure it yourself under "
                            "ncu and pass the CSV with --csv")
    if w.get("kind") == "script":
        return
    if "model" not in w:
        raise CountersError(f"cannot re-run this run's workload (kind {w.get('kind')!r}): "
                            "pass an ncu CSV with --csv")
    if str(w.get("device", "")).startswith("cpu"):
        raise CountersError("the run was recorded on the CPU: there are no GPU kernels to count")


def estimate(run_dir: Path, window: StepWindow) -> tuple[int | None, float | None]:
    """(kernels in the window, seconds of kernel replay) from the run's kernel_steps, if analysed."""
    from tracekit.store.rundir import RunDir

    run = RunDir.open(run_dir)
    if not run.has_table("kernel_steps"):
        return None, None
    ks = run.read_df("kernel_steps")
    if "category" in ks:
        ks = ks[ks["category"].astype(str).isin(["compute", "comm"])]
    n = int(ks["step_id"].between(window.start, window.stop - 1).sum())
    return n, n * PER_KERNEL_S


def collect(run_dir: Path, opts: CountersOptions) -> CountersResult:
    """Measure the run's kernels in the window under ncu (or read ``opts.csv``), join, write, re-analyse."""
    from tracekit.ingest import ncu as ncu_csv
    from tracekit.store.rundir import RunDir

    run = RunDir.open(run_dir)
    manifest = run.read_manifest()
    window = opts.steps or parse_trace_steps(DEFAULT_STEPS)
    assert window is not None
    metrics = ncu_csv.METRIC_SETS.get(opts.metric_set)
    if metrics is None:
        raise UsageError(f"--metrics {opts.metric_set!r}: use {', '.join(ncu_csv.METRIC_SETS)}")
    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="tracekit-ncu-"))
    keep_work = False
    try:
        if opts.csv is not None:
            csv_path = opts.csv
        else:
            check_rerunnable(manifest)
            exe = find_ncu(opts.ncu)
            if exe is None:
                raise CountersError("Nsight Compute (ncu) not found on PATH, in $CUDA_HOME/bin or under "
                                    "/opt/nvidia/nsight-compute/: install it (it ships with the CUDA toolkit) "
                                    "or pass --ncu PATH")
            csv_path = work / CSV_NAME
            keep_work = True  # until it worked: the log is the evidence
            _profile(exe, run.path, window, metrics, work, csv_path, opts)
            keep_work = False
        table = ncu_csv.read_csv(csv_path, required=() if opts.csv is not None else metrics[:1])
        return _write(run, table, csv_path, window, opts, t0)
    finally:
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)


def _profile(exe: str, run_dir: Path, window: StepWindow, metrics: Sequence[str], work: Path, csv_path: Path,
             opts: CountersOptions) -> None:
    log = work / "ncu.log"
    base = work / "counters"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **opts.extra_env}
    cmd = ncu_command(exe, base, log, metrics, child_argv(run_dir, window))
    out = work / "workload.log"
    try:
        with out.open("w") as fh:
            rc = _run(cmd, opts.timeout_s, env, stdout=fh)
    except subprocess.TimeoutExpired:
        raise CountersError(f"ncu did not finish within {opts.timeout_s:.0f} s profiling steps {window}: "
                            f"profile fewer steps (--steps) or raise --timeout (ncu log: {log})") from None
    except OSError as exc:
        raise CountersError(f"cannot start ncu ({exe}): {exc}") from None
    text = (log.read_text(errors="replace") if log.is_file() else "") + out.read_text(errors="replace")
    why = failure(rc, text)
    report = base.with_suffix(".ncu-rep")
    if why is None and not report.is_file():
        why = "ncu wrote no report: the step window was never reached"
    if why is not None:
        raise CountersError(f"{why} (ncu log: {log})")
    with csv_path.open("w") as fh:
        try:
            rc = _run(export_command(exe, report, metrics), opts.timeout_s, env, stdout=fh)
        except subprocess.TimeoutExpired:
            raise CountersError(f"ncu -i {report} did not finish within {opts.timeout_s:.0f} s") from None
    if rc != 0:
        raise CountersError(f"ncu could not export {report} to CSV (exit code {rc})")


def _write(run: Any, table: Any, csv_path: Path, window: StepWindow, opts: CountersOptions,
           t0: float) -> CountersResult:
    """Join (tracekit.app.counters: nothing written unless something joins), keep the CSV, note it in run.json."""
    from tracekit.app.counters import attach

    try:
        done = attach(run.path, table)
    except TracekitError as exc:
        raise CountersError(exc.message) from None
    dest = run.path / CSV_NAME
    if csv_path.resolve() != dest.resolve():
        shutil.copyfile(csv_path, dest)
    elapsed = time.perf_counter() - t0
    run.update_manifest(counters={
        "tool": "ncu", "steps": str(window), "metric_set": opts.metric_set, "kernels": done.kernels,
        "joined": done.joined, "classified": done.classified, "elapsed_s": round(elapsed, 1), "csv": CSV_NAME,
        "source": "csv" if opts.csv is not None else "ncu re-run",
    })
    return CountersResult(done.kernels, done.joined, str(window), elapsed, done.lines, dest)


# --- the child: the workload again, with NVTX step ranges -------------------------------


class CudaMarks:
    """The calls StepMarks makes: torch.cuda's profiler start/stop and NVTX push/pop."""

    def __init__(self) -> None:
        import torch

        self.torch = torch

    def start(self) -> None:
        self.torch.cuda.synchronize()
        self.torch.cuda.cudart().cudaProfilerStart()

    def stop(self) -> None:
        self.torch.cuda.synchronize()
        self.torch.cuda.cudart().cudaProfilerStop()

    def push(self, name: str) -> None:
        self.torch.cuda.nvtx.range_push(name)

    def pop(self) -> None:
        self.torch.cuda.nvtx.range_pop()


class StepMarks:
    """Tracker callbacks: an NVTX range per step of the window, profiler start/stop around the window."""

    def __init__(self, window: StepWindow, api: Any = None) -> None:
        self.window = window
        self.api = api if api is not None else CudaMarks()
        self.started = False

    def start(self, step_id: int) -> None:
        from tracekit.ingest.ncu import STEP_RANGE

        w = self.window
        if not (w.start <= step_id < w.stop):
            return
        if not self.started:
            self.api.start()
            self.started = True
        self.api.push(STEP_RANGE.format(step_id))

    def end(self, step_id: int) -> None:
        w = self.window
        if not (w.start <= step_id < w.stop):
            return
        self.api.pop()
        if step_id == w.stop - 1 and self.started:
            self.api.stop()
            self.started = False

    def close(self) -> None:
        """A window that ran past the last step: stop profiling anyway."""
        if self.started:
            self.api.stop()
            self.started = False


def rerun(run_dir: Path, window: StepWindow, api: Any = None) -> Any:
    """Replay the run's workload in this process, marking the window's steps (the child's body).

    Returns the tracker, whose ``steps`` are the replay's steps (ids, kinds, shapes).
    """
    import json

    from tracekit.collectors.hooks import GenerationTracker

    manifest = json.loads((run_dir / "run.json").read_text())
    marks = StepMarks(window, api)
    tracker = GenerationTracker(annotate=False, on_step_start=marks.start, on_step_end=marks.end)
    w = manifest.get("workload") or {}
    if w.get("kind") == "script":
        _rerun_script(list(w.get("argv") or []), tracker)
    else:
        _rerun_builtin(w, tracker)
    marks.close()
    return tracker


def _rerun_builtin(w: dict[str, Any], tracker: Any) -> None:
    from tracekit.collectors import presets
    from tracekit.collectors import workload as wl
    from tracekit.collectors.hooks import GenerationTracker, patch_generate

    cfg = wl.WorkloadConfig(
        model=presets.resolve_model(str(w["model"])), device=str(w.get("device", "cuda")),
        dtype=str(w.get("dtype", "fp16")), shape=str(w.get("shape", "custom")),
        input_tokens=int(w["input_tokens"]), output_tokens=int(w["output_tokens"]), batch=int(w.get("batch", 1)),
        requests=int(w.get("requests", 1)), warmup=int(w.get("warmup", 0)), seed=int(w.get("seed", 0)),
        compile=w.get("mode") == "compiled", quant=str(w.get("quant") or "none"),
    )
    model, _ = wl.build_model(cfg)
    vocab = int(model.config.vocab_size)
    prompts = wl.make_prompts(cfg, vocab, cfg.requests)
    warm = wl.make_prompts(cfg, vocab, cfg.warmup, seed_offset=10_000)
    if cfg.compile:
        from tracekit.collectors import compiled

        compiled.enable(model, max_cache_len=cfg.input_tokens + cfg.output_tokens)
        if not warm:
            warm = wl.make_prompts(cfg, vocab, 1, seed_offset=10_000)
    for p in warm:  # the recorded run's sequence: warm-up, the unprofiled timing pass, the recorded requests
        model.generate(**wl.generate_kwargs(cfg, p))
    with patch_generate(GenerationTracker(annotate=False)):
        for p in prompts:
            model.generate(**wl.generate_kwargs(cfg, p))
    with patch_generate(tracker):
        for i, p in enumerate(prompts):
            tracker.next_name = f"{cfg.shape}-{i}"
            model.generate(**wl.generate_kwargs(cfg, p))


def _rerun_script(argv: list[str], tracker: Any) -> None:
    import runpy

    from tracekit.collectors.hooks import patch_generate
    from tracekit.collectors.script import parse_script_argv

    kind, target, args = parse_script_argv(argv)
    sys.argv = [target, *args]
    with patch_generate(tracker):
        try:
            if kind == "script":
                sys.path.insert(0, str(Path(target).resolve().parent))
                runpy.run_path(target, run_name="__main__")
            else:
                sys.path.insert(0, os.getcwd())
                runpy.run_module(target, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            if e.code not in (None, 0):
                raise


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3 or args[1] != "--steps":
        print("usage: python -m tracekit.collectors.ncu RUN_DIR --steps A:B", file=sys.stderr)
        return 2
    window = parse_trace_steps(args[2])
    assert window is not None
    rerun(Path(args[0]), window)
    return 0


if __name__ == "__main__":
    sys.exit(main())
