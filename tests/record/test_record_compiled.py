"""Compiled mode: step boundaries from the streamer, no hook inside the compiled call.

Transformers compiles ``model.__call__`` itself (``get_compiled_call``), so a
forward hook runs inside the compiled region. On the H200 that cost the CUDA
graphs (``record --compile`` decoded at 14.8 ms per token instead of ~3.6 ms).
The CPU cannot run CUDA graphs, but it can make dynamo prove there is no graph
break: Transformers' compile on every device with ``fullgraph=True`` raises on
the first break.
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers import need_module

from tracekit.collectors import compiled
from tracekit.collectors.hooks import (
    STEPS_HOOKS,
    STEPS_STREAMER,
    GenerationTracker,
    may_compile,
    patch_generate,
)
from tracekit.collectors.presets import MODEL_PRESETS

torch = need_module("torch")
need_module("transformers")

PROMPT, NEW = 9, 5


def _tiny() -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    p = MODEL_PRESETS["tiny"]
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(p.model_type, **p.config)).eval()


def _kwargs(streamer: Any = None) -> dict[str, Any]:
    ids = torch.randint(10, 4000, (2, PROMPT), generator=torch.Generator().manual_seed(1))
    kw: dict[str, Any] = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "min_new_tokens": NEW,
        "max_new_tokens": NEW,
        "do_sample": False,
        "pad_token_id": 0,
    }
    if streamer is not None:
        kw["streamer"] = streamer
    return kw


def _rows(tr: GenerationTracker) -> list[tuple[int, int, str, int, int, int]]:
    return [(s.step_id, s.request_id, s.kind, s.batch, s.q_len, s.kv_len) for s in tr.steps]


class HookSpy:
    """A user streamer that notes, at every token, how many forward hooks the model's modules carry."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.hooks_seen: list[int] = []

    def put(self, value: Any) -> None:
        self.hooks_seen.append(
            sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in self.model.modules())
        )

    def end(self) -> None:
        pass


def test_compiled_mode_has_the_same_steps_as_eager_and_no_hook_on_the_model() -> None:
    model = _tiny()
    # GIVEN the same two requests, eager (dynamic cache) ...
    eager = GenerationTracker(annotate=True)
    spy_e = HookSpy(model)
    with patch_generate(eager):
        model.generate(**_kwargs(spy_e))
        model.generate(**_kwargs())
    # ... and in compiled mode (record --compile's set-up: static cache, compile config)
    compiled.enable(model, max_cache_len=PROMPT + NEW)
    comp = GenerationTracker(annotate=True)
    spy_c = HookSpy(model)
    with patch_generate(comp):
        model.generate(**_kwargs(spy_c))
        model.generate(**_kwargs())
    # THEN the steps table rows are identical: 1 prefill + 4 decodes per request, same ids and lengths
    assert _rows(comp) == _rows(eager)
    assert [r[2:] for r in _rows(comp)[:NEW]] == [("prefill", 2, PROMPT, PROMPT)] + [
        ("decode", 2, 1, PROMPT + i) for i in range(1, NEW)
    ]
    assert eager.step_sources == {STEPS_HOOKS: 2} and comp.step_sources == {STEPS_STREAMER: 2}
    # AND eager had its hooks on the model while generating, compiled mode none at all
    assert spy_e.hooks_seen and min(spy_e.hooks_seen) >= 2
    assert len(spy_c.hooks_seen) == NEW + 1 and max(spy_c.hooks_seen) == 0
    # AND every step closed, in order, and no step was left open after the last token
    for s in comp.steps:
        assert s.cpu_end_ns is not None and s.cpu_end_ns >= s.cpu_start_ns
    assert comp._open_step is None


def _force_compile(model: Any) -> None:
    """Transformers' own auto-compile, on the CPU too, failing on any graph break."""
    from transformers import CompileConfig

    compiled.enable(model, max_cache_len=PROMPT + NEW)
    cc = CompileConfig(backend="eager", fullgraph=True)  # eager backend: dynamo's tracing only, fast
    cc._compile_all_devices = True
    model.generation_config.compile_config = cc


@pytest.mark.filterwarnings("ignore:Dynamo does not know")
@pytest.mark.slow
def test_compiled_decode_has_no_graph_break_while_recording() -> None:
    model = _tiny()
    _force_compile(model)
    eager = GenerationTracker(annotate=False)
    with patch_generate(eager):
        model.generate(**_kwargs())  # compiles (fullgraph) without any tracker code inside
    # WHEN recording with the default step source
    tr = GenerationTracker(annotate=True)
    with patch_generate(tr):
        model.generate(**_kwargs())
    # THEN the compiled decode ran whole (fullgraph raises on a break) and the steps are exact
    assert tr.step_sources == {STEPS_STREAMER: 1}
    assert [r[2:] for r in _rows(tr)] == [("prefill", 2, PROMPT, PROMPT)] + [
        ("decode", 2, 1, PROMPT + i) for i in range(1, NEW)
    ]
    # AND the check has teeth: forward hooks inside the same compiled call do break the graph
    hooks = GenerationTracker(annotate=True, steps=STEPS_HOOKS)
    with patch_generate(hooks), pytest.raises(Exception, match=r"(?i)time|item|unsupported|graph"):
        model.generate(**_kwargs())


class _Handle:
    def remove(self) -> None:
        pass


class FakeModel:
    device = None
    generation_config = None
    hooked = 0

    def register_forward_pre_hook(self, *a: Any, **k: Any) -> _Handle:
        self.hooked += 1
        return _Handle()

    def register_forward_hook(self, *a: Any, **k: Any) -> _Handle:
        self.hooked += 1
        return _Handle()


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def _gen(clock: Clock, tokens: int) -> Any:
    def gen(model: Any, *args: Any, streamer: Any, **kwargs: Any) -> None:
        streamer.put("prompt")
        for _ in range(tokens):
            clock.now += 1_000
            streamer.put("token")
        streamer.end()

    return gen


class FakeCache:
    """A compileable cache already holding ``n`` tokens (a follow-up turn)."""

    is_compileable = True

    def __init__(self, n: int) -> None:
        self.n = n

    def get_seq_length(self) -> int:
        return self.n


def test_streamer_steps_span_token_to_token_and_an_early_stop_leaves_no_phantom_step() -> None:
    clock = Clock()
    tr = GenerationTracker(annotate=False, clock=clock, steps=STEPS_STREAMER)
    model = FakeModel()
    ids = torch.zeros((1, 12), dtype=torch.long)
    # GIVEN a request asking for 6 tokens that stops (EOS) after 3, with 4 tokens already cached
    tr.generate(_gen(clock, 3), model, input_ids=ids, max_new_tokens=6, past_key_values=FakeCache(4))
    # THEN three steps, each closed at its token's stamp; the step opened after token 3 is gone
    assert [(s.kind, s.q_len, s.kv_len) for s in tr.steps] == [
        ("prefill", 8, 12),
        ("decode", 1, 13),
        ("decode", 1, 14),
    ]
    assert [(s.cpu_start_ns, s.cpu_end_ns) for s in tr.steps] == [(0, 1_000), (1_000, 2_000), (2_000, 3_000)]
    assert tr.requests[0].token_ns == [1_000, 2_000, 3_000]
    assert model.hooked == 0
    # AND a request of exactly its length opens no step after its last token
    tr.generate(_gen(clock, 2), model, input_ids=ids, max_new_tokens=2)
    assert [s.step_id for s in tr.steps] == [0, 1, 2, 3, 4] and tr._open_step is None


def test_a_failed_streamer_request_keeps_its_running_step() -> None:
    clock = Clock()
    tr = GenerationTracker(annotate=False, clock=clock, steps=STEPS_STREAMER)
    ids = torch.zeros((1, 5), dtype=torch.long)

    def boom(model: Any, *args: Any, streamer: Any, **kwargs: Any) -> None:
        streamer.put("prompt")
        clock.now += 1_000
        streamer.put("token")
        clock.now += 500
        raise RuntimeError("forward failed")

    with pytest.raises(RuntimeError):
        tr.generate(boom, FakeModel(), input_ids=ids, max_new_tokens=4)
    # the decode step that was running when it failed is kept, closed at the failure
    assert [(s.kind, s.cpu_end_ns) for s in tr.steps] == [("prefill", 1_000), ("decode", 1_500)]


def test_which_generate_calls_may_compile() -> None:
    from transformers import CompileConfig, GenerationConfig

    class M:
        def __init__(self, gc: Any) -> None:
            self.generation_config = gc

    assert not may_compile(M(GenerationConfig()), {})
    assert may_compile(M(GenerationConfig(cache_implementation="static")), {})
    assert may_compile(M(GenerationConfig()), {"cache_implementation": "static"})
    assert not may_compile(M(GenerationConfig(cache_implementation="dynamic")), {})
    gc = GenerationConfig()
    gc.compile_config = CompileConfig()
    assert may_compile(M(gc), {})
    assert not may_compile(M(gc), {"disable_compile": True})
    assert may_compile(M(GenerationConfig()), {"past_key_values": FakeCache(3)})
    with pytest.raises(ValueError, match="steps="):
        GenerationTracker(steps="forward")


def test_graph_capture_pass_without_a_gpu_is_just_the_warm_up(tmp_path: Any) -> None:
    # On CPU there are no CUDA graphs: the calls run (they are the warm-up), nothing is written, run.json says why.
    calls: list[int] = []
    out = compiled.record_captures(lambda: calls.append(1), tmp_path, cuda=False)
    assert out == {"captured": False, "reason": "no CUDA graphs without a GPU"}
    assert calls == [1, 1] and not (tmp_path / compiled.CAPTURE_DIR).exists()


def test_graph_capture_pass_profiles_the_first_calls_with_shapes(tmp_path: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # The GPU parts stubbed (no CUDA here): the first two calls (where CUDA-graph trees capture the
    # decode and the prefill graphs) run under the profiler; the trace lands in capture_traces/
    # gzipped, with the ops' shapes. Nothing resets the graphs: the timed requests replay these.
    import gzip
    import json

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    calls: list[int] = []

    def once() -> None:
        calls.append(1)
        torch.randn(8, 16) @ torch.randn(16, 4)

    out = compiled.record_captures(once, tmp_path, cuda=True)
    assert out["captured"] is True and calls == [1, 1] and out["calls"] == 2
    path = tmp_path / out["file"]
    assert path == tmp_path / compiled.CAPTURE_DIR / compiled.CAPTURE_FILE
    doc = json.loads(gzip.decompress(path.read_bytes()))
    dims = [e["args"].get("Input Dims") for e in doc["traceEvents"] if e.get("name") == "aten::mm"]
    assert dims == [[[8, 16], [16, 4]]] * 2
    # a call that fails is the warm-up failing: it raises, as the warm-up would
    with pytest.raises(ZeroDivisionError):
        compiled.record_captures(lambda: 1 / 0, tmp_path, cuda=True)
    # a profiler that fails leaves the warm-up to run unprofiled, and says so
    import torch.profiler as tp

    def broken(*a: Any, **k: Any) -> Any:
        raise RuntimeError("CUPTI unavailable")

    monkeypatch.setattr(tp, "profile", broken)
    calls.clear()
    bad = compiled.record_captures(once, tmp_path, cuda=True)
    assert bad["captured"] is False and "CUPTI unavailable" in bad["reason"] and calls == [1, 1]
