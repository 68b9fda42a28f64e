"""Speculative decoding: Transformers' assisted generation, every draft and verify forward recorded.

``tracekit record --assistant PRESET|PATH|layers:N`` runs each request twice in one run:
plainly (``generate``) and with the draft model proposing tokens that the target then
verifies in one pass (``generate(assistant_model=...)``). One round of assisted decoding
is: draft forwards (``get_candidates``: the draft model's own generate), then one target
forward over the K proposed tokens + 1 (``verify``; q_len = K + 1), then the accepted
count (``update_candidate_strategy``). The first round's target forward also prefills the
prompt: it is a ``prefill`` step with q_len = prompt + K.

Hooks (instance level, removed on exit): the target's ``_get_candidate_generator`` is
wrapped so that the generator it returns reports its rounds; forward pre/post hooks on
the target and the draft open a ``tracekit.step`` annotation per forward (kind draft when
called inside ``get_candidates``, else verify / prefill / decode), and each round ends
with a ``tracekit.accept`` marker (tracekit.model.stepnames). Tokens are stamped by a
streamer that counts every token of a round (a round appends several at once).

The draft: a preset (random weights: its vocabulary must be the target's), a local model
directory, or ``layers:N``: the target's first N layers with its embeddings, final norm
and LM head, shared (no copy), so that the draft agrees with the target often even with
random weights. Drafting proposes exactly ``--assistant-tokens`` tokens per round
(constant schedule, confidence threshold 0), so runs compare.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tracekit.collectors.hooks import RequestRecord
from tracekit.collectors.options import RecordOptions
from tracekit.collectors.recording import Recording, create_run
from tracekit.collectors.tables import requests_table
from tracekit.collectors.timing import timings
from tracekit.errors import TracekitError, UsageError
from tracekit.model import schema as _schema
from tracekit.model.stepnames import (
    AcceptLabel,
    RequestLabel,
    StepLabel,
    format_accept,
    format_request,
    format_step,
    step_kind,
)
from tracekit.store.rundir import RunDir

LAYERS_PREFIX = "layers:"


# --- the draft model --------------------------------------------------------------------


def truncated_draft(target: Any, layers: int) -> Any:
    """The target's first ``layers`` decoder layers, embeddings, final norm and LM head, shared.

    Built on the meta device, then every module is the target's own object: no weight is
    copied, and nothing of the draft is left unmaterialised (checked).
    """
    import torch
    from transformers import AutoModelForCausalLM

    total = int(getattr(target.config, "num_hidden_layers", 0) or 0)
    if not 1 <= layers < total:
        raise UsageError(f"--assistant layers:{layers}: give 1 to {total - 1} (the target has {total} layers)")
    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = layers
    if isinstance(getattr(cfg, "layer_types", None), list):
        cfg.layer_types = cfg.layer_types[:layers]
    with torch.device("meta"):
        draft = AutoModelForCausalLM.from_config(cfg, dtype=target.dtype)
    base_t, base_d = target.get_decoder(), draft.get_decoder()
    if not hasattr(base_t, "layers"):
        raise UsageError(f"--assistant layers:N: {type(target).__name__} has no decoder layer list to truncate")
    for name, child in base_t.named_children():
        setattr(base_d, name, torch.nn.ModuleList(list(child)[:layers]) if name == "layers" else child)
    for name, child in target.named_children():
        if child is not base_t:
            setattr(draft, name, child)
    left = [n for n, t in [*draft.named_parameters(), *draft.named_buffers()] if t.device.type == "meta"]
    if left:
        raise UsageError(f"--assistant layers:N: {type(target).__name__} keeps state outside its layers ({left[:3]})")
    draft.generation_config = copy.deepcopy(target.generation_config)
    return draft.eval()


def build_draft(spec: str, target: Any, cfg: Any) -> tuple[Any, dict[str, Any]]:
    """(draft model, its description for run.json) from ``--assistant``."""
    from tracekit.collectors import presets
    from tracekit.collectors import workload as wl

    if spec.startswith(LAYERS_PREFIX):
        try:
            n = int(spec[len(LAYERS_PREFIX):])
        except ValueError:
            raise UsageError(f"--assistant {spec!r}: use layers:N with N a number of layers") from None
        draft = truncated_draft(target, n)
        info = {"assistant": spec, "kind": "truncated target (shared weights)", "layers": n,
                "parameters": int(sum(p.numel() for p in draft.parameters()))}
        return draft, info
    dcfg = wl.WorkloadConfig(model=presets.resolve_model(spec), device=cfg.device, dtype=cfg.dtype, shape=cfg.shape,
                             input_tokens=cfg.input_tokens, output_tokens=cfg.output_tokens, seed=cfg.seed + 1,
                             trust_remote_code=cfg.trust_remote_code)
    draft, info = wl.build_model(dcfg)
    tv, dv = int(target.config.vocab_size), int(draft.config.vocab_size)
    if tv != dv:
        raise UsageError(f"--assistant {spec}: its vocabulary ({dv}) is not the target's ({tv}); "
                         "assisted generation needs one tokenizer (try layers:N)")
    return draft, {"assistant": spec, "kind": "model", **{k: info.get(k) for k in ("preset", "path", "parameters")}}


def configure_draft(draft: Any, tokens: int) -> None:
    """Exactly ``tokens`` proposals per round: constant schedule, no confidence cut-off."""
    gc = draft.generation_config
    gc.num_assistant_tokens = tokens
    gc.num_assistant_tokens_schedule = "constant"
    gc.assistant_confidence_threshold = 0.0


# --- the hooks ------------------------------------------------------------------------------


@dataclass
class SpecStep:
    step_id: int
    request_id: int
    kind: str  # prefill | decode | draft | verify
    q_len: int
    kv_len: int
    cpu_start_ns: int
    round: int | None = None
    proposed: int | None = None
    accepted: int | None = None
    cpu_end_ns: int | None = None

    @property
    def batch(self) -> int:
        return 1


@dataclass
class SpecRequest(RequestRecord):
    assistant: str | None = None
    plain_request_id: int | None = None
    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class _Tokens:
    """A streamer stamping every generated token (a round hands several at once) after a sync."""

    def __init__(self, rec: RequestRecord, clock: Callable[[], int], sync: Callable[[], None]) -> None:
        self.rec, self.clock, self.sync = rec, clock, sync
        self.seen_prompt = False

    def put(self, value: Any) -> None:
        if not self.seen_prompt:
            self.seen_prompt = True
            return
        self.sync()
        t = self.clock()
        self.rec.token_ns.extend([t] * int(value.numel()))

    def end(self) -> None:
        pass


def _q_len(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    x = kwargs.get("input_ids")
    if x is None and args:
        x = args[0]
    if x is None:
        x = kwargs.get("inputs_embeds")
    return int(x.shape[1]) if x is not None and getattr(x, "ndim", 0) >= 2 else 1


def _past(kwargs: dict[str, Any]) -> int:
    for key in ("cache", "past_key_values"):  # the cache's keyword in transformers 5.2x / 5.17
        c = kwargs.get(key)
        if c is not None and hasattr(c, "get_seq_length"):
            try:
                return int(c.get_seq_length())
            except Exception:
                return 0
    return 0


class SpecTracer:
    """Runs requests plainly or assisted and keeps every forward as a step (host clock, time.time_ns).

    ``__enter__``/``__exit__`` install and remove the hooks on ``target`` and ``draft``
    (usable as a Recording's ``patch``).
    """

    def __init__(self, target: Any, draft: Any, assistant: str, *, annotate: bool = True,
                 clock: Callable[[], int] = time.time_ns) -> None:
        self.target, self.draft, self.assistant = target, draft, assistant
        self.annotate = annotate
        self.clock = clock
        self.steps: list[SpecStep] = []
        self.requests: list[SpecRequest] = []
        self.step_sources: dict[str, int] = {"hooks": 0}
        self.on_step_start: Any = None
        self.on_step_end: Any = None
        self.on_token: Any = None
        self._handles: list[Any] = []
        self._req: SpecRequest | None = None
        self._in_draft = False
        self._round: int | None = None
        self._proposed: int | None = None
        self._tokens_before = 0
        self._open: list[tuple[SpecStep, Any]] = []

    # --- install -------------------------------------------------------------------
    def __enter__(self) -> SpecTracer:
        orig = self.target._get_candidate_generator
        tracer = self

        def get_candidate_generator(*a: Any, **k: Any) -> Any:
            gen = orig(*a, **k)
            tracer._wrap(gen)
            return gen

        self.target._get_candidate_generator = get_candidate_generator
        for m in (self.target, self.draft):
            self._handles.append(m.register_forward_pre_hook(self._pre, with_kwargs=True))
            self._handles.append(m.register_forward_hook(self._post, with_kwargs=True, always_call=True))
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        if "_get_candidate_generator" in vars(self.target):
            del self.target._get_candidate_generator  # the class's method again

    def _wrap(self, gen: Any) -> None:
        tracer = self
        get, update = gen.get_candidates, gen.update_candidate_strategy

        def get_candidates(input_ids: Any, *a: Any, **k: Any) -> Any:
            req = tracer._req
            tracer._round = (tracer._round + 1) if tracer._round is not None else 0
            tracer._proposed = None
            tracer._tokens_before = len(req.token_ns) if req is not None else 0
            tracer._in_draft = True
            try:
                cand, logits = get(input_ids, *a, **k)
            finally:
                tracer._in_draft = False
            tracer._proposed = int(cand.shape[1] - input_ids.shape[1])
            if req is not None:
                req.rounds += 1
                req.proposed += tracer._proposed
            return cand, logits

        def update_candidate_strategy(input_ids: Any, scores: Any, num_matches: Any, *a: Any, **k: Any) -> Any:
            req, rnd = tracer._req, tracer._round
            if req is not None and rnd is not None:
                acc = int(num_matches)
                req.accepted += acc
                verify = next((s for s in reversed(tracer.steps) if s.kind in ("verify", "prefill")
                               and s.request_id == req.request_id and s.round == rnd), None)
                if verify is not None:
                    verify.accepted = acc
                emitted = len(req.token_ns) - tracer._tokens_before  # the streamer has this round's tokens
                if tracer.annotate:
                    label = AcceptLabel(req.request_id, rnd, tracer._proposed or 0, acc, emitted)
                    with _record_function(format_accept(label)):
                        pass
            return update(input_ids, scores, num_matches, *a, **k)

        gen.get_candidates = get_candidates
        gen.update_candidate_strategy = update_candidate_strategy

    # --- forwards ------------------------------------------------------------------
    def _pre(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        req = self._req
        if req is None:
            return
        q = _q_len(args, kwargs)
        kv = _past(kwargs) + q
        if self._in_draft:
            kind, rnd, proposed = "draft", self._round, None
        elif self._round is None:
            kind, rnd, proposed = step_kind(q), None, None  # a plain request
        else:
            kind = "prefill" if kv == q else "verify"
            rnd, proposed = self._round, self._proposed
        step = SpecStep(len(self.steps), req.request_id, kind, q, kv, 0, rnd, proposed)
        label = StepLabel(step.step_id, req.request_id, kind, 1, q, kv, round=rnd, proposed=proposed)
        rf = _record_function(format_step(label)) if self.annotate else None
        step.cpu_start_ns = self.clock()
        if rf is not None:
            rf.__enter__()
        self.steps.append(step)
        self._open.append((step, rf))

    def _post(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        if not self._open:
            return
        step, rf = self._open.pop()
        if rf is not None:
            rf.__exit__(None, None, None)
        step.cpu_end_ns = self.clock()
        self.step_sources["hooks"] += 1

    # --- one request -------------------------------------------------------------------
    def generate(self, prompt: Any, output_tokens: int, name: str, *, assisted: bool,
                 plain_request_id: int | None = None) -> SpecRequest:
        """One request: plain ``generate`` or assisted, annotated and token-timed."""
        sync = _sync_for(self.target)
        rid = len(self.requests)
        rec = SpecRequest(rid, name, 1, int(prompt.shape[-1]), output_tokens, 0,
                          assistant=self.assistant if assisted else None, plain_request_id=plain_request_id)
        kwargs = {"input_ids": prompt, "attention_mask": _ones(prompt), "min_new_tokens": output_tokens,
                  "max_new_tokens": output_tokens, "do_sample": False, "num_beams": 1, "pad_token_id": 0,
                  "streamer": _Tokens(rec, self.clock, sync)}
        if assisted:
            kwargs["assistant_model"] = self.draft
        rf = _record_function(format_request(RequestLabel(rid, name, 1, rec.input_tokens, output_tokens))) \
            if self.annotate else None
        self.requests.append(rec)
        self._req, self._round, self._proposed = rec, None, None
        sync()
        rec.start_ns = self.clock()
        if rf is not None:
            rf.__enter__()
        try:
            self.target.generate(**kwargs)
            rec.complete = len(rec.token_ns) == output_tokens
        finally:
            while self._open:  # a forward that raised
                self._post(None, None, None, None)
            sync()
            rec.end_ns = self.clock()
            if rf is not None:
                rf.__exit__(None, None, None)
            self._req = None
        return rec


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """The draft's inner generate warns once about its own kwargs and logits processors: Transformers'
    concern, not the user's; errors still show."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def _ones(x: Any) -> Any:
    import torch

    return torch.ones_like(x)


def _sync_for(model: Any) -> Callable[[], None]:
    import torch

    dev = getattr(model, "device", None)
    if dev is not None and getattr(dev, "type", "cpu") == "cuda" and torch.cuda.is_available():
        return lambda: torch.cuda.synchronize(dev)
    return lambda: None


def _record_function(name: str) -> Any:
    import torch

    return torch.autograd.profiler.record_function(name)


# --- tables and the recording -----------------------------------------------------------------


def speedups(reqs: list[SpecRequest]) -> dict[int, float | None]:
    """Assisted request id -> its plain twin's e2e / its own e2e."""
    by = {r.request_id: r for r in reqs}
    out: dict[int, float | None] = {}
    for r in reqs:
        if r.assistant is None or r.plain_request_id is None:
            continue
        p = by.get(r.plain_request_id)
        a_e2e = r.metrics()["e2e_ns"]
        p_e2e = p.metrics()["e2e_ns"] if p is not None else None
        out[r.request_id] = p_e2e / a_e2e if a_e2e and p_e2e else None
    return out


def summary(reqs: list[SpecRequest], steps: list[SpecStep]) -> dict[str, Any]:
    """Acceptance, tokens per verify, and the time in draft and verify forwards (host clock)."""
    asst = [r for r in reqs if r.assistant is not None]
    prop = sum(r.proposed for r in asst)
    acc = sum(r.accepted for r in asst)
    ids = {r.request_id for r in asst}
    mine = [s for s in steps if s.request_id in ids and s.cpu_end_ns is not None]
    sp = [v for v in speedups(reqs).values() if v is not None]
    gen = sum(len(r.token_ns) for r in asst)
    rounds = sum(r.rounds for r in asst)
    return {
        "requests": len(asst),
        "rounds": rounds,
        "proposed": prop,
        "accepted": acc,
        "acceptance_rate": acc / prop if prop else None,
        "tokens_per_round": gen / rounds if rounds else None,
        "draft_forwards": sum(1 for s in mine if s.kind == "draft"),
        "draft_ns": sum(_dur(s) for s in mine if s.kind == "draft"),
        "verify_ns": sum(_dur(s) for s in mine if s.kind in ("verify", "prefill")),
        "speedup_mean": sum(sp) / len(sp) if sp else None,
        "speedup_min": min(sp) if sp else None,
        "speedup_max": max(sp) if sp else None,
    }


def _dur(s: SpecStep) -> int:
    return (s.cpu_end_ns or s.cpu_start_ns) - s.cpu_start_ns


class SpecRecording(Recording):
    """A Recording whose steps are the draft / verify forwards of SpecTracer."""

    def __init__(self, run: RunDir, opts: RecordOptions, tracer: SpecTracer) -> None:
        super().__init__(run, opts, tracker=tracer, patch=tracer)
        self.tracer = tracer

    def _tables(self, offset: int) -> tuple[Any, Any]:
        steps_t, _ = super()._tables(offset)
        done = [s for s in self.tracer.steps if s.cpu_end_ns is not None]
        self.run.write_table("step_requests", _schema.from_columns("step_requests", {
            "step_id": [s.step_id for s in done],
            "request_id": [s.request_id for s in done],
            "phase": [s.kind for s in done],
            "q_len": [s.q_len for s in done],
            "kv_len": [s.kv_len for s in done],
            "round": [s.round for s in done],
            "proposed_tokens": [s.proposed for s in done],
            "accepted_tokens": [s.accepted for s in done],
        }))
        reqs = self.tracer.requests
        sp = speedups(reqs)
        requests_t = requests_table(reqs, offset, extra={
            "assistant": [r.assistant for r in reqs],
            "proposed_tokens": [r.proposed if r.assistant else None for r in reqs],
            "accepted_tokens": [r.accepted if r.assistant else None for r in reqs],
            "acceptance_rate": [r.accepted / r.proposed if r.assistant and r.proposed else None for r in reqs],
            "plain_request_id": [r.plain_request_id for r in reqs],
            "speedup": [sp.get(r.request_id) for r in reqs],
        })
        return steps_t, requests_t


def _requests_pass(tracer: SpecTracer, prompts: list[Any], cfg: Any, say: Callable[[str, int], None]) -> None:
    """Each prompt plainly, then with the assistant (same prompt, same length)."""
    for i, p in enumerate(prompts):
        say("plain", i)
        plain = tracer.generate(p, cfg.output_tokens, f"{cfg.shape}-{i}.plain", assisted=False)
        say("assisted", i)
        tracer.generate(p, cfg.output_tokens, f"{cfg.shape}-{i}", assisted=True, plain_request_id=plain.request_id)


def run_assisted(cfg: Any, assistant: str, tokens: int, opts: RecordOptions) -> RunDir:
    """Build target and draft, warm up, time without the profiler, then record; one run directory."""
    from tracekit.collectors import workload as wl

    if cfg.batch != 1:
        raise UsageError("--assistant: assisted generation runs one sequence at a time (--batch 1)")
    if tokens < 1:
        raise UsageError("--assistant-tokens must be at least 1")
    model, model_info = wl.build_model(cfg)
    wl.check_fits(cfg, model)
    if not hasattr(model, "_get_candidate_generator"):
        raise TracekitError("--assistant: this transformers has no assisted generation (_get_candidate_generator)")
    draft, draft_info = build_draft(assistant, model, cfg)
    configure_draft(draft, tokens)
    vocab = int(model.config.vocab_size)
    prompts = wl.make_prompts(cfg, vocab, cfg.requests)
    warm = wl.make_prompts(cfg, vocab, cfg.warmup, seed_offset=10_000)
    run = create_run(opts, workload={**cfg.manifest(), "kind": "assisted"}, model=model_info,
                     assisted={**draft_info, "tokens_per_round": tokens, "schedule": "constant",
                               "confidence_threshold": 0.0})

    def say(what: str, i: int) -> None:
        if not opts.quiet:
            sys.stderr.write(f"\r--assistant: {phase}: request {i + 1}/{len(prompts)} ({what})\033[K")
            sys.stderr.flush()

    phase = "warm-up"
    rec: SpecRecording | None = None
    try:
        with quiet_transformers():
            bare = SpecTracer(model, draft, assistant, annotate=False)
            with bare:
                for p in warm:
                    bare.generate(p, cfg.output_tokens, "warmup.plain", assisted=False)
                    bare.generate(p, cfg.output_tokens, "warmup", assisted=True)
                bare.steps.clear()
                bare.requests.clear()
                phase = "timing without profiler"
                _requests_pass(bare, prompts, cfg, say)
            unprofiled = timings(list(bare.requests))
            unprofiled["assisted"] = summary(bare.requests, bare.steps)
            unprofiled["speedup"] = {str(k): v for k, v in speedups(bare.requests).items()}
            run.update_manifest(timings={"unprofiled": unprofiled})
            phase = "recording"
            tracer = SpecTracer(model, draft, assistant, annotate=True)
            rec = SpecRecording(run, opts, tracer)
            with rec:
                _requests_pass(tracer, prompts, cfg, say)
            t = run.read_manifest().get("timings", {})
            t.setdefault("profiled", {})["assisted"] = summary(tracer.requests, tracer.steps)
            t["profiled"]["speedup"] = {str(k): v for k, v in speedups(tracer.requests).items()}
            run.update_manifest(timings=t)
            if not opts.quiet:
                sys.stderr.write("\n")
    except BaseException as exc:
        if rec is None:
            reason = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else \
                f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            run.mark_incomplete(f"{phase}: {reason}")
        raise
    return run
