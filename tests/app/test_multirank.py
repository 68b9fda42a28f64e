from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tracekit.app.analyze import analyse_multirank
from tracekit.errors import UsageError
from tracekit.model import schema
from tracekit.report.terminal import multirank_lines as summary
from tracekit.store.rundir import RunDir

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def _fake_rank(d: Path, rank: int) -> dict[str, Any]:
    """Stands in for the single-run analysis: writes steps and kernels of a known shape.

    Two steps (prefill 0-1000 ns, decode 2000-2500 ns, shifted by 100 ns on rank 1). In the
    prefill a GEMM covers 0-600 and an all-reduce 500-800: 300 ns of NCCL, 200 exposed.
    In the decode one all-reduce 2100-2200 with nothing beside it: 100 ns, all exposed.
    """
    rd = RunDir(d)
    sh = 100 * rank
    rd.write_table("steps", schema.from_columns("steps", {
        "step_id": [0, 1], "request_id": [0, 0], "kind": ["prefill", "decode"],
        "cpu_start_ns": [sh, 2000 + sh], "cpu_end_ns": [1000 + sh, 2500 + sh],
        "gpu_start_ns": [sh, 2000 + sh], "gpu_end_ns": [1000 + sh, 2500 + sh],
    }))  # fmt: skip
    rd.write_table("gpu_activity", schema.from_columns("gpu_activity", {
        "ts_ns": [sh, 500 + sh, 2100 + sh], "dur_ns": [600, 300, 100], "kind": ["kernel"] * 3,
        "name": ["sm90_gemm", NCCL, NCCL], "device": [rank] * 3, "stream": [7] * 3,
    }))  # fmt: skip
    return {"steps": rd.read_df("steps")}


@pytest.fixture
def tp_dir(tmp_path: Path) -> RunDir:
    run = RunDir.create(tmp_path / "tp", tp={"world_size": 2})
    for k in (0, 1):
        RunDir.create(tmp_path / "tp" / "ranks" / str(k))
    return run


def test_comm_per_phase_and_skew_are_written(tp_dir: RunDir) -> None:
    res = analyse_multirank(tp_dir, lambda d: _fake_rank(d, int(d.name)))
    cp = tp_dir.read_df("comm_phases").set_index(["rank", "phase"])
    for k in (0, 1):
        assert cp.loc[(k, "prefill"), "comm_ns"] == 300 and cp.loc[(k, "prefill"), "exposed_comm_ns"] == 200
        assert cp.loc[(k, "decode"), "comm_ns"] == 100 and cp.loc[(k, "decode"), "exposed_comm_ns"] == 100
    skew = tp_dir.read_df("rank_skew").set_index("phase")
    assert skew.loc["prefill", "skew_max_ns"] == 100
    assert json.loads(skew.loc["decode", "straggler_counts"]) == {"1": 1}  # rank 1 ends last
    coll = tp_dir.read_df("comm_collectives")
    assert set(coll["collective"]) == {"AllReduce"} and coll["kernels"].sum() == 4
    assert tp_dir.read_df("gpu_activity").groupby("rank").size().to_dict() == {0: 3, 1: 3}
    assert any("exposed 0.00 ms" in line for line in summary(res))


def test_a_rank_that_cannot_be_analysed_is_a_warning(tp_dir: RunDir) -> None:
    def one(d: Path) -> dict[str, Any]:
        if d.name == "1":
            raise UsageError("no trace")
        return _fake_rank(d, 0)

    res = analyse_multirank(tp_dir, one)
    assert res.ranks == [0]
    assert tp_dir.read_df("rank_steps")["ranks"].eq(1).all()
    assert any("rank 1: no trace" in w for w in tp_dir.read_manifest()["warnings"])


def test_not_multirank_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        analyse_multirank(RunDir.create(tmp_path / "plain"))


def test_recorded_h200_tp_traces_split_nccl_into_transfer_and_wait(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    # GIVEN the trimmed per-rank traces of a 2-rank TP run on two H200s (TinyLlama shape,
    # Transformers tp_plan="auto", NCCL; steps 0..2 = prefill + 2 decode steps of request 0)
    import shutil

    src = fixtures_dir / "tp_h200"
    shutil.copytree(src, tmp_path / "tp")
    run = RunDir.open(tmp_path / "tp")
    # WHEN the run directory is analysed
    analyse_multirank(run)
    # THEN the steps align across both ranks
    aligned = run.read_df("rank_steps")
    assert list(aligned["step_id"]) == [0, 1, 2] and (aligned["ranks"] == 2).all()
    assert list(aligned["kind"]) == ["prefill", "decode", "decode"]
    # the all-reduces hold the ranks in lock-step: steps end within a few us of each other
    assert aligned["skew_ns"].max() < 10_000 < aligned["dur_min_ns"].min()
    # NCCL kernels are found in every step on both ranks, the same number on each
    # (22 layers x 2 all-reduces + the lm_head all-gather)
    cs = run.read_df("comm_steps").set_index(["rank", "step_id"])
    for k in (0, 1):
        assert list(cs.loc[k, "nccl_kernels"]) == [45, 45, 45]
    # every instance matched, and the ends of one instance coincide across ranks (the model holds)
    inst = run.read_df("comm_instances")
    assert len(inst) == 2 * 3 * 45 and inst["matched"].all()
    assert inst["end_spread_ns"].max() < 20_000
    # and per rank and phase, transfer + wait = the NCCL kernel time = the NCCL time of the phase
    cp = run.read_df("comm_phases").set_index(["rank", "phase"])
    for key in [(0, "prefill"), (1, "prefill"), (0, "decode"), (1, "decode")]:
        r = cp.loc[key]
        assert r["transfer_ns"] + r["wait_ns"] == r["nccl_kernel_ns"] > 0 and r["unmatched_ns"] == 0
        assert abs(r["nccl_kernel_ns"] - r["comm_ns"]) <= 0.01 * r["comm_ns"]
        # transfer is the same collective work on both ranks
        assert r["transfer_ns"] == cp.loc[(1 - key[0], key[1]), "transfer_ns"]
    # rank 1 started the prefill late: rank 0's NCCL kernels spent nearly all their time waiting
    assert cp.loc[(0, "prefill"), "wait_ns"] > 0.9 * cp.loc[(0, "prefill"), "nccl_kernel_ns"]
    assert cp.loc[(1, "prefill"), "last_arrivals"] == 45
