"""Grouped GEMM tile padding (tracekit.analysis.tilepad): the row granule read from CUTLASS kernel names, the
expected padded rows under uniform routing, and the rule checked against an H100's tensor-instruction counts."""

from __future__ import annotations

import gzip
import json
import math

import pytest
from helpers import FIXTURES

from tracekit.analysis import tilepad
from tracekit.analysis.opmodels import op_cost

MEASURED = json.loads((FIXTURES / "ncu" / "grouped_mm_h100.json").read_text())


def _trace_kernel(cell: str) -> str:
    with gzip.open(FIXTURES / "ncu" / f"eager_{cell}.json.gz") as f:
        d = json.load(f)
    return next(e["name"] for e in d["traceEvents"] if e.get("cat") == "kernel" and "GroupProblemShape" in e["name"])


def test_the_granule_is_tile_m_times_cluster_m_in_mangled_and_demangled_names() -> None:
    # Mixtral's kernel: tile (128, 256, 64), cluster (2, 1, 1); Qwen3-MoE's: tile (64, 128, 128), cluster (2, 1, 1)
    assert tilepad.granule(_trace_kernel("mixtral-8x7b_b8")) == 256
    assert tilepad.granule(_trace_kernel("qwen3-30b-a3b_b1")) == 128
    demangled = {c["case"].split(".")[0]: tilepad.granule(c["kernel"]) for c in MEASURED["cases"]}
    assert demangled == {"mixtral": 256, "qwen3moe": 128}
    assert tilepad.granule("nvjet_sm90_tst_128x64_64x8_1x2_h_bz_TNT") is None
    assert tilepad.granule("void cutlass::device_kernel<GroupProblemShape<...> >") is None  # no shapes in it


def test_expected_padded_rows_by_hand() -> None:
    # 2 rows over 2 groups: a group gets 0, 1 or 2 rows with p = 1/4, 1/2, 1/4; granule 4 -> 0, 1, 1 tiles:
    # 2 groups x 4 rows x 3/4 = 6
    assert tilepad.expected_padded_rows(2, 2, 4) == pytest.approx(6.0)
    assert tilepad.expected_padded_rows(300, 1, 128) == 384.0  # one group: its rows rounded up
    assert tilepad.expected_padded_rows(0, 8, 256) == 0.0
    # 1,024 rows over 128 groups (8 each on average): every group is almost surely touched, one tile each
    assert tilepad.expected_padded_rows(1024, 128, 128) == pytest.approx(128 * 128, rel=1e-3)
    assert tilepad.padding_factor(2048, 8, None) == 1.0


def test_issued_tensor_instructions_follow_each_group_rounded_up_to_the_granule() -> None:
    """On an H100 (Nsight Compute, smsp__inst_executed_pipe_tensor_op_gmma): the same kernel issues the same
    instructions per padded row whatever the routing: 2,048 rows as 8 x 256, as the routed 233-291 per
    expert (26 tiles of 128 rows, not the 21 the valid rows need) and all on one expert; Qwen3-MoE's 8 rows
    per expert issue a whole 128-row granule each."""
    per_row: dict[tuple[str, int, int], set[float]] = {}
    for c in MEASURED["cases"]:
        g = tilepad.granule(c["kernel"])
        assert g is not None
        padded = sum(math.ceil(m / g) * g for m in c["counts"])
        per_row.setdefault((c["kernel"], c["k"], c["n"]), set()).add(c["gmma_inst"] / padded)
    assert len(per_row) == 4 and all(len(v) == 1 for v in per_row.values()), per_row


def test_the_padding_explains_the_routed_slowdown() -> None:
    """Mixtral's gate/up GEMM: the routed rows ran at 0.62x the uniform rows' useful rate; per padded row
    the two run within 1% of each other."""
    cases = {c["case"]: c for c in MEASURED["cases"]}
    uni, routed = cases["mixtral.gate_up.uniform"], cases["mixtral.gate_up.routed"]
    g = tilepad.granule(routed["kernel"])
    assert g == 256
    rate = {k: sum(math.ceil(m / g) * g for m in c["counts"]) / c["event_median_s"] for k, c in (("u", uni), ("r", routed))}
    assert sum(uni["counts"]) / uni["event_median_s"] > 1.5 * sum(routed["counts"]) / routed["event_median_s"]
    assert rate["r"] == pytest.approx(rate["u"], rel=0.01)


def test_the_grouped_mm_model_carries_its_rows_and_groups() -> None:
    c = op_cost("aten::_grouped_mm", "[[2048, 4096], [8, 4096, 28672], [8], [], []]",
                '["c10::BFloat16", "c10::BFloat16", "int", "", ""]')
    assert c is not None and c.groups == (2048, 8) and c.flops == 2.0 * 2048 * 4096 * 28672
