"""The sweep summary of hand-made points; every expected value worked out by hand from the inputs."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tracekit.analysis import sweep
from tracekit.analysis.sweep import (
    PointData,
    activation_bytes_per_token,
    prefill_transient_per_prompt_token,
    summarize,
    summarize_point,
)
from tracekit.store.reference import seed_study

MS = 1_000_000
POINT = {"id": "p1", "group": "g", "shape": "chat", "mode": "eager", "batch": 2, "input_tokens": 100,
         "output_tokens": 11}
KV = {"formula_bytes_per_token": 1000, "cache_tensor_bytes_per_token": 1000, "peak_growth_bytes_per_token": 3000,
      "cache_tokens": 110, "allocated_growth_bytes_per_token": 1200, "logits_fp32_bytes_per_token": 50}


def _requests(ttft_ms: list[float], e2e_ms: list[float]) -> pd.DataFrame:
    n = len(ttft_ms)
    return pd.DataFrame({
        "request_id": range(n), "batch": [2] * n, "input_tokens": [100] * n, "output_tokens": [11] * n,
        "ttft_ns": [t * MS for t in ttft_ms], "e2e_ns": [e * MS for e in e2e_ms],
        "tpot_ns": [(e - t) * MS / 10 for t, e in zip(ttft_ms, e2e_ms, strict=True)],
    })


NAN = math.nan
PHASES = pd.DataFrame(
    # request_id, phase, time, compute, memory, idle, latency, idle_host, idle_wait, idle_profiler
    [(NAN, "prefill", 1000, 300, 200, 400, 100, 250, 100, 50),
     (0, "prefill", 999, 999, 999, 0, 0, 0, 0, 0),  # a request's row: the run-level one is used
     (NAN, "decode", 2000, 100, 1000, 500, 400, NAN, 200, 0)],
    columns=["request_id", "phase", "time_ns", "compute_bound_ns", "memory_bound_ns", "idle_ns", "latency_bound_ns",
             "idle_host_ns", "idle_wait_ns", "idle_profiler_ns"])


def test_a_point_with_three_repetitions_reports_medians_and_spreads() -> None:
    # three repetitions of one request (batch 2, 100 prompt tokens, 11 output tokens):
    # TTFT 10 / 30 / 20 ms, e2e 110 / 150 / 120 ms -> TPOT (e2e - TTFT) / 10 = 10 / 12 / 10 ms
    manifest = {"repeats": {"n": 3, "calls_per_repeat": 1}, "kv": KV, "compiled": {"compile_s": 12.5},
                "timings": {"prefilled_tokens": 100}}
    p = PointData(POINT, "complete", manifest, _requests([10, 30, 20], [110, 150, 120]), PHASES, "runs/p1")
    row = summarize_point(p, input_price=1.0, output_price=2.0)
    assert row["repeats"] == 3 and row["calls"] == 1
    assert (row["ttft_ms"], row["ttft_ms_min"], row["ttft_ms_max"]) == (20, 10, 30)
    assert (row["tpot_ms"], row["tpot_ms_min"], row["tpot_ms_max"]) == (10, 10, 12)
    assert (row["e2e_ms"], row["e2e_ms_min"], row["e2e_ms_max"]) == (120, 110, 150)
    assert row["prefill_ms"] == 20
    assert row["prefill_share"] == pytest.approx(20 / 120)  # the median of 10/110, 30/150, 20/120
    # 200 prompt tokens (2 sequences) over a TTFT of 10 / 30 / 20 ms: 20,000 / 6,667 / 10,000 tok/s
    assert row["prefill_tok_s"] == pytest.approx(10_000)
    # 2 x 10 decode tokens over 100 / 120 / 100 ms
    assert row["decode_tok_s"] == pytest.approx(200)
    assert (row["sent_input_tokens"], row["prefilled_tokens"], row["generated_tokens"]) == (200, 200, 22)
    assert row["ms_per_input_token"] == pytest.approx(0.1)  # 20 ms / 200 tokens
    assert row["ms_per_output_token"] == pytest.approx(5)  # 10 ms per step of 2 tokens
    assert row["read_write_asymmetry"] == pytest.approx(50)
    # $1 per million input tokens, $2 per million output: 200 + 44 vs the chat reference 128 + 256
    assert row["cost_usd"] == pytest.approx(244e-6)
    assert row["cost_vs_chat"] == pytest.approx(244 / 384)
    shares = ("compute", "memory", "idle", "latency", "idle_host", "idle_wait", "idle_profiler")
    assert [row[f"prefill_{s}_share"] for s in shares] == pytest.approx([0.3, 0.2, 0.4, 0.1, 0.25, 0.1, 0.05])
    dec = [row[f"decode_{s}_share"] for s in shares]
    assert dec[:4] == pytest.approx([0.05, 0.5, 0.25, 0.2]) and dec[4] is None and dec[5:] == pytest.approx([0.1, 0])
    assert (row["kv_formula_bytes_per_token"], row["kv_cache_bytes_per_token"], row["kv_allocated_bytes_per_token"],
            row["kv_peak_bytes_per_token"], row["logits_fp32_bytes_per_token"], row["kv_cache_tokens"]) == \
        (1000, 1000, 1200, 3000, 50, 110)
    # peak 3000 B x 110 tokens, less the cache of the 200 prompt tokens, per prompt token
    assert row["prefill_transient_bytes_per_prompt_token"] == pytest.approx(650)
    assert row["compile_s"] == 12.5 and row["status"] == "complete" and row["run_dir"] == "runs/p1"
    assert (row["point_id"], row["shape"], row["batch"], row["input_tokens"], row["output_tokens"]) == \
        ("p1", "chat", 2, 100, 11)


def test_two_repetitions_average_the_middle_and_one_measures_prefill_from_the_requests() -> None:
    two = PointData(POINT, "complete", {"repeats": {"n": 2, "calls_per_repeat": 1}},
                    _requests([10, 30], [110, 150]), None)
    row = summarize_point(two, 1.0, 1.0)
    assert (row["repeats"], row["ttft_ms"], row["e2e_ms"]) == (2, 20, 130)
    assert row["prefill_compute_share"] is None and row["decode_latency_share"] is None
    # repeats that do not tile the requests: one repetition of both requests, an agent-like sum
    odd = PointData(POINT, "complete", {"repeats": {"n": 3, "calls_per_repeat": 1}}, _requests([10, 30], [110, 150]))
    r = summarize_point(odd, 1.0, 1.0)
    assert (r["repeats"], r["calls"], r["ttft_ms"], r["e2e_ms"], r["prefill_ms"]) == (1, 2, 10, 260, 40)
    assert r["tpot_ms"] == pytest.approx(11)  # the mean of 10 and 12
    assert r["prefilled_tokens"] == 2 * 200  # both calls' prompts, from the requests table
    # compiled mode: the transient of a static cache is not measurable
    compiled = PointData({**POINT, "mode": "compiled"}, "complete", {"kv": KV}, _requests([10], [110]))
    assert summarize_point(compiled, 1.0, 1.0)["prefill_transient_bytes_per_prompt_token"] is None


def test_failed_and_load_points() -> None:
    failed = summarize_point(PointData(POINT, "failed", {"error": "CUDA out of memory"}), 1.0, 1.0)
    assert failed["reason"] == "CUDA out of memory" and failed["ttft_ms"] is None and failed["repeats"] is None
    load = {"output_tok_s": 500, "ttft_ns_p50": 2 * MS, "ttft_ns_p99": 8 * MS, "tpot_ns_p50": 1 * MS,
            "tpot_ns_p99": 3 * MS, "itl_ns_p99": 4 * MS, "queue_ns_p99": 5 * MS, "e2e_ns_p50": 20 * MS}
    req = pd.DataFrame({"request_id": [0, 1], "step_time_ns": [10 * MS, 30 * MS], "gpu_time_ns": [4 * MS, 6 * MS],
                        "energy_j": [1.0, 3.0]})
    pt = {**POINT, "group": "load", "rate": 2.5, "requests": 10}
    for timings in ({"unprofiled": {"load": load}, "profiled": {"load": {"output_tok_s": 1}}},
                    {"profiled": {"load": load}}):
        row = summarize_point(PointData(pt, "complete", {"timings": timings}, req), 1.0, 1.0, gpu_per_hour=3.6)
        assert (row["rate_rps"], row["requests"], row["throughput_tok_s"]) == (2.5, 10, 500)
        assert (row["ttft_p50_ms"], row["ttft_p99_ms"], row["tpot_p50_ms"], row["tpot_p99_ms"]) == (2, 8, 1, 3)
        assert (row["itl_p99_ms"], row["queue_p99_ms"]) == (4, 5)
        assert (row["ttft_ms"], row["tpot_ms"], row["e2e_ms"]) == (2, 1, 20)
        assert (row["step_ms_per_request"], row["gpu_ms_per_request"], row["j_per_request"]) == (20, 5, 2)
        assert row["usd_per_request"] == pytest.approx(20e-3 / 3600 * 3.6)  # 20 ms at $3.6 an hour
    df = summarize([PointData(POINT, "failed", {"error": "x"})], input_price=1.0, output_price=1.0)
    assert list(df["batch"]) == [2] and str(df["batch"].dtype) == "Int64"


def test_activation_and_transient_bytes() -> None:
    a = activation_bytes_per_token({"intermediate_size": 5632, "hidden_size": 2048}, "fp16")
    assert a == {"mlp": 4 * 5632 * 2, "hidden": 2 * 2048 * 2, "total": 45_056 + 8_192, "elem": 2,
                 "intermediate_size": 5632, "hidden_size": 2048}
    assert activation_bytes_per_token({"intermediate_size": 8, "hidden_size": 4}, "fp32")["total"] == 4 * 8 * 4 + 2 * 4 * 4
    assert activation_bytes_per_token({"intermediate_size": 8, "hidden_size": 4}, "int4") is None
    assert activation_bytes_per_token({"hidden_size": 4}, "fp16") is None
    assert prefill_transient_per_prompt_token(KV, 200) == pytest.approx(650)
    # a cache whose tensors differ from the formula by more than 1% (a static cache): not measurable
    assert prefill_transient_per_prompt_token({**KV, "cache_tensor_bytes_per_token": 1011}, 200) is None
    assert prefill_transient_per_prompt_token({**KV, "cache_tensor_bytes_per_token": 1009}, 200) == \
        pytest.approx((3000 * 110 - 1009 * 200) / 200)
    assert prefill_transient_per_prompt_token(KV, 0) is None
    assert prefill_transient_per_prompt_token({**KV, "cache_tokens": None}, 200) is None


def _summary_like_the_seed() -> pd.DataFrame:
    """A sweep summary whose numbers are the seed study's own (T4, TinyLlama-1.1B, fp16)."""
    base = {"status": "complete", "mode": "eager", "batch": 1, "agent_mode": None, "ms_per_output_token": 132.0}
    rows = [
        {"group": "shapes", "shape": "smoke", "input_tokens": 22, "output_tokens": 8, "ttft_ms": 152.0,
         "prefill_tok_s": 144.0, "decode_tok_s": 7.0, "ms_per_input_token": 1.0,
         "kv_peak_bytes_per_token": 0.17e6, "kv_formula_bytes_per_token": 0.022e6},
        {"group": "shapes", "shape": "chat", "input_tokens": 128, "output_tokens": 128, "prefill_share": 0.03},
        {"group": "shapes", "shape": "rag", "input_tokens": 1205, "output_tokens": 60, "prefill_share": 0.16},
        {"group": "shapes", "shape": "creative", "input_tokens": 25, "output_tokens": 500, "prefill_share": 0.005},
        {"group": "prompt", "shape": "p25", "input_tokens": 25, "output_tokens": 8, "prefill_tok_s": 143.0},
        {"group": "prompt", "shape": "p1205", "input_tokens": 1205, "output_tokens": 8, "prefill_tok_s": 2271.0,
         "ms_per_input_token": 0.44},
        {"group": "agent", "shape": "agent", "input_tokens": 100, "output_tokens": 32, "agent_mode": "resend",
         "cost_vs_chat": 11.9, "prefill_share": 0.03, "ms_per_output_token": 999.0},
        {"group": "shapes", "shape": "chat", "input_tokens": 1, "output_tokens": 2, "status": "failed",
         "ms_per_input_token": 0.01},
        {"group": "shapes", "shape": "chat", "input_tokens": 1, "output_tokens": 2, "mode": "compiled",
         "ms_per_input_token": 0.001},
    ]
    return pd.DataFrame([{**base, **r} for r in rows])


def test_a_sweep_that_reproduces_the_seed_matches_every_claim() -> None:
    from tracekit.analysis.sweep import seed_comparison

    cmp = seed_comparison(_summary_like_the_seed(), seed_study()).set_index("key")
    # the seed's numbers: smoke TTFT 152 ms, 144 and 7 tok/s; prefill shares 3%, 16%, 0.5%; 143 and 2271 tok/s
    # prefill at 25 and 1205 prompt tokens; 0.44 ms per input token, 300x per output token; 0.17 MB of KV
    # per token against a 0.022 MB formula; a resend agent loop 11.9x a chat request, 3% prefill
    seed = {"smoke_prefill_ms": 152, "smoke_prefill_tok_s": 144, "smoke_decode_tok_s": 7, "chat_prefill_share": 0.03,
            "rag_prefill_share": 0.16, "creative_prefill_share": 0.005, "short_prompt_tok_s": 143,
            "long_prompt_tok_s": 2271, "long_vs_short_prefill": 2271 / 143, "ms_per_input_token": 0.44,
            "output_vs_input_token": 300, "kv_measured_vs_formula": 0.17 / 0.022, "agent_cost_vs_chat": 11.9,
            "agent_prefill_share": 0.03}
    assert cmp["seed_t4"].to_dict() == pytest.approx(seed)
    assert cmp["measured"].to_dict() == pytest.approx(seed)
    assert cmp["measured_vs_seed"].tolist() == pytest.approx([1.0] * len(seed))
    absolute = {"smoke_prefill_ms", "smoke_prefill_tok_s", "smoke_decode_tok_s", "short_prompt_tok_s",
                "long_prompt_tok_s", "ms_per_input_token"}
    assert {k for k, h in cmp["holds"].items() if h is None} == absolute
    assert all(cmp.loc[k, "verdict"] == "holds" for k in seed if k not in absolute)
    assert cmp.loc["smoke_prefill_ms", "verdict"] == "hardware-specific: 1x the T4's value"
    # three times the seed still holds; more is higher here; a third less is lower here
    s = _summary_like_the_seed()
    s.loc[s["shape"] == "rag", "prefill_share"] = 0.48
    s.loc[s["shape"] == "creative", "prefill_share"] = 0.0016
    s.loc[s["group"] == "agent", "cost_vs_chat"] = 36.0
    c2 = seed_comparison(s, seed_study()).set_index("key")
    assert (c2.loc["rag_prefill_share", "holds"], c2.loc["rag_prefill_share", "verdict"]) == (True, "holds")
    assert (c2.loc["creative_prefill_share", "holds"], c2.loc["creative_prefill_share", "verdict"]) == \
        (False, "lower here")
    assert (c2.loc["agent_cost_vs_chat", "holds"], c2.loc["agent_cost_vs_chat", "verdict"]) == (False, "higher here")
    none = seed_comparison(s[s["group"] != "agent"], seed_study()).set_index("key")
    assert none.loc["agent_cost_vs_chat", "verdict"] == "not measured" and none.loc["agent_cost_vs_chat", "holds"] is None


def test_agent_steps_accumulate_latency() -> None:
    from tracekit.analysis.sweep import agent_steps

    steps = [{"step": i, "prompt_tokens": 100 * (i + 1), "prefilled_tokens": 100, "output_tokens": 10,
              "prefill_ns": 5 * MS, "e2e_ns": (20 + i) * MS} for i in range(3)]
    p = PointData({"id": "a1", "mode": "eager"}, "complete", {"agent": {"mode": "reuse", "steps": steps}})
    df = agent_steps([p, PointData({"id": "x"}, "failed", {"agent": {"steps": steps}})])
    assert df["cumulative_ms"].tolist() == [20, 41, 63] and df["e2e_ms"].tolist() == [20, 21, 22]
    assert df["prefill_ms"].tolist() == [5, 5, 5] and set(df["agent_mode"]) == {"reuse"}


def test_phases_without_bound_columns_give_no_split() -> None:
    # a CPU run: the phases table has times but no compute / memory / idle columns
    ph = pd.DataFrame({"request_id": [None], "phase": ["prefill"], "time_ns": [1000]})
    p = PointData(POINT, "complete", {"timings": {"prefilled_tokens": 100}}, _requests([10], [110]), ph)
    row = summarize_point(p, 1.0, 1.0)
    assert (row["prefill_compute_share"], row["prefill_memory_share"], row["prefill_idle_share"]) == (None, None, None)
    assert row["prefill_latency_share"] is None and row["ttft_ms"] == 10


def test_activation_bytes_for_every_dtype_spelling() -> None:
    # 4 x 8 + 2 x 4 = 40 elements a token: 80 bytes in 16-bit types, 160 in 32-bit ones
    cfg = {"intermediate_size": 8, "hidden_size": 4}
    for dtype, total in [("fp16", 80), ("bf16", 80), ("float16", 80), ("bfloat16", 80), ("fp32", 160),
                         ("float32", 160)]:
        assert activation_bytes_per_token(cfg, dtype)["total"] == total, dtype


def test_a_phase_of_one_nanosecond_still_has_shares() -> None:
    ph = pd.DataFrame({"request_id": pd.array([None], dtype="Int64"), "phase": ["decode"], "time_ns": [1],
                       "latency_bound_ns": [1], "idle_host_ns": [0]})
    out = sweep._more_split(ph, "decode")
    assert (out["decode_latency_share"], out["decode_idle_host_share"]) == (1.0, 0.0)


def test_the_seed_study_is_data_with_its_source() -> None:
    # the packaged data file: 14 claims, each read from it; a relative claim holds within 3x
    from dataclasses import replace

    study = seed_study()
    assert study.source and study.gpu == "T4" and study.hold_factor == 3.0 and len(study.claims) == 14
    chat = next(c for c in study.claims if c.key == "chat_prefill_share")
    assert (chat.seed, chat.unit, chat.relative) == (0.03, "share", True)
    assert study.kv_measured_bytes_per_token == 170_000
    # the comparison takes whatever study it is given: its claims, its values, its hold factor
    s = _summary_like_the_seed()
    assert bool(seed_comparison_of(s, study).loc["chat_prefill_share", "holds"])
    strict = replace(study, hold_factor=1.0, claims=(replace(chat, seed=1.0),))
    got = seed_comparison_of(s, strict)
    assert list(got.index) == ["chat_prefill_share"] and got.loc["chat_prefill_share", "seed_t4"] == 1.0
    assert not bool(got.loc["chat_prefill_share", "holds"])  # 3% against 1.0 is not within 1x


def seed_comparison_of(summary: pd.DataFrame, study: object) -> pd.DataFrame:
    from tracekit.analysis.sweep import seed_comparison

    return seed_comparison(summary, study).set_index("key")  # type: ignore[arg-type]
