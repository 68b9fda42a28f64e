"""Every engine step annotation format (tracekit.model.stepnames), from the strings the engines build.

vLLM: gpu_worker.annotate_profile (execute_new_N_cached_M; execute_context_C(T)_generation_G(T) from
compute_iteration_details; the detailed form behind ProfilerConfig.detailed_trace_annotation, whose
upstream test expects "execute_5_context_1(sq4sk4sqsq16sqsk16)_generation_1(sq1sk11sqsq1sqsk11)").
SGLang: model_runner._build_step_span_name and step_span_utils' detailed suffixes (examples quoted in
TraceLens's annotation_utils), and the lowercase forms of sglang PR #23419's description.
"""

from __future__ import annotations

import pytest

from tracekit.model.stepnames import (
    PhaseStats,
    looks_like_engine_step,
    parse_capture_label,
    parse_diffusion_request,
    parse_engine_step,
    parse_sglang_step,
    parse_vllm_context_generation,
    parse_vllm_detailed,
    parse_vllm_new_cached,
    unread_numbers,
)


@pytest.mark.parametrize(
    ("name", "fmt", "kind", "batch", "tokens", "q_len", "kv_len"),
    [
        # vLLM: requests only; cached-only is decode (a later prefill chunk cannot be told apart)
        ("execute_new_2_cached_0", "vllm_new_cached", "prefill", 2, None, None, None),
        ("execute_new_0_cached_4", "vllm_new_cached", "decode", 4, None, 1, None),
        ("execute_new_2_cached_3", "vllm_new_cached", "mixed", 5, None, None, None),
        # vLLM default since 0.14: requests and tokens per phase (upstream test_simple_format_mixed)
        ("execute_context_1(4)_generation_1(1)", "vllm_context_generation", "mixed", 2, 5, 4, None),
        ("execute_context_0(0)_generation_64(64)", "vllm_context_generation", "decode", 64, 64, 1, None),
        ("execute_context_2(2048)_generation_0(0)", "vllm_context_generation", "prefill", 2, 2048, 1024, None),
        ("execute_context_0(0)_generation_4(12)", "vllm_context_generation", "decode", 4, 12, 3, None),  # spec decode
        # an underscore-joined pair is (tokens _ Σ query²), never a sum of tokens: 888² = 788,544 (a B200 trace)
        ("execute_context_1(888_788544)_generation_0(0)", "vllm_context_generation", "prefill", 1, 888, 888, None),
        # a second number no Σ query² can be (4 < 12² / 2): not read, not tokens either
        ("execute_context_2(12_4)_generation_1(1)", "vllm_context_generation", "mixed", 3, 13, 6, None),
        # vLLM detailed: bs = Σsq; kv_len the mean KV length after the step
        ("execute_5_context_1(sq4sk4sqsq16sqsk16)_generation_1(sq1sk11sqsq1sqsk11)", "vllm_detailed", "mixed",
         2, 5, 4, 8),
        ("execute_64_context_0(sq0sk0sqsq0sqsk0)_generation_64(sq64sk65536sqsq64sqsk65536)", "vllm_detailed",
         "decode", 64, 64, 1, 1024),
        # SGLang: toks is the EXTEND batch's new tokens
        ("step[EXTEND bs=15 toks=15360]", "sglang_step", "prefill", 15, 15360, 1024, None),
        ("step[DECODE bs=32]", "sglang_step", "decode", 32, 32, 1, None),
        ("step[MIXED bs=3]", "sglang_step", "mixed", 3, None, None, None),
        ("step[TARGET_VERIFY bs=4]", "sglang_step", "decode", 4, None, None, None),
        ("step[DRAFT_EXTEND_V2 bs=4]", "sglang_step", "decode", 4, None, None, None),
        ("step[EXTEND bs=2 toks=14721 c_sq=14721 c_sqsq=108745533 c_sqsk=108745533 c_sk=14721]", "sglang_step",
         "prefill", 2, 14721, 7360, 7360),
        ("step[DECODE bs=64 g_sq=128 g_sqsq=256 g_sqsk=262144 g_sk=131072]", "sglang_step", "decode", 64, 128,
         2, 2048),
        ("step[MIXED bs=2 c=1 g=1 c_sq=5 c_sk=8 c_sqsq=25 c_sqsk=40 g_sq=1 g_sk=12 g_sqsq=1 g_sqsk=12]",
         "sglang_step", "mixed", 2, 6, 5, 10),
        # the PR description's lowercase forms
        ("step[decode bs=4]", "sglang_step", "decode", 4, 4, 1, None),
        ("step[prefill bs=2 toks=9]", "sglang_step", "prefill", 2, 9, 4, None),
        ("step[mixed bs=3 ext=5 dec=2]", "sglang_step", "mixed", 3, 7, 5, None),
        # a CUDA-graph batch written real/padded: the real one
        ("step[DECODE bs=117/128]", "sglang_step", "decode", 117, 117, 1, None),
    ],
)
def test_every_format(name: str, fmt: str, kind: str, batch: int, tokens: int | None, q_len: int | None,
                      kv_len: int | None) -> None:
    s = parse_engine_step(name)
    assert s is not None
    assert (s.format, s.kind, s.batch, s.tokens, s.q_len, s.kv_len) == (fmt, kind, batch, tokens, q_len, kv_len)


def test_detailed_sums_are_kept_per_phase() -> None:
    s = parse_vllm_detailed("execute_5_context_1(sq4sk4sqsq16sqsk16)_generation_1(sq1sk11sqsq1sqsk11)")
    assert s is not None
    assert s.context == PhaseStats(1, sq=4, sk=4, sqsq=16, sqsk=16)
    assert s.generation == PhaseStats(1, sq=1, sk=11, sqsq=1, sqsk=11)
    assert s.seq_stats() == {"context": {"requests": 1, "sq": 4, "sk": 4, "sqsq": 16, "sqsk": 16},
                             "generation": {"requests": 1, "sq": 1, "sk": 11, "sqsq": 1, "sqsk": 11}}
    g = parse_sglang_step("step[MIXED bs=2 c=1 g=1 c_sq=5 c_sk=8 c_sqsq=25 c_sqsk=40 g_sq=1 g_sk=12 g_sqsq=1 g_sqsk=12]")
    assert g is not None and g.context == PhaseStats(1, 5, 8, 25, 40) and g.generation == PhaseStats(1, 1, 12, 1, 12)
    # a patched TARGET_VERIFY writes its decode sums under c_: they are the generation's
    v = parse_sglang_step("step[TARGET_VERIFY bs=2 c_sq=8 c_sk=100 c_sqsq=32 c_sqsk=400]")
    assert v is not None and v.kind == "decode" and v.generation == PhaseStats(2, 8, 100, 32, 400) and v.q_len == 4


def test_underscore_pair_is_tokens_and_sum_of_squares() -> None:
    s = parse_vllm_context_generation("execute_context_1(888_788544)_generation_0(0)")
    assert s is not None and s.context == PhaseStats(1, sq=888, sqsq=788_544) and s.tokens == 888
    # two prompts of 300 and 100: Σq = 400, Σq² = 100,000, inside [400² / 2, 400²]
    two = parse_vllm_context_generation("execute_context_2(400_100000)_generation_3(3)")
    assert two is not None and two.context == PhaseStats(2, sq=400, sqsq=100_000) and two.tokens == 403
    assert unread_numbers("execute_context_2(12_4)_generation_1(1)") == 1
    assert unread_numbers("execute_context_1(888_788544)_generation_0(0)") == 0


def test_diffusion_request_label() -> None:
    d = parse_diffusion_request("execute_diffusion_1_256x256")
    assert d is not None and (d.batch, d.height, d.width) == (1, 256, 256)
    assert parse_diffusion_request("execute_diffusion_x") is None
    assert parse_engine_step("execute_diffusion_1_256x256") is None


def test_idle_steps_and_unknown_formats() -> None:
    for idle in ("execute_new_0_cached_0", "execute_context_0(0)_generation_0(0)", "step[IDLE bs=0]", "step[idle]"):
        s = parse_engine_step(idle)
        assert s is not None and s.kind is None, idle
    for unknown in ("step[FOO bs=3]", "execute_model", "execute_1_2_3", "stepper[DECODE bs=1]"):
        assert parse_engine_step(unknown) is None, unknown
    assert looks_like_engine_step("step[FOO bs=3]") and looks_like_engine_step("execute_model")
    assert not looks_like_engine_step("ProfilerStep#3")
    # each parser only takes its own format
    assert parse_vllm_new_cached("execute_context_1(4)_generation_1(1)") is None
    assert parse_vllm_context_generation("execute_new_1_cached_2") is None
    assert parse_vllm_detailed("execute_context_1(4)_generation_1(1)") is None
    assert parse_sglang_step("execute_new_1_cached_2") is None


def test_vllm_capture_labels() -> None:
    full = parse_capture_label("capture_32_FULL")
    assert full is not None and (full.tokens, full.mode, full.prefix) == (32, "FULL", None)
    draft = parse_capture_label("capture_32_draft_FULL")
    assert draft is not None and (draft.tokens, draft.mode, draft.prefix) == (32, "FULL", "draft")
    low = parse_capture_label("capture_8192_piecewise")
    assert low is not None and (low.tokens, low.mode) == (8192, "PIECEWISE")
    assert parse_capture_label("capture_128_decode") is None  # TraceLens's examples of other engines


@pytest.mark.parametrize(("name", "kind", "batch", "tokens", "q_len", "kv_len", "sums"), [
    # ATOM's model runner labels (examples from TraceLens's annotation_utils and ATOM's docs)
    ("prefill[bs=2 tok=14721 ctx=[7803, 6918]]", "prefill", 2, 14721, 7360, None, {"requests": 2, "sq": 14721}),
    ("prefill[bs=2 tok=14721 ctx=[7803, 6918] sqsq=108745533 sqsk=108745533 sk=14721]", "prefill", 2, 14721,
     7360, 7360, {"requests": 2, "sq": 14721, "sk": 14721, "sqsq": 108745533, "sqsk": 108745533}),
    ("decode[bs=117/128 tok=117 d=117]", "decode", 117, 117, 1, None, {"requests": 117, "sq": 117}),
    ("decode[bs=32 tok=128 d=32 spec=3 sqsq=512 sqsk=262144 sk=65536]", "decode", 32, 128, 4, 2048,
     {"requests": 32, "sq": 128, "sk": 65536, "sqsq": 512, "sqsk": 262144}),
    ("eager_decode[bs=4 tok=4 ctx=[10, 11, 12, 13]]", "decode", 4, 4, 1, None, {"requests": 4, "sq": 4}),
])
def test_atom_labels(name: str, kind: str, batch: int, tokens: int, q_len: int, kv_len: int | None,
                     sums: dict[str, int]) -> None:
    s = parse_engine_step(name)
    assert s is not None and (s.engine, s.format) == ("atom", "atom_step")
    assert (s.kind, s.batch, s.tokens, s.q_len, s.kv_len) == (kind, batch, tokens, q_len, kv_len)
    phase = s.context if kind == "prefill" else s.generation
    assert phase is not None and phase.as_dict() == sums
    assert looks_like_engine_step(name)


def test_a_users_decode_label_is_not_atoms() -> None:
    assert parse_engine_step("decode[3]") is None and not looks_like_engine_step("decode[3]")
