"""Sweep definitions, pricing and the pure summary / seed comparison."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from tracekit.analysis import sweep as sa
from tracekit.errors import UsageError
from tracekit.model import pricing, sweepspec
from tracekit.store.reference import seed_study


def test_point_ids_are_stable_and_unique():
    a = sweepspec.seed_points()
    b = sweepspec.seed_points()
    assert [p.id for p in a] == [p.id for p in b]
    assert len({p.id for p in a}) == len(a)
    assert all("/" not in p.id for p in a)  # one directory per point
    ids = {p.id for p in a}
    assert "shapes-rag-in1205-out60-b1-eager" in ids and "shapes-rag-in1205-out60-b1-compiled" in ids
    assert {p.batch for p in a if p.group == "batch"} == {1, 4, 8, 32}
    prompts = sorted(p.input_tokens for p in a if p.group == "prompt")
    assert prompts[0] == 25 and prompts[-1] == 4096
    assert {p.agent.mode for p in a if p.agent} == {"resend", "kv-reuse"}


def test_seed_estimate_fits_six_minutes_on_h200_with_repeats():
    spec = sweepspec.from_preset("seed")
    assert (
        spec.model == "tinyllama" and spec.repeats_for(cuda=True) == 3 and spec.repeats_for(cuda=False) == 1
    )
    est = sweepspec.estimate_seconds(spec, cuda=True)
    assert est < 360
    # repeats are counted: one timed run instead of three is clearly cheaper
    assert sweepspec.estimate_seconds(replace(spec, repeats=1), cuda=True) < est - 60


def test_summary_reports_median_and_spread_of_repetitions():
    # GIVEN a point timed 3 times (3 requests) with TPOTs 10, 30 and 20 ms
    req = pd.DataFrame({
        "request_id": [0, 1, 2], "batch": [1] * 3, "input_tokens": [100] * 3, "output_tokens": [11] * 3,
        "ttft_ns": [5e6, 7e6, 6e6], "tpot_ns": [10e6, 30e6, 20e6], "e2e_ns": [105e6, 307e6, 206e6],
    })  # fmt: skip
    point = {"id": "p", "group": "shapes", "shape": "x", "mode": "eager", "batch": 1, "input_tokens": 100,
             "output_tokens": 11}  # fmt: skip
    manifest = {"repeats": {"n": 3, "calls_per_repeat": 1}, "timings": {"prefilled_tokens": 100}}
    # WHEN it is summarised
    row = sa.summarize_point(sa.PointData(point, "complete", manifest, req), 1.0, 1.0)
    # THEN timings are medians, with min and max beside them; token counts are per repetition
    assert row["repeats"] == 3
    assert (row["tpot_ms"], row["tpot_ms_min"], row["tpot_ms_max"]) == (20.0, 10.0, 30.0)
    assert (row["ttft_ms"], row["ttft_ms_min"], row["ttft_ms_max"]) == (6.0, 5.0, 7.0)
    assert row["e2e_ms"] == 206.0 and row["prefill_tok_s"] == pytest.approx(100 / 6e-3)
    assert row["sent_input_tokens"] == 100 and row["generated_tokens"] == 11 and row["calls"] == 1
    # AND a run without repeats in run.json is one repetition of all its requests (an older sweep)
    old = sa.summarize_point(sa.PointData(point, "complete", {}, req.iloc[:1]), 1.0, 1.0)
    assert old["repeats"] == 1 and old["tpot_ms"] == old["tpot_ms_min"] == old["tpot_ms_max"] == 10.0


def test_agent_saving_text_states_saving_or_its_absence():
    from tracekit.report.markdown import agent_saving_text

    base = {"resend_prefilled_tokens": 1920.0, "kv_reuse_prefilled_tokens": 388.0, "resend_e2e_ms": 100.0,
            "kv_reuse_e2e_ms": 80.0}  # fmt: skip
    saved = agent_saving_text({**base, "resend_prefill_ms": 200.0, "kv_reuse_prefill_ms": 50.0})
    assert "1532 fewer (80%)" in saved and "150.0 ms saved (75%)" in saved
    none = agent_saving_text({**base, "resend_prefill_ms": 200.0, "kv_reuse_prefill_ms": 250.0})
    assert "NO saving measured" in none and "200.0 ms vs 250.0 ms" in none


def test_toml_config(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text(
        'model = "tiny"\nmodes = ["eager", "compiled"]\nshapes = ["smoke", "64/8"]\nbatch = [1, 2]\n'
        'prompt_lengths = [32, 64]\n[agent]\nsteps = 2\ntool_tokens = 4\nmodes = ["kv-reuse"]\n'
        "[pricing]\ninput_per_mtok = 1.0\noutput_per_mtok = 4.0\n"
    )
    spec = sweepspec.from_toml_text(f.read_text(), name=f.stem, where=str(f))
    groups = [p.group for p in spec.points]
    assert groups.count("shapes") == 4 and groups.count("batch") == 4 and groups.count("prompt") == 4
    agents = [p for p in spec.points if p.agent]
    assert len(agents) == 2 and all(p.agent.mode == "kv-reuse" and p.agent.steps == 2 for p in agents)
    assert pricing.from_mapping(spec.pricing).cost(1e6, 1e6) == pytest.approx(5.0)


@pytest.mark.parametrize(
    "text",
    ['shapes = ["huge"]', "batch = [0]", 'modes = ["jit"]', "nope = 1", "", 'shapes = ["smoke"\n'],
)
def test_bad_configs_are_usage_errors(tmp_path, text):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(UsageError):
        sweepspec.from_toml_text(f.read_text(), name=f.stem, where=str(f))


def test_pricing_override_and_default_cites_source():
    assert pricing.DEFAULT.source and pricing.DEFAULT.as_of
    p = pricing.from_mapping({"output_per_mtok": 10})
    assert p.output_per_mtok == 10 and p.input_per_mtok == pricing.DEFAULT.input_per_mtok
    with pytest.raises(UsageError):
        pricing.from_mapping({"output_per_mtok": -1})


def _req(rows):
    return pd.DataFrame(rows)


def _point(pid, group, shape, i, o, ttft_ms, e2e_ms, batch=1, agent=None, manifest=None, phases=None):
    point = {"id": pid, "group": group, "shape": shape, "input_tokens": i, "output_tokens": o, "batch": batch,
             "mode": "eager", "agent": agent}  # fmt: skip
    req = _req([{"request_id": 0, "batch": batch, "input_tokens": i, "output_tokens": o, "ttft_ns": ttft_ms * 1e6,
                 "e2e_ns": e2e_ms * 1e6, "tpot_ns": (e2e_ms - ttft_ms) * 1e6 / (o - 1)}])  # fmt: skip
    return sa.PointData(point, "complete", manifest or {"timings": {"prefilled_tokens": i}}, req, phases)


def test_summary_from_synthetic_points():
    # GIVEN a chat point: TTFT 10 ms of e2e 1,280 ms, and a run-level phase split
    phases = pd.DataFrame([
        {"request_id": None, "phase": "decode", "time_ns": 100, "compute_bound_ns": 10, "memory_bound_ns": 20, "idle_ns": 70},
        {"request_id": 0, "phase": "decode", "time_ns": 999, "compute_bound_ns": 999, "memory_bound_ns": 0, "idle_ns": 0},
    ])  # fmt: skip
    chat = _point("c", "shapes", "chat", 128, 128, 10.0, 1280.0, phases=phases)
    failed = sa.PointData({"id": "f", "group": "batch", "shape": "chat", "batch": 32}, "failed",
                          {"error": "OutOfMemoryError: CUDA out of memory"})  # fmt: skip
    s = sa.summarize([chat, failed], input_price=0.15, output_price=0.6)
    c = s.iloc[0]
    assert c["prefill_share"] == pytest.approx(10 / 1280)
    assert c["prefill_tok_s"] == pytest.approx(128 / 0.010)
    assert c["decode_tok_s"] == pytest.approx(127 / 1.270)
    assert c["tpot_ms"] == pytest.approx(1270 / 127)
    assert c["read_write_asymmetry"] == pytest.approx((1270 / 127) / (10 / 128))
    # the run-level rows decide the split, not the per-request ones
    assert (c["decode_compute_share"], c["decode_memory_share"], c["decode_idle_share"]) == (0.1, 0.2, 0.7)
    assert pd.isna(c["prefill_idle_share"])
    assert c["cost_vs_chat"] == pytest.approx(1.0)
    f = s.iloc[1]
    assert f["status"] == "failed" and "out of memory" in f["reason"] and pd.isna(f["ttft_ms"])


def test_seed_comparison_is_computed_not_hardcoded():
    chat = _point("c", "shapes", "chat", 128, 128, 10.0, 1000.0)  # share 1% vs seed 3%: within 3x
    rag = _point("r", "shapes", "rag", 1205, 60, 500.0, 1000.0)  # share 50% vs 16%: above 3x
    s = sa.summarize([chat, rag], input_price=0.15, output_price=0.6)
    cmp = sa.seed_comparison(s, seed_study()).set_index("key")
    assert cmp.loc["chat_prefill_share", "measured"] == pytest.approx(0.01)
    assert cmp.loc["chat_prefill_share", "holds"] is True or cmp.loc["chat_prefill_share", "holds"] == True  # noqa: E712
    assert cmp.loc["rag_prefill_share", "holds"] == False  # noqa: E712
    assert cmp.loc["rag_prefill_share", "verdict"] == "higher here"
    assert cmp.loc["agent_cost_vs_chat", "verdict"] == "not measured"


def test_split_without_ceiling_is_unknown_not_zero():
    # GIVEN phases from a run whose bound pass had no ceiling: compute/memory columns empty, idle known
    phases = pd.DataFrame([{"request_id": None, "phase": "decode", "time_ns": 100, "compute_bound_ns": None,
                            "memory_bound_ns": None, "idle_ns": 90}])  # fmt: skip
    # THEN the compute and memory shares are unknown (None), the idle share is still reported
    assert sa._split(phases, "decode") == (None, None, 0.9)


def _kv_point(pid, i, o, peak_total, formula=200.0, logits=4000.0):
    n = i + o - 1  # cached tokens after the request (batch 1)
    kv = {"formula_bytes_per_token": formula, "cache_tensor_bytes_per_token": formula, "cache_tokens": n,
          "allocated_growth_bytes_per_token": formula, "peak_growth_bytes_per_token": peak_total / n,
          "logits_fp32_bytes_per_token": logits}  # fmt: skip
    return _point(
        pid, "prompt", "x", i, o, 10.0, 100.0, manifest={"timings": {"prefilled_tokens": i}, "kv": kv}
    )


def test_kv_text_explains_the_peak_from_the_measured_numbers():
    from tracekit.report.markdown import kv_text

    cfg = {"intermediate_size": 100, "hidden_size": 50}  # fp16: (4 x 100 + 2 x 50) x 2 = 1,000 B per token
    # GIVEN a prompt-heavy point whose peak is prompt x (cache 200 + 950) and an answer-heavy one whose
    # final cache (101 x 200 B) outweighs its prefill, peaking 300 B above the final cache
    a = _kv_point("a", 10, 5, 10 * 200 + 10 * 950)
    b = _kv_point("b", 2, 100, 101 * 200 + 300)
    s = sa.summarize([a, b], input_price=0.15, output_price=0.6)
    assert s.iloc[0]["prefill_transient_bytes_per_prompt_token"] == pytest.approx(950)
    text = " ".join(kv_text(s, cfg, "fp16"))
    # THEN the transient is stated per prompt token from point a only, matched to the activations,
    # fp32 logits (4,000 B per token) are ruled out, and b's peak is placed at the end of decode
    assert "950 B per prompt token" in text and "0.95-0.95x" in text
    assert "activations explain it" in text and "not the cause" in text
    assert "(b) the peak is at the end of decode" in text and "300 B in all" in text
    # GIVEN a transient of 5,000 B per prompt token: THEN neither explanation is claimed as matching
    big = sa.summarize([_kv_point("c", 10, 5, 10 * 200 + 10 * 5000)], input_price=0.15, output_price=0.6)
    text = " ".join(kv_text(big, cfg, "fp16"))
    assert "does NOT match" in text and "could account" in text
    # a compiled (static cache) point gets no transient: its cache is allocated up front
    c = _kv_point("d", 10, 5, 10 * 200 + 10 * 950)
    c = sa.PointData({**c.point, "mode": "compiled"}, c.status, c.manifest, c.requests)
    assert pd.isna(
        sa.summarize([c], input_price=0.15, output_price=0.6).iloc[0][
            "prefill_transient_bytes_per_prompt_token"
        ]
    )
