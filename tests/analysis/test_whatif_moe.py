"""More sequences touch more experts: tracekit.analysis.whatif_moe on hand-built steps (values worked by
hand below) and on the committed H100 MoE sweep (benchmarks/whatif/data/h100-moe: a Qwen3-MoE-shaped
8-layer model, 128 experts, top-8, recorded at batch 1, 8 and 32)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from tracekit.analysis import whatif_moe as moe
from tracekit.analysis.whatif import Change, project
from tracekit.analysis.whatif_profile import KERNEL_COLUMNS, PhaseStep, Profile
from tracekit.model.ceilings import datasheet

ROOT = Path(__file__).resolve().parents[2]
H, INTER, E, K = 64, 32, 16, 2  # hidden, expert intermediate, experts, top-k
QWEN = {"num_experts": E, "num_experts_per_tok": K, "hidden_size": H, "moe_intermediate_size": INTER}


def test_experts_touched_by_more_sequences_worked_by_hand() -> None:
    # 43 of 128 touched by one sequence: u = 85/128, u^8 = 0.0378, so 8 sequences touch 128 x 0.962 = 123
    assert moe.touched(43, 128, 8) == 123
    assert math.isclose(128 * (1 - (85 / 128) ** 8), 123.16, abs_tol=0.01)
    assert moe.touched(43, 128, 1) == 43  # the same batch: as traced
    assert moe.touched(128, 128, 4) == 128  # all touched already
    assert moe.touched(1, 16, 64) == 16  # saturates at E


def test_experts_of_reads_qwen_and_mixtral_configs_and_not_dense_ones() -> None:
    q = moe.experts_of(QWEN)
    assert q == moe.Experts(E, K, (float(H * INTER), float(2 * H * INTER)))
    m = moe.experts_of({"num_local_experts": 8, "num_experts_per_tok": 2, "hidden_size": 4096,
                        "intermediate_size": 14336})
    assert m is not None and m.experts == 8 and m.weights[0] == 4096 * 14336
    assert moe.experts_of({"hidden_size": 4096, "intermediate_size": 11008}) is None
    assert moe.experts_of({**QWEN, "num_experts": 1}) is None


def _k(rows: list[dict[str, object]]) -> pd.DataFrame:
    base = {"dur_ns": 5000.0, "bound": "latency", "flops": float("nan"), "bytes": float("nan"), "dtype": "fp16",
            "op_name": None, "rows": float("nan"), "graph": False, "gap_ns": 0.0}
    return pd.DataFrame([{**base, **r} for r in rows], columns=list(KERNEL_COLUMNS))


def _gemm(off: float, rows: float, weight: float, op: str = "aten::mm") -> dict[str, object]:
    return {"off_ns": off, "kclass": "gemm", "op_name": op, "rows": rows, "flops": 2 * rows * weight,
            "bytes": weight * 2 + rows * 4}


def _layer(t0: float, tokens: int, expert_rows: list[int], gap: float) -> list[dict[str, object]]:
    """A Qwen-style layer: router GEMM, every touched expert's gate/up GEMM, the activation once,
    then every touched expert's down GEMM, ``gap`` ns of host time per call."""
    assert sum(expert_rows) == tokens * K
    out = [_gemm(t0, tokens, H * E, "aten::linear")]
    t = t0 + gap
    for r in expert_rows:
        out.append(_gemm(t, r, 2 * H * INTER))
        t += gap
    out.append({"off_ns": t, "kclass": "elementwise", "op_name": "aten::silu"})
    t += gap
    for r in expert_rows:
        out.append(_gemm(t, r, H * INTER))
        t += gap
    return out


def _step(tokens: int, layers: list[list[int]], gap: float = 10_000.0) -> PhaseStep:
    rows: list[dict[str, object]] = []
    t = 0.0
    for er in layers:
        rows += _layer(t, tokens, er, gap)
        t = float(rows[-1]["off_ns"]) + 50_000.0  # type: ignore[arg-type]
    rows.append({"off_ns": t, "kclass": "elementwise", "op_name": "aten::add"})
    k = _k(rows)
    return PhaseStep("prefill", 1, tokens, tokens, tokens, period_ns=t + 20_000.0, kernels=k,
                     syncs=((t + 5_000.0, t + 6_000.0),), cpu_ops=len(k), launches=len(k))


def test_loops_found_by_weight_shape_and_routed_rows() -> None:
    step = _step(8, [[4, 4, 8], [2, 2, 2, 2, 8]])  # 8 tokens x top-2 = 16 routed rows per layer
    ex = moe.experts_of(QWEN)
    assert ex is not None
    found = moe.loops(step.kernels, ex, step.tokens)
    assert [lp.touched for lp in found] == [3, 5]
    first = found[0]
    assert first.first == 1 and first.last == 7  # router at 0; gate/up 1-3, silu 4, down 5-7
    assert list(first.per_expert) == [1, 2, 3, 5, 6, 7]  # the activation runs once per layer
    # rows that are not tokens x top-k per expert: not an expert loop (e.g. a dense MLP of that shape)
    assert moe.loops(step.kernels, ex, 5) == []


def test_reroute_appends_experts_with_host_time_and_spreads_the_rows() -> None:
    step = _step(8, [[4, 4, 8], [2, 2, 2, 2, 8]], gap=10_000.0)
    ex = moe.experts_of(QWEN)
    assert ex is not None
    # 3 of 16: u = 13/16, x4: 16 (1 - 0.4358) = 9.03 -> 9; 5 of 16: u = 11/16, 16 (1 - 0.2234) = 12.4 -> 12
    grown, sizes = moe.reroute(step, ex, 4)
    assert sizes == [(3, 9), (5, 12)]
    k = grown.kernels
    assert len(k) == len(step.kernels) + 2 * (6 + 7)  # two GEMMs per added expert
    assert k["off_ns"].is_monotonic_increasing
    # host time per added expert: the slope of span over touched is undefined with two loops, so a
    # loop's span per expert (median): layer 1 spans 60 us over 3, layer 2 100 us over 5 -> 20 us
    per = moe.block_host_ns(moe.loops(step.kernels, ex, 8), step.kernels["off_ns"].to_numpy(dtype=float))
    assert per == pytest.approx(20_000.0)
    assert grown.period_ns == pytest.approx(step.period_ns + 13 * per)
    assert grown.syncs[0][0] == pytest.approx(step.syncs[0][0] + 13 * per)
    gemm = k["kclass"].eq("gemm") & k["op_name"].eq("aten::mm")
    assert sorted(set(k.loc[gemm, "route"].round(4))) == [round(3 / 9, 4), round(5 / 12, 4)]
    assert set(k.loc[~gemm, "route"]) == {1.0}  # router, activation, the rest: per layer, as traced
    assert moe.reroute(step, ex, 1)[1] == [(3, 3), (5, 5)]


def _moe_points() -> dict[str, Profile]:
    with gzip.open(ROOT / "benchmarks" / "whatif" / "data" / "h100-moe.json.gz") as f:
        d = json.loads(f.read())
    return {p["id"]: Profile.from_dict(p["profile"]) for p in d["points"]}


def test_batch_1_prefill_projected_to_batch_8_touches_the_experts_the_batch_8_trace_did() -> None:
    pts = _moe_points()
    b1, b8 = pts["batch-128x32-in128-out32-b1-eager"], pts["batch-128x32-in128-out32-b8-eager"]
    ex = moe.experts_of(b1.model)
    assert ex is not None and ex.experts == 128 and ex.top_k == 8
    step = b1.phases["prefill"]
    traced = [lp.touched for lp in moe.loops(b8.phases["prefill"].kernels, ex, b8.phases["prefill"].tokens)]
    _, sizes = moe.reroute(step, ex, 8)
    projected = [b for _, b in sizes]
    assert [a for a, _ in sizes] == [106, 43, 38, 39, 32, 35, 28, 23]
    assert traced == [128, 126, 127, 119, 116, 116, 114, 112]
    assert abs(sum(projected) - sum(traced)) / sum(traced) < 0.05  # 937 vs 958
    # decode runs the experts without a loop here: nothing to grow
    assert moe.reroute(b1.phases["decode"], ex, 8)[1] == []


def test_batch_8_prefill_kernel_time_projected_within_fifteen_percent() -> None:
    pts = _moe_points()
    b1, b8 = pts["batch-128x32-in128-out32-b1-eager"], pts["batch-128x32-in128-out32-b8-eager"]
    p = project(b1, Change(batch=8, no_profiler=True), datasheet)
    got = p.phases["prefill"].projected.gpu_ns
    measured = b8.phases["prefill"].gpu_busy_ns
    assert abs(sum(got.values()) - measured) / measured < 0.15  # 15.7 ms vs 17.0 (the loop kept: 9.7)
    assert any("expert loops" in a for a in p.assumptions)
