"""Sweep definitions: presets, TOML files and flags, turned into a list of points.

A point is one run directory: one workload (a request shape at a batch size,
or an agent loop) in one execution mode. Points are frozen dataclasses with a
stable id derived from their parameters only, so ``--resume`` finds the same
directory for the same point whatever order a sweep lists them in.

Studies (``group``) and what each measures:

- ``shapes``: the named request shapes (smoke, chat, rag, creative) at batch 1,
  in every execution mode: prefill share per shape, eager vs compiled split.
- ``batch``: the chat shape at each batch size: TPOT against batch.
- ``prompt``: prompt lengths with a short answer: TTFT and prefill tok/s against length.
- ``output``: answer lengths at a fixed prompt: per-output-token cost.
- ``agent``: an agent loop of N steps, ``resend`` (whole history each step) vs
  ``kv-reuse`` (the previous step's KV cache passed back).
- ``load``: N requests of a shape (or a mix, ``chat,rag``) served by the continuous
  batching engine at each arrival rate (requests per second, Poisson; 0: all at once):
  the latency-throughput curve, and each request's cost at that load. In a load point
  ``compiled`` means the engine's CUDA graphs.

``quant`` is a dimension across every study: each point runs once per quantization
(tracekit.model.quant: none, int8, int8-dyn, int4, fp8), the model quantized by torchao.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tracekit.errors import UsageError, visible
from tracekit.model.quant import CHOICES as QUANT_CHOICES
from tracekit.model.quant import NONE as QUANT_NONE

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib

# name -> (input tokens, output tokens). smoke/chat/rag/creative are the seed's shapes.
SHAPES: dict[str, tuple[int, int]] = {
    "smoke": (22, 8),
    "chat": (128, 128),
    "rag": (1205, 60),
    "creative": (25, 500),
}
# The agentic shape is a loop, not one request: see AgentSpec.
AGENTIC = "agentic"
MODES = ("eager", "compiled")
AGENT_MODES = ("resend", "kv-reuse")
GROUPS = ("shapes", "batch", "prompt", "output", "agent", "load")
# The agentic shape in a load mix is one step of an AgentSpec() loop: its longest prompt and answer.
AGENTIC_MAX = (128 + 4 * (64 + 64), 64)


@dataclass(frozen=True)
class AgentSpec:
    """An agent loop: each step answers, then a tool result is appended."""

    steps: int = 5
    system_tokens: int = 128  # the first prompt (system prompt + task)
    output_tokens: int = 64  # answer length per step
    tool_tokens: int = 64  # tool result appended after each answer
    mode: str = "resend"  # resend | kv-reuse


@dataclass(frozen=True)
class Point:
    """One run of a sweep: a workload in an execution mode."""

    group: str
    shape: str
    input_tokens: int
    output_tokens: int
    batch: int = 1
    mode: str = "eager"  # eager | compiled
    agent: AgentSpec | None = None
    # Load points: requests served, and their arrival rate (requests per second; None: all at
    # once). input/output_tokens are then the mix's longest.
    requests: int = 0
    rate: float | None = None
    quant: str = "none"  # tracekit.model.quant mode of the model's linear layers

    @property
    def id(self) -> str:
        """Stable, readable, filesystem-safe: parameters only, never position or time."""
        base = self._base_id()
        return base if self.quant == QUANT_NONE else f"{base}-{self.quant}"

    def _base_id(self) -> str:
        if self.group == "load":
            shape = "".join(c if c.isalnum() or c in "-_." else "x" if c == "/" else "+" for c in self.shape)
            rate = "all" if self.rate is None else f"{self.rate:g}"
            return f"load-{shape}-n{self.requests}-r{rate}-{self.mode}"
        if self.agent is not None:
            a = self.agent
            return (
                f"agent-{a.mode}-n{a.steps}-sys{a.system_tokens}-out{a.output_tokens}"
                f"-tool{a.tool_tokens}-b{self.batch}-{self.mode}"
            )
        shape = "".join(c if c.isalnum() or c in "-_." else "x" for c in self.shape)  # "128/32" -> "128x32"
        return f"{self.group}-{shape}-in{self.input_tokens}-out{self.output_tokens}-b{self.batch}-{self.mode}"

    @property
    def total_output_tokens(self) -> int:
        """Output tokens per sequence over the whole point (all agent steps)."""
        if self.agent is not None:
            return self.agent.steps * self.agent.output_tokens
        return self.output_tokens

    def prompt_lengths(self) -> list[int]:
        """Prompt length of each generate call when the whole history is sent."""
        if self.agent is None:
            return [self.input_tokens]
        a = self.agent
        return [a.system_tokens + i * (a.output_tokens + a.tool_tokens) for i in range(a.steps)]


@dataclass(frozen=True)
class SweepSpec:
    """What to run and on what model."""

    name: str
    model: str  # a record preset name (tiny, tinyllama, ...)
    device: str = "auto"  # auto | cpu | cuda
    dtype: str = "auto"  # auto | float16 | bfloat16 | float32
    points: tuple[Point, ...] = ()
    # Warm-up runs of the whole point (same batch, prompt and answer length, or the
    # whole agent loop) before timing: a short warm-up left the first use of every
    # longer KV length inside the timed run (H200 seed run: decode 19 -> 60-107 ms
    # per token from the 5th forward on, right after a 4-token warm-up).
    warmup_runs: int = 1
    # Timed repetitions per point (median reported, min/max as the spread);
    # 0 means "auto": 3 on a GPU, 1 on a CPU.
    repeats: int = 0
    # Kernel-capture window: profile only the first N forward passes of a point
    # (prefill + a few decode steps); host timers still cover every token.
    trace_steps: int = 6
    pricing: Mapping[str, Any] = field(default_factory=dict)
    max_batch_tokens: int = 512  # load points: tokens per engine step

    def with_points(self, points: Iterable[Point]) -> SweepSpec:
        return replace(self, points=tuple(dedupe(points)))

    def repeats_for(self, cuda: bool) -> int:
        return self.repeats if self.repeats > 0 else (DEFAULT_GPU_REPEATS if cuda else 1)


DEFAULT_GPU_REPEATS = 3


def dedupe(points: Iterable[Point]) -> list[Point]:
    seen: set[str] = set()
    out: list[Point] = []
    for p in points:
        if p.id not in seen:
            seen.add(p.id)
            out.append(p)
    return out


# --- builders ---------------------------------------------------------------


def shape_points(shapes: Sequence[str], modes: Sequence[str], batch: int = 1) -> list[Point]:
    pts = []
    for mode in modes:
        for s in shapes:
            if s == AGENTIC:
                continue  # the agentic shape is built by agent_points
            i, o = _shape(s)
            pts.append(Point("shapes", s, i, o, batch, mode))
    return pts


def batch_points(batches: Sequence[int], modes: Sequence[str], shape: str = "chat") -> list[Point]:
    i, o = _shape(shape)
    return [Point("batch", shape, i, o, b, mode) for mode in modes for b in batches]


def prompt_points(lengths: Sequence[int], modes: Sequence[str], output_tokens: int = 8) -> list[Point]:
    return [Point("prompt", f"prompt{n}", n, output_tokens, 1, mode) for mode in modes for n in lengths]


def output_points(lengths: Sequence[int], modes: Sequence[str], input_tokens: int = 128) -> list[Point]:
    return [Point("output", f"output{n}", input_tokens, n, 1, mode) for mode in modes for n in lengths]


def load_points(rates: Sequence[float], modes: Sequence[str], shape: str = "chat", requests: int = 16) -> list[Point]:
    """One point per arrival rate (0: all at once) and mode, ``requests`` requests of ``shape`` (a mix: a,b)."""
    names = [x.strip() for x in shape.split(",") if x.strip()]
    if not names:
        raise UsageError("load: give a shape")
    dims = [AGENTIC_MAX if n == AGENTIC else _shape(n) for n in names]
    i, o = max(d[0] for d in dims), max(d[1] for d in dims)
    if requests < 1 or any(r < 0 for r in rates):
        raise UsageError("load: requests must be at least 1 and rates not negative")
    return [Point("load", ",".join(names), i, o, 1, mode, requests=requests, rate=float(r) if r else None)
            for mode in modes for r in rates]


def agent_points(agent: AgentSpec, agent_modes: Sequence[str], modes: Sequence[str]) -> list[Point]:
    pts = []
    for mode in modes:
        for am in agent_modes:
            a = replace(agent, mode=am)
            pts.append(Point("agent", AGENTIC, a.system_tokens, a.output_tokens, 1, mode, a))
    return pts


def with_quant(points: Iterable[Point], quants: Sequence[str]) -> list[Point]:
    """Every point once per quantization, quantization outermost (the model is rebuilt once per value)."""
    bad = [q for q in quants if q not in QUANT_CHOICES]
    if bad:
        raise UsageError(f"quant: unknown {bad}; known: {', '.join(QUANT_CHOICES)}")
    pts = list(points)
    return [replace(p, quant=q) for q in quants for p in pts]


def _shape(name: str) -> tuple[int, int]:
    if name in SHAPES:
        return SHAPES[name]
    # "IN/OUT" is a custom shape, e.g. 512/32.
    if "/" in name:
        a, _, b = name.partition("/")
        try:
            return int(a), int(b)
        except ValueError:
            pass
    raise UsageError(f"unknown shape {name!r}; known: {', '.join([*SHAPES, AGENTIC])} or IN/OUT")


# --- presets ----------------------------------------------------------------

SEED_PROMPT_LENGTHS = (25, 128, 512, 1205, 2048, 4096)


def seed_points() -> list[Point]:
    """The seed study, planned to fit 10 minutes on an H200 with the TinyLlama shape.

    Eager decode there costs 25-56 ms per token, so eager tokens are the budget:
    shapes (~700 tokens), the batch sweep on a shortened chat (decode cost barely
    grows with batch when the host is the bottleneck), prompts with 8-token
    answers, and the agent loop. The compiled mode is the dimension on the
    shapes and the batch sweep, where it moves the split the most.
    """
    pts: list[Point] = []
    pts += shape_points(["smoke", "chat", "rag", "creative"], MODES)
    pts += batch_points([1, 4, 8, 32], MODES, shape="128/32")
    pts += prompt_points(SEED_PROMPT_LENGTHS, ["eager"], output_tokens=8)
    pts += output_points([8, 32, 128], ["eager"], input_tokens=128)
    pts += agent_points(
        AgentSpec(steps=5, system_tokens=128, output_tokens=64, tool_tokens=64), AGENT_MODES, ["eager"]
    )
    return dedupe(pts)


def quick_points() -> list[Point]:
    """A few points of every study, small enough for CI on two CPU cores."""
    pts: list[Point] = []
    pts += shape_points(["smoke", "32/16"], ["eager"])
    pts += batch_points([1, 4], ["eager"], shape="16/8")
    pts += prompt_points([16, 64], ["eager"], output_tokens=4)
    pts += agent_points(
        AgentSpec(steps=3, system_tokens=16, output_tokens=6, tool_tokens=8), AGENT_MODES, ["eager"]
    )
    return dedupe(pts)


PRESETS = {
    "seed": ("tinyllama", seed_points),
    "quick": ("tiny", quick_points),
}


def from_preset(name: str, *, model: str | None = None, device: str = "auto") -> SweepSpec:
    if name not in PRESETS:
        raise UsageError(f"unknown sweep preset {name!r}; known: {', '.join(PRESETS)}")
    default_model, build = PRESETS[name]
    spec = SweepSpec(name=name, model=model or default_model, device=device)
    if name == "quick":
        # Two repetitions so that CI runs the median/spread path; CPU timings of the tiny model are cheap.
        spec = replace(
            spec, device="cpu" if device == "auto" else device, dtype="float32", trace_steps=4, repeats=2
        )
    return spec.with_points(build())


# --- TOML and flags ---------------------------------------------------------


_LIMIT = 2**31  # a token count, batch, step count or request count past this is no workload's


def _whole(v: Any, least: int = 1) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and least <= v <= _LIMIT


def _ints(value: Any, key: str) -> list[int]:
    vals = value if isinstance(value, list) else [value]
    if vals and all(_whole(v) for v in vals):
        return list(vals)
    raise UsageError(f"sweep config: {key} must be a positive integer or a list of them")


def _int(data: Mapping[str, Any], key: str, default: int, least: int = 1) -> int:
    """``data[key]`` (else ``default``): a whole number from ``least`` up to 2**31, else UsageError."""
    v = data.get(key, default)
    if not _whole(v, least):
        raise UsageError(f"sweep config: {key} must be a whole number from {least} to {_LIMIT}")
    return int(v)


def _strs(value: Any, key: str, allowed: Sequence[str] | None = None) -> list[str]:
    vals = [value] if isinstance(value, str) else value
    if not isinstance(vals, list) or not all(isinstance(v, str) for v in vals):
        raise UsageError(f"sweep config: {key} must be a string or a list of strings")
    if allowed is not None:
        bad = [v for v in vals if v not in allowed]
        if bad:
            raise UsageError(f"sweep config: {key}: unknown {bad}; known: {', '.join(allowed)}")
    return list(vals)


def from_mapping(data: Mapping[str, Any], *, name: str = "custom") -> SweepSpec:
    """Build a sweep from a parsed TOML document (or the equivalent flags).

    Keys: model, device, dtype, warmup_runs, repeats, trace_steps, modes, shapes, batch,
    batch_shape, prompt_lengths, prompt_output_tokens, output_lengths,
    output_input_tokens, quant, [agent] (steps, system_tokens, output_tokens,
    tool_tokens, modes), [load] (rates, shape, requests, max_batch_tokens),
    [pricing] (input_per_mtok, output_per_mtok, gpu_per_hour).
    """
    known = {
        "name", "model", "device", "dtype", "warmup_runs", "repeats", "trace_steps", "modes", "shapes", "batch",
        "batch_shape", "prompt_lengths", "prompt_output_tokens", "output_lengths", "output_input_tokens",
        "agent", "load", "pricing", "quant",
    }  # fmt: skip
    unknown = set(data) - known
    if unknown:
        raise UsageError(f"sweep config: unknown keys {sorted(unknown)}")
    modes = _strs(data.get("modes", ["eager"]), "modes", MODES)
    pts: list[Point] = []
    shapes = _strs(data.get("shapes", []), "shapes")
    pts += shape_points(shapes, modes)
    if "batch" in data:
        pts += batch_points(_ints(data["batch"], "batch"), modes, shape=str(data.get("batch_shape", "chat")))
    if "prompt_lengths" in data:
        pts += prompt_points(
            _ints(data["prompt_lengths"], "prompt_lengths"), modes, _int(data, "prompt_output_tokens", 8)
        )
    if "output_lengths" in data:
        pts += output_points(
            _ints(data["output_lengths"], "output_lengths"), modes, _int(data, "output_input_tokens", 128, least=2)
        )
    agent = data.get("agent")
    if agent is None and AGENTIC in shapes:
        agent = {}
    if agent is not None:
        if not isinstance(agent, Mapping):
            raise UsageError("sweep config: [agent] must be a table")
        a = dict(agent)
        agent_modes = _strs(a.pop("modes", list(AGENT_MODES)), "agent.modes", AGENT_MODES)
        unknown_agent = set(a) - {"steps", "system_tokens", "output_tokens", "tool_tokens"}
        if unknown_agent:
            raise UsageError(f"sweep config: [agent]: unknown keys {sorted(unknown_agent)}")
        if any(not _whole(v, 0) for v in a.values()):
            raise UsageError(f"sweep config: [agent] counts must be whole numbers from 0 to {_LIMIT}")
        spec = AgentSpec(**a)
        if spec.steps < 1 or spec.output_tokens < 1 or spec.system_tokens < 2:
            raise UsageError("sweep config: [agent] needs steps >= 1, output_tokens >= 1, system_tokens >= 2")
        pts += agent_points(spec, agent_modes, modes)
    load = data.get("load")
    max_batch_tokens = 512
    if load is not None:
        if not isinstance(load, Mapping):
            raise UsageError("sweep config: [load] must be a table")
        unknown_load = set(load) - {"rates", "shape", "requests", "max_batch_tokens"}
        if unknown_load:
            raise UsageError(f"sweep config: [load]: unknown keys {sorted(unknown_load)}")
        rates = load.get("rates", [0])
        rates = [rates] if isinstance(rates, int | float) else rates
        if not isinstance(rates, list) or not all(
                isinstance(r, int | float) and not isinstance(r, bool) and 0 <= r < math.inf for r in rates):
            raise UsageError("sweep config: [load] rates must be a list of requests per second (0: all at once)")
        n = _int(load, "requests", 16)
        max_batch_tokens = _int(load, "max_batch_tokens", 512)
        pts += load_points([float(r) for r in rates], modes, str(load.get("shape", "chat")), n)
    if not pts:
        raise UsageError(
            "sweep config defines no points (give shapes, batch, prompt_lengths, output_lengths, agent or load)"
        )
    if "quant" in data:
        pts = with_quant(pts, _strs(data["quant"], "quant", QUANT_CHOICES))
        if not pts:
            raise UsageError("sweep config: quant is empty: give none, or the quantizations to cross")
    for p in pts:
        if p.input_tokens < 2 or p.output_tokens < 1:
            raise UsageError(f"sweep point {p.id}: needs at least 2 input tokens and 1 output token")
        if max(p.input_tokens, p.output_tokens, p.batch, p.requests) > _LIMIT:
            raise UsageError(f"sweep point {p.id}: a count past {_LIMIT}")
    pricing = data.get("pricing", {})
    if not isinstance(pricing, Mapping):
        raise UsageError("sweep config: [pricing] must be a table")
    spec_ = SweepSpec(
        name=str(data.get("name", name)),
        model=str(data.get("model", "tiny")),
        device=str(data.get("device", "auto")),
        dtype=_dtype(data.get("dtype", "auto")),
        warmup_runs=_int(data, "warmup_runs", 1, least=0),
        repeats=_int(data, "repeats", 0, least=0),  # 0: the default for the device
        trace_steps=_int(data, "trace_steps", 6),
        pricing=dict(pricing),
        max_batch_tokens=max_batch_tokens,
    )
    return spec_.with_points(pts)


DTYPES = ("auto", "float16", "bfloat16", "float32")


def _dtype(value: Any) -> str:
    """The sweep's dtype: one of DTYPES (float128, float64 or a typo is refused before anything runs)."""
    if not isinstance(value, str) or value not in DTYPES:
        raise UsageError(f"sweep config: dtype {visible(repr(value))} is not one of {', '.join(DTYPES)}")
    return value


def from_toml_text(text: str, *, name: str, where: str) -> SweepSpec:
    """The spec a TOML text describes (a config file's, read by the sweep command); UsageError (naming
    ``where``) where it is not TOML or not a sweep."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"sweep config {visible(where)}: {exc}") from None
    return from_mapping(data, name=name)


def estimate_seconds(
    spec: SweepSpec, *, cuda: bool, ms_per_token: Mapping[str, float] | None = None
) -> float:
    """A rough wall-clock estimate, printed before the sweep starts.

    Decode dominates: every point runs ``warmup_runs`` + ``repeats`` times at
    full length. Per-token costs on a GPU: eager 22 ms, compiled 4 ms (the TinyLlama
    shape on an H200, rounded up from docs/sweep.md); a generous figure for the tiny
    preset on a CPU. Per point a fixed cost of about 1.5 s (profiled window, ingest,
    analysis); compiled points add one compilation per batch size (about 35 s).
    """
    per = dict(
        ms_per_token or ({"eager": 22.0, "compiled": 4.0} if cuda else {"eager": 3.0, "compiled": 3.0})
    )
    runs = max(0, spec.warmup_runs) + spec.repeats_for(cuda)
    total_ms = 0.0
    compiled_batches: set[int] = set()
    for p in spec.points:
        if p.group == "load":
            # One unprofiled and one recorded pass (no repeats); decode steps batch the requests, so a
            # pass lasts about the arrivals plus one answer's decode, plus tracing and analysis.
            arrive_ms = 1000.0 * p.requests / p.rate if p.rate else 0.0
            total_ms += 2 * (arrive_ms + p.output_tokens * per.get(p.mode, per["eager"])) + 3000.0 + 40.0 * p.requests
            continue
        # Batch barely changes the per-token cost while the host is the bottleneck.
        decode_ms = p.total_output_tokens * per.get(p.mode, per["eager"])
        prefill_ms = sum(max(20.0, n * 0.03) for n in p.prompt_lengths()) if cuda else 0.0
        total_ms += runs * (decode_ms + prefill_ms)
        total_ms += 2000.0 if cuda else 300.0  # profiled window, ingest, analysis
        if p.mode == "compiled":
            compiled_batches.add(p.batch)
    total_ms += min(len(compiled_batches), 2) * (35000.0 if cuda else 20000.0)
    return total_ms / 1000.0
