"""The agent loop on CPU with the tiny preset: kv-reuse prefills fewer tokens, same outputs."""

from __future__ import annotations

import pytest
from helpers import need_module

torch = need_module("torch")
need_module("transformers")


@pytest.fixture(scope="module")
def tiny_model():
    from tracekit.collectors import presets, workload

    cfg = workload.WorkloadConfig(
        model=presets.resolve_model("tiny"),
        device="cpu",
        dtype="fp32",
        shape="t",
        input_tokens=1,
        output_tokens=1,
    )
    model, _ = workload.build_model(cfg)
    return model


@pytest.mark.slow
def test_kv_reuse_prefills_only_new_tokens_and_matches_resend_outputs(tiny_model):
    from tracekit.collectors.agent import run_agent_loop

    # GIVEN a 4-step loop with a long system prompt and short tool results
    kw = dict(steps=4, system_tokens=600, output_tokens=5, tool_tokens=7)
    # WHEN it runs re-sending the history, and reusing the KV cache
    resend = run_agent_loop(tiny_model, mode="resend", **kw)
    reuse = run_agent_loop(tiny_model, mode="kv-reuse", **kw)
    # THEN both see the same growing prompts and produce the same token counts per step
    assert [s.prompt_tokens for s in resend.steps] == [600, 612, 624, 636]
    assert [s.prompt_tokens for s in reuse.steps] == [s.prompt_tokens for s in resend.steps]
    assert [s.output_tokens for s in reuse.steps] == [s.output_tokens for s in resend.steps] == [5] * 4
    # AND resend prefills the whole history, kv-reuse only what the cache lacks:
    # the tool result plus the last answer token (its KV was never computed).
    assert [s.prefilled_tokens for s in resend.steps] == [600, 612, 624, 636]
    assert [s.prefilled_tokens for s in reuse.steps] == [600, 8, 8, 8]
    # AND the steps after the first spend less time in prefill (8 tokens vs 600+),
    # measured by host timers: compare the sums to keep one noisy sample from deciding.
    assert sum(s.prefill_ns for s in reuse.steps[1:]) < sum(s.prefill_ns for s in resend.steps[1:])
    # AND each call's steps are one prefill then decode steps of q_len 1 over a growing KV
    call = reuse.calls[2]
    assert [(st.kind, st.q_len) for st in call.steps] == [("prefill", 8)] + [("decode", 1)] * 4
    assert [st.kv_len for st in call.steps] == [624, 625, 626, 627, 628]


def test_timed_generate_times_every_token(tiny_model):
    from tracekit.collectors.agent import timed_generate

    ids = torch.randint(1, 100, (2, 12))
    r = timed_generate(tiny_model, ids, 6)
    assert r.output_tokens == 6 and r.batch == 2 and r.prefilled_tokens == 12
    assert len(r.token_ns) == 6 and r.token_ns == sorted(r.token_ns)
    assert r.start_ns < r.token_ns[0] <= r.end_ns
    # record's definition (hooks.RequestRecord.metrics): (e2e - TTFT) / (output tokens - 1)
    assert r.ttft_ns == r.token_ns[0] - r.start_ns and r.e2e_ns == r.end_ns - r.start_ns
    assert r.tpot_ns == pytest.approx((r.e2e_ns - r.ttft_ns) / 5)
    assert r.metrics()["itl_ns"]["max"] >= r.metrics()["itl_ns"]["p50"] > 0
    assert len(r.steps) == 6 and r.steps[0].kind == "prefill"


def test_bad_agent_mode(tiny_model):
    from tracekit.collectors.agent import run_agent_loop

    with pytest.raises(ValueError, match="agent mode"):
        run_agent_loop(tiny_model, steps=1, system_tokens=4, output_tokens=2, tool_tokens=2, mode="cache")


def test_median_steps_over_repeated_loops(tiny_model):
    from tracekit.collectors.agent import AgentResult, AgentStep, median_steps

    def loop(ms: list[int]) -> AgentResult:
        return AgentResult(
            "kv-reuse", [AgentStep(i, 10 + i, 5, 3, m, 3 * m, m, 2 * m) for i, m in enumerate(ms)]
        )

    med = median_steps([loop([1, 50]), loop([3, 10]), loop([2, 20])])
    assert [s.prefill_ns for s in med] == [2, 20] and [s.e2e_ns for s in med] == [6, 60]
    assert [(s.prompt_tokens, s.prefilled_tokens) for s in med] == [(10, 5), (11, 5)]


@pytest.mark.slow
def test_timed_generate_without_annotations_times_the_same_tokens(tiny_model):
    from tracekit.collectors.agent import timed_generate

    ids = torch.randint(1, 100, (1, 8))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        r = timed_generate(tiny_model, ids, 4, annotate=False)
    from tracekit.model.stepnames import REQUEST_PREFIX, STEP_PREFIX

    names = {e.name for e in prof.events()}
    assert not any(n.startswith((STEP_PREFIX, REQUEST_PREFIX)) for n in names)
    # and with them (the default, used under the profiler) the same call is annotated
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof2:
        timed_generate(tiny_model, ids, 4)
    steps = [e.name for e in prof2.events() if e.name.startswith(STEP_PREFIX)]
    assert len(steps) == 4
    assert len(r.token_ns) == 4 and [s.kind for s in r.steps] == ["prefill", "decode", "decode", "decode"]


@pytest.mark.slow
def test_annotated_agent_loop_numbers_requests_and_steps_across_its_calls(tiny_model):
    """The loop's calls share one tracker: request i is step i of the loop, step ids run on."""
    from tracekit.collectors.agent import run_agent_loop
    from tracekit.model.stepnames import parse_request, parse_step

    ticks: list[int] = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        res = run_agent_loop(
            tiny_model, steps=3, system_tokens=20, output_tokens=4, tool_tokens=3, mode="kv-reuse",
            on_step=lambda: ticks.append(1),
        )  # fmt: skip
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    steps = [lab for e in events if (lab := parse_step(e.name)) is not None]
    reqs = [lab for e in events if (lab := parse_request(e.name)) is not None]
    assert [r.request_id for r in reqs] == [0, 1, 2]
    assert [r.name for r in reqs] == ["agent-kv-reuse-0", "agent-kv-reuse-1", "agent-kv-reuse-2"]
    assert [s.step_id for s in steps] == list(range(12))  # 3 calls x (prefill + 3 decode)
    assert [s.request_id for s in steps] == [0] * 4 + [1] * 4 + [2] * 4
    # kv-reuse: the tool result (3) and the last answer token (1) are prefilled
    assert [(s.kind, s.q_len) for s in steps[4:8]] == [("prefill", 4)] + [("decode", 1)] * 3
    assert len(ticks) == 12 == sum(len(c.steps) for c in res.calls)


def test_kv_reuse_agent_loop_in_compiled_mode(tiny_model):
    """The sweep's compiled mode (static cache set on generation_config) with a cache passed back:
    generate refused the two together until timed_generate cleared cache_implementation per call."""
    from tracekit.collectors import compiled
    from tracekit.collectors.agent import run_agent_loop, timed_generate

    compiled.enable(tiny_model, max_cache_len=128)
    try:
        assert tiny_model.generation_config.cache_implementation == "static"
        first = timed_generate(tiny_model, torch.randint(1, 100, (1, 20)), 4, annotate=False)
        assert type(first.cache).__name__ == "StaticCache"
        history = torch.cat([first.sequences, torch.randint(1, 100, (1, 3))], dim=1)
        second = timed_generate(tiny_model, history, 4, cache=first.cache, annotate=False)
        res = run_agent_loop(tiny_model, steps=3, system_tokens=20, output_tokens=4, tool_tokens=3, mode="kv-reuse")
    finally:
        compiled.disable(tiny_model)
    assert (second.prompt_tokens, second.prefilled_tokens, second.output_tokens) == (27, 4, 4)
    assert second.cache is first.cache  # the static cache itself was reused
    assert [s.prefilled_tokens for s in res.steps] == [20, 4, 4]
    assert [s.prompt_tokens for s in res.steps] == [20, 27, 34]
    assert all(s.output_tokens == 4 for s in res.steps)
