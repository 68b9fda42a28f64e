"""``tracekit counters`` without a GPU: a stand-in ncu that behaves as the real one does (exit codes,
log lines, report file, the CSV export), on a real H200 recording (tests/fixtures/record_gpu_smoke).

The stand-in answers the export (``ncu -i``) with counters built from the run's own trace in
Nsight Compute's CSV layout (tracekit.ingest.ncu.to_csv), so everything but the profiling itself runs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import FIXTURES, undeclared_tables

from tracekit.analysis.counters import launch_order
from tracekit.app.analyze import analyse_run
from tracekit.cli import main
from tracekit.collectors import ncu as ncu_driver
from tracekit.collectors.profiler import StepWindow
from tracekit.ingest import ncu
from tracekit.store.rundir import RunDir

FAKE = r'''#!{python}
import os, sys, time
args = sys.argv[1:]
mode = os.environ.get("FAKE_NCU", "ok")
if "-i" in args:
    sys.stdout.write(open(os.environ["FAKE_NCU_CSV"]).read())
    sys.exit(0)
log = args[args.index("--log-file") + 1]
base = args[args.index("-o") + 1]
open(os.environ["FAKE_NCU_ARGS"], "w").write("\n".join(args))
with open(log, "w") as f:
    f.write("==PROF== Connected to process 1 (python3)\n")
    if mode == "perm":
        f.write("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
                "Counters on the target device 0.\n")
        sys.exit(1)
    if mode == "crash":
        f.write("==ERROR== The application returned an error code (11).\n")
        sys.exit(11)
    if mode == "sleep":
        time.sleep(60)
    if mode == "none":
        f.write("==WARNING== No kernels were profiled.\n")
        sys.exit(0)
    f.write("==PROF== Disconnected from process 1\n")
open(base + ".ncu-rep", "w").write("report")
'''


def tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(path)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("smoke") / "run"
    shutil.copytree(FIXTURES / "record_gpu_smoke", src)
    analyse_run_dir(src)
    return src


def analyse_run_dir(path: Path) -> None:
    from tracekit.app.analyze import open_or_ingest

    analyse_run(open_or_ingest(path, None, False))


@pytest.fixture
def run(analysed: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(analysed, dst)
    return dst


def counters_for(run: Path, steps: range, tensor_pct: float = 0.0) -> pd.DataFrame:
    """What ncu would report for the run's kernels of ``steps``: its trace's kernels in launch order."""
    kb = pd.read_parquet(run / "tables" / "kernel_bound.parquet")
    k = launch_order(kb)
    k = k[k["step_id"].isin(list(steps))]
    rng = np.random.default_rng(0)
    return pd.DataFrame({
        "name": k["name"].to_numpy(), "step_id": k["step_id"].astype(int).to_numpy(), "stream": 7,
        "grid": list(k["grid"]), "block": list(k["block"]),
        "ncu_dur_ns": k["dur_ns"].to_numpy() * 1.1, "dram_bytes": rng.integers(0, 10**6, len(k)),
        "dram_pct": np.where(k["name"].str.contains("nvjet"), 75.0, 5.0), "tensor_pct": tensor_pct,
    })


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    exe = tmp_path / "bin" / "ncu"
    exe.parent.mkdir()
    exe.write_text(FAKE.replace("{python}", sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("FAKE_NCU_ARGS", str(tmp_path / "ncu_args.txt"))
    return exe


def counters_cli(run: Path, *extra: str) -> int:
    return main(["counters", str(run), *extra])


@pytest.mark.slow
def test_counters_join_and_classify(run: Path, fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    steps = sorted(pd.read_parquet(run / "tables" / "kernel_bound.parquet")["step_id"].dropna().unique())[:2]
    window = f"{int(steps[0])}:{int(steps[-1]) + 1}"
    csv = tmp_path / "export.csv"
    csv.write_text(ncu.to_csv(counters_for(run, range(int(steps[0]), int(steps[-1]) + 1))))
    monkeypatch.setenv("FAKE_NCU_CSV", str(csv))
    assert counters_cli(run, "--steps", window, "--ncu", str(fake)) == 0
    out = capsys.readouterr()
    assert "joined to the trace" in out.out and f"(steps {window})" in out.out
    assert "counters: profiling steps" in out.err
    args = (tmp_path / "ncu_args.txt").read_text().splitlines()
    # the command: no clock locking, only the window (profiler start/stop), NVTX step names, one-pass
    # metrics, kernel replay, graph nodes, no cache flush, no SASS in the report; the child re-runs the run
    for flag, value in (("--clock-control", "none"), ("--profile-from-start", "off"), ("--replay-mode", "kernel"),
                        ("--graph-profiling", "node"), ("--cache-control", "none"), ("--import-sass", "no"),
                        ("--metrics", ",".join(ncu.METRICS_ONE_PASS))):
        assert args[args.index(flag) + 1] == value
    assert "--nvtx" in args and args[-4:] == ["tracekit.collectors.ncu", str(run), "--steps", window]
    kb = pd.read_parquet(run / "tables" / "kernel_bound.parquet")
    measured = kb[kb["source"] == "ncu"]
    assert len(measured) > 50 and set(measured["step_id"]) == set(steps)
    gemm = measured["name"].str.contains("nvjet")
    assert (measured.loc[gemm, "bound"] == "memory").all() and (measured.loc[~gemm, "bound"] == "latency").all()
    m = RunDir.open(run).read_manifest()["counters"]
    assert m["steps"] == window and m["joined"] == len(measured) and (run / ncu_driver.CSV_NAME).is_file()
    ph = pd.read_parquet(run / "tables" / "phases.parquet")
    assert ph["kernels_measured"].fillna(0).sum() > 0
    # kernel_bound with Nsight Compute's columns, and ncu_counters, are tables as declared
    problems, seen = undeclared_tables(run)
    assert not problems and {"kernel_bound", "ncu_counters"} <= seen, problems
    assert kb["ncu_match"].notna().sum() >= len(measured) > 0


@pytest.mark.parametrize(("mode", "message"), [
    ("perm", "NVreg_RestrictProfilingToAdminUsers=0"),
    ("crash", "the workload failed under ncu (exit code 11)"),
    ("none", "ncu profiled no kernels"),
])
def test_ncu_failures_are_one_line_and_leave_the_run_untouched(
        run: Path, fake: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        mode: str, message: str) -> None:
    monkeypatch.setenv("FAKE_NCU", mode)
    before = tree_digest(run)
    assert counters_cli(run, "--ncu", str(fake)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("tracekit: error: ") and message in err[-1]
    assert tree_digest(run) == before


def test_timeout_kills_ncu_and_says_so(run: Path, fake: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAKE_NCU", "sleep")
    before = tree_digest(run)
    assert counters_cli(run, "--ncu", str(fake), "--timeout", "2") == 1
    assert "ncu did not finish within 2 s" in capsys.readouterr().err
    assert tree_digest(run) == before


def test_no_ncu_anywhere(run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    if ncu_driver.find_ncu() is not None:
        pytest.skip("an ncu is installed in a standard place on this machine")
    before = tree_digest(run)
    assert counters_cli(run) == 1
    assert "Nsight Compute (ncu) not found" in capsys.readouterr().err
    assert tree_digest(run) == before


def test_counters_of_another_run_are_refused(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the H200 probe's tiny forward, labelled as step 0: 102 kernels that are not this run's
    other = ncu.read_csv(FIXTURES / "ncu" / "tiny_forward_mangled.csv").to_pandas()
    other["step_id"] = 0
    csv = tmp_path / "other.csv"
    csv.write_text(ncu.to_csv(other))
    before = tree_digest(run)
    assert counters_cli(run, "--csv", str(csv)) == 1
    err = capsys.readouterr().err
    assert "the counters do not match this run: 0 of 102 profiled kernels joined" in err
    assert "step 0 not joined" in err
    assert tree_digest(run) == before


def test_cpu_runs_and_foreign_traces_cannot_be_rerun() -> None:
    with pytest.raises(ncu_driver.CountersError, match="recorded on the CPU"):
        ncu_driver.check_rerunnable({"workload": {"model": "tiny", "device": "cpu"}})
    with pytest.raises(ncu_driver.CountersError, match="--csv"):
        ncu_driver.check_rerunnable({"source": "ingest"})
    ncu_driver.check_rerunnable({"workload": {"kind": "script", "argv": ["python", "x.py"]}})


def test_failure_lines() -> None:
    assert ncu_driver.failure(0, "==PROF== ok\n") is None
    assert "gVisor" in (ncu_driver.failure(1, "==ERROR== Failed to initialize the profiler: LibraryNotLoaded") or "")
    assert ncu_driver.failure(1, "==ERROR== something odd\n") == "ncu failed: something odd"
    assert ncu_driver.failure(3, "") == "ncu failed: exit code 3"


def test_step_marks_cover_exactly_the_window() -> None:
    calls: list[str] = []

    class Api:
        def start(self) -> None:
            calls.append("start")

        def stop(self) -> None:
            calls.append("stop")

        def push(self, name: str) -> None:
            calls.append(name)

        def pop(self) -> None:
            calls.append("pop")

    m = ncu_driver.StepMarks(StepWindow(2, 4), Api())
    for s in range(6):
        m.start(s)
        m.end(s)
    m.close()
    assert calls == ["start", "tracekit.step id=2", "pop", "tracekit.step id=3", "pop", "stop"]


def test_find_ncu_under_cuda_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "ncu").write_text("")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CUDA_HOME", str(home))
    assert ncu_driver.find_ncu() == str(home / "bin" / "ncu")
    assert ncu_driver.find_ncu(str(tmp_path / "nope")) is None
    assert os.path.basename(ncu_driver.find_ncu(str(home / "bin" / "ncu")) or "") == "ncu"


@pytest.mark.slow
def test_the_replay_has_the_recorded_runs_steps(tmp_path: Path) -> None:
    """The child replays warm-up, the unprofiled pass and the requests: its step ids are the run's."""
    from tracekit.collectors import presets
    from tracekit.collectors import workload as wl
    from tracekit.collectors.options import RecordOptions
    from tracekit.collectors.workload_runner import run_workload

    cfg = wl.WorkloadConfig(model=presets.resolve_model("tiny"), device="cpu", dtype="fp32", shape="smoke",
                            input_tokens=6, output_tokens=3, requests=2, warmup=1)
    run = run_workload(cfg, RecordOptions(out=tmp_path / "run", nvml=False, cuda=False))
    recorded = run.read_df("steps")[["step_id", "kind", "q_len", "kv_len"]]
    names: list[str] = []

    class Api:
        def start(self) -> None:
            names.append("start")

        def stop(self) -> None:
            names.append("stop")

        def push(self, name: str) -> None:
            names.append(name)

        def pop(self) -> None:
            pass

    tracker = ncu_driver.rerun(run.path, StepWindow(2, 5), Api())
    replay = pd.DataFrame([(s.step_id, s.kind, s.q_len, s.kv_len) for s in tracker.steps],
                          columns=["step_id", "kind", "q_len", "kv_len"])
    pd.testing.assert_frame_equal(replay, recorded.astype(replay.dtypes.to_dict()), check_dtype=False)
    assert names == ["start", "tracekit.step id=2", "tracekit.step id=3", "tracekit.step id=4", "stop"]


def test_a_workload_that_fails_under_ncu_is_named_by_its_own_last_error() -> None:
    from tracekit.collectors.ncu import failure

    log = ("==PROF== Connected to process 1013\n"
           "Traceback (most recent call last):\n  File \"<frozen runpy>\", line 189\n"
           "ModuleNotFoundError: No module named 'tracekit.collectors'\n"
           "==ERROR== The application returned an error code (1).\n")
    msg = failure(1, log)
    assert msg is not None and "exit code 1" in msg
    assert "ModuleNotFoundError: No module named 'tracekit.collectors'" in msg
    assert "\n" not in msg


def test_the_rerun_does_not_put_the_working_directory_on_sys_path(tmp_path: Path) -> None:
    # A source checkout in the working directory (without its installed sub-packages) must not shadow
    # the installed tracekit in the re-run: on the GPU machine it made every workload fail under ncu.
    import subprocess

    from tracekit.collectors.ncu import child_argv
    from tracekit.collectors.profiler import parse_trace_steps

    argv = child_argv(tmp_path / "run", parse_trace_steps("1:2"))  # type: ignore[arg-type]
    flags = argv[1:argv.index("-m")]
    code = "import os, sys; print(any(p in ('', os.getcwd()) for p in sys.path))"
    out = subprocess.run([sys.executable, *flags, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.strip() == "False"
    plain = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert plain.stdout.strip() == "True"
