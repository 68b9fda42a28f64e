"""The generation primitives of a sweep: one timed generate call, and the agent loop.

``timed_generate`` runs one Transformers ``generate`` call with host timers on
every token: a streamer receives each new token after it has been copied to
the host (and synchronises once more, as record's ``TokenTimer`` does), so
token times are when the token was really available, eager or compiled.
TTFT / TPOT / ITL are computed by record's own ``hooks.RequestRecord.metrics``
(one definition for both verbs).

Why not record's ``GenerationTracker`` as is: it finds step boundaries with
forward hooks on the model, and in the ``compiled`` mode Transformers compiles
``model.__call__`` itself (``get_compiled_call``), so hooks with clocks and
``record_function`` would land inside the compiled region (graph breaks, no
CUDA graph). Here the streamer opens and closes the step annotations between
tokens, on the host, outside any compiled region; and only when asked
(``annotate``): the timed repetitions run without them, like record's
unprofiled pass. Measured on CPU (tiny preset), the streamer costs ~10 µs per
token with annotations and ~4 µs without; record's tracker ~4 µs without and
~19 µs with: noise next to a 19 ms eager decode step.

``run_agent_loop`` is the agentic workload: N steps whose prompt grows each
step by the previous answer plus a tool result of configurable length.
``resend`` sends the whole history every step (what a stateless API does);
``kv-reuse`` passes the previous step's KV cache back, so only the tokens the
cache lacks (the tool result and the last answer token) are prefilled. The
tokens prefilled are measured at the model's input, not computed.
"""

from __future__ import annotations

import contextlib
import inspect
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from tracekit.collectors.hooks import RequestRecord

from tracekit import stepnames

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


def _sync(device: Any) -> None:
    import torch

    if getattr(device, "type", "cpu") == "cuda":
        torch.cuda.synchronize(device)


class _Streamer:
    """Token timer and step annotator; Transformers calls put() with the prompt, then each token."""

    def __init__(
        self,
        request_id: int,
        batch: int,
        past_len: int,
        prompt_len: int,
        step_base: int,
        on_step: Any,
        annotate: bool = True,
        sync: Any = None,
        expected_tokens: int | None = None,
    ):
        self.expected_tokens = expected_tokens
        self.annotate = annotate
        self.sync = sync
        self.request_id = request_id
        self.batch = batch
        self.past_len = past_len
        self.prompt_len = prompt_len
        self.step_base = step_base
        self.on_step = on_step  # profiler.step or None
        self.token_ns: list[int] = []
        self.steps: list[StepTime] = []
        self._open: Any = None
        self._open_start = 0
        self._open_kind = ("prefill", 0, 0)

    def _begin(self, idx: int) -> None:
        import torch

        if idx == 0:
            q, kv = self.prompt_len - self.past_len, self.prompt_len
        else:
            q, kv = 1, self.prompt_len + idx
        kind = stepnames.step_kind(q)
        if self.annotate:
            label = stepnames.StepLabel(self.step_base + idx, self.request_id, kind, self.batch, q, kv)
            self._open = torch.profiler.record_function(stepnames.format_step(label))
            self._open.__enter__()
        else:
            self._open = _NO_ANNOTATION
        self._open_start = time.perf_counter_ns()
        self._open_kind = (kind, q, kv)

    def _finish(self, now: int) -> None:
        if self._open is None:
            return
        if self._open is not _NO_ANNOTATION:
            self._open.__exit__(None, None, None)
        kind, q, kv = self._open_kind
        self.steps.append(StepTime(kind, q, kv, self._open_start, now))
        self._open = None
        if self.on_step is not None:
            self.on_step()

    def put(self, value: Any) -> None:
        if not self.token_ns and self._open is None and not self.steps:
            # The first put is the prompt itself: the prefill starts now.
            self._begin(0)
            return
        if self.sync is not None:
            self.sync()  # as record's TokenTimer: the token is on the host even if the copy was async
        now = time.perf_counter_ns()
        self.token_ns.append(now)
        self._finish(now)
        # After the last token no forward follows: opening a step then would leave an
        # empty step annotation in the trace (a record_function cannot be taken back).
        if self.expected_tokens is None or len(self.token_ns) < self.expected_tokens:
            self._begin(len(self.token_ns))

    def end(self) -> None:
        # A step opened after the last token (length unknown) never ran a forward: drop it.
        if self._open is not None:
            if self._open is not _NO_ANNOTATION:
                self._open.__exit__(None, None, None)
            self._open = None


_NO_ANNOTATION = object()  # an open step without a record_function (annotate=False)


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


def timed_generate(
    model: Any,
    input_ids: Any,
    max_new_tokens: int,
    *,
    cache: Any = None,
    request_id: int = 0,
    request_name: str = "request",
    step_base: int = 0,
    on_step: Any = None,
    annotate: bool = True,
) -> GenResult:
    """One greedy generate of exactly ``max_new_tokens`` tokens, timed on the host.

    ``cache``: a KV cache from a previous call (its sequences must be a prefix of
    ``input_ids``); only the tokens it lacks are prefilled. ``annotate``: open
    tracekit's request and step ``record_function`` annotations (needed only
    under the profiler).
    """
    import torch

    batch, prompt_len = int(input_ids.shape[0]), int(input_ids.shape[1])
    past = cache_length(cache)
    prefilled: list[int] = []

    def first_forward(_mod: Any, args: Any, kwargs: Any) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            prefilled.append(int(ids.shape[1]))
        handle.remove()  # only the prefill: never a hook inside a compiled decode

    handle = model.register_forward_pre_hook(first_forward, with_kwargs=True)
    device = input_ids.device
    sync = (lambda: _sync(device)) if getattr(device, "type", "cpu") == "cuda" else None
    # min_new_tokens = max_new_tokens below: exactly this many tokens come.
    streamer = _Streamer(
        request_id, batch, past, prompt_len, step_base, on_step, annotate, sync, max_new_tokens
    )
    kwargs: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "min_new_tokens": max_new_tokens,  # random weights emit EOS at random: fix the length
        "do_sample": False,
        "streamer": streamer,
        "return_dict_in_generate": True,
        "pad_token_id": 0,
        "attention_mask": torch.ones_like(input_ids),
    }
    if cache is not None:
        kwargs[_cache_kwarg(model)] = cache
    label = stepnames.RequestLabel(request_id, request_name, batch, prompt_len, max_new_tokens)
    request_rf: Any = (
        torch.profiler.record_function(stepnames.format_request(label))
        if annotate
        else contextlib.nullcontext()
    )
    try:
        _sync(device)
        start = time.perf_counter_ns()
        with torch.inference_mode(), request_rf:
            out = model.generate(input_ids, **kwargs)
        _sync(device)
        end = time.perf_counter_ns()
    finally:
        handle.remove()
    seqs = out.sequences
    new_cache = getattr(out, "past_key_values", None)
    if new_cache is None:
        new_cache = getattr(out, "cache", None)
    return GenResult(
        batch=batch,
        prompt_tokens=prompt_len,
        prefilled_tokens=prefilled[0] if prefilled else prompt_len - past,
        output_tokens=int(seqs.shape[1]) - prompt_len,
        start_ns=start,
        end_ns=end,
        token_ns=streamer.token_ns,
        steps=streamer.steps,
        sequences=seqs,
        cache=new_cache,
    )


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
    step_base = 0
    for i in range(steps):
        r = timed_generate(
            model,
            history,
            output_tokens,
            cache=cache if mode == KV_REUSE else None,
            request_id=i,
            request_name=f"agent-{mode}-{i}",
            step_base=step_base,
            on_step=on_step,
            annotate=annotate,
        )
        step_base += len(r.steps)
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
