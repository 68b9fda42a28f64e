"""Step and request annotations, and host-side token timestamps.

``GenerationTracker.generate`` wraps one ``model.generate`` call: the request
in a ``record_function`` named by ``tracekit.model.stepnames.format_request``, every
forward pass inside it in one named by ``format_step``, and a streamer that
stamps each token when it is available on the host (after a device
synchronise), which is what TTFT and ITL mean.

Step boundaries come from one of two places (``STEPS_HOOKS`` / ``STEPS_STREAMER``):

* forward hooks on the model (eager): each step is exactly one forward pass,
  with its query and KV length read from the forward's arguments;
* the streamer (compiled mode, i.e. a static/compileable cache): Transformers
  compiles ``model.__call__`` itself (``get_compiled_call`` ->
  ``torch.compile(self.__call__)``), and a module's forward hooks run inside
  ``__call__``, so hooks that read clocks, ``cache.get_seq_length()`` (a
  ``.item()``) or open a ``record_function`` break the compiled graph and cost
  the CUDA graphs (docs/record.md has the measured cost). There is no outer module to hook instead (the compiled
  call *is* the outermost module), so the steps are taken between tokens on
  the host: the prefill opens when generate hands the streamer the prompt, and
  each token closes its step and opens the next. Shapes are known without
  looking inside: prefill q = prompt - cached, decode q = 1, kv = prompt + tokens
  so far. A streamer step therefore spans token to token (forward, logits
  processing, token copy), not the forward alone.

Everything is also kept in a host-side log (``steps``, ``requests``): the
tables are built from it, so they cover the whole run even when kernel-level
capture is limited to a window of steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tracekit.model.stats import percentile
from tracekit.model.stepnames import RequestLabel, StepLabel, format_request, format_step, step_kind

Clock = Callable[[], int]

STEPS_AUTO = "auto"  # streamer where generate may compile the forward, hooks elsewhere
STEPS_HOOKS = "hooks"
STEPS_STREAMER = "streamer"
STEP_SOURCES = (STEPS_AUTO, STEPS_HOOKS, STEPS_STREAMER)
# Transformers' cache implementations that are not compileable (the rest are static and may compile).
_DYNAMIC_CACHES = (None, "dynamic", "offloaded", "quantized")
# Makes a timing event with torch.cuda.Event's interface: record(), synchronize(), elapsed_time(other) -> ms.
EventFactory = Callable[[], Any]


@dataclass
class StepRecord:
    step_id: int
    request_id: int
    kind: str
    batch: int
    q_len: int
    kv_len: int
    cpu_start_ns: int  # host clock (time.time_ns)
    cpu_end_ns: int | None = None


@dataclass
class RequestRecord:
    request_id: int
    name: str
    batch: int
    input_tokens: int
    requested_tokens: int
    start_ns: int  # host clock, after a device synchronise
    token_ns: list[int] = field(default_factory=list)  # each token available on the host
    end_ns: int | None = None
    complete: bool = False
    # Device-side clock of the same request (CUDA events), ns after the start event; None if not taken.
    event_token_ns: list[int] | None = None
    event_end_ns: int | None = None

    def event_view(self) -> RequestRecord | None:
        """This request timed by its CUDA events instead of the host clock (start at 0)."""
        if self.event_token_ns is None:
            return None
        return RequestRecord(
            self.request_id,
            self.name,
            self.batch,
            self.input_tokens,
            self.requested_tokens,
            0,
            list(self.event_token_ns),
            self.event_end_ns,
            self.complete,
        )

    @property
    def output_tokens(self) -> int:
        return len(self.token_ns)

    def metrics(self) -> dict[str, Any]:
        """TTFT, TPOT, e2e and ITL as vLLM's benchmarks define them (host clock, ns)."""
        out: dict[str, Any] = {
            "request_id": self.request_id,
            "name": self.name,
            "batch": self.batch,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "complete": self.complete,
            "ttft_ns": None,
            "tpot_ns": None,
            "e2e_ns": None,
            "prefill_share": None,
        }
        if not self.token_ns:
            return out
        end = self.end_ns if self.end_ns is not None else self.token_ns[-1]
        ttft = self.token_ns[0] - self.start_ns
        e2e = end - self.start_ns
        out["ttft_ns"] = ttft
        out["e2e_ns"] = e2e
        out["prefill_share"] = ttft / e2e if e2e > 0 else None
        if self.output_tokens > 1:
            out["tpot_ns"] = (e2e - ttft) / (self.output_tokens - 1)
            itl = [b - a for a, b in zip(self.token_ns, self.token_ns[1:], strict=False)]
            out["itl_ns"] = {
                "mean": sum(itl) / len(itl),
                "p50": percentile(itl, 50),
                "p90": percentile(itl, 90),
                "p99": percentile(itl, 99),
                "max": max(itl),
            }
        return out


class TokenTimer:
    """A Transformers streamer (duck-typed: ``put``/``end``) that stamps tokens.

    ``generate`` calls ``put`` first with the prompt, then once per new token
    with the token already copied to the host; we synchronise once more so the
    stamp is "first token available on the host" even where that copy is async.
    A user's own streamer, if any, still gets every call.
    """

    def __init__(
        self,
        record: RequestRecord,
        clock: Clock,
        sync: Callable[[], None],
        inner: Any = None,
        on_token: Callable[[RequestRecord], None] | None = None,
        events: EventFactory | None = None,
        on_boundary: Callable[[int], None] | None = None,
    ) -> None:
        self.record = record
        self._clock = clock
        self._sync = sync
        self._inner = inner
        self._on_token = on_token
        self._events = events
        # Streamer step boundaries: called with 0 at the prompt, then with the token count after each token.
        self._on_boundary = on_boundary
        self.token_events: list[Any] = []
        self._seen_prompt = False

    def put(self, value: Any) -> None:
        if self._seen_prompt:
            self._sync()
            self.record.token_ns.append(self._clock())
            if self._events is not None:
                # Recorded when the token reached the host and waited on: the device-side
                # twin of the host stamp above, for the same token of the same request.
                ev = self._events()
                ev.record()
                ev.synchronize()
                self.token_events.append(ev)
            if self._on_boundary is not None:
                self._on_boundary(self.record.output_tokens)
            if self._on_token is not None:
                self._on_token(self.record)
        else:
            self._seen_prompt = True
            if self._on_boundary is not None:
                self._on_boundary(0)
        if self._inner is not None:
            self._inner.put(value)

    def end(self) -> None:
        if self._inner is not None:
            self._inner.end()


def _shape_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int]:
    ids = kwargs.get("input_ids")
    if ids is None and args:
        ids = args[0]
    if ids is None:
        ids = kwargs.get("inputs_embeds")
    if ids is None or getattr(ids, "ndim", 0) < 2:
        return 1, 1
    return int(ids.shape[0]), int(ids.shape[1])


def _past_length(kwargs: dict[str, Any]) -> int | None:
    # Transformers has passed the cache as ``past_key_values`` and (5.2x) as ``cache``.
    for key in ("past_key_values", "cache"):
        cache = kwargs.get(key)
        if cache is not None and hasattr(cache, "get_seq_length"):
            try:
                return int(cache.get_seq_length())
            except Exception:
                return None
    return None


def may_compile(model: Any, kwargs: dict[str, Any]) -> bool:
    """Whether this generate call may run a compiled forward (Transformers' auto-compile).

    Decided before generate runs, from what it will see: a compile config, a
    static cache implementation, or a compileable cache passed in. On a CPU
    Transformers does not actually compile a static cache; the answer is still
    yes there, so the CPU exercises the same (hook-free) path as the GPU.
    """
    gc = kwargs.get("generation_config") or getattr(model, "generation_config", None)
    if kwargs.get("disable_compile", getattr(gc, "disable_compile", False)):
        return False
    if getattr(gc, "compile_config", None) is not None:
        return True
    if kwargs.get("cache_implementation", getattr(gc, "cache_implementation", None)) not in _DYNAMIC_CACHES:
        return True
    for key in ("past_key_values", "cache"):
        cache = kwargs.get(key)
        if cache is not None and type(cache).__name__ != "DynamicCache":
            try:
                if bool(getattr(cache, "is_compileable", False)):
                    return True
            except Exception:  # a legacy tuple cache or a lazy one: not compileable
                pass
    return False


def _sync_for(model: Any) -> Callable[[], None]:
    import torch

    dev = getattr(model, "device", None)
    if dev is not None and getattr(dev, "type", "cpu") == "cuda" and torch.cuda.is_available():
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        return lambda: torch.cuda.synchronize(index)
    return lambda: None


class GenerationTracker:
    """Annotates and times ``generate`` calls; keeps the host-side log of steps and requests."""

    def __init__(
        self,
        *,
        annotate: bool = True,
        clock: Clock = time.time_ns,
        on_step_start: Callable[[int], None] | None = None,
        on_step_end: Callable[[int], None] | None = None,
        on_token: Callable[[RequestRecord], None] | None = None,
        events: EventFactory | None = None,
        steps: str = STEPS_AUTO,
    ) -> None:
        if steps not in STEP_SOURCES:
            raise ValueError(f"steps={steps!r}: use one of {', '.join(STEP_SOURCES)}")
        self.annotate = annotate
        self.steps_from = steps
        self.step_sources: dict[str, int] = {}  # requests per step source actually used
        self.clock = clock
        # When set, every request is also timed with device events (start, each token, end).
        self.events = events
        self.on_step_start = on_step_start
        self.on_step_end = on_step_end
        self.on_token = on_token
        self.steps: list[StepRecord] = []
        self.requests: list[RequestRecord] = []
        self.next_name: str | None = None  # the built-in workload names its requests
        self._depth = 0
        self._current: RequestRecord | None = None
        self._kv = 0
        self._open_step: StepRecord | None = None
        self._step_rf: Any = None
        self._past = 0  # streamer mode: tokens already in a cache passed to generate

    # --- forward hooks -----------------------------------------------------
    def _pre_forward(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        req = self._current
        if req is None or self._open_step is not None:
            return  # a nested forward (e.g. a draft model): the outer step covers it
        batch, q_len = _shape_of(args, kwargs)
        past = _past_length(kwargs)
        kv_len = (past if past is not None else self._kv) + q_len
        self._kv = kv_len
        self._open(req, batch, q_len, kv_len)

    def _streamer_boundary(self, tokens: int) -> None:
        """Streamer mode: the prompt (0) opens the prefill; token n closes its step and opens the next."""
        req = self._current
        if req is None:
            return
        self._close_step()
        if req.requested_tokens and tokens >= req.requested_tokens:
            return  # generate stops here: opening a step would leave one that never ran
        if tokens == 0:
            q_len = max(req.input_tokens - self._past, 1)
            kv_len = req.input_tokens
        else:
            q_len, kv_len = 1, req.input_tokens + tokens
        self._open(req, req.batch, q_len, kv_len)

    def _drop_open_step(self) -> None:
        """A streamer step opened after the last token (EOS came early): no forward ran in it."""
        rec = self._open_step
        if rec is None:
            return
        self._exit_step_annotation()
        self._open_step = None
        if self.steps and self.steps[-1] is rec:
            self.steps.pop()

    def _open(self, req: RequestRecord, batch: int, q_len: int, kv_len: int) -> None:
        step_id = len(self.steps)
        if self.on_step_start is not None:
            self.on_step_start(step_id)
        rec = StepRecord(step_id, req.request_id, step_kind(q_len), batch, q_len, kv_len, self.clock())
        self.steps.append(rec)
        self._open_step = rec
        if self.annotate:
            self._step_rf = _record_function(
                format_step(StepLabel(step_id, req.request_id, rec.kind, batch, q_len, kv_len))
            )
            self._step_rf.__enter__()

    def _exit_step_annotation(self) -> None:
        if self._step_rf is not None:
            self._step_rf.__exit__(None, None, None)
            self._step_rf = None

    def _post_forward(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        self._close_step()

    def _close_step(self) -> None:
        rec = self._open_step
        if rec is None:
            return
        self._exit_step_annotation()
        rec.cpu_end_ns = self.clock()
        self._open_step = None
        if self.on_step_end is not None:
            self.on_step_end(rec.step_id)

    # --- generate ---------------------------------------------------------
    def generate(self, orig: Callable[..., Any], model: Any, *args: Any, **kwargs: Any) -> Any:
        """Run ``orig(model, ...)`` (the real generate) as one annotated, timed request."""
        if self._depth > 0:
            return orig(model, *args, **kwargs)
        ids = kwargs.get("input_ids", kwargs.get("inputs"))
        if ids is None and args:
            ids = args[0]
        shape = tuple(getattr(ids, "shape", ()))
        batch, in_tokens = (int(shape[0]), int(shape[-1])) if len(shape) >= 2 else (1, 0)
        requested = kwargs.get("max_new_tokens")
        if requested is None:
            gc = kwargs.get("generation_config") or getattr(model, "generation_config", None)
            requested = getattr(gc, "max_new_tokens", None)
        rid = len(self.requests)
        name = self.next_name or f"request-{rid}"
        self.next_name = None
        sync = _sync_for(model)
        rec = RequestRecord(rid, name, batch, in_tokens, int(requested or 0), 0)
        source = self.steps_from
        if source == STEPS_AUTO:
            source = STEPS_STREAMER if may_compile(model, kwargs) else STEPS_HOOKS
        self.step_sources[source] = self.step_sources.get(source, 0) + 1
        by_streamer = source == STEPS_STREAMER
        if by_streamer:
            # Read on the host before generate runs: nothing of ours may run inside the compiled call.
            cached = _past_length(kwargs)
            self._past = cached if cached is not None else 0
        timer = TokenTimer(
            rec,
            self.clock,
            sync,
            kwargs.get("streamer"),
            self.on_token,
            self.events,
            on_boundary=self._streamer_boundary if by_streamer else None,
        )
        kwargs["streamer"] = timer
        handles = (
            []
            if by_streamer
            else [
                model.register_forward_pre_hook(self._pre_forward, with_kwargs=True),
                model.register_forward_hook(self._post_forward, with_kwargs=True, always_call=True),
            ]
        )
        rf = None
        if self.annotate:
            label = RequestLabel(rid, name, batch, in_tokens, rec.requested_tokens)
            rf = _record_function(format_request(label))
        # The request starts when the device is idle and generate is about to run:
        # our own set-up above is not part of it.
        sync()
        rec.start_ns = self.clock()
        events = self.events
        start_ev = None
        if events is not None:
            start_ev = events()
            start_ev.record()
        self.requests.append(rec)
        if rf is not None:
            rf.__enter__()
        self._depth += 1
        self._current = rec
        self._kv = 0
        try:
            out = orig(model, *args, **kwargs)
            rec.complete = True
            return out
        finally:
            if by_streamer and rec.complete:
                self._drop_open_step()
            else:
                self._close_step()  # a forward that raised leaves its step open
            self._depth -= 1
            self._current = None
            for h in handles:
                h.remove()
            try:
                sync()
            finally:
                rec.end_ns = self.clock()
                if rf is not None:
                    rf.__exit__(None, None, None)
            if rec.complete and events is not None and start_ev is not None:
                end_ev = events()
                end_ev.record()
                end_ev.synchronize()
                rec.event_token_ns = [_event_ns(start_ev, e) for e in timer.token_events]
                rec.event_end_ns = _event_ns(start_ev, end_ev)


def _event_ns(start: Any, ev: Any) -> int:
    return round(float(start.elapsed_time(ev)) * 1e6)  # elapsed_time is in ms


def cuda_event_factory(model: Any) -> EventFactory | None:
    """torch.cuda.Event with timing on the model's device, or None off CUDA."""
    import torch

    dev = getattr(model, "device", None)
    if dev is None or getattr(dev, "type", "cpu") != "cuda" or not torch.cuda.is_available():
        return None
    return lambda: torch.cuda.Event(enable_timing=True)


def _record_function(name: str) -> Any:
    import torch

    return torch.autograd.profiler.record_function(name)


class patch_generate:
    """Route every ``GenerationMixin.generate`` through a tracker for the duration.

    Any Transformers model that generates inside (the built-in workload, or a
    user's script) then gets the same step annotations and token timing.
    """

    def __init__(self, tracker: GenerationTracker) -> None:
        self.tracker = tracker
        self._orig: Any = None

    def __enter__(self) -> patch_generate:
        from transformers.generation.utils import GenerationMixin

        orig = GenerationMixin.generate
        tracker = self.tracker

        def generate(model: Any, *args: Any, **kwargs: Any) -> Any:
            return tracker.generate(orig, model, *args, **kwargs)

        generate.__wrapped__ = orig  # type: ignore[attr-defined]
        generate.__doc__ = orig.__doc__
        self._orig = orig
        GenerationMixin.generate = generate  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        from transformers.generation.utils import GenerationMixin

        if self._orig is not None:
            GenerationMixin.generate = self._orig  # type: ignore[method-assign]
            self._orig = None
