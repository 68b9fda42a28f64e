"""The names of tracekit's own annotations: one format, written and parsed here.

The recorder wraps each forward pass and each request in a
``record_function`` whose name carries everything the phase split needs, so
that the split of our own runs is exact (source ``tracekit``):

    tracekit.request id=0 name=chat-0 batch=1 input_tokens=128 output_tokens=128
    tracekit.step id=3 request=0 kind=decode batch=1 q_len=1 kv_len=131

``kv_len`` is the number of KV positions attended after the step (past + query).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REQUEST_PREFIX = "tracekit.request"
STEP_PREFIX = "tracekit.step"

STEP_KINDS = ("prefill", "decode", "mixed")

_KV = re.compile(r"(\w+)=(\S+)")


@dataclass(frozen=True)
class StepLabel:
    step_id: int
    request_id: int
    kind: str
    batch: int
    q_len: int
    kv_len: int


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


def format_step(label: StepLabel) -> str:
    return (
        f"{STEP_PREFIX} id={label.step_id} request={label.request_id} kind={label.kind} "
        f"batch={label.batch} q_len={label.q_len} kv_len={label.kv_len}"
    )


def format_request(label: RequestLabel) -> str:
    name = label.name.replace(" ", "_")
    return (
        f"{REQUEST_PREFIX} id={label.request_id} name={name} batch={label.batch} "
        f"input_tokens={label.input_tokens} output_tokens={label.output_tokens}"
    )


def _fields(text: str) -> dict[str, str]:
    return dict(_KV.findall(text))


def parse_step(name: str) -> StepLabel | None:
    if not name.startswith(STEP_PREFIX + " "):
        return None
    f = _fields(name)
    try:
        return StepLabel(
            step_id=int(f["id"]),
            request_id=int(f["request"]),
            kind=f["kind"],
            batch=int(f["batch"]),
            q_len=int(f["q_len"]),
            kv_len=int(f["kv_len"]),
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
