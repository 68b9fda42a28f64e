"""The generation primitives of a sweep: one timed generate call, and the agent loop.

``timed_generate`` runs one Transformers ``generate`` call with host timers on
every token: a streamer receives each new token after it has been copied to
the host (and synchronises once more, as record's ``TokenTimer`` does), so
token times are when the token was really available, eager or compiled.
TTFT / TPOT / ITL are computed by record's own ``hooks.RequestRecord.metrics``
(one definition for both verbs).

The steps are record's own: ``hooks.GenerationTracker`` in its streamer mode
(``STEPS_STREAMER``), which opens and closes step annotations between tokens on
the host, outside any compiled region. Forward hooks would not do here: in the
``compiled`` mode Transformers compiles ``model.__call__`` itself
(``get_compiled_call``), so hooks with clocks and ``record_function`` would land
inside the compiled region (graph breaks, no CUDA graph). Annotations are opened
only when asked (``annotate``): the timed repetitions run without them, like
record's unprofiled pass.

``run_agent_loop`` is the agentic workload: N steps whose prompt grows each
step by the previous answer plus a tool result of configurable length.
``resend`` sends the whole history every step (what a stateless API does);
``kv-reuse`` passes the previous step's KV cache back, so only the tokens the
cache lacks (the tool result and the last answer token) are prefilled. The
tokens prefilled are measured at the model's input, not computed.
"""

from __future__ import annotations

import inspect
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from tracekit.collectors.hooks import STEPS_STREAMER, GenerationTracker, RequestRecord

RESEND = "resend"
KV_REUSE = "kv-reuse"


@dataclass
class StepTime:
    """One forward pass as the host saw it (perf_counter_ns)."""

    kind: str
    q_len: int
    kv_len: int
    start_ns: int
    end_ns: int


@dataclass
class GenResult:
    batch: int
    prompt_tokens: int  # prompt length sent, per sequence
    prefilled_tokens: int  # query length of the first forward, measured at the model input
    output_tokens: int  # new tokens per sequence
    start_ns: int
    end_ns: int
    token_ns: list[int]  # host time each new token became available
    steps: list[StepTime]
    sequences: Any = None
    cache: Any = None

    def metrics(self) -> dict[str, Any]:
        """TTFT, TPOT, e2e, prefill share and ITL, by record's definitions (``RequestRecord.metrics``)."""
        rec = RequestRecord(0, "", self.batch, self.prompt_tokens, self.output_tokens, self.start_ns,
                            list(self.token_ns), self.end_ns, True)  # fmt: skip
        return rec.metrics()

    @property
    def ttft_ns(self) -> int:
        return int(self.metrics()["ttft_ns"])

    @property
    def e2e_ns(self) -> int:
        return int(self.metrics()["e2e_ns"])

    @property
    def tpot_ns(self) -> float | None:
        v = self.metrics()["tpot_ns"]
        return float(v) if v is not None else None


def _cache_kwarg(model: Any) -> str:
    # Transformers 5.2x renamed generate's past_key_values to cache; 5.17 has only the old name.
    params = inspect.signature(model.generate).parameters
    return "cache" if "cache" in params else "past_key_values"


def cache_length(cache: Any) -> int:
    if cache is None:
        return 0
    try:
        return int(cache.get_seq_length())
    except Exception:  # legacy tuple caches
        return int(cache[0][0].shape[-2])


def step_tracker(annotate: bool = True, on_step: Any = None) -> GenerationTracker:
    """Record's tracker as the sweep runs it: streamer steps, perf_counter clock, ``on_step`` after each step."""
    return GenerationTracker(
        annotate=annotate,
        clock=time.perf_counter_ns,
        steps=STEPS_STREAMER,
        on_step_end=(lambda _step_id: on_step()) if on_step is not None else None,
    )


def timed_generate(
    model: Any,
    input_ids: Any,
    max_new_tokens: int,
    *,
    cache: Any = None,
    request_name: str = "request",
    on_step: Any = None,
    annotate: bool = True,
    tracker: GenerationTracker | None = None,
) -> GenResult:
    """One greedy generate of exactly ``max_new_tokens`` tokens, timed on the host.

    ``cache``: a KV cache from a previous call (its sequences must be a prefix of
    ``input_ids``); only the tokens it lacks are prefilled. ``annotate``: open
    tracekit's request and step ``record_function`` annotations (needed only
    under the profiler). ``tracker``: carry request and step ids on from earlier
    calls (the agent loop); its own ``annotate`` and step callback then apply.
    """
    import torch

    tracker = tracker or step_tracker(annotate, on_step)
    batch, prompt_len = int(input_ids.shape[0]), int(input_ids.shape[1])
    past = cache_length(cache)
    prefilled: list[int] = []

    def first_forward(_mod: Any, args: Any, kwargs: Any) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            prefilled.append(int(ids.shape[1]))
        handle.remove()  # only the prefill: never a hook inside a compiled decode

    handle = model.register_forward_pre_hook(first_forward, with_kwargs=True)
    kwargs: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "min_new_tokens": max_new_tokens,  # random weights emit EOS at random: fix the length
        "do_sample": False,
        "return_dict_in_generate": True,
        "pad_token_id": 0,
        "attention_mask": torch.ones_like(input_ids),
    }
    if cache is not None:
        kwargs[_cache_kwarg(model)] = cache
        # The compiled mode sets generation_config.cache_implementation ("static") and max_cache_len;
        # generate refuses the first next to a cache object and warns about the second. The cache
        # passed (a static one, from the previous call) already says both.
        kwargs["cache_implementation"] = None
        if getattr(model.generation_config, "max_cache_len", None) is not None:
            kwargs["max_cache_len"] = None
    tracker.next_name = request_name
    first_step = len(tracker.steps)
    try:
        with torch.inference_mode():
            out = tracker.generate(_generate, model, input_ids, **kwargs)
    finally:
        handle.remove()
    rec = tracker.requests[-1]
    seqs = out.sequences
    new_cache = getattr(out, "past_key_values", None)
    if new_cache is None:
        new_cache = getattr(out, "cache", None)
    steps = [
        StepTime(s.kind, s.q_len, s.kv_len, s.cpu_start_ns, s.cpu_end_ns)
        for s in tracker.steps[first_step:]
        if s.cpu_end_ns is not None
    ]
    return GenResult(
        batch=batch,
        prompt_tokens=prompt_len,
        prefilled_tokens=prefilled[0] if prefilled else prompt_len - past,
        output_tokens=int(seqs.shape[1]) - prompt_len,
        start_ns=rec.start_ns,
        end_ns=rec.end_ns if rec.end_ns is not None else rec.start_ns,
        token_ns=list(rec.token_ns),
        steps=steps,
        sequences=seqs,
        cache=new_cache,
    )


def _generate(model: Any, *args: Any, **kwargs: Any) -> Any:
    return model.generate(*args, **kwargs)


@dataclass(frozen=True)
class AgentStep:
    step: int
    prompt_tokens: int  # history length sent
    prefilled_tokens: int  # tokens actually run through prefill (measured)
    output_tokens: int
    ttft_ns: int
    e2e_ns: int
    prefill_ns: int  # host time of the prefill forward
    decode_ns: int


@dataclass
class AgentResult:
    mode: str
    steps: list[AgentStep] = field(default_factory=list)
    calls: list[GenResult] = field(default_factory=list)


def run_agent_loop(
    model: Any,
    *,
    steps: int,
    system_tokens: int,
    output_tokens: int,
    tool_tokens: int,
    mode: str = RESEND,
    batch: int = 1,
    seed: int = 0,
    vocab_size: int | None = None,
    on_step: Any = None,
    annotate: bool = True,
) -> AgentResult:
    """Run the agent loop; every step's history is the previous history + answer + tool result.

    The system prompt and tool results are drawn from a seeded generator, so a
    ``resend`` and a ``kv-reuse`` run see the same tool results.
    """
    import torch

    if mode not in (RESEND, KV_REUSE):
        raise ValueError(f"agent mode must be {RESEND} or {KV_REUSE}, not {mode!r}")
    vocab = int(vocab_size or model.config.vocab_size)
    device = model.device
    gen = torch.Generator().manual_seed(seed)

    def tokens(n: int) -> Any:
        # Token 0 is the pad id: keep it out of prompts.
        return torch.randint(1, vocab, (batch, n), generator=gen).to(device)

    history = tokens(system_tokens)
    cache = None
    result = AgentResult(mode)
    tracker = step_tracker(annotate, on_step)  # one for the loop: request i, step ids running on
    for i in range(steps):
        r = timed_generate(
            model,
            history,
            output_tokens,
            cache=cache if mode == KV_REUSE else None,
            request_name=f"agent-{mode}-{i}",
            tracker=tracker,
        )
        result.calls.append(r)
        prefill = r.steps[0].end_ns - r.steps[0].start_ns if r.steps else r.ttft_ns
        result.steps.append(
            AgentStep(
                step=i,
                prompt_tokens=r.prompt_tokens,
                prefilled_tokens=r.prefilled_tokens,
                output_tokens=r.output_tokens,
                ttft_ns=r.ttft_ns,
                e2e_ns=r.e2e_ns,
                prefill_ns=prefill,
                decode_ns=r.e2e_ns - prefill,
            )
        )
        history = torch.cat([r.sequences, tokens(tool_tokens)], dim=1)
        cache = r.cache
        r.sequences = None  # keep only the cache alive between steps
        r.cache = None
    return result


def median_steps(loops: list[AgentResult]) -> list[AgentStep]:
    """Per step, the median over repeated loops of every timing (token counts are equal across loops)."""
    if not loops:
        return []
    out = []
    for i, first in enumerate(loops[0].steps):
        same = [lp.steps[i] for lp in loops if len(lp.steps) > i]

        def med(attr: str, same: list[AgentStep] = same) -> int:
            return int(statistics.median(getattr(s, attr) for s in same))

        out.append(
            AgentStep(
                step=first.step,
                prompt_tokens=first.prompt_tokens,
                prefilled_tokens=first.prefilled_tokens,
                output_tokens=first.output_tokens,
                ttft_ns=med("ttft_ns"),
                e2e_ns=med("e2e_ns"),
                prefill_ns=med("prefill_ns"),
                decode_ns=med("decode_ns"),
            )
        )
    return out
