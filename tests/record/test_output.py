"""tracekit's output is its own: libraries' lines are caught, kept in the run, and summed up in one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from helpers import need_module

from tracekit.collectors.noise import LOG_NAME, ThirdPartyOutput, is_routine, is_third_party
from tracekit.store.rundir import RunDir

# What tracekit itself prints while recording: its progress lines and its summary block.
OWN_LINE = re.compile(r"^(warm-up|timing without profiler|recording): request \d+/\d+, \d+/\d+ tokens$"
                      r"|^tracekit record: |^  \S|^ {18}open it at ")


def _record(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "default"}  # every warning a library raises would print
    return subprocess.run([sys.executable, "-m", "tracekit", "record", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    need_module("torch")
    need_module("transformers")
    cwd = tmp_path_factory.mktemp("out")
    # A kernel-capture window too: the profiler then starts and stops inside the step hooks.
    proc = _record(["--model", "tiny", "--requests", "2", "--trace-steps", "2:6", "--out", "run"], cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc, cwd / "run"


@pytest.mark.slow
def test_record_on_the_tiny_preset_prints_only_its_own_lines(tiny_run) -> None:
    proc, run = tiny_run
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    foreign = [ln for ln in lines if not OWN_LINE.search(ln)]
    assert not foreign, foreign
    # What the libraries printed is in the run: Kineto's start/stop lines in the log, counted in run.json
    m = RunDir.open(run).read_manifest()
    log = (run / LOG_NAME).read_text()
    assert "profiler_start" in log and "profiler_stop" in log
    info = m["third_party"]
    assert info["log"] == LOG_NAME and info["messages"] >= 2 and info["routine"] >= 2
    assert info["messages"] == len([ln for ln in log.splitlines() if ln.strip()])
    # ... and summed up in one line of the summary
    summary = [ln for ln in lines if ln.startswith("  libraries")]
    assert len(summary) == 1 and f"{info['messages']} message(s) captured" in summary[0]
    assert summary[0].endswith(f"full text in {Path('run') / LOG_NAME}")


@pytest.mark.slow
def test_every_recorded_table_of_a_single_rank_run_says_rank_0(tiny_run) -> None:
    _, run = tiny_run
    rd = RunDir.open(run)
    for name in ("steps", "requests", "counters"):
        t = rd.read_table(name)
        assert "rank" in t.column_names and t.column("rank").null_count == 0, name
        assert set(t.column("rank").to_pylist()) <= {0}, name
    assert rd.read_table("steps").num_rows > 0


@pytest.mark.slow
def test_the_summary_says_how_long_post_processing_took(tiny_run) -> None:
    # GIVEN a recorded run: run.json says what the work after the workload cost, part by part
    proc, run = tiny_run
    post = RunDir.open(run).read_manifest()["postprocess"]
    assert post["trace_bytes"] > 0 and post["seconds"] > 0
    parts = post["annotations_s"] + post["tables_s"] + post["merge_s"]
    assert parts <= post["seconds"] + 0.003  # each part rounded to 1 ms
    # THEN the summary prints that total in one line
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip().startswith("post-processing")]
    assert len(lines) == 1 and f"post-processing {post['seconds']:.2f} s" in lines[0], proc.stderr[-2000:]


SCRIPT = textwrap.dedent(
    """
    import warnings
    import torch
    import tracekit
    import noisy_lib  # a third-party package: warns when imported and when used
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)
    model = LlamaForCausalLM(cfg).eval()
    warnings.warn("the user's own warning stays on screen")
    ids = torch.randint(3, 256, (1, 6))
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=3, min_new_tokens=3, do_sample=False,
              pad_token_id=0)
    with tracekit.warmup():
        model.generate(ids, **kw)
    noisy_lib.use()
    model.generate(ids, **kw)
    print("script output stays too")
    """
)


@pytest.mark.slow
def test_a_script_keeps_its_own_output_and_warnings_but_not_the_libraries(tmp_path: Path) -> None:
    need_module("torch")
    need_module("transformers")
    site = tmp_path / "lib" / "site-packages"
    site.mkdir(parents=True)
    (site / "noisy_lib.py").write_text(
        "import warnings\nwarnings.warn('noisy_lib: deprecated import', DeprecationWarning)\n"
        "def use():\n    warnings.warn('noisy_lib: slow path taken', UserWarning)\n")
    (tmp_path / "my.py").write_text(SCRIPT)
    env_path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": env_path, "PYTHONWARNINGS": "default"}
    proc = subprocess.run([sys.executable, "-m", "tracekit", "record", "--no-nvml", "--out", "run", "--",
                           "python", "my.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "script output stays too" in proc.stdout
    assert "the user's own warning stays on screen" in proc.stderr
    assert "slow path taken" not in out and "deprecated import" not in out and "USDT" not in out
    m = RunDir.open(tmp_path / "run").read_manifest()
    assert "third-party: noisy_lib: UserWarning: noisy_lib: slow path taken" in m["warnings"]
    assert not any("own warning" in w for w in m["warnings"])
    # the warm-up is marked, and left out of the timing means
    assert m["warmup_requests"] == [0]
    prof = m["timings"]["profiled"]
    assert prof["aggregate"]["requests"] == 1 and prof["aggregate"]["warmup_requests"] == 1
    assert [r.get("warmup", False) for r in prof["requests"]] == [True, False]
    assert "noisy_lib: slow path taken" in (tmp_path / "run" / LOG_NAME).read_text()


def test_native_stderr_is_caught_only_inside_native(capfd: pytest.CaptureFixture[str]) -> None:
    out = ThirdPartyOutput()
    try:
        with out.native():
            os.write(2, b"USDT:2026-01-01 00:00:00 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
            os.write(2, b"CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: counters not readable\n")
            with out.native():  # nested: still caught, restored once
                os.write(2, b"inner line\n")
        os.write(2, b"after the block\n")
        err = capfd.readouterr().err
        assert err == "after the block\n"
        s = out.summary()
        assert s["messages"] == 3 and s["routine"] == 1
        assert s["warnings"] == ["stderr: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: counters not readable",
                                 "stderr: inner line"]
    finally:
        out.close()


def test_warnings_from_libraries_are_caught_and_the_users_pass(tmp_path: Path) -> None:
    lib = tmp_path / "site-packages" / "somelib"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text("import warnings\ndef go():\n    warnings.warn('from the library')\n")
    sys.path.insert(0, str(tmp_path / "site-packages"))
    shown: list[str] = []
    try:
        import somelib  # type: ignore[import-not-found]

        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = lambda m, *a, **k: shown.append(str(m))
            with ThirdPartyOutput() as out:
                somelib.go()
                somelib.go()
                warnings.warn("the user's", stacklevel=1)
            out.close()
        assert shown == ["the user's"]
        assert [w.text() for w in out.caught] == ["somelib: UserWarning: from the library"] * 2
        assert out.summary()["warnings"] == ["somelib: UserWarning: from the library (×2)"]
    finally:
        sys.path.remove(str(tmp_path / "site-packages"))
        sys.modules.pop("somelib", None)


def test_what_counts_as_third_party_and_as_routine() -> None:
    roots = ("/venv/lib/python3.12/site-packages/",)
    assert is_third_party("/venv/lib/python3.12/site-packages/torch/profiler/profiler.py", roots)
    assert not is_third_party("/home/me/my_script.py", roots)
    assert is_third_party("<frozen importlib._bootstrap>", roots)
    # torch's warnings with a stacklevel pointing into tracekit are still torch's
    import tracekit.collectors.profiler as prof

    assert is_third_party(prof.__file__, roots)
    assert is_routine("USDT:2026-12-01 13:50:13 28191:28191 SyncActivityProfilerHandler.cpp:59] profiler_stop")
    assert is_routine("Warning: Profiler clears events at the end of each cycle. Only events ...")
    assert not is_routine("TensorFloat32 tensor cores for float32 matrix multiplication available but not enabled.")


def test_summary_line_reads_run_json(tmp_path: Path) -> None:
    from tracekit.report.record_summary import render

    m = {"status": "complete", "warnings": ["third-party: torch: UserWarning: x", "real problem"],
         "third_party": {"messages": 5, "routine": 2, "kept": 1, "by_origin": {"native stderr": 2, "torch": 3},
                         "log": LOG_NAME}}
    text = render(m, tmp_path)
    assert "warning         real problem" in text and "UserWarning: x" not in text
    line = [ln for ln in text.splitlines() if ln.startswith("  libraries")]
    assert line == [f"  libraries       5 message(s) captured (native stderr 2, torch 3; 2 routine), "
                    f"1 kept as run.json warnings; full text in {tmp_path / LOG_NAME}"]
    assert "libraries" not in render({"status": "complete"}, tmp_path)
    assert json.dumps(m)  # run.json stays plain JSON


def test_torchao_import_lines_are_routine() -> None:
    """What importing torchao 0.18 prints with a torch it was not built for (recorded on this CPU)."""
    so = "/venv/lib/python3.11/site-packages/torchao/_C_cutlass_90a.abi3.so"
    assert is_routine(f"Failed to load {so}: Could not load this library: {so}")
    assert is_routine("W1201 16:57:24.231000 27311 torch/utils/_pytree.py:630] <enum 'KernelPreference'> is an Enum "
                      "subclass and is now natively supported by torch.compile as an opaque value type. Calling "
                      "register_constant() on Enum subclasses is deprecated and will be an error in a future release.")
    assert is_routine("Warning: Detected no triton, on systems without Triton certain kernels will not work")
    assert not is_routine("Failed to load /opt/my_model/weights.safetensors: Could not load this library")
