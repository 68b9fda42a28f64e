from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tracekit import schema
from tracekit.errors import UsageError
from tracekit.multirank import analyse_multirank, summary
from tracekit.rundir import RunDir

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
