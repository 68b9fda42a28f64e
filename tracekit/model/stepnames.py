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


def _fields(text: str) -> dict[str, str]:
    return dict(_KV.findall(text))


def _seqs(text: str) -> tuple[SeqLabel, ...] | None:
    out = []
    for part in text.split(","):
        m = _SEQ.match(part)
        if m is None:
            return None
        out.append(SeqLabel(int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))))
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
            return batch_label(int(f["id"]), list(seqs))
        return StepLabel(
            step_id=int(f["id"]),
            request_id=int(f["request"]),
            kind=f["kind"],
            batch=int(f["batch"]),
            q_len=int(f["q_len"]),
            kv_len=int(f["kv_len"]),
            round=int(f["round"]) if "round" in f else None,
            proposed=int(f["proposed"]) if "proposed" in f else None,
        )
    except (KeyError, ValueError):
        return None


def parse_accept(name: str) -> AcceptLabel | None:
    if not name.startswith(ACCEPT_PREFIX + " "):
        return None
    f = _fields(name)
    try:
        return AcceptLabel(
            request_id=int(f["request"]),
            round=int(f["round"]),
            proposed=int(f["proposed"]),
            accepted=int(f["accepted"]),
            emitted=int(f["emitted"]),
        )
    except (KeyError, ValueError):
        return None


def parse_request(name: str) -> RequestLabel | None:
    if not name.startswith(REQUEST_PREFIX + " "):
        return None
    f = _fields(name)
    try:
        return RequestLabel(
            request_id=int(f["id"]),
            name=f.get("name", f"request-{f['id']}"),
            batch=int(f["batch"]),
            input_tokens=int(f["input_tokens"]),
            output_tokens=int(f["output_tokens"]),
        )
    except (KeyError, ValueError):
        return None
