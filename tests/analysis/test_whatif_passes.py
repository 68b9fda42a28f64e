"""What-if projections on synthetic steps: the replay, the re-costing, fusion, the projection, the profile.

Every expected value is worked by hand in the comment beside it.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from tracekit.analysis import whatif_cost as wc
from tracekit.analysis import whatif_sim as sim
from tracekit.analysis.whatif import Change, WhatifError, project
from tracekit.analysis.whatif_calib import calibrate, fit_profiler_scaled
from tracekit.analysis.whatif_constants import DEFAULT
from tracekit.analysis.whatif_profile import KERNEL_COLUMNS, PhaseStep, Profile, profile, without_stall
from tracekit.model.ceilings import datasheet

US = 1000.0


def test_replay_host_bound_step_lasts_the_host_period() -> None:
    # three 1 us kernels issued at 0, 10, 20 us, launch latency 2 us, period 30 us: the GPU is done at
    # 23 us, the host at 30 us
    assert sim.replay([0, 10 * US, 20 * US], [US] * 3, [0] * 3, [], 30 * US, 1.0, 2 * US) == 30 * US


def test_replay_gpu_bound_step_queues_kernels() -> None:
    # 20 us kernels: k0 2-22, k1 max(12, 22)-42, k2 max(22, 42)-62: the step lasts 62 us
    assert sim.replay([0, 10 * US, 20 * US], [20 * US] * 3, [0] * 3, [], 30 * US, 1.0, 2 * US) == 62 * US


def test_replay_host_waits_at_a_sync_then_finishes_its_work() -> None:
    # sync called at 25 us, returning at 26 us (1 us of its own): the host waits for the GPU (62 us),
    # adds the call's 1 us (max(25 + 1, 62) = 62), then the 4 us of host work after it: 66 us
    got = sim.replay([0, 10 * US, 20 * US], [20 * US] * 3, [0] * 3, [(25 * US, 26 * US)], 30 * US, 1.0, 2 * US)
    assert got == 66 * US


def test_replay_host_scale_and_graph_gaps() -> None:
    # host at half pace: issues at 0, 5, 10 us, period 15 us; graph kernels 1 us with 0.5 us gaps:
    # k0 2-3, k1 max(7, 3.5)-8, k2 max(12, 8.5)-13: the host's 15 us wins
    assert sim.replay([0, 10 * US, 20 * US], [US] * 3, [0, 500, 500], [], 30 * US, 0.5, 2 * US) == 15 * US
    # all issued at once (one graph launch): 2-3, 3.5-4.5, 5-6 us
    assert sim.replay([0, 0, 0], [US] * 3, [0, 500, 500], [], 0, 1.0, 2 * US) == 6 * US


def test_solve_host_scale_finds_the_pace_of_a_timer() -> None:
    # host-bound 30 us step; a timer of 12 us means the host runs at 0.4 of the traced pace
    s, exact = sim.solve_host_scale(12 * US, [0, 10 * US, 20 * US], [US] * 3, [0] * 3, [], 30 * US, 2 * US)
    assert exact and s == pytest.approx(0.4, abs=1e-3)
    # the GPU alone takes 62 us: no pace gives 40 us
    s, exact = sim.solve_host_scale(40 * US, [0, 10 * US, 20 * US], [20 * US] * 3, [0] * 3, [], 30 * US, 2 * US)
    assert not exact


def _kernels(rows: list[dict[str, object]]) -> pd.DataFrame:
    base = {"off_ns": 0.0, "dur_ns": 1000.0, "kclass": "elementwise", "bound": "latency", "flops": np.nan,
            "bytes": np.nan, "dtype": "fp16", "op_name": None, "rows": np.nan, "graph": False, "gap_ns": 0.0}
    return pd.DataFrame([{**base, **r} for r in rows], columns=list(KERNEL_COLUMNS))


def test_rescale_a_linear_keeps_its_weight_and_scales_its_rows() -> None:
    # decode, batch 1 -> 8, N = K = 1000, M = 1: F = 2 x 1 x 1000 x 1000 = 2e6;
    # B = 2 B x (N K + M K + M N) = 2 x 1,002,000 = 2.004e6; weight W = F / (2 M) x 2 B = 2e6
    # batch 8: F = 16e6; B = W + (B - W) x 8 = 2e6 + 4000 x 8 = 2.032e6
    k = _kernels([{"kclass": "gemm", "op_name": "aten::mm", "flops": 2e6, "bytes": 2.004e6, "rows": 1.0}])
    out = wc.rescale(k, wc.Shape(1, 1, 100, 1), wc.Shape(8, 1, 100, 8), "decode")
    assert out["flops"].iloc[0] == pytest.approx(16e6)
    assert out["bytes"].iloc[0] == pytest.approx(2.032e6)


def test_rescale_attention_with_the_kv_length_and_others_with_tokens() -> None:
    # decode attention at batch 1, KV 100 -> batch 2, KV 300: F x (2 x 300) / (1 x 100) = 6;
    # B x 2 (1 + 300) / (1 + 100) = 5.96...; an elementwise kernel scales with tokens (x2)
    k = _kernels([{"kclass": "attention", "op_name": "aten::_scaled_dot_product_flash_attention",
                   "flops": 1e6, "bytes": 1e6},
                  {"kclass": "elementwise", "op_name": "aten::add", "flops": 10.0, "bytes": 100.0}])
    out = wc.rescale(k, wc.Shape(1, 1, 100, 1), wc.Shape(2, 1, 300, 2), "decode")
    assert out["flops"].tolist() == pytest.approx([6e6, 20.0])
    assert out["bytes"].tolist() == pytest.approx([1e6 * 2 * 301 / 101, 200.0])


def test_retime_scales_memory_bound_kernels_by_the_bandwidth_ratio() -> None:
    # 480 MB read by a memory-bound kernel: 100 us on an H200 (4.8 TB/s); on an H100 SXM (3.35 TB/s)
    # 100 x 4.8 / 3.35 = 143.28 us. A latency-bound one of 3 us reading 1 MB: its work part grows from
    # 1e6 / 4.8e12 = 208.3 ns to 1e6 / 3.35e12 = 298.5 ns: 3 us + 90.2 ns / 0.75 = 3.1203 us
    h200, h100 = datasheet("NVIDIA H200"), datasheet("H100 SXM")
    assert h200 is not None and h100 is not None
    k = _kernels([{"bound": "memory", "bytes": 480e6, "flops": 1e6, "dur_ns": 100 * US},
                  {"bound": "latency", "bytes": 1e6, "flops": 1e3, "dur_ns": 3 * US}])
    got = wc.retime(k, k, h200, h100)
    assert got.tolist() == pytest.approx([100 * US * 4.8 / 3.35, 3 * US + (1e6 / 3.35e3 - 1e6 / 4.8e3) / 0.75])


def test_retime_latency_kernel_keeps_its_floor_and_follows_its_work() -> None:
    # 3 us latency-bound kernel reading 1 MB (208.3 ns of roof) whose work grows to 48 MB (10 us):
    # 3 us + (10 us - 208.3 ns) / 0.75 = 16.056 us; shrunk to nothing: 3 us - 277.8 ns = 2.722 us;
    # a 5 us one shrunk by 4.8 MB (1 us of roof): 5 - 1.333 = 3.667 us, never under the 2 us floor
    h200 = datasheet("NVIDIA H200")
    assert h200 is not None
    old = _kernels([{"bound": "latency", "bytes": 1e6, "flops": 1e3, "dur_ns": 3 * US},
                    {"bound": "latency", "bytes": 1e6, "flops": 1e3, "dur_ns": 3 * US},
                    {"bound": "latency", "bytes": 4.8e6, "flops": 1e3, "dur_ns": 5 * US},
                    {"bound": "latency", "bytes": 48e6, "flops": 1e3, "dur_ns": 3 * US}])
    new = old.assign(bytes=[48e6, 0.0, 0.0, 0.0])
    got = wc.retime(old, new, h200, h200).tolist()
    assert got[:3] == pytest.approx([3 * US + (10 * US - 1e6 / 4.8e3) / 0.75, 3 * US - 1e6 / 4.8e3 / 0.75,
                                     5 * US - 1 * US / 0.75])
    assert got[3] == 2 * US  # 3 us - 10 us / 0.75 is under the floor



def test_a_slow_gemm_family_grows_at_its_measured_marginal_rate() -> None:
    # torchao's int4 weight-only GEMM (aten::_weight_int4pack_mm) on an H100, weight 2048 x 2048
    # (w = 4,194,304 elements): 3.55 us at M = 1 (decode), 40.2 us at M = 128 (prefill): 2 w x 127 FLOPs
    # in 36.65 us = 29.07 TFLOP/s, under 0.75 of the bf16 peak. At M = 1,024 (batch 8) its time is
    # 40.2 us + 2 w x 896 / 29.07e3 FLOP/ns = 298.8 us (measured: 298 us); the peak rule would give
    # 40.2 us + (2 w x 896 / 989.4e3 FLOP/ns) / 0.75 = 50.3 us.
    h100 = datasheet("H100 SXM")
    assert h100 is not None
    w = 2048 * 2048
    gemm = {"kclass": "gemm", "op_name": "aten::_weight_int4pack_mm", "dtype": "bf16", "bytes": w / 2}
    decode = _kernels([{**gemm, "rows": 1.0, "flops": 2.0 * w, "dur_ns": 3.55 * US}] * 3)
    prefill = _kernels([{**gemm, "rows": 128.0, "flops": 2.0 * w * 128 * 1.0004, "dur_ns": 40.2 * US}] * 3)
    rates = wc.marginal_rates([prefill, decode])  # the traced FLOPs rounded: one family within 2%
    r = rates.of(prefill)
    assert r == pytest.approx([2 * w * 127 / (36.65 * US)] * 3, rel=1e-3)
    new = prefill.assign(flops=2.0 * w * 1024, rows=1024.0)
    got = wc.retime(prefill, new, h100, h100, rates)
    assert got[0] == pytest.approx(40.2 * US + 2 * w * (1024 - 128 * 1.0004) / r[0], rel=1e-9)
    assert got[0] == pytest.approx(298.8 * US, rel=2e-3)
    # without the family's rate (or for a GEMM fast at its rows) the peak rule stands
    assert wc.retime(prefill, new, h100, h100)[0] < 60 * US
    fast = _kernels([{**gemm, "op_name": "aten::mm", "rows": 1.0, "flops": 2.0 * w, "dur_ns": 8 * US},
                     {**gemm, "op_name": "aten::mm", "rows": 128.0, "flops": 2.0 * w * 128, "dur_ns": 9 * US}])
    rates = wc.marginal_rates([fast])
    assert wc.retime(fast, fast.assign(flops=2.0 * w * 1024), h100, h100, rates)[1] == pytest.approx(
        wc.retime(fast, fast.assign(flops=2.0 * w * 1024), h100, h100)[1])

def test_fuse_keeps_gemms_and_merges_elementwise_runs() -> None:
    # gemm | ew 2, ew 5, red 3 | gemm | copy 1  ->  gemm, one kernel of 5, gemm, one of 1
    k = _kernels([{"kclass": "gemm", "dur_ns": 10.0}, {"dur_ns": 2.0}, {"dur_ns": 5.0},
                  {"kclass": "reduction", "dur_ns": 3.0}, {"kclass": "gemm", "dur_ns": 10.0},
                  {"kclass": "copy", "dur_ns": 1.0}])
    assert wc.fuse(k)["dur_ns"].tolist() == [10.0, 5.0, 10.0, 1.0]


def _profile(unprofiled: dict[str, float] | None = None, decode_graphs: int = 0) -> Profile:
    # prefill: 4 latency-bound kernels of 10 us every 1 ms over a 4 ms period (host-bound);
    # decode: the same with 1 us kernels and a 2 ms period
    pre = _kernels([{"off_ns": i * 1e6, "dur_ns": 10 * US, "kclass": "gemm", "op_name": "aten::mm",
                     "flops": 2e9, "bytes": 5e6, "rows": 128.0} for i in range(4)])
    dec = _kernels([{"off_ns": i * 0.5e6, "dur_ns": US, "flops": 1e3, "bytes": 1e4} for i in range(4)])
    return Profile(
        run="synthetic", gpu="NVIDIA H200", dtype="fp16", mode="eager", quant="none", batch=1, input_tokens=128,
        output_tokens=32,
        phases={"prefill": PhaseStep("prefill", 1, 128, 128, 128, 4e6, pre, (), cpu_ops=400, launches=4),
                "decode": PhaseStep("decode", 1, 1, 130, 1, 2e6, dec, (), cpu_ops=200, launches=4,
                                    graph_launches=decode_graphs, steps=4)},
        profiled={"ttft_ns": 4.5e6, "tpot_ns": 2e6}, unprofiled=unprofiled or {}, launch_ns=2000.0)


def test_one_op_mix_fits_only_the_hosts_scale_of_the_base_pair() -> None:
    # both rows have 10 ops per launch (one model's mix): ops and launches cannot be told apart, so the
    # base pair (1 us per op, 6 us per launch) is scaled: 1,000 ops + 100 launches cost 1.6 ms at the
    # base and 3.2 ms measured (and 6.4 ms for twice the work): k = 2
    rows = [(1000, 100, 3.2e6), (2000, 200, 6.4e6)]
    assert fit_profiler_scaled(rows, 1000.0, 6000.0) == pytest.approx((2000.0, 12000.0))
    # mixes 10 and 50 ops per launch: the two terms are fitted (2 us per op, 10 us per launch)
    rows = [(1000, 100, 3e6), (5000, 100, 11e6)]
    assert fit_profiler_scaled(rows, 1000.0, 6000.0) == pytest.approx((2000.0, 10000.0))


def test_calibrate_leaves_out_a_gpu_bound_step() -> None:
    # the decode step's kernels are busy 1.9 of its 2 ms: the profiler's host cost hides under them,
    # so only the host-bound prefill (2 ms over 400 ops and 4 launches) is fitted
    p = _profile({"ttft_ns": 2.5e6, "tpot_ns": 1.9e6})
    dec = p.phases["decode"]
    busy = dec.kernels.assign(dur_ns=[475 * US] * 4)
    p = replace(p, phases={**p.phases, "decode": replace(dec, kernels=busy)})
    c = calibrate([p], replace(DEFAULT, profiler_ns_per_op=1000.0, profiler_ns_per_launch=0.0))
    assert c.profiler_ns_per_op == pytest.approx(5000.0)
    # kernels busy 0.5 ms: a quarter of the profiled 2 ms period, but 42% of the 1.2 ms unprofiled TPOT:
    # without the profiler the GPU sets the pace, so the decode step is left out as well (kept, its
    # 0.8 ms over 200 ops would pull the fit to 4.8 us per op)
    p = _profile({"ttft_ns": 2.5e6, "tpot_ns": 1.2e6})
    half = dec.kernels.assign(dur_ns=[125 * US] * 4)
    p = replace(p, phases={**p.phases, "decode": replace(dec, kernels=half)})
    c = calibrate([p], replace(DEFAULT, profiler_ns_per_op=1000.0, profiler_ns_per_launch=0.0))
    assert c.profiler_ns_per_op == pytest.approx(5000.0)


def test_a_one_off_host_stall_is_cut_out_of_the_step() -> None:
    # prefill: launches at 0, 1, 2, 3 ms of a 4 ms period, then a 100 ms host stall before a fifth
    # at 103 ms (period 104 ms): the gaps are 0,1,1,1,100,1 ms (median 1 ms), so 99 ms go
    p = _profile()
    pre = p.phases["prefill"]
    k = pd.concat([pre.kernels, pre.kernels.iloc[[0]].assign(off_ns=103e6)], ignore_index=True)
    step, stall = without_stall(replace(pre, kernels=k, period_ns=104e6))
    assert stall == pytest.approx(99e6)
    assert step.period_ns == pytest.approx(5e6) and step.kernels["off_ns"].tolist()[-1] == pytest.approx(4e6)
    # the same gap spent waiting at a sync is the GPU's time, not a stall
    waited = replace(pre, kernels=k, period_ns=104e6, syncs=((3.5e6, 102e6),))
    assert without_stall(waited) == (waited, 0.0)
    assert without_stall(pre)[1] == 0.0  # evenly spaced launches: nothing cut


def test_project_without_the_profiler_uses_the_runs_own_timers() -> None:
    # the run's unprofiled TTFT 2.5 ms / TPOT 1 ms are the projection without the profiler
    p = project(_profile({"ttft_ns": 2.5e6, "tpot_ns": 1e6}), Change(no_profiler=True), datasheet)
    assert p.phases["prefill"].projected.latency_ns == pytest.approx(2.5e6, rel=1e-3)
    assert p.phases["decode"].projected.latency_ns == pytest.approx(1e6, rel=1e-3)
    assert p.phases["decode"].saved_ns == pytest.approx(1e6, rel=1e-3)


def test_project_without_timers_uses_the_per_op_and_per_launch_profiler_cost() -> None:
    # decode: 200 ops x 4 us + 4 launches x 50 us = 1 ms of a 2 ms host period: pace 0.5, TPOT 2 ms -> 1 ms
    k = replace(DEFAULT, profiler_ns_per_op=4000.0, profiler_ns_per_launch=50_000.0)
    p = project(_profile(), Change(no_profiler=True), datasheet, k)
    assert p.phases["decode"].projected.latency_ns == pytest.approx(1e6, rel=1e-3)


def test_project_graphs_is_graph_host_time_plus_fused_kernels() -> None:
    # decode under graphs: four 1 us elementwise kernels fuse into one of 1 us, plus one graph gap and
    # the graph host time; prefill pays the static cache's extra
    p = project(_profile({"ttft_ns": 2.5e6, "tpot_ns": 1e6}), Change(graphs=True, no_profiler=True), datasheet)
    assert p.phases["decode"].projected.latency_ns == pytest.approx(DEFAULT.graph_host_ns + US + DEFAULT.graph_gap_ns)
    assert p.phases["prefill"].projected.latency_ns == pytest.approx(2.5e6 + DEFAULT.static_prefill_ns, rel=1e-3)
    assert any("CUDA graphs" in a for a in p.assumptions)


TINYLLAMA = {"num_attention_heads": 32, "num_key_value_heads": 4, "hidden_size": 2048, "num_hidden_layers": 22}


def test_static_cache_bytes_count_every_slot_at_the_query_heads() -> None:
    # TinyLlama at batch 32 over 1,040 slots: 32 x 1040 x 32 heads x 64 x 22 layers x 2 (K, V) x 2 B
    assert wc.static_cache_bytes(TINYLLAMA, 32, 1040) == 5_997_854_720
    assert wc.static_cache_bytes({**TINYLLAMA, "head_dim": 128}, 1, 10) == 10 * 32 * 128 * 22 * 4
    assert wc.static_cache_bytes({"hidden_size": 2048}, 1, 10) is None


def test_project_graphs_adds_the_static_caches_reads() -> None:
    # batch 1 over a 1,040-slot cache: 1040 x 32 x 64 x 22 x 4 B = 187.4 MB at 0.5 ps per byte = 93.7 us
    # more GPU time on the fused step's non-GEMM kernels; without --cache-len: prompt + answer, 160 slots
    k = replace(DEFAULT, static_decode_ns_per_byte=0.0005)
    p = replace(_profile({"ttft_ns": 2.5e6, "tpot_ns": 1e6}), model=TINYLLAMA)
    got = project(p, Change(graphs=True, no_profiler=True, cache_len=1040), datasheet, k)
    extra = 0.0005 * 1040 * 32 * 64 * 22 * 4
    assert got.phases["decode"].projected.latency_ns == pytest.approx(
        k.graph_host_ns + US + extra + k.graph_gap_ns)
    dflt = project(p, Change(graphs=True, no_profiler=True), datasheet, k)
    assert dflt.phases["decode"].projected.latency_ns == pytest.approx(
        k.graph_host_ns + US + extra * 160 / 1040 + k.graph_gap_ns)


def test_a_compiled_source_moves_the_static_term_with_the_batch() -> None:
    # a compiled run (cache 1,040 slots) whose decode replays a graph of unmodelled kernels: batch 1 -> 4
    # adds 0.5 ps x (4 - 1) x 187.4 MB = 281 us over its non-GEMM kernels; attention is not also scaled
    k = replace(DEFAULT, static_decode_ns_per_byte=0.0005)
    p = _profile({"ttft_ns": 2.5e6, "tpot_ns": 1e6}, decode_graphs=1)
    dec = p.phases["decode"]
    ker = dec.kernels.assign(kclass=["attention", "elementwise", "gemm", "elementwise"], flops=np.nan,
                             bytes=np.nan, graph=True, dur_ns=[10 * US] * 4)
    p = replace(p, mode="compiled", model=TINYLLAMA, cache_len=1040,
                phases={**p.phases, "decode": replace(dec, kernels=ker)})
    base = project(p, Change(no_profiler=True), datasheet, k).phases["decode"].projected.gpu_ns
    got = project(p, Change(batch=4, no_profiler=True), datasheet, k).phases["decode"].projected.gpu_ns
    assert sum(got.values()) - sum(base.values()) == pytest.approx(0.0005 * 3 * 1040 * 32 * 64 * 22 * 4)


def test_calibrate_measures_the_static_decode_cost_per_byte() -> None:
    # compiled decode at batch 1 and 4 over 1,040 slots: non-GEMM 0.7 ms and 1.0 ms; the bytes differ by
    # 3 x 187.4 MB: 0.3 ms / 562.2 MB = 0.5336 ps per byte
    def run(b: int, non_gemm_us: float) -> Profile:
        p = _profile(decode_graphs=1)
        dec = p.phases["decode"]
        ker = dec.kernels.assign(kclass=["elementwise", "gemm", "gemm", "gemm"],
                                 dur_ns=[non_gemm_us * US, 5 * US, 5 * US, 5 * US])
        return replace(p, mode="compiled", batch=b, model=TINYLLAMA, cache_len=1040,
                       phases={**p.phases, "decode": replace(dec, kernels=ker)})

    c = calibrate([run(1, 700.0), run(4, 1000.0)])
    assert c.static_decode_ns_per_byte == pytest.approx(0.3e6 / (3 * 1040 * 32 * 64 * 22 * 4))


def test_project_to_another_gpu_keeps_a_host_bound_step() -> None:
    # every kernel is short next to the host's 1 ms gaps: the H100 changes nothing measurable
    p = project(_profile(), Change(gpu="H100 SXM"), datasheet)
    assert p.phases["decode"].projected.latency_ns == pytest.approx(2e6, rel=1e-3)
    assert "H100" in p.ceilings["to"]


def test_project_refuses_what_the_run_lacks() -> None:
    with pytest.raises(WhatifError, match="no ceiling for GPU"):
        project(_profile(), Change(gpu="no such GPU"), datasheet)
    with pytest.raises(WhatifError, match="dequantization"):
        project(_profile(), Change(quant="fp8", graphs=True), datasheet)
    bare = Profile(run="x", gpu="NVIDIA H200", dtype=None, mode=None, quant="none", batch=1, input_tokens=1,
                   output_tokens=2, phases={})
    with pytest.raises(WhatifError, match="no captured"):
        project(bare, Change(), datasheet)


def test_quant_adds_the_measured_host_cost_per_linear_call() -> None:
    # eager int4: each of the prefill's 4 linear calls costs the measured host time more (QuantCost.host_ns)
    base = project(_profile({"ttft_ns": 2.5e6, "tpot_ns": 1e6}), Change(no_profiler=True), datasheet)
    q = project(_profile({"ttft_ns": 2.5e6, "tpot_ns": 1e6}), Change(quant="int4", no_profiler=True), datasheet)
    diff = q.phases["prefill"].projected.latency_ns - base.phases["prefill"].projected.latency_ns
    assert diff == pytest.approx(4 * DEFAULT.quant[("int4", "eager")].host_ns, rel=1e-3)


def test_a_quantized_gemm_runs_no_faster_than_its_measured_rate() -> None:
    # the prefill's 4 GEMMs of 2 GFLOP took 10 us each in fp16 (200 TFLOP/s). int4's tinygemm reaches
    # 0.038 of the bf16 rate at any row count (scripts/gpu/quant_gemm.py on an H100: 30.2 of 794.5
    # TFLOP/s): on the H200 datasheet's 989.5, 2e9 / (0.038 x 989.5e12) = 53.2 us each
    qc = DEFAULT.quant[("int4", "eager")]
    assert qc.rate_of_peak == pytest.approx(0.038)
    q = project(_profile({"ttft_ns": 2.5e6, "tpot_ns": 1e6}), Change(quant="int4", no_profiler=True), datasheet)
    gpu = sum(q.phases["prefill"].projected.gpu_ns.values())
    peak = datasheet("NVIDIA H200").flops("bf16")
    assert gpu == pytest.approx(4 * 2e9 / (0.038 * peak) * 1e9, rel=1e-6)
    assert gpu == pytest.approx(4 * 53.2e3, rel=2e-3)
    # fp8's rate (0.558) leaves the 10 us GEMMs as they were: 2e9 / (0.558 x 989.5e12) = 3.6 us
    f = project(_profile({"ttft_ns": 2.5e6, "tpot_ns": 1e6}), Change(quant="fp8", no_profiler=True), datasheet)
    assert sum(f.phases["prefill"].projected.gpu_ns.values()) < 4 * 10.5e3


def test_the_eager_quant_constants_are_the_per_call_measurements() -> None:
    # scripts/gpu/quant_gemm.py's H100 output (benchmarks/whatif/quant_gemm_h100.json): host time per
    # call over bf16's and the rate at 4,096 rows, medians of the three weight shapes; the host put on the
    # reference host's scale (124.4 us per fp16 linear call of a decode step there, 85.2 on the H100's)
    import statistics

    from helpers import REPO

    cases = json.loads((REPO / "benchmarks" / "whatif" / "quant_gemm_h100.json").read_text())["cases"]
    host = {(c["mode"], c["n"], c["k"]): c["host_us"] for c in cases if c.get("host_us") is not None}
    rate = {(c["mode"], c["n"], c["k"]): c["tflops"] for c in cases if c["m"] == 4096}
    shapes = sorted({(n, k) for _, n, k in host})
    assert len(shapes) == 3
    for mode in ("int8", "int4", "fp8"):
        qc = DEFAULT.quant[(mode, "eager")]
        extra = statistics.median(host[(mode, n, k)] - host[("none", n, k)] for n, k in shapes)
        assert qc.host_ns == pytest.approx(extra * 1e3 * 124.4 / 85.2, rel=2e-3), mode
        assert qc.rate_of_peak == pytest.approx(statistics.median(rate[(mode, n, k)] for n, k in shapes) / 794.5,
                                                abs=6e-4), mode


def test_projection_json_has_the_latencies_per_phase() -> None:
    d = project(_profile(), Change(batch=8, no_profiler=True), datasheet).to_dict()
    json.dumps(d)
    for side in ("measured", "projected"):
        for ph in ("prefill", "decode"):
            assert {"ttft_ms", "tpot_ms", "step_ms"} <= set(d[side]["phases"][ph])
    assert d["measured"]["tpot_ms"] == 2.0 and d["assumptions"]


def test_profile_round_trips_through_json() -> None:
    p = _profile({"tpot_ns": 1e6})
    back = Profile.from_dict(json.loads(json.dumps(p.to_dict())))
    assert back.phases["decode"].kernels["dur_ns"].tolist() == p.phases["decode"].kernels["dur_ns"].tolist()
    assert back.unprofiled == {"tpot_ns": 1e6}


def test_profile_from_tables_takes_the_median_step_and_its_syncs() -> None:
    # three decode steps of 2, 3 and 4 ms after a prefill; the first decode step is skipped (one-off
    # costs), the median of the others (3, 4 ms) by position is the 3 ms one (step 2)
    t0 = 1_000_000_000_000
    starts = [t0, t0 + 5_000_000, t0 + 7_000_000, t0 + 10_000_000]
    ends = [starts[1], starts[2], starts[3], t0 + 14_000_000]
    steps = pd.DataFrame({"step_id": [0, 1, 2, 3], "request_id": [0] * 4,
                          "kind": ["prefill", "decode", "decode", "decode"], "batch": [1] * 4,
                          "q_len": [16, 1, 1, 1], "kv_len": [16, 17, 18, 19], "tokens": [16, 1, 1, 1],
                          "cpu_start_ns": starts, "cpu_end_ns": ends, "captured": [True] * 4,
                          "graph_launches": [0] * 4})
    kern = pd.DataFrame({"ts_ns": [t0 + 7_100_000, t0 + 7_200_000], "dur_ns": [5000, 6000],
                         "issued_ns": [t0 + 7_095_000, t0 + 7_195_000], "kclass": ["gemm", "elementwise"],
                         "bound": ["latency", "latency"], "flops": [1.0, 2.0], "bytes": [3.0, 4.0],
                         "dtype": ["fp16", "fp16"], "op_name": ["aten::mm", "aten::add"], "op_id": [1, 2],
                         "launch_name": ["cudaLaunchKernel"] * 2, "name": ["k1", "k2"], "correlation": [1, 2]})
    runtime = pd.DataFrame({"ts_ns": [t0 + 9_000_000], "dur_ns": [500_000], "name": ["cudaStreamSynchronize"],
                            "correlation": [9]})
    cpu_ops = pd.DataFrame({"op_id": [1, 2], "ts_ns": [t0 + 7_090_000, t0 + 7_190_000],
                            "input_dims": ["[[1,1,2048],[2048,2048]]", "[[1,1,2048],[1,1,2048]]"]})
    man = {"environment": {"gpu": "NVIDIA H200"}, "workload": {"batch": 1, "input_tokens": 16, "output_tokens": 4,
                                                               "mode": "eager", "dtype": "fp16"},
           "timings": {"unprofiled": {"aggregate": {"ttft_ns": 3e6, "tpot_ns": 2e6}}}}
    p = profile(kern, steps, runtime, cpu_ops, man)
    d = p.phases["decode"]
    assert d.period_ns == 3_000_000 and d.steps == 3
    assert d.kernels["off_ns"].tolist() == [95_000, 195_000]
    assert d.kernels["rows"].tolist() == [1.0, 1.0]  # the product of the first input's dims but the last
    assert d.syncs == ((2_000_000, 2_500_000),) and d.cpu_ops == 2
    assert p.unprofiled == {"ttft_ns": 3e6, "tpot_ns": 2e6} and p.gpu == "NVIDIA H200"


def test_calibrate_fits_the_profiler_cost_per_op_and_launch() -> None:
    # prefill: 2 ms over 400 ops and 4 launches; decode: 1 ms over 200 ops and 4 launches: 5 us per op
    # and no launch cost fit both exactly
    c = calibrate([_profile({"ttft_ns": 2.5e6, "tpot_ns": 1e6})])
    assert c.profiler_ns_per_op == pytest.approx(5000.0) and c.profiler_ns_per_launch == pytest.approx(0.0, abs=1e-6)
    assert c.graph_host_ns == DEFAULT.graph_host_ns  # no graph-launched run: kept


def test_cache_len_says_why_it_was_not_applied() -> None:
    # a graphed source without a known cache (an engine's paged cache) and an eager one without --graphs
    graphed = _profile({"ttft_ns": 2.5e6, "tpot_ns": 1e6}, decode_graphs=1)
    got = project(graphed, Change(cache_len=4096, no_profiler=True), datasheet)
    assert any("--cache-len not applied: the run's decode is replayed from graphs" in a for a in got.assumptions)
    eager = replace(_profile({"ttft_ns": 2.5e6, "tpot_ns": 1e6}), model=TINYLLAMA)
    got = project(eager, Change(cache_len=4096, no_profiler=True), datasheet)
    assert any("no static cache without --graphs" in a for a in got.assumptions)


def test_a_profile_keeps_only_a_real_cache_length() -> None:
    p = _profile()
    for bad in (-3, 0, "many", None, float("nan")):
        d = {**p.to_dict(), "cache_len": bad}
        assert Profile.from_dict(d).cache_len is None
    assert Profile.from_dict({**p.to_dict(), "cache_len": 1040}).cache_len == 1040
