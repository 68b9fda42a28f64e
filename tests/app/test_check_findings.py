"""``tracekit check``: each finding on a Kineto trace built to have it, and the same trace without it.

The base trace: four SGLang decode steps (``step[DECODE bs=4]``) of an eager Llama-like forward on an
H100 (engine_traces' ops and kernel names, its attention left out so that every kernel has a cost
model), every kernel launched by a cudaLaunchKernel 2 µs before it starts. Each variant changes one
thing; its finding is worked out from that change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engine_traces import H100_PROPS, Kineto, forward_ops

from tracekit.analysis import health
from tracekit.app.check import check
from tracekit.cli import main
from tracekit.store.rundir import RunDir

OPS = [op for op in forward_ops(4, hip=False) if not op.attention]
KERNELS_PER_STEP = sum(len(op.kernels) for op in OPS)  # no op here has children


def build(steps: int = 4, annotate: bool = True, gap_us: float = 300.0) -> Kineto:
    k = Kineto(props=dict(H100_PROPS))
    ts, g = 100.0, 0.0
    for _ in range(steps):
        start, t = ts, ts + 10.0
        for op in OPS:
            t, g = k.eager(op, t, g)
        if annotate:
            k.annotation("step[DECODE bs=4]", start, t - start + 5.0, gpu=False)
        ts = max(t, g) + gap_us
    return k


def verdict(tmp_path: Path, k: Kineto) -> tuple[health.Verdict, Path]:
    path = k.write(tmp_path / "trace.json.gz")
    [c] = check(path, tmp_path / "run")
    return c.verdict, tmp_path / "run"


def severities(v: health.Verdict) -> dict[str, str]:
    return {f.code: f.severity for f in v.findings}


def only(v: health.Verdict, code: str, severity: str) -> health.Finding:
    """The finding ``code``, which has ``severity``, every other check ok."""
    sev = severities(v)
    assert sev.pop(code) == severity, v.findings
    assert set(sev.values()) == {health.OK}, v.findings
    return next(f for f in v.findings if f.code == code)


def _devices(k: Kineto) -> list[dict[str, Any]]:
    return [e for e in k.events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]


def test_a_clean_trace_is_fit(tmp_path: Path) -> None:
    v, _ = verdict(tmp_path, build())
    assert set(severities(v).values()) == {health.OK}
    assert v.headline == "fit: every check passed" and v.exit_code == 0
    assert [f.code for f in v.findings] == ["gpu", "events", "window_cut", "before_window", "unlinked", "clocks",
                                            "steps", "shapes", "unmodelled", "profiler", "ceiling"]
    assert v.findings[0].what == f"{4 * KERNELS_PER_STEP} GPU activities on 1 device"


def test_window_that_ends_mid_step(tmp_path: Path) -> None:
    # a fifth step whose launches ran after the profiler stopped: its kernels are not in the trace
    k = build(steps=5)
    last = [e for e in k.events if e["cat"] == "kernel"][-KERNELS_PER_STEP:]
    k.events = [e for e in k.events if not any(e is x for x in last)]
    v, _ = verdict(tmp_path, k)
    f = only(v, "window_cut", health.WRONG)
    assert f.what.startswith(f"the window ends mid-step: the last {KERNELS_PER_STEP} launch calls ran on the GPU "
                             "after the trace stopped: 1 step (")
    assert "synchronise" in f.fix and v.exit_code == 1 and v.headline == "unfit: window cut mid-step"


def test_window_that_opens_mid_step(tmp_path: Path) -> None:
    # three 2 us kernels launched before the window run at the start of the first step: 6 us of its
    # busy time is an earlier step's, far under 5% of the step time: a caveat
    k = build()
    for i in range(3):
        k.device("void at::native::vectorized_elementwise_kernel<4>", "kernel", 101.0 + 3 * i, 2.0, 90_000 + i, None)
    v, _ = verdict(tmp_path, k)
    f = only(v, "window_cut", health.CAVEAT)
    assert f.what == ("the window opens mid-step: 3 GPU activities (0.01 ms) launched before it ran at its start, "
                      "inside 1 step, whose busy time it inflates")
    assert v.headline == "fit, with 1 caveat: window cut mid-step" and v.exit_code == 0


def test_work_before_the_window(tmp_path: Path) -> None:
    # one step whose GPU work starts 5 ms late with nothing visible running: the first kernel's launch
    # returned at t+4 us and it would start at t+6; now at t+5,006 us: queued from t+4+5 (launch latency)
    # to t+5,006: 4,997 us behind unseen work
    k = build(steps=1)
    for e in _devices(k):
        e["ts"] += 5000.0
    v, run = verdict(tmp_path, k)
    f = only(v, "before_window", health.WRONG)
    sb = RunDir.open(run).read_df("step_bound").iloc[0]
    assert sb["idle_before_window_ns"] == 4_997_000
    share = 4_997_000 / float(sb["gpu_busy_ns"] + sb["idle_ns"])
    assert f.what.startswith(f"for 5.00 ms ({100 * share:.0f}%) of the step time (1 of 1 step) the GPU had")
    assert "longer" in f.fix and "syncs will not help" in f.fix


def test_correlation_ids_that_link_nothing(tmp_path: Path) -> None:
    # the runtime calls of the second step are gone: its kernels (a quarter of the GPU's time) link nothing
    k = build()
    kernels = [e for e in k.events if e["cat"] == "kernel"]
    lost = {e["args"]["correlation"] for e in kernels[KERNELS_PER_STEP:2 * KERNELS_PER_STEP]}
    k.events = [e for e in k.events if not (e["cat"] == "cuda_runtime" and e["args"]["correlation"] in lost)]
    v, _ = verdict(tmp_path, k)
    f = only(v, "unlinked", health.WRONG)
    assert f.what.startswith(f"{KERNELS_PER_STEP} of {4 * KERNELS_PER_STEP} GPU activities (25% of the GPU's busy "
                             "time) link to no runtime call")
    # and the other way: launch calls whose GPU records were dropped, in the middle of the trace
    k = build()
    kernels = [e for e in k.events if e["cat"] == "kernel"]
    k.events = [e for e in k.events if e is not kernels[KERNELS_PER_STEP]]
    v, _ = verdict(tmp_path / "b", k)
    f = only(v, "unlinked", health.CAVEAT)
    assert f.what.startswith(f"1 of {4 * KERNELS_PER_STEP} launch calls link to no GPU activity")


def test_dropped_or_unknown_events(tmp_path: Path) -> None:
    k = build()
    for i in range(2):
        k.events.append({"ph": "X", "cat": "mystery_device", "name": "op", "pid": 9, "tid": 9, "ts": 200.0 + i,
                         "dur": 1.0, "args": {}})
    k.events.append({"ph": "X", "cat": "kernel", "name": "no_ts", "pid": 0, "tid": 7, "dur": 1.0, "args": {}})
    v, _ = verdict(tmp_path, k)
    f = only(v, "events", health.CAVEAT)
    assert f.what == (f"1 of {len(k.events):,} events skipped at ingest (1 no ts); 2 timed events of categories "
                      "tracekit does not read (2 mystery_device)")


def test_shapes_not_recorded(tmp_path: Path) -> None:
    k = build()
    for e in k.events:
        e["args"].pop("Input Dims", None)
        e["args"].pop("Input type", None)
    k.meta["record_shapes"] = 0
    v, _ = verdict(tmp_path, k)
    sev = severities(v)
    assert sev["shapes"] == health.CAVEAT
    f = next(f for f in v.findings if f.code == "shapes")
    assert f.what.startswith("no op shapes in the trace (record_shapes off in the trace's metadata)")


def test_kernel_time_without_a_model(tmp_path: Path) -> None:
    # a custom op's 1 ms kernel, launched in the first step: no cost model for it
    k = build(gap_us=2000.0)
    ext = k.op("myext::fused_thing", 120.0, 20.0)
    c = k.runtime("cudaLaunchKernel", 121.0, 4.0, ext)
    k.device("my_custom_kernel", "kernel", 1_000_000.0, 1000.0, c, ext)  # after every other kernel
    v, _ = verdict(tmp_path, k)
    sev = severities(v)
    assert sev["unmodelled"] == health.CAVEAT
    f = next(f for f in v.findings if f.code == "unmodelled")
    assert "my_custom_kernel 1.00 ms" in f.what


def test_profiler_overhead(tmp_path: Path) -> None:
    k = build()
    for i in range(50):
        k.python("model.py(12): forward", 100.0 + i, 0.5)
    v, _ = verdict(tmp_path, k)
    f = only(v, "profiler", health.CAVEAT)
    assert f.what.startswith("Python stack tracing was on (50 python_function events)")


def test_no_ceiling(tmp_path: Path) -> None:
    k = build()
    k.props = None
    v, _ = verdict(tmp_path, k)
    f = only(v, "ceiling", health.CAVEAT)
    assert f.what == "no ceiling: the trace names no GPU" and "--ceiling" in f.fix


def test_clock_domains(tmp_path: Path) -> None:
    # every GPU record 1 ms earlier than the host says: each starts ~1 ms before the call that launched it
    k = build()
    for e in _devices(k):
        e["ts"] -= 1000.0
    v, _ = verdict(tmp_path, k)
    f = only(v, "clocks", health.WRONG)
    assert f.what.startswith(f"{4 * KERNELS_PER_STEP} of {4 * KERNELS_PER_STEP} GPU activities start before the call "
                             "that launched them (by up to 0.99 ms)")


def test_no_gpu_activity(tmp_path: Path) -> None:
    k = build()
    k.events = [e for e in k.events if e not in _devices(k)]
    v, _ = verdict(tmp_path, k)
    assert [(f.code, f.severity) for f in v.findings] == [("gpu", health.WRONG), ("events", health.OK)]
    assert v.headline == "unfit: no GPU activity"


def test_no_steps(tmp_path: Path) -> None:
    # no step annotation and no aten::embedding to infer steps from
    k = build(annotate=False)
    k.events = [e for e in k.events if e["name"] != "aten::embedding"]
    v, _ = verdict(tmp_path, k)
    f = only(v, "steps", health.CAVEAT)
    assert f.what.startswith("no steps found")


def test_cli_exit_status_and_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fit = build().write(tmp_path / "fit.json.gz")
    assert main(["check", str(fit), "--json", str(tmp_path / "v.json")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{fit}: fit: every check passed"
    assert (tmp_path / "v.json").read_text().count('"severity": "ok"') == 11
    assert not list(tmp_path.glob("*.tracekit"))  # a check of a trace file leaves no run directory
    k = build(steps=1)
    for e in _devices(k):
        e["ts"] += 5000.0
    bad = k.write(tmp_path / "late.json.gz")
    assert main(["check", str(bad)]) == 1
    assert "  WRONG   before_window  for 5.00 ms" in capsys.readouterr().out
    assert main(["check", str(tmp_path / "missing.json")]) == 2
    (tmp_path / "not.json").write_text('{"a": 1}')
    assert main(["check", str(tmp_path / "not.json")]) == 2
    # a trace cut short (a copy that stopped): ingest refuses it, the check says why and exits 2
    cut = build().write(tmp_path / "cut.json")
    cut.write_bytes(cut.read_bytes()[: len(cut.read_bytes()) * 7 // 10])
    capsys.readouterr()
    assert main(["check", str(cut)]) == 2
    assert "JSON ends early" in capsys.readouterr().err


def test_a_file_cut_short_makes_the_analysis_wrong() -> None:
    # a run whose ingest kept the events before a cut (run.json ingest.files[].truncated)
    manifest = {"ingest": {"files": [{"path": "t.json", "truncated": "t.json: JSON ends early"}],
                           "counts": {"events_read": 10}}}
    v = health.check({}, manifest=manifest)
    assert [(f.code, f.severity) for f in v.findings] == [("gpu", health.WRONG), ("events", health.WRONG)]
    assert v.findings[1].what.startswith("the trace file is cut short (t.json: JSON ends early)")


def test_a_run_directory_is_checked_from_its_tables(tmp_path: Path) -> None:
    from tracekit.app.analyze import analyze

    path = build().write(tmp_path / "trace.json.gz")
    run, _ = analyze(path, tmp_path / "run")
    manifest = (run.path / "run.json").stat().st_mtime_ns
    [c] = check(run.path)
    assert c.verdict.headline == "fit: every check passed"
    assert (run.path / "run.json").stat().st_mtime_ns == manifest  # read, not analysed again
    assert run.read_manifest()["analysis"]["check"]["verdict"] == "fit"


@pytest.mark.parametrize("before_ns,severity", [(49, health.CAVEAT), (50, health.WRONG), (0, health.OK)])
def test_before_window_threshold(before_ns: int, severity: str) -> None:
    # 5% of the step's device time (busy + idle = 1,000 ns) makes the analysis wrong
    import pandas as pd

    gpu = pd.DataFrame({"ts_ns": [0], "dur_ns": [500], "device": [0], "correlation": [1], "kind": ["kernel"],
                        "name": ["k"]})
    steps = pd.DataFrame({"step_id": [0], "time_ns": [1000], "gpu_busy_ns": [500], "idle_ns": [500],
                          "idle_before_window_ns": [before_ns]})
    v = health.check({"gpu_activity": gpu, "step_bound": steps})
    assert severities(v)["before_window"] == severity


def test_clocks_across_ranks() -> None:
    # two ranks of one job: spans [0, 10) and [5, 20) s overlap; [0, 10) and [3,600, 3,610) s do not
    s = 1_000_000_000
    assert health.rank_clocks({0: (0, 10 * s), 1: (5 * s, 20 * s)}).severity == health.OK
    f = health.rank_clocks({0: (0, 10 * s), 1: (3600 * s, 3610 * s)})
    assert f.severity == health.WRONG
    assert f.what.startswith("rank 1's GPU activity starts 3,590.000 s after rank 0's ends")
    assert health.rank_clocks({0: (0, 1)}).severity == health.OK


def test_a_multirank_run_is_checked_per_rank_and_across(tmp_path: Path) -> None:
    import shutil

    from helpers import FIXTURES

    run = tmp_path / "tp"
    shutil.copytree(FIXTURES / "tp_h200", run)
    checked = check(run)
    assert [c.label for c in checked] == [f"{run} rank 0", f"{run} rank 1", f"{run} across ranks"]
    assert checked[-1].verdict.findings[0].what == "the GPU spans of the 2 ranks overlap"


def test_which_runtime_calls_put_work_on_the_gpu() -> None:
    launches = ["cudaLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC", "hipExtModuleLaunchKernel",
                "hipModuleLaunchKernel", "cudaGraphLaunch", "cudaMemcpyAsync", "hipMemcpyWithStream", "cudaMemsetAsync"]
    others = ["cudaLaunchHostFunc", "cuLaunchHostFunc", "cudaPointerGetAttributes", "cudaStreamIsCapturing",
              "cudaFuncGetAttributes", "cudaDeviceSynchronize", "cudaEventRecord"]
    assert all(health.LAUNCH.search(n) for n in launches)
    assert not any(health.LAUNCH.search(n) for n in others)


def test_graph_replays_without_a_capture_have_no_shapes(tmp_path: Path) -> None:
    # every step one cudaGraphLaunch replaying the forward's kernels; no capture trace to lend them the ops
    k = Kineto(props=dict(H100_PROPS))
    ts, g = 100.0, 0.0
    for _ in range(4):
        k.op("aten::copy_", ts + 1.0, 2.0, [[4], [4], []], ["long int", "long int", "Scalar"])  # the inputs' copy
        ext = k.op("model.forward", ts + 5.0, 30.0)
        t, g = k.replay(OPS, ts + 10.0, g, ext)
        k.annotation("step[DECODE bs=4]", ts, t - ts + 5.0, gpu=False)
        ts = max(t, g) + 300.0
    v, _ = verdict(tmp_path, k)
    f = next(f for f in v.findings if f.code == "shapes")
    assert f.severity == health.CAVEAT
    assert f.what == (f"op shapes recorded, but {4 * KERNELS_PER_STEP} of the {4 * KERNELS_PER_STEP} graph-replayed "
                      "kernels (100% of the GPU's busy time) have no captured op to take shapes from")
