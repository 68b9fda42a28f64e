"""`tracekit record`: the CLI end to end on the CPU, with the tiny preset."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import need_module

from tracekit.cli import main
from tracekit.model.stepnames import parse_step
from tracekit.store.rundir import STATUS_COMPLETE, STATUS_INCOMPLETE, RunDir
from tracekit.trace import chrome as chrome_trace
from tracekit.trace.tracks import TRACEKIT_PID

need_module("torch")
need_module("transformers")


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunDir, float, int]:
    """`tracekit record` with no arguments at all: the README's first command."""
    cwd = tmp_path_factory.mktemp("cwd")
    mp = pytest.MonkeyPatch()
    mp.chdir(cwd)
    try:
        t0 = time.perf_counter()
        rc = main(["record"])
        elapsed = time.perf_counter() - t0
    finally:
        mp.undo()
    runs = list((cwd / "runs").iterdir())
    assert len(runs) == 1 and runs[0].name.endswith("-smoke")
    return RunDir.open(runs[0]), elapsed, rc


def test_record_with_no_arguments_writes_a_complete_run(default_run) -> None:
    # How long it takes is measured, not asserted (a loaded machine stretches it): docs/measurements.
    run, _elapsed, rc = default_run
    assert rc == 0
    m = run.read_manifest()
    assert m["status"] == STATUS_COMPLETE
    assert m["workload"]["model"] == "tiny" and m["workload"]["shape"] == "smoke"
    assert m["workload"]["dtype"] == "fp32" and m["workload"]["device"] == "cpu"
    assert m["model"]["weights"] == "random" and m["model"]["config"]["num_hidden_layers"] == 4
    env = m["environment"]
    assert env["torch"] and env["transformers"] and env["python"]
    assert m["nvml"]["available"] is False and "cpu" in m["nvml"]["reason"]
    assert m["command"][:2] == ["tracekit", "record"]
    for key in ("unprofiled", "profiled", "profiler_overhead"):
        assert key in m["timings"], key
    assert m["timings"]["profiled"]["aggregate"]["requests"] == 1
    assert m["timings"]["unprofiled"]["aggregate"]["requests"] == 1
    assert isinstance(m["clock"]["offset_ns"], int) and m["clock"]["step_syncs"] == 8


def test_steps_table_is_exact_for_the_forced_output_length(default_run) -> None:
    run, _, _ = default_run
    steps = run.read_df("steps").sort_values("step_id")
    # smoke: 22 prompt tokens, 8 output tokens -> one prefill + 7 decode forward passes
    assert list(steps["kind"]) == ["prefill"] + ["decode"] * 7
    assert list(steps["q_len"]) == [22] + [1] * 7
    assert list(steps["kv_len"]) == list(range(22, 30))
    assert set(steps["source"]) == {"tracekit"} and set(steps["batch"]) == {1}
    assert (steps["cpu_end_ns"] > steps["cpu_start_ns"]).all()
    assert steps["cpu_start_ns"].is_monotonic_increasing


def test_requests_table_timings_follow_the_definitions(default_run) -> None:
    run, _, _ = default_run
    req = run.read_df("requests")
    assert len(req) == 1
    r = req.iloc[0]
    assert (r["input_tokens"], r["output_tokens"], r["batch"]) == (22, 8, 1)
    assert 0 < r["ttft_ns"] < r["e2e_ns"]
    assert r["tpot_ns"] == pytest.approx((r["e2e_ns"] - r["ttft_ns"]) / 7)
    assert r["prefill_share"] == pytest.approx(r["ttft_ns"] / r["e2e_ns"])
    assert r["end_ns"] - r["start_ns"] == r["e2e_ns"]
    steps = run.read_df("steps")
    # Steps sit inside their request on the one (trace) clock.
    assert (steps["cpu_start_ns"] >= r["start_ns"]).all() and (steps["cpu_end_ns"] <= r["end_ns"]).all()


def test_trace_has_kineto_events_and_tracekit_tracks_on_one_clock(default_run) -> None:
    run, _, _ = default_run
    data = chrome_trace.load(run.trace_path)
    events = data["traceEvents"]
    assert "baseTimeNanoseconds" in data  # Kineto's header survived the merge
    assert any(e.get("cat") == "cpu_op" and e.get("name") == "aten::mm" for e in events)
    ours = [e for e in events if e.get("pid") == TRACEKIT_PID and e.get("ph") == "X"]
    assert sum(e["cat"] == "tracekit.step" for e in ours) == 8
    assert [e["name"] for e in ours if e["cat"] == "tracekit.step"] == ["prefill"] + ["decode"] * 7
    assert sum(e["cat"] == "tracekit.request" and e["name"] != "ttft" for e in ours) == 1
    kineto_steps = {
        parse_step(e["name"]).step_id: e  # type: ignore[union-attr]
        for e in events
        if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("tracekit.step ")
    }
    assert sorted(kineto_steps) == list(range(8))
    steps = run.read_df("steps").set_index("step_id")
    for sid, e in kineto_steps.items():
        # Table timestamps are Kineto's ts converted to ns.
        assert abs(steps.loc[sid, "cpu_start_ns"] - round(e["ts"] * 1000)) <= 1
    req = run.read_df("requests").iloc[0]
    kreq = next(
        e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("tracekit.request")
    )
    # The request's host start maps onto the trace no later than Kineto's annotation of it (the offset
    # is the least over the clock pairs, so at most a millisecond of clock jitter after it), and the
    # annotation opens inside the request's host span. How long after the host read its start the
    # annotation opens is the scheduler's business: a loaded machine delays it by milliseconds.
    lead = kreq["ts"] * 1000 - req["start_ns"]
    assert -1_000_000 < lead < req["e2e_ns"]


def test_summary_is_printed_with_overhead_and_perfetto_hint(tmp_path: Path, capsys) -> None:
    rc = main(["record", "--warmup", "0", "--out", str(tmp_path / "r"), "--output-tokens", "3"])
    assert rc == 0
    cap = capsys.readouterr()
    out = cap.out  # the summary is on stdout (`tracekit record > out.txt` keeps it); progress on stderr
    for word in ("TTFT", "TPOT", "prefill", "decode", "prefill share", "profiler cost", "ui.perfetto.dev"):
        assert word in out, word
    assert str(tmp_path / "r" / "trace.json.gz") in out
    assert "TTFT" not in cap.err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--model", "no-such-preset"], "neither a preset"),
        (["--shape", "huge"], "unknown --shape"),
        (["--device", "tpu"], "--device"),
        (["--dtype", "int3"], "--dtype"),
        (["--trace-steps", "5:2"], "--trace-steps"),
    ],
)
def test_bad_arguments_are_one_line_errors_with_exit_2(tmp_path: Path, capsys, args, needle) -> None:
    out = tmp_path / "r"
    assert main(["record", "-q", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tracekit: error:") and needle in err and "\n" not in err
    assert not out.exists()


def test_model_path_must_be_a_model_directory(tmp_path: Path, capsys) -> None:
    (tmp_path / "m").mkdir()
    assert main(["record", "-q", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "r")]) == 2
    assert "config.json" in capsys.readouterr().err


def test_existing_run_is_not_overwritten_without_force(tmp_path: Path) -> None:
    out = tmp_path / "r"
    args = ["record", "-q", "--warmup", "0", "--output-tokens", "2", "--out", str(out)]
    assert main(args) == 0
    first = RunDir.open(out).read_manifest()["created_at"]
    assert main(args) == 2
    assert RunDir.open(out).read_manifest()["created_at"] == first
    assert main([*args, "--force"]) == 0
    assert RunDir.open(out).read_manifest()["created_at"] != first


def test_batch_requests_and_custom_lengths(tmp_path: Path) -> None:
    out = tmp_path / "r"
    args = ["record", "-q", "--warmup", "0", "--batch", "2", "--requests", "2"]
    assert main([*args, "--input-tokens", "5", "--output-tokens", "3", "--out", str(out)]) == 0
    run = RunDir.open(out)
    req = run.read_df("requests")
    assert list(req["batch"]) == [2, 2] and list(req["output_tokens"]) == [3, 3]
    assert list(req["name"]) == ["smoke-custom-0", "smoke-custom-1"]
    steps = run.read_df("steps")
    assert list(steps["request_id"]) == [0, 0, 0, 1, 1, 1]
    assert list(steps["kv_len"]) == [5, 6, 7, 5, 6, 7]
    assert list(steps["tokens"]) == [10, 2, 2, 10, 2, 2]
    m = run.read_manifest()
    assert m["workload"]["shape"] == "smoke-custom" and m["workload"]["input_tokens"] == 5
    assert len(m["timings"]["unprofiled"]["requests"]) == 2


def test_trace_steps_limits_kernel_capture_but_not_the_timers(tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert main(["record", "-q", "--warmup", "0", "--trace-steps", "2:5", "--out", str(out)]) == 0
    run = RunDir.open(out)
    assert run.status == STATUS_COMPLETE
    assert len(run.read_df("steps")) == 8 and run.read_df("requests").iloc[0]["output_tokens"] == 8
    events = chrome_trace.load(run.trace_path)["traceEvents"]
    captured = {
        parse_step(e["name"]).step_id  # type: ignore[union-attr]
        for e in events
        if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("tracekit.step ")
    }
    assert captured == {2, 3, 4}
    m = run.read_manifest()
    assert m["profiler"]["trace_steps"] == "2:5" and m["clock"]["clock_syncs"] >= 1
    # All 8 steps are still on tracekit's own track.
    assert sum(e.get("cat") == "tracekit.step" for e in events) == 8


class _Raiser:
    """A user streamer that raises after ``after`` tokens of the ``on_call``-th generate call."""

    def __init__(self, exc: BaseException, after: int) -> None:
        self.exc = exc
        self.after = after
        self.puts = 0

    def put(self, value: Any) -> None:
        self.puts += 1
        if self.puts > self.after:
            raise self.exc

    def end(self) -> None:
        pass


def _fail_in_profiled_pass(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    from tracekit.collectors import workload as wl

    calls = {"n": 0}
    orig = wl.generate_kwargs

    def patched(cfg: Any, prompt: Any) -> dict[str, Any]:
        kw = orig(cfg, prompt)
        calls["n"] += 1
        if calls["n"] == 2:  # call 1: the unprofiled pass; call 2: the profiled one
            kw["streamer"] = _Raiser(exc, after=3)  # the prompt + 2 tokens, then fail
        return kw

    monkeypatch.setattr(wl, "generate_kwargs", patched)


def test_ctrl_c_leaves_an_incomplete_run_with_what_was_captured(tmp_path: Path, monkeypatch) -> None:
    _fail_in_profiled_pass(monkeypatch, KeyboardInterrupt())
    out = tmp_path / "r"
    assert main(["record", "-q", "--warmup", "0", "--out", str(out)]) == 130
    run = RunDir.open(out)
    m = run.read_manifest()
    assert m["status"] == STATUS_INCOMPLETE and "interrupt" in m["incomplete_reason"]
    assert m["timings"]["unprofiled"]["aggregate"]["requests"] == 1
    steps = run.read_df("steps")
    assert 1 <= len(steps) < 8
    req = run.read_df("requests").iloc[0]
    assert req["output_tokens"] == 3  # the third token was on the host before the streamer raised
    assert run.trace_path.is_file()
    assert any(e.get("cat") == "tracekit.step" for e in chrome_trace.load(run.trace_path)["traceEvents"])


def test_an_exception_keeps_the_run_incomplete_and_keeps_the_traceback(tmp_path: Path, monkeypatch) -> None:
    _fail_in_profiled_pass(monkeypatch, RuntimeError("boom"))
    out = tmp_path / "r"
    with pytest.raises(RuntimeError, match="boom"):
        main(["record", "-q", "--warmup", "0", "--out", str(out)])
    m = RunDir.open(out).read_manifest()
    assert m["status"] == STATUS_INCOMPLETE and "boom" in m["incomplete_reason"]


def test_out_of_memory_is_one_line_naming_shape_and_batch(tmp_path: Path, monkeypatch, capsys) -> None:
    import torch

    _fail_in_profiled_pass(monkeypatch, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    out = tmp_path / "r"
    assert main(["record", "-q", "--warmup", "0", "--batch", "3", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("tracekit: error: CUDA out of memory") and "batch 3" in err and "smoke" in err
    assert json.loads((out / "run.json").read_text())["status"] == STATUS_INCOMPLETE


def test_a_window_never_reached_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert main(["record", "-q", "--warmup", "0", "--trace-steps", "100:200", "--out", str(out)]) == 0
    run = RunDir.open(out)
    m = run.read_manifest()
    assert m["status"] == STATUS_COMPLETE
    assert any("never reached" in w for w in m["warnings"])
    events = chrome_trace.load(run.trace_path)["traceEvents"]
    assert sum(e.get("cat") == "tracekit.step" for e in events) == 8
    assert not any(e.get("cat") == "cpu_op" for e in events)


def test_record_a_local_model_directory(tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    LlamaForCausalLM(cfg).save_pretrained(tmp_path / "model")
    assert any(p.suffix == ".safetensors" for p in (tmp_path / "model").iterdir())
    out = tmp_path / "r"
    args = [
        "record",
        "-q",
        "--warmup",
        "0",
        "--model",
        str(tmp_path / "model"),
        "--output-tokens",
        "3",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    m = RunDir.open(out).read_manifest()
    assert m["model"]["weights"] == "pretrained" and m["model"]["config"]["vocab_size"] == 300
    assert m["workload"]["model"] == str(tmp_path / "model")


def test_a_config_only_directory_is_built_with_random_weights(tmp_path: Path) -> None:
    """A directory with only a config.json (an MoE architecture here) records with random weights: the
    architecture's ops run (Qwen3-MoE's experts as grouped GEMMs) and the steps are exact."""
    model = tmp_path / "moe"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "transformers_version": "4.51.0",
        "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
        "num_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 512}))
    out = tmp_path / "r"
    assert main(["record", "-q", "--warmup", "0", "--model", str(model), "--output-tokens", "3",
                 "--out", str(out)]) == 0
    run = RunDir.open(out)
    m = run.read_manifest()
    assert m["model"]["weights"] == "random" and m["model"]["model_type"] == "qwen3_moe"
    assert m["model"]["config"]["num_experts"] == 4 and "(no weight files: random weights)" in m["model"]["source"]
    assert main(["analyze", "-q", str(out)]) == 0
    steps = run.read_df("steps")
    assert steps["kind"].tolist() == ["prefill", "decode", "decode"]
    ops = set(run.read_df("cpu_ops")["name"].astype(str))
    assert ops & {"aten::_grouped_mm", "aten::index_add_"}, "the experts' ops are in the trace"


@pytest.mark.parametrize(
    "config, needle",
    [
        ("{not json", "config.json is unreadable"),
        ('{"hidden_size": 64}', "names no model_type"),
        ('{"model_type": "no-such-architecture"}', "cannot build model_type 'no-such-architecture'"),
    ],
)
def test_a_config_only_directory_that_cannot_be_built_is_one_line(tmp_path: Path, capsys, config, needle) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(config)
    assert main(["record", "-q", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tracekit: error:") and needle in err and "\n" not in err


@pytest.mark.slow
def test_a_real_sigint_during_the_profiled_pass(tmp_path: Path) -> None:
    """Ctrl-C as a signal (not a mocked exception) once the profiled pass has produced a token: exit
    130, run incomplete, partial data kept. The signal waits for that event (the progress line on a
    terminal), never for a guessed time, so a loaded machine only makes it slower."""
    import os
    import pty
    import re
    import select
    import signal
    import subprocess
    import sys

    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "tracekit", "record", "--warmup", "0", "--output-tokens", "150", "--out", str(out)]
    # stderr on a terminal: the progress line is updated with every token ("recording: request 1/1, N/150").
    master, slave = pty.openpty()
    # A shell starts background jobs with SIGINT ignored, and a child inherits that (Python then installs
    # no KeyboardInterrupt handler): the child gets SIGINT's default back, as a terminal's process has.
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(slave)
    seen = b""
    token = re.compile(rb"recording: request 1/1, ([1-9][0-9]*)/150")
    try:
        while proc.poll() is None and not token.search(seen):
            if select.select([master], [], [], 1.0)[0]:
                try:
                    seen += os.read(master, 4096)
                except OSError:  # the child closed the terminal
                    break
        assert proc.poll() is None, "the run finished before it could be interrupted: " + seen.decode()[-500:]
        proc.send_signal(signal.SIGINT)
        while True:  # drain the terminal until the child lets go of it, so it never blocks writing
            try:
                chunk = os.read(master, 4096) if select.select([master], [], [], 1.0)[0] else b""
            except OSError:
                break
            if not chunk and proc.poll() is not None:
                break
            seen += chunk
        proc.wait(timeout=600)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, seen.decode(errors="replace")[-500:]
    run = RunDir.open(out)
    m = run.read_manifest()
    assert m["status"] == STATUS_INCOMPLETE and "interrupt" in m["incomplete_reason"]
    steps = run.read_df("steps")
    assert 1 <= len(steps) < 150
    assert run.trace_path.is_file() and run.read_df("requests").iloc[0]["output_tokens"] < 150


@pytest.mark.slow
def test_a_window_past_the_end_keeps_the_steps_it_captured(tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert main(["record", "-q", "--warmup", "0", "--trace-steps", "5:100", "--out", str(out)]) == 0
    events = chrome_trace.load(RunDir.open(out).trace_path)["traceEvents"]
    captured = {
        parse_step(e["name"]).step_id  # type: ignore[union-attr]
        for e in events
        if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("tracekit.step ")
    }
    assert captured == {5, 6, 7}


@pytest.mark.slow
def test_every_table_recorded_and_analysed_is_declared(default_run: tuple[RunDir, float, int],
                                                       tmp_path: Path) -> None:
    import shutil

    from helpers import undeclared_tables

    # GIVEN the tiny preset recorded on the CPU (a copy: the other tests read the run as recorded)
    run = RunDir.open(shutil.copytree(default_run[0].path, tmp_path / "run"))
    recorded = set(run.tables())
    # WHEN it is analysed
    assert main(["analyze", str(run.path)]) == 0
    # THEN every table the recorder and the analysis wrote is one tracekit.model.schema declares, as declared
    problems, seen = undeclared_tables(tmp_path)
    assert not problems, "\n".join(problems)
    assert {"steps", "requests", "counters"} <= recorded and "gpu_activity" in seen
    assert {"recorded_steps", "recorded_requests", "phases", "kernel_steps"} <= seen



@pytest.mark.slow
def test_ctrl_c_after_the_recording_finished_says_the_run_is_complete(tmp_path: Path, monkeypatch, capfd) -> None:
    # An interrupt between the recording's end and record's return leaves a complete run: the message
    # says what run.json says (it said "partial run kept (status incomplete)" whatever the status).
    from tracekit.collectors import recording

    orig = recording.Recording.__exit__

    def exit_then_interrupt(self: Any, exc_type: Any, exc: Any, tb: Any) -> None:
        orig(self, exc_type, exc, tb)
        if exc is None:
            raise KeyboardInterrupt

    monkeypatch.setattr(recording.Recording, "__exit__", exit_then_interrupt)
    out = tmp_path / "r"
    assert main(["record", "-q", "--warmup", "0", "--out", str(out)]) == 130
    err = capfd.readouterr().err
    assert RunDir.open(out).status == STATUS_COMPLETE
    assert f"run kept (status complete): {out}" in err and "partial" not in err
