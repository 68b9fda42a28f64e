from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tracekit.analysis import ranks
from tracekit.collectors import tp
from tracekit.errors import TracekitError, UsageError
from tracekit.store.rundir import RunDir

# Every test here records real runs (a sweep, several ranks): minutes on 2 cores.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tp_recorded(tmp_path_factory) -> tuple[RunDir, str, str]:
    """``tracekit record --tp 2`` on the CPU, once for every test here: the tiny Llama preset sharded over
    2 processes (gloo), one request of 3 output tokens after one warm-up; (run, stdout, stderr)."""
    import contextlib
    import io

    from tracekit.cli import main

    out, err = io.StringIO(), io.StringIO()
    run = tmp_path_factory.mktemp("tp") / "run"
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["record", "--tp", "2", "--device", "cpu", "--warmup", "1", "--output-tokens", "3", "--out", str(run)])
    assert rc == 0, err.getvalue()[-2000:]
    return RunDir.open(run), out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def tp_run(tp_recorded: tuple[RunDir, str, str]) -> RunDir:
    return tp_recorded[0]


def test_record_tp_writes_one_run_per_rank_and_says_so(tp_recorded: tuple[RunDir, str, str]) -> None:
    run, out, err = tp_recorded
    m = run.read_manifest()
    assert m["status"] == "complete" and m["tp"]["world_size"] == 2
    steps = run.read_df("steps")
    # every rank ran the same forced request: one prefill and two decodes each
    assert sorted(steps["rank"].unique().tolist()) == [0, 1]
    for _, g in steps.groupby("rank"):
        assert g["kind"].tolist() == ["prefill", "decode", "decode"]
    for r in (0, 1):
        rm = RunDir.open(run.path / "ranks" / str(r)).read_manifest()
        assert rm["status"] == "complete" and rm["tp"]["rank"] == r and rm["tp"]["backend"] == "gloo"
    assert "--tp 2" in err and "TTFT" in out


def test_each_rank_writes_its_own_run_and_trace(tp_run: RunDir) -> None:
    assert tp_run.status == "complete"
    man = tp_run.read_manifest()
    assert [r["status"] for r in man["tp"]["ranks"]] == ["complete", "complete"]
    for k in (0, 1):
        rd = RunDir(tp.rank_dir(tp_run.path, k))
        m = rd.read_manifest()
        assert m["tp"]["rank"] == k and m["tp"]["world_size"] == 2 and m["tp"]["backend"] == "gloo"
        assert m["model"]["tp_modules"] > 0 or m["tp"]["impl"] == "transformers"
        # the model really is sharded: every layer all-reduces after attention and after the MLP
        with gzip.open(rd.trace_path) as fh:
            events = json.load(fh)
        events = events["traceEvents"] if isinstance(events, dict) else events
        allreduce = [e for e in events if "allreduce" in str(e.get("name", "")).lower()]
        layers = m["model"]["config"]["num_hidden_layers"]
        steps = rd.read_table("steps").num_rows
        assert len(allreduce) >= 2 * layers * steps > 0


def test_merged_tables_carry_the_rank_and_align(tp_run: RunDir) -> None:
    steps = tp_run.read_df("steps")
    assert sorted(steps["rank"].unique()) == [0, 1]
    per_rank = steps.groupby("rank")["step_id"].apply(list)
    assert per_rank[0] == per_rank[1]  # the same forward passes on both ranks
    assert set(tp_run.read_df("requests")["rank"]) == {0, 1}
    aligned = ranks.align_steps(steps)
    assert len(aligned) == len(per_rank[0]) and (aligned["ranks"] == 2).all()
    # collectives keep the ranks in lock-step: the ends of a step are close (same host clock)
    assert aligned["skew_ns"].max() < 0.5 * aligned["dur_max_ns"].sum()


def test_a_failing_rank_fails_the_run_with_one_line_and_keeps_it(tmp_path: Path) -> None:
    # the tiny preset's 32 heads do not split over 3 processes: every rank refuses
    with pytest.raises(TracekitError) as err:
        tp.launch(tp.TPOptions(out=tmp_path / "bad", world_size=3, device="cpu", warmup=0, timeout_s=120))
    assert "rank" in err.value.message and "\n" not in err.value.message
    assert RunDir.open(tmp_path / "bad").status == "incomplete"


def test_options_are_checked_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        tp.launch(tp.TPOptions(out=tmp_path / "x", world_size=0))
    with pytest.raises(UsageError):
        tp.launch(tp.TPOptions(out=tmp_path / "y", impl="magic"))


@pytest.fixture(scope="module")
def gpu_tp_run(tmp_path_factory) -> RunDir:
    # GIVEN the default model sharded over 2 GPUs (NCCL), recorded once for the GPU tests below
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    out = tmp_path_factory.mktemp("tp_gpu") / "g"
    return tp.launch(tp.TPOptions(out=out, world_size=2, device="cuda", dtype="bf16", timeout_s=300))


@pytest.mark.gpu
def test_two_gpu_tensor_parallel_run_has_nccl_kernels(gpu_tp_run: RunDir) -> None:
    run = gpu_tp_run
    assert run.status == "complete"
    assert [r["status"] for r in run.read_manifest()["tp"]["ranks"]] == ["complete", "complete"]
    config = RunDir(tp.rank_dir(run.path, 0)).read_manifest()["model"]["config"]
    for k in (0, 1):
        # every rank wrote its own run: its steps, and a trace whose kernels include NCCL's collectives
        rd = RunDir(tp.rank_dir(run.path, k))
        m = rd.read_manifest()
        assert m["status"] == "complete" and m["tp"]["rank"] == k and m["tp"]["backend"] == "nccl"
        assert rd.read_table("steps").num_rows > 0
        with gzip.open(rd.trace_path) as fh:
            doc = json.load(fh)
        events = doc["traceEvents"] if isinstance(doc, dict) else doc
        nccl = [e for e in events if e.get("cat") == "kernel" and "nccl" in str(e.get("name", "")).lower()]
        # at least one all-reduce after attention and one after the MLP of every layer
        assert len(nccl) >= 2 * config["num_hidden_layers"], (k, len(nccl))


def test_analyse_multirank_on_a_recorded_tp_run(tp_run: RunDir) -> None:
    from tracekit.app.analyze import RANK_TABLES, analyse_multirank
    from tracekit.store.ranks import is_multirank

    assert is_multirank(tp_run.path) and not is_multirank(tp.rank_dir(tp_run.path, 0))
    # WHEN the TP run directory is analysed (each rank as a single run, then across ranks)
    res = analyse_multirank(tp_run)
    # THEN every rank got its own steps/phases, and the merged tables carry both ranks
    for k in (0, 1):
        rd = RunDir(tp.rank_dir(tp_run.path, k))
        assert rd.has_table("phases") and rd.read_table("steps").num_rows == len(res.per_rank[k]["steps"]) > 0
    steps = tp_run.read_df("steps")
    assert sorted(steps["rank"].unique()) == [0, 1]
    assert sorted(tp_run.read_df("phases")["rank"].unique()) == [0, 1]
    for name in RANK_TABLES:
        assert tp_run.has_table(name)
    aligned = tp_run.read_df("rank_steps")
    assert len(aligned) == steps["step_id"].nunique() and (aligned["ranks"] == 2).all()
    assert (aligned["missing_ranks"] == "").all()
    cp = tp_run.read_df("comm_phases")
    assert {(r, p) for r, p in zip(cp["rank"], cp["phase"], strict=True)} >= {(0, "prefill"), (1, "decode")}
    assert tp_run.read_manifest()["rank_analysis"]["ranks"] == [0, 1]


@pytest.mark.gpu
def test_two_gpu_tensor_parallel_run_records_nccl_kernels_on_every_rank(gpu_tp_run: RunDir) -> None:
    run = gpu_tp_run
    from tracekit.app.analyze import analyze

    analyze(run.path)
    gpu = run.read_df("gpu_activity")
    nccl = gpu[gpu["name"].astype(str).str.contains("nccl", case=False)]
    assert sorted(nccl["rank"].unique()) == [0, 1]
    assert (nccl["dur_ns"] > 0).all()
    # the per-rank and cross-rank tables: every step on both ranks, NCCL time in each rank's phases
    aligned = run.read_df("rank_steps")
    assert len(aligned) > 0 and (aligned["ranks"] == 2).all()
    cp = run.read_df("comm_phases")
    for k in (0, 1):
        mine = cp[cp["rank"] == k]
        assert len(mine) > 0 and (mine["nccl_kernels"] > 0).any() and (mine["comm_ns"] >= 0).all()
        assert RunDir(tp.rank_dir(run.path, k)).read_table("phases").num_rows > 0
