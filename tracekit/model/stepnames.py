"""The names of tracekit's own annotations: one format, written and parsed here.

The recorder wraps each forward pass and each request in a
``record_function`` whose name carries everything the phase split needs, so
that the split of our own runs is exact (source ``tracekit``):

    tracekit.request id=0 name=chat-0 batch=1 input_tokens=128 output_tokens=128
    tracekit.step id=3 request=0 kind=decode batch=1 q_len=1 kv_len=131

``kv_len`` is the number of KV positions attended after the step (past + query).

Two more forms of the same ``tracekit.step`` annotation (``format_batch_step``,
``format_spec_step``), and one marker:

* an engine step serving several requests (continuous batching): the requests
  and each one's phase, query and KV length, so that prefill, decode and mixed
  steps are exact, whatever the query lengths (a one-token prompt chunk is prefill):

      tracekit.step id=7 kind=mixed batch=3 q_len=25 kv_len=43 seqs=4:f25/25,0:d1/43,2:p16/16

  ``seqs`` holds ``<request>:<phase><q_len>/<kv_len>`` per request, phase ``p``
  (a prompt chunk that does not finish the prompt), ``f`` (the last prompt chunk:
  it samples the first token) or ``d`` (decode); the head's q_len and kv_len are
  the maxima over the requests, as in the one-request form;
* a speculative-decoding forward (assisted generation): kind ``draft`` (a draft
  model forward) or ``verify`` (the target checking the ``proposed`` draft tokens:
  q_len = proposed + 1), with the round it belongs to:

      tracekit.step id=9 request=0 kind=verify batch=1 q_len=5 kv_len=21 round=2 proposed=4

* ``tracekit.accept request=0 round=2 proposed=4 accepted=3 emitted=4``: a
  zero-length marker after the verify, when the accepted count is known
  (a ``record_function`` name is fixed when it opens).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REQUEST_PREFIX = "tracekit.request"
STEP_PREFIX = "tracekit.step"
ACCEPT_PREFIX = "tracekit.accept"

STEP_KINDS = ("prefill", "decode", "mixed")
SPEC_KINDS = ("draft", "verify")  # speculative decoding: draft-model and target-verify forwards
SEQ_PHASES = {"p": "prefill", "f": "prefill", "d": "decode"}

_KV = re.compile(r"(\w+)=(\S+)")
_SEQ = re.compile(r"^(\d+):([pfd])(\d+)/(\d+)$")


@dataclass(frozen=True)
class SeqLabel:
    """One request's part of a batch step: phase p / f / d (see the module doc)."""

    request_id: int
    phase: str
    q_len: int
    kv_len: int


@dataclass(frozen=True)
class StepLabel:
    step_id: int
    request_id: int | None  # None: a batch step serving several requests (``seqs``)
    kind: str
    batch: int
    q_len: int
    kv_len: int
    seqs: tuple[SeqLabel, ...] = ()
    round: int | None = None  # speculative decoding: the draft/verify round
    proposed: int | None = None  # speculative decoding: draft tokens proposed in the round

    @property
    def tokens(self) -> int:
        """Query tokens in the step, all sequences."""
        return sum(s.q_len for s in self.seqs) if self.seqs else self.batch * self.q_len


@dataclass(frozen=True)
class AcceptLabel:
    request_id: int
    round: int
    proposed: int
    accepted: int
    emitted: int  # tokens appended this round: accepted + 1, fewer where max_length cut it


@dataclass(frozen=True)
class RequestLabel:
    request_id: int
    name: str
    batch: int
    input_tokens: int
    output_tokens: int


def step_kind(q_len: int, q_lens: list[int] | None = None) -> str:
    """prefill: query length > 1; decode: 1; mixed: both in one batch."""
    if q_lens:
        has_pre = any(q > 1 for q in q_lens)
        has_dec = any(q == 1 for q in q_lens)
        if has_pre and has_dec:
            return "mixed"
        return "prefill" if has_pre else "decode"
    return "prefill" if q_len > 1 else "decode"


def batch_kind(phases: list[str]) -> str:
    """prefill when every request is in a prompt chunk (p/f), decode when all decode (d), else mixed."""
    kinds = {SEQ_PHASES[p] for p in phases}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def format_step(label: StepLabel) -> str:
    if label.seqs:
        return format_batch_step(label)
    if label.round is not None:
        return format_spec_step(label)
    return (
        f"{STEP_PREFIX} id={label.step_id} request={label.request_id} kind={label.kind} "
        f"batch={label.batch} q_len={label.q_len} kv_len={label.kv_len}"
    )


def format_batch_step(label: StepLabel) -> str:
    seqs = ",".join(f"{q.request_id}:{q.phase}{q.q_len}/{q.kv_len}" for q in label.seqs)
    return (
        f"{STEP_PREFIX} id={label.step_id} kind={label.kind} batch={len(label.seqs)} "
        f"q_len={label.q_len} kv_len={label.kv_len} seqs={seqs}"
    )


def batch_label(step_id: int, seqs: list[SeqLabel]) -> StepLabel:
    """The label of a batch step from its requests (kind, batch and maxima derived)."""
    return StepLabel(
        step_id=step_id,
        request_id=seqs[0].request_id if len({q.request_id for q in seqs}) == 1 else None,
        kind=batch_kind([q.phase for q in seqs]),
        batch=len(seqs),
        q_len=max((q.q_len for q in seqs), default=0),
        kv_len=max((q.kv_len for q in seqs), default=0),
        seqs=tuple(seqs),
    )


def format_spec_step(label: StepLabel) -> str:
    """A draft forward does not know yet how many tokens its round will propose: no ``proposed`` field."""
    tail = f" proposed={label.proposed}" if label.proposed is not None else ""
    return (
        f"{STEP_PREFIX} id={label.step_id} request={label.request_id} kind={label.kind} batch={label.batch} "
        f"q_len={label.q_len} kv_len={label.kv_len} round={label.round}{tail}"
    )


def format_accept(label: AcceptLabel) -> str:
    return (
        f"{ACCEPT_PREFIX} request={label.request_id} round={label.round} proposed={label.proposed} "
        f"accepted={label.accepted} emitted={label.emitted}"
    )


def format_request(label: RequestLabel) -> str:
    name = label.name.replace(" ", "_")
    return (
        f"{REQUEST_PREFIX} id={label.request_id} name={name} batch={label.batch} "
        f"input_tokens={label.input_tokens} output_tokens={label.output_tokens}"
    )


_LIMIT = 2**31  # a count or id past this is no step's: the label is not one (products stay inside int64)


def _int(text: str) -> int:
    """``int(text)``; ValueError beyond +-``_LIMIT``."""
    v = int(text)
    if not -_LIMIT <= v <= _LIMIT:
        raise ValueError(f"{v} is out of range")
    return v


def _fields(text: str) -> dict[str, str]:
    return dict(_KV.findall(text))


def _seqs(text: str) -> tuple[SeqLabel, ...] | None:
    out = []
    for part in text.split(","):
        m = _SEQ.match(part)
        if m is None:
            return None
        out.append(SeqLabel(_int(m.group(1)), m.group(2), _int(m.group(3)), _int(m.group(4))))
    return tuple(out)


def parse_step(name: str) -> StepLabel | None:
    """Any form of the step annotation (one request, a batch, a speculative round); None if not one."""
    if not name.startswith(STEP_PREFIX + " "):
        return None
    f = _fields(name)
    try:
        if "seqs" in f:
            seqs = _seqs(f["seqs"])
            if not seqs:
                return None
            return batch_label(_int(f["id"]), list(seqs))
        return StepLabel(
            step_id=_int(f["id"]),
            request_id=_int(f["request"]),
            kind=f["kind"],
            batch=_int(f["batch"]),
            q_len=_int(f["q_len"]),
            kv_len=_int(f["kv_len"]),
            round=_int(f["round"]) if "round" in f else None,
            proposed=_int(f["proposed"]) if "proposed" in f else None,
        )
    except (KeyError, ValueError):
        return None


def parse_accept(name: str) -> AcceptLabel | None:
    if not name.startswith(ACCEPT_PREFIX + " "):
        return None
    f = _fields(name)
    try:
        return AcceptLabel(
            request_id=_int(f["request"]),
            round=_int(f["round"]),
            proposed=_int(f["proposed"]),
            accepted=_int(f["accepted"]),
            emitted=_int(f["emitted"]),
        )
    except (KeyError, ValueError):
        return None


def parse_request(name: str) -> RequestLabel | None:
    if not name.startswith(REQUEST_PREFIX + " "):
        return None
    f = _fields(name)
    try:
        return RequestLabel(
            request_id=_int(f["id"]),
            name=f.get("name", f"request-{f['id']}"),
            batch=_int(f["batch"]),
            input_tokens=_int(f["input_tokens"]),
            output_tokens=_int(f["output_tokens"]),
        )
    except (KeyError, ValueError):
        return None


# --- engine step annotations (vLLM, SGLang) ----------------------------------------------------
#
# One parser per format the engines have written (docs/metrics.md, "Engine step annotations",
# has the sources). Each returns an EngineStep or None; ``parse_engine_step`` tries them in
# order. Every field is what the annotation states; what it does not state stays None.


@dataclass(frozen=True)
class PhaseStats:
    """The sequences of one phase of an engine step (context: prompt chunks; generation: decodes).

    ``sq`` Σ query tokens scheduled this step, ``sk`` Σ KV length after the step (past + query),
    ``sqsq`` Σ query², ``sqsk`` Σ query × KV: the sums vLLM's and SGLang's detailed annotations
    carry, and all an attention model needs. None where the annotation does not say.
    """

    requests: int | None
    sq: int | None = None
    sk: int | None = None
    sqsq: int | None = None
    sqsk: int | None = None

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in (("requests", self.requests), ("sq", self.sq), ("sk", self.sk),
                                  ("sqsq", self.sqsq), ("sqsk", self.sqsk)) if v is not None}


@dataclass(frozen=True)
class EngineStep:
    """One engine step annotation, parsed. ``kind`` None: an idle step (no sequence scheduled)."""

    engine: str  # vllm | sglang | atom
    format: str  # which format matched (ENGINE_FORMATS)
    kind: str | None
    batch: int | None  # requests in the step
    tokens: int | None  # query tokens scheduled, all requests (unpadded)
    q_len: int | None  # query tokens per sequence: mean prompt chunk (prefill, mixed), else per decode
    kv_len: int | None  # KV length after the step per sequence: mean over the batch where sums are given
    context: PhaseStats | None = None
    generation: PhaseStats | None = None
    mode: str | None = None  # SGLang's ForwardMode name

    def seq_stats(self) -> dict[str, dict[str, int]] | None:
        """{"context": {...}, "generation": {...}} (steps.seq_stats); None if the annotation gives neither."""
        out = {k: p.as_dict() for k, p in (("context", self.context), ("generation", self.generation))
               if p is not None and p.as_dict()}
        return out or None


def _phase_kind(n_ctx: int | None, n_gen: int | None) -> str | None:
    c, g = bool(n_ctx), bool(n_gen)
    if c and g:
        return "mixed"
    if c:
        return "prefill"
    return "decode" if g else None


def _mean(total: int | None, n: int | None) -> int | None:
    return max(1, round(total / n)) if total is not None and n else None


def _phase_numbers(requests: int, text: str) -> PhaseStats:
    """One phase of ``execute_context_C(...)_generation_G(...)``: ``(T)`` or the underscore-joined ``(T_S)``.

    ``T`` is the phase's scheduled query tokens (vLLM compute_iteration_details: num_ctx_tokens /
    num_generation_tokens). A second number is Σ query² of the phase (``888_788544``: one 888-token
    prompt, 888² = 788,544), never more tokens: it is kept as ``sqsq`` where it is one, i.e. within
    [T²/C, T²] (each of the C sequences has q ≥ 1: Cauchy-Schwarz below, one sequence above), and
    dropped otherwise (``unread`` counts the numbers not taken). More numbers are not read either.
    """
    parts = [_int(p) for p in text.split("_") if p]
    sq = parts[0] if parts else 0
    sqsq = parts[1] if len(parts) > 1 else None
    if sqsq is not None and not (requests and sq * sq <= sqsq * requests and sqsq <= sq * sq):
        sqsq = None
    return PhaseStats(requests, sq=sq, sqsq=sqsq)


def unread_numbers(name: str) -> int:
    """How many numbers of a ``vllm_context_generation`` annotation its parser does not take (0 for any other)."""
    m = VLLM_CONTEXT_GENERATION.match(name)
    if m is None:
        return 0
    n = 0
    for req, text in ((m.group(2), m.group(3)), (m.group(4), m.group(5))):
        parts = [p for p in text.split("_") if p]
        taken = 1 + (_phase_numbers(int(req), text).sqsq is not None)
        n += max(0, len(parts) - taken)
    return n


def _engine_step(engine: str, fmt: str, ctx: PhaseStats | None, gen: PhaseStats | None, tokens: int | None,
                 mode: str | None = None, kind: str | None = None, batch: int | None = None) -> EngineStep:
    n_ctx = ctx.requests if ctx is not None else None
    n_gen = gen.requests if gen is not None else None
    kind = kind or _phase_kind(n_ctx, n_gen)
    if batch is None and (n_ctx is not None or n_gen is not None):
        batch = (n_ctx or 0) + (n_gen or 0)
    if kind in ("prefill", "mixed"):
        q_len = _mean(ctx.sq if ctx else None, n_ctx)
    elif kind == "decode":
        q_len = _mean(gen.sq if gen else None, n_gen)
    else:
        q_len = None
    sk = [p.sk for p in (ctx, gen) if p is not None and p.requests]
    kv_len = _mean(sum(v for v in sk if v is not None), batch) if sk and None not in sk else None
    return EngineStep(engine, fmt, kind, batch, tokens, q_len, kv_len, ctx, gen, mode)


# vLLM, vllm/v1/worker/gpu_worker.py annotate_profile: f"execute_new_{num_new}_cached_{num_cached}".
# New requests are scheduled for the first time (prefill); cached ones are running (a decode, or a
# later chunk of a chunked prefill: this format cannot tell, so cached-only counts as decode).
VLLM_NEW_CACHED = re.compile(r"^execute_new_(\d+)_cached_(\d+)$")
# vLLM >= 0.14 default: "execute_context_{C}({Tc})_generation_{G}({Tg})" (compute_iteration_details).
VLLM_CONTEXT_GENERATION = re.compile(r"^execute_(?:(\d+)_)?context_(\d+)\(([\d_]+)\)_generation_(\d+)\(([\d_]+)\)$")
# vLLM detailed (ProfilerConfig.detailed_trace_annotation): per phase Σsq, Σsk, Σsq², Σsq·sk.
VLLM_DETAILED = re.compile(
    r"^execute_(\d+)_context_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)"
    r"_generation_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)$"
)
# vLLM capture traces: f"capture_{num_tokens}_{mode}" or f"capture_{num_tokens}_{prefix}_{mode}".
VLLM_CAPTURE = re.compile(r"^capture_(\d+)_(?:([A-Za-z0-9]+)_)?(FULL|PIECEWISE|NONE)$", re.IGNORECASE)
# SGLang model_runner step span: "step[EXTEND bs=15 toks=15360]", "step[DECODE bs=64 g_sq=64 ...]", and
# the lowercase forms of its PR description ("step[prefill bs=2 toks=9]", "step[mixed bs=3 ext=5 dec=2]",
# "step[idle]").
SGLANG_STEP = re.compile(r"^step\[\s*([A-Za-z_0-9]+)((?:\s+[A-Za-z_]+=[\d/]+)*)\s*\]$", re.IGNORECASE)

SGLANG_KINDS = {
    "EXTEND": "prefill", "PREFILL": "prefill", "SPLIT_PREFILL": "prefill", "DLLM_EXTEND": "prefill",
    "DECODE": "decode", "TARGET_VERIFY": "decode", "VERIFY": "decode", "DRAFT": "decode",
    "DRAFT_EXTEND": "decode", "DRAFT_EXTEND_V2": "decode",  # speculative decoding's passes are decode work
    "MIXED": "mixed",
    "IDLE": None, "DUMMY_FIRST": None,
}
# ATOM (ROCm/ATOM) model runner: record_function(f"prefill[bs={bs} tok={total_tokens} ctx={context_lens}]"),
# "decode[bs=.. tok=.. d=.. spec=..]" (graph replay), "eager_decode[bs=.. tok=.. ctx=..]"; its detailed mode
# (ATOM_ENABLE_DETAILED_ANNOTATION=1, ROCm/ATOM PR #477) appends sk=, sqsq=, sqsk= (the phase's sums).
ATOM_STEP = re.compile(r"^(prefill|decode|eager_decode)\[(.*)\]$")
_ATOM_FIELD = re.compile(r"(\w+)=(\[[^\]]*\](?:\.\.\.\+\d+)?|\S+)")
ENGINE_FORMATS = ("vllm_new_cached", "vllm_context_generation", "vllm_detailed", "sglang_step", "atom_step")


def parse_vllm_new_cached(name: str) -> EngineStep | None:
    m = VLLM_NEW_CACHED.match(name)
    if m is None:
        return None
    new, cached = _int(m.group(1)), _int(m.group(2))
    kind = _phase_kind(new, cached)
    q_len = 1 if kind == "decode" else None  # a new request's prompt length is not in the name
    return EngineStep("vllm", "vllm_new_cached", kind, new + cached, None, q_len, None,
                      PhaseStats(new), PhaseStats(cached))


def parse_vllm_context_generation(name: str) -> EngineStep | None:
    m = VLLM_CONTEXT_GENERATION.match(name)
    if m is None:
        return None
    # A leading count ("execute_7_context_...") is taken as nothing: the token counts are explicit.
    c, g = _int(m.group(2)), _int(m.group(4))
    ctx, gen = _phase_numbers(c, m.group(3)), _phase_numbers(g, m.group(5))
    return _engine_step("vllm", "vllm_context_generation", ctx, gen, (ctx.sq or 0) + (gen.sq or 0))


def parse_vllm_detailed(name: str) -> EngineStep | None:
    m = VLLM_DETAILED.match(name)
    if m is None:
        return None
    v = [_int(x) for x in m.groups()]
    ctx = PhaseStats(v[1], sq=v[2], sk=v[3], sqsq=v[4], sqsk=v[5])
    gen = PhaseStats(v[6], sq=v[7], sk=v[8], sqsq=v[9], sqsk=v[10])
    return _engine_step("vllm", "vllm_detailed", ctx, gen, v[0])


def _sglang_phase(fields: dict[str, int], prefix: str, requests: int | None) -> PhaseStats | None:
    vals = {k: fields.get(f"{prefix}_{k}") for k in ("sq", "sk", "sqsq", "sqsk")}
    if requests is None and all(v is None for v in vals.values()):
        return None
    return PhaseStats(requests, **vals)


def parse_sglang_step(name: str) -> EngineStep | None:
    """Any SGLang step span; None if not one, or a ForwardMode this parser does not know."""
    m = SGLANG_STEP.match(name)
    if m is None:
        return None
    mode = m.group(1).upper()
    if mode not in SGLANG_KINDS:
        return None
    raw = dict(re.findall(r"([A-Za-z_]+)=([\d/]+)", m.group(2)))
    # "bs=117/128" (real/padded, a CUDA-graph batch): the real one counts
    fields = {k.lower(): _int(v.split("/")[0]) for k, v in raw.items()}
    kind = SGLANG_KINDS[mode]
    bs = fields.get("bs")
    if kind is None:
        return EngineStep("sglang", "sglang_step", None, bs, 0, None, None, mode=mode)
    toks = fields.get("toks", fields.get("ext"))
    if kind == "mixed":
        n_gen = fields.get("g", fields.get("dec"))
        n_ctx = fields.get("c", bs - n_gen if bs is not None and n_gen is not None else None)
        ctx = _sglang_phase(fields, "c", n_ctx) or PhaseStats(n_ctx, sq=toks)
        gen = _sglang_phase(fields, "g", n_gen) or PhaseStats(n_gen, sq=n_gen)
        if ctx.sq is None and toks is not None:
            ctx = PhaseStats(n_ctx, sq=toks, sk=ctx.sk, sqsq=ctx.sqsq, sqsk=ctx.sqsk)
        if gen.sq is None and "dec" in fields:
            gen = PhaseStats(n_gen, sq=fields["dec"], sk=gen.sk, sqsq=gen.sqsq, sqsk=gen.sqsk)
        parts = [p.sq for p in (ctx, gen)]
        tokens = sum(v for v in parts if v is not None) if None not in parts else None
        return _engine_step("sglang", "sglang_step", ctx, gen, tokens, mode, kind, bs)
    if kind == "prefill":
        ctx = _sglang_phase(fields, "c", bs) or PhaseStats(bs)
        if ctx.sq is None and toks is not None:
            ctx = PhaseStats(bs, sq=toks, sk=ctx.sk, sqsq=ctx.sqsq, sqsk=ctx.sqsk)
        return _engine_step("sglang", "sglang_step", ctx, None, ctx.sq, mode, kind, bs)
    # decode-phase modes: the upstream suffix is g_*; a patched TARGET_VERIFY writes c_* instead
    prefix = "c" if not any(k.startswith("g_") for k in fields) and any(k.startswith("c_") for k in fields) else "g"
    gen = _sglang_phase(fields, prefix, bs) or PhaseStats(bs)
    tokens = gen.sq if gen.sq is not None else (bs if mode == "DECODE" else None)
    if gen.sq is None and tokens is not None:
        gen = PhaseStats(bs, sq=tokens)
    return _engine_step("sglang", "sglang_step", None, gen, tokens, mode, kind, bs)


def parse_atom_step(name: str) -> EngineStep | None:
    """ATOM's step label; None if not one (``bs=`` is required: a user's ``decode[3]`` is not a step).

    bs = requests (``bs=117/128``: real/padded, the real one), tok = query tokens of all of them (> bs
    in a speculative decode); sk, sqsq, sqsk the phase's sums where the detailed mode wrote them."""
    m = ATOM_STEP.match(name)
    if m is None:
        return None
    f = dict(_ATOM_FIELD.findall(m.group(2)))
    if "bs" not in f or not re.fullmatch(r"\d+(/\d+)?", f["bs"]):
        return None
    bs = _int(f["bs"].split("/")[0])

    def num(k: str) -> int | None:
        return _int(f[k]) if k in f and f[k].isdigit() else None

    stats = PhaseStats(bs, sq=num("tok"), sk=num("sk"), sqsq=num("sqsq"), sqsk=num("sqsk"))
    if m.group(1) == "prefill":
        return _engine_step("atom", "atom_step", stats, None, stats.sq, m.group(1), "prefill", bs)
    return _engine_step("atom", "atom_step", None, stats, stats.sq, m.group(1), "decode", bs)


_ENGINE_PARSERS = (parse_vllm_detailed, parse_vllm_context_generation, parse_vllm_new_cached, parse_sglang_step,
                   parse_atom_step)


def parse_engine_step(name: str) -> EngineStep | None:
    """The engine step an annotation names, in any format of ENGINE_FORMATS; None if none matches."""
    for parse in _ENGINE_PARSERS:
        try:
            step = parse(name)
        except ValueError:  # a number past _LIMIT: not this format's step
            continue
        if step is not None:
            return step
    return None


def looks_like_engine_step(name: str) -> bool:
    """An annotation shaped like an engine step ("execute_...", "step[...]") whether or not its format
    is known: an unknown one is reported, never taken for a request window."""
    atom = ATOM_STEP.match(name) is not None and "bs=" in name
    return name.startswith("execute_") or name.lower().startswith("step[") or atom


# xDiT (xfuser) diffusion pipelines: one annotation per generated image batch, "execute_diffusion_{batch}_{H}x{W}"
# (the corpus's Flux.1 trace: "execute_diffusion_1_256x256"); a request, not a step.
DIFFUSION_REQUEST = re.compile(r"^execute_diffusion_(\d+)_(\d+)x(\d+)$")


@dataclass(frozen=True)
class DiffusionLabel:
    batch: int
    height: int
    width: int


def parse_diffusion_request(name: str) -> DiffusionLabel | None:
    """xDiT's request annotation (``execute_diffusion_1_256x256``); None if not one."""
    m = DIFFUSION_REQUEST.match(name)
    if m is None or any(len(g) > 9 for g in m.groups()):
        return None
    return DiffusionLabel(int(m.group(1)), int(m.group(2)), int(m.group(3)))


@dataclass(frozen=True)
class CaptureLabel:
    tokens: int
    mode: str  # FULL | PIECEWISE | NONE
    prefix: str | None  # a subsystem ("draft", "encoder"), None for the model itself


def parse_capture_label(name: str) -> CaptureLabel | None:
    """vLLM's graph-capture annotation (capture traces): ``capture_32_FULL``, ``capture_32_draft_FULL``."""
    m = VLLM_CAPTURE.match(name)
    if m is None or len(m.group(1)) > 18:  # (a batch size past int64 is no capture's)
        return None
    return CaptureLabel(_int(m.group(1)), m.group(3).upper(), m.group(2))
