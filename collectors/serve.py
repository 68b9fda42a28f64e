"""Serving under load: the built-in workload through Transformers' continuous-batching engine.

``tracekit record --serve`` sends N requests of mixed shapes (chat, RAG, creative, agentic,
or a file of prompt/output lengths), all at once or at a given rate (Poisson arrivals,
seeded), to ``model.init_continuous_batching()`` (paged attention, chunked prefill, the
engine's CUDA graphs with ``--cuda-graphs``), and records every scheduler step.

The engine has no step callback, so ``EngineTracer`` wraps three methods of its batch
processor (class level, undone on exit): ``prepare_next_batch`` (after it, the scheduled
batch: each request's query length and KV length), ``_generation_step`` (the forward pass
and sampling: opened as a ``tracekit.step ... seqs=...`` annotation,
tracekit.model.stepnames.format_batch_step) and ``update_batch`` (tokens appended). The
engine runs in a background thread, so the profiler records all threads.

Per request, the engine's own stamps (``record_timestamps``; ``time.perf_counter``):
arrival (``created_time``), first scheduled (``lifespan[0]``), each token on the host
(``timestamps``), finish (``lifespan[1]``). They give queueing delay, TTFT, TPOT, ITL and
e2e; the trace gives the same TTFT and e2e from the step windows (``trace_ttft_ns``,
``trace_e2e_ns``: end of the step that sampled the first / last token), which checks them.

The same requests run twice on one engine: once without the profiler (run.json
``timings.unprofiled``) and once recorded. Prefix caching (block sharing) is off so the
second pass recomputes every prompt. Attention stays on SDPA: 5.17 gets ``paged|sdpa``
(it would switch to flash attention where installed), later versions
``auto_switch_to_flash=False``; run.json ``serve.attention`` says which.
"""

from __future__ import annotations

import dataclasses
import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.collectors.hooks import RequestRecord
from tracekit.collectors.noise import ThirdPartyOutput, keep_third_party
from tracekit.collectors.options import RecordOptions
from tracekit.collectors.recording import Recording, create_run
from tracekit.collectors.tables import requests_table
from tracekit.collectors.timing import timings
from tracekit.errors import TracekitError, UsageError, visible
from tracekit.model import schema as _schema
from tracekit.model.stats import percentile
from tracekit.model.stepnames import SeqLabel, StepLabel, batch_label, format_batch_step
from tracekit.model.sweepspec import AgentSpec
from tracekit.store.rundir import RunDir

AGENTIC = "agentic"
PATCHED = ("prepare_next_batch", "_generation_step", "update_batch")


# --- the workload ------------------------------------------------------------------


@dataclass(frozen=True)
class ServeRequest:
    """One request of the workload: its shape and when it arrives (seconds after the first)."""

    index: int
    name: str
    input_tokens: int
    output_tokens: int
    arrival_s: float


@dataclass(frozen=True)
class ServeConfig:
    """The engine and the arrival process (everything else comes from the WorkloadConfig)."""

    requests: tuple[ServeRequest, ...]
    rate: float | None = None  # requests per second (Poisson); None: all arrive at once
    max_batch_tokens: int = 512  # tokens per step: longer prompts are prefilled in chunks
    num_blocks: int | None = None  # KV cache pages; None: enough for every request at once
    page_size: int = 64  # tokens per KV cache page
    max_requests_per_batch: int | None = None
    cuda_graphs: bool = False  # the engine's CUDA graphs (warm-up captures them, untimed)
    timeout_s: float = 1800.0

    def blocks(self) -> int:
        """KV pages: the given number, else every request's prompt and answer at once (no waiting on cache)."""
        if self.num_blocks is not None:
            return self.num_blocks
        need = sum(math.ceil((r.input_tokens + r.output_tokens) / self.page_size) for r in self.requests)
        return need + 2

    def manifest(self) -> dict[str, Any]:
        return {
            "requests": len(self.requests),
            "rate_rps": self.rate,
            "arrivals": "poisson" if self.rate else "all at once",
            "max_batch_tokens": self.max_batch_tokens,
            "num_blocks": self.blocks(),
            "page_size": self.page_size,
            "max_requests_per_batch": self.max_requests_per_batch,
            "cuda_graphs": self.cuda_graphs,
            "shapes": sorted({r.name.rsplit("-", 1)[0] for r in self.requests}),
            "plan": [[r.name, r.input_tokens, r.output_tokens, round(r.arrival_s, 6)] for r in self.requests],
        }


def serve_shape(name: str, rng: random.Random | None = None) -> tuple[int, int]:
    """(input, output) tokens of one request of a named shape or ``IN/OUT``; ``agentic`` is one step of a
    five-step agent loop that resends its history (AgentSpec: step k has a prompt of
    system + k x (answer + tool result) tokens), step drawn at random (seeded)."""
    from tracekit.collectors.presets import resolve_shape

    if name == AGENTIC:
        a = AgentSpec()
        k = (rng or random.Random(0)).randrange(a.steps)
        return a.system_tokens + k * (a.output_tokens + a.tool_tokens), a.output_tokens
    if "/" in name:  # IN/OUT, as the sweep writes a custom shape
        a_, _, b_ = name.partition("/")
        if a_.isdigit() and b_.isdigit() and int(a_) > 0 and int(b_) > 0:
            return int(a_), int(b_)
    sp = resolve_shape(name)
    return sp.input_tokens, sp.output_tokens


def read_lengths(path: Path) -> list[tuple[int, int]]:
    """A lengths file: one request per line, ``PROMPT OUTPUT`` (space or comma); ``#`` comments."""
    from tracekit.store.fsops import decode_text, read_input

    text = decode_text(read_input(path, "--lengths"), f"--lengths {visible(path)}")
    out: list[tuple[int, int]] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.replace(",", " ").split()
        try:
            a, b = int(parts[0]), int(parts[1])
        except (IndexError, ValueError):
            if n == 1 and not out:
                continue  # a header line
            raise UsageError(f"--lengths {path}:{n}: expected 'PROMPT OUTPUT' token counts, got {line!r}") from None
        if a < 1 or b < 1:
            raise UsageError(f"--lengths {path}:{n}: token counts must be at least 1")
        out.append((a, b))
    if not out:
        raise UsageError(f"--lengths {path}: no requests in it")
    return out


def plan(shapes: Sequence[str], n: int, rate: float | None, seed: int, *,
         lengths: Sequence[tuple[int, int]] | None = None, input_tokens: int | None = None,
         output_tokens: int | None = None) -> tuple[ServeRequest, ...]:
    """The requests: shapes round-robin (or the lengths file's rows, cycled), arrival times from a
    Poisson process of ``rate`` (the first at 0; exponential gaps, seeded), or all at 0."""
    if n < 1:
        raise UsageError("--serve needs at least one request")
    if rate is not None and rate <= 0:
        raise UsageError(f"--rate {rate}: give a positive number of requests per second, or leave it out")
    rng = random.Random(seed)
    arrivals = random.Random(seed + 1)
    out = []
    t = 0.0
    for i in range(n):
        if lengths:
            a, b = lengths[i % len(lengths)]
            name = "lengths"
        else:
            name = shapes[i % len(shapes)]
            a, b = serve_shape(name, rng)
        a, b = input_tokens or a, output_tokens or b
        if i and rate:
            t += arrivals.expovariate(rate)
        out.append(ServeRequest(i, f"{name}-{i}", a, b, t if rate else 0.0))
    return tuple(out)


# --- the engine ----------------------------------------------------------------------


def engine_support() -> str | None:
    """Why this stack cannot run --serve (one line), or None."""
    try:
        import transformers
        from transformers.generation.continuous_batching import continuous_api as api
    except ImportError as exc:
        return f"transformers has no continuous batching engine here ({exc})"
    missing = [m for m in PATCHED if not hasattr(getattr(api, "ContinuousBatchProcessor", None), m)]
    if missing or not hasattr(api, "ContinuousBatchingManager"):
        return (f"transformers {transformers.__version__} lacks the continuous batching engine tracekit drives "
                f"(ContinuousBatchingManager, ContinuousBatchProcessor.{'/'.join(PATCHED)}; transformers 5.17+)")
    return None


def _cb_fields() -> set[str]:
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    return {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}


def cb_config(serve: ServeConfig, *, device: str) -> tuple[Any, str]:
    """(ContinuousBatchingConfig, attention note) for this Transformers version."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    fields = _cb_fields()
    kw: dict[str, Any] = {
        "num_blocks": serve.blocks(),
        "max_batch_tokens": serve.max_batch_tokens,
        "allow_block_sharing": False,  # the recorded pass repeats the unprofiled pass's prompts
        "scheduler_type": "fifo",
        "use_cuda_graph": bool(serve.cuda_graphs and device.startswith("cuda")),
        "use_async_batching": False,
    }
    kw["page_size" if "page_size" in fields else "block_size"] = serve.page_size
    if serve.max_requests_per_batch is not None:
        kw["max_requests_per_batch"] = serve.max_requests_per_batch
    if "auto_switch_to_flash" in fields:
        kw["auto_switch_to_flash"] = False
        note = "sdpa (auto_switch_to_flash=False)"
    else:
        note = "paged|sdpa"
    return ContinuousBatchingConfig(**{k: v for k, v in kw.items() if k in fields}), note


def generation_config(max_new_tokens: int) -> Any:
    from transformers import GenerationConfig

    # eos_token_id=-1: no EOS, so every request runs to exactly its output length.
    return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=-1, pad_token_id=0)


class Engine:
    """One ContinuousBatchingManager, started once and shared by the warm-up and both passes."""

    def __init__(self, model: Any, serve: ServeConfig, device: str) -> None:
        self.model = model
        self.serve = serve
        self.device = device
        self.manager: Any = None
        self.attention = ""
        self._restore_attn: str | None = None

    def __enter__(self) -> Engine:
        why = engine_support()
        if why is not None:
            raise TracekitError(f"--serve: {why}")
        cfg, note = cb_config(self.serve, device=self.device)
        self.attention = note
        if note == "paged|sdpa":
            # 5.17 switches sdpa to flash attention where it is installed unless asked for paged|sdpa;
            # a model left on paged|sdpa cannot run a plain forward, so it is put back on exit.
            self._restore_attn = str(getattr(self.model.config, "_attn_implementation", None) or "sdpa")
            self.model.set_attn_implementation("paged|sdpa")
        longest = max(r.output_tokens for r in self.serve.requests)
        try:
            self.manager = self.model.init_continuous_batching(
                generation_config=generation_config(longest), continuous_batching_config=cfg
            )
            if self.serve.cuda_graphs:
                self.manager.warmup()  # captures the graphs, before anything is timed or traced
            self.manager.start()
        except TracekitError:
            raise
        except Exception as exc:
            self._put_back()
            raise TracekitError(f"--serve: the continuous batching engine would not start for this model: "
                                f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                                ) from None
        return self

    def __exit__(self, *exc: Any) -> None:
        m, self.manager = self.manager, None
        try:
            if m is not None:
                m.stop(block=True, timeout=60)
                m.destroy()
        finally:
            self._put_back()

    def _put_back(self) -> None:
        if self._restore_attn is not None:
            self.model.set_attn_implementation(self._restore_attn)
            self._restore_attn = None

    def run(self, requests: Sequence[ServeRequest], prompts: Sequence[list[int]], tag: str,
            tracer: EngineTracer | None = None) -> dict[int, Any]:
        """Send the requests at their arrival times; wait for all; {request index: GenerationOutput}."""
        mgr = self.manager
        ids = {f"{tag}{r.index}": r.index for r in requests}
        if tracer is not None:
            tracer.ids.update(ids)
        t0 = time.perf_counter()
        for r, p in sorted(zip(requests, prompts, strict=True), key=lambda rp: rp[0].arrival_s):
            wait = t0 + r.arrival_s - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            mgr.add_request(p, request_id=f"{tag}{r.index}", max_new_tokens=r.output_tokens, record_timestamps=True)
        got: dict[int, Any] = {}
        deadline = time.monotonic() + self.serve.timeout_s
        while len(got) < len(ids):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TracekitError(f"--serve: {len(ids) - len(got)} requests unfinished after {self.serve.timeout_s:.0f} s")
            out = mgr.get_result(timeout=min(left, 1.0))
            if out is None:
                if not mgr.is_running():
                    fatal = getattr(getattr(mgr, "background_thread_status", None), "fatal_error", None)
                    raise TracekitError(f"--serve: the continuous batching engine stopped ({fatal or 'no reason given'})")
                continue
            if out.request_id in ids and out.is_finished():
                got[ids[out.request_id]] = out
        return got


# --- the step hooks --------------------------------------------------------------------


@dataclass
class BatchStep:
    """One scheduler step as the recorder saw it (host clock, time.time_ns)."""

    step_id: int
    seqs: list[SeqLabel]
    sched_start_ns: int
    sched_end_ns: int
    cpu_start_ns: int = 0
    cpu_end_ns: int | None = None
    padded_tokens: int | None = None  # what the forward saw (CUDA graphs pad the batch)
    label: StepLabel | None = None

    def __post_init__(self) -> None:
        self.label = batch_label(self.step_id, self.seqs)

    @property
    def kind(self) -> str:
        assert self.label is not None
        return self.label.kind


def _host_io(bp: Any) -> Any:
    """The IO object of the batch being prepared, launched or updated (sync and async batching)."""
    io = bp.inputs_and_outputs
    if hasattr(io, "io_pairs"):
        return io.io_pairs[io.current_pair].host_io
    return io


class EngineTracer:
    """Wraps the batch processor's methods while installed; keeps the steps and their requests.

    ``ids`` maps the engine's request ids to tracekit's request numbers (requests it does not
    know, e.g. warm-up ones, are kept under -1). Usable as the ``patch`` of a Recording
    (``__enter__`` installs, ``__exit__`` removes).
    """

    def __init__(self, *, annotate: bool = True, clock: Callable[[], int] = time.time_ns) -> None:
        self.annotate = annotate
        self.clock = clock
        self.ids: dict[str, int] = {}
        self.steps: list[BatchStep] = []
        self.updates: dict[int, tuple[int, int]] = {}  # step id -> (update start, end) on the host clock
        self.step_sources: dict[str, int] = {"engine": 0}
        self.requests: list[RequestRecord] = []  # filled by the driver from the engine's outputs
        self.on_step_start: Any = None  # set by Recording; windows are not used with --serve
        self.on_step_end: Any = None
        self.on_token: Any = None
        self._orig: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._pending: dict[int, BatchStep] = {}
        self._step_of_io: dict[int, int] = {}
        self._next = 0

    def __enter__(self) -> EngineTracer:
        from transformers.generation.continuous_batching import continuous_api as api

        bp_cls = api.ContinuousBatchProcessor
        self._orig = {m: getattr(bp_cls, m) for m in PATCHED}
        tracer = self
        orig = self._orig

        def prepare_next_batch(bp: Any, *a: Any, **k: Any) -> Any:
            t0 = tracer.clock()
            ok = orig["prepare_next_batch"](bp, *a, **k)
            if ok:
                tracer._snapshot(bp, t0, tracer.clock())
            return ok

        def _generation_step(bp: Any, *a: Any, **k: Any) -> Any:
            rec = tracer._pending.pop(id(bp), None)
            if rec is None:
                return orig["_generation_step"](bp, *a, **k)
            tracer._step_of_io[id(_host_io(bp))] = rec.step_id  # before the call: async swaps IO pairs inside it
            rf = None
            if tracer.annotate:
                rf = _record_function(format_batch_step(rec.label))  # type: ignore[arg-type]
            rec.cpu_start_ns = tracer.clock()
            if rf is not None:
                rf.__enter__()
            try:
                return orig["_generation_step"](bp, *a, **k)
            finally:
                if rf is not None:
                    rf.__exit__(None, None, None)
                rec.cpu_end_ns = tracer.clock()
                with tracer._lock:
                    tracer.steps.append(rec)
                    tracer.step_sources["engine"] += 1

        def update_batch(bp: Any, *a: Any, **k: Any) -> Any:
            step = tracer._step_of_io.get(id(_host_io(bp)), -1)
            t0 = tracer.clock()
            try:
                return orig["update_batch"](bp, *a, **k)
            finally:
                tracer.updates[step] = (t0, tracer.clock())

        for m, fn in (("prepare_next_batch", prepare_next_batch), ("_generation_step", _generation_step),
                      ("update_batch", update_batch)):
            setattr(bp_cls, m, fn)
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._orig:
            return
        from transformers.generation.continuous_batching import continuous_api as api

        for m, fn in self._orig.items():
            setattr(api.ContinuousBatchProcessor, m, fn)
        self._orig = {}

    def _snapshot(self, bp: Any, t0: int, t1: int) -> None:
        io = _host_io(bp)
        seqs = []
        for fs in io.requests_in_batch:
            st = fs.state
            q = int(fs.query_length)
            kv = int(st.position_offset)  # already advanced by q when the batch tensors were prepared
            if kv - q < len(st.initial_tokens):
                phase = "f" if fs.has_new_token else "p"
            else:
                phase = "d"
            seqs.append(SeqLabel(self.ids.get(str(st.request_id), -1), phase, q, kv))
        padded = getattr(io, "num_q_tokens", None)
        rec = BatchStep(self._next, seqs, t0, t1, padded_tokens=int(padded) if isinstance(padded, int) else None)
        self._next += 1
        self._pending[id(bp)] = rec


def _record_function(name: str) -> Any:
    import torch

    return torch.autograd.profiler.record_function(name)


# --- per-request records ---------------------------------------------------------------


@dataclass
class ServeRecord(RequestRecord):
    """A request as the engine timed it (host clock): arrival, first scheduled, tokens, finish."""

    scheduled_ns: int | None = None
    trace_first_ns: int | None = None  # end of the step that sampled its first token (host clock)
    trace_last_ns: int | None = None  # and its last
    extra: dict[str, Any] = field(default_factory=dict)

    def metrics(self) -> dict[str, Any]:
        m = super().metrics()
        m["queue_ns"] = self.scheduled_ns - self.start_ns if self.scheduled_ns is not None else None
        return m


class PerfToHost:
    """time.perf_counter seconds (the engine's clock) to time.time_ns (the recorder's), from one pair."""

    def __init__(self) -> None:
        self.wall = time.time_ns()
        self.perf = time.perf_counter_ns()

    def __call__(self, t: float) -> int:
        return round(t * 1e9) - self.perf + self.wall


def records(requests: Sequence[ServeRequest], outputs: dict[int, Any], to_host: PerfToHost,
            steps: Sequence[BatchStep] = ()) -> list[ServeRecord]:
    """One ServeRecord per request from the engine's outputs; the step windows give trace_first/last."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for s in steps:
        end = s.cpu_end_ns
        if end is None:
            continue
        for q in s.seqs:
            if q.phase in "fd":
                first.setdefault(q.request_id, end)
                last[q.request_id] = end
    out = []
    for r in requests:
        o = outputs.get(r.index)
        rec = ServeRecord(r.index, r.name, 1, r.input_tokens, r.output_tokens, 0)
        if o is not None:
            rec.start_ns = to_host(o.created_time)
            rec.token_ns = [to_host(t) for t in (o.timestamps or [])]
            rec.end_ns = to_host(o.lifespan[1]) if o.lifespan[1] >= 0 else None
            rec.scheduled_ns = to_host(o.lifespan[0]) if o.lifespan[0] >= 0 else None
            rec.complete = o.error is None and o.is_finished() and len(o.generated_tokens) == r.output_tokens
            if o.error:
                rec.extra["error"] = str(o.error)
        rec.trace_first_ns = first.get(r.index)
        rec.trace_last_ns = last.get(r.index)
        out.append(rec)
    return out


def load_metrics(recs: Sequence[ServeRecord]) -> dict[str, Any]:
    """Under-load aggregates: throughput over the pass, p50 / p99 of TTFT, TPOT, ITL, queue and e2e (ns)."""
    done = [r for r in recs if r.complete and r.token_ns]
    out: dict[str, Any] = {"requests": len(recs), "completed": len(done)}
    if not done:
        return out
    t0 = min(r.start_ns for r in done)
    t1 = max(r.end_ns or r.token_ns[-1] for r in done)
    span = max(t1 - t0, 1)
    gen = sum(len(r.token_ns) for r in done)
    out["duration_ns"] = span
    out["output_tok_s"] = gen / (span / 1e9)
    out["input_tok_s"] = sum(r.input_tokens for r in done) / (span / 1e9)
    out["request_rate_rps"] = len(done) / (span / 1e9)
    ms = [r.metrics() for r in done]
    itl = [b - a for r in done for a, b in zip(r.token_ns, r.token_ns[1:], strict=False)]
    for key, vals in (("ttft_ns", [m["ttft_ns"] for m in ms]), ("tpot_ns", [m["tpot_ns"] for m in ms]),
                      ("e2e_ns", [m["e2e_ns"] for m in ms]), ("queue_ns", [m["queue_ns"] for m in ms]),
                      ("itl_ns", itl)):
        v = [float(x) for x in vals if x is not None]
        out[f"{key}_p50"] = percentile(v, 50)
        out[f"{key}_p99"] = percentile(v, 99)
        out[f"{key}_mean"] = sum(v) / len(v) if v else None
    return out


def trace_check(recs: Sequence[ServeRecord]) -> dict[str, Any]:
    """Engine TTFT / e2e against the step windows: the engine stamps a token in update_batch, after its step."""
    d_first = [r.token_ns[0] - r.trace_first_ns for r in recs if r.token_ns and r.trace_first_ns is not None]
    d_last = [(r.end_ns or r.token_ns[-1]) - r.trace_last_ns for r in recs
              if r.token_ns and r.trace_last_ns is not None]
    return {
        "what": "engine token stamp minus the end of the step that sampled it (host clock): the update_batch "
                "bookkeeping in between, never negative in a synchronous engine",
        "first_token_ns_p50": percentile([float(x) for x in d_first], 50),
        "first_token_ns_max": max(d_first) if d_first else None,
        "first_token_ns_min": min(d_first) if d_first else None,
        "last_token_ns_max": max(d_last) if d_last else None,
        "requests_checked": len(d_first),
    }


# --- the recording -------------------------------------------------------------------------


class ServeRecording(Recording):
    """A Recording whose steps are the engine's scheduler steps (EngineTracer), profiled on every thread."""

    def __init__(self, run: RunDir, opts: RecordOptions, tracer: EngineTracer) -> None:
        super().__init__(run, dataclasses.replace(opts, all_threads=True), tracker=tracer, patch=tracer)
        self.tracer = tracer

    def unstepped_requests(self) -> list[int]:
        stepped = {q.request_id for s in self.tracer.steps for q in s.seqs}
        return [r.request_id for r in self.tracer.requests if r.output_tokens and r.request_id not in stepped]

    def _tables(self, offset: int) -> tuple[Any, Any]:
        steps = [s for s in self.tracer.steps if s.cpu_end_ns is not None]
        al = self.alignment

        def start_of(s: BatchStep) -> int | None:
            return al.start_of(s.step_id, s.cpu_start_ns)

        def end_of(s: BatchStep) -> int | None:
            return al.end_of(s.step_id, s.cpu_end_ns)

        labels = [s.label for s in steps]
        steps_t = _schema.from_columns("steps", {
            "step_id": [s.step_id for s in steps],
            "request_id": [lab.request_id if lab is not None else None for lab in labels],
            "kind": [s.kind for s in steps],
            "batch": [lab.batch if lab is not None else None for lab in labels],
            "q_len": [lab.q_len if lab is not None else None for lab in labels],
            "kv_len": [lab.kv_len if lab is not None else None for lab in labels],
            "tokens": [lab.tokens if lab is not None else None for lab in labels],
            "source": ["tracekit"] * len(steps),
            "cpu_start_ns": [start_of(s) for s in steps],
            "cpu_end_ns": [end_of(s) for s in steps],
        })
        seq_rows = [(s.step_id, q) for s in steps for q in s.seqs]
        self.run.write_table("step_requests", _schema.from_columns("step_requests", {
            "step_id": [sid for sid, _ in seq_rows],
            "request_id": [q.request_id for _, q in seq_rows],
            "phase": [q.phase for _, q in seq_rows],
            "q_len": [q.q_len for _, q in seq_rows],
            "kv_len": [q.kv_len for _, q in seq_rows],
        }))
        # The trace's view of each request: end of the step that sampled its first / last token.
        end_by_id = {s.step_id: end_of(s) for s in steps}
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for s in steps:
            e = end_by_id[s.step_id]
            for q in s.seqs:
                if q.phase in "fd" and e is not None:
                    first.setdefault(q.request_id, e)
                    last[q.request_id] = e
        reqs = self.tracer.requests

        def since_start(r: RequestRecord, ns: int | None) -> int | None:
            return None if ns is None else ns - (r.start_ns + offset)

        requests_t = requests_table(reqs, offset, source="engine", itl=True, extra={
            "queue_ns": [r.metrics().get("queue_ns") for r in reqs],
            "trace_ttft_ns": [since_start(r, first.get(r.request_id)) for r in reqs],
            "trace_e2e_ns": [since_start(r, last.get(r.request_id)) for r in reqs],
        })
        return steps_t, requests_t


# --- the driver ----------------------------------------------------------------------------


def make_prompts(requests: Sequence[ServeRequest], vocab_size: int, seed: int) -> list[list[int]]:
    """Random token ids per request, deterministic by seed (the lowest ids are special tokens)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    low = min(10, vocab_size - 1)
    return [torch.randint(low, vocab_size, (r.input_tokens,), generator=gen).tolist() for r in requests]


def check_fits(requests: Sequence[ServeRequest], model: Any) -> None:
    limit = getattr(model.config, "max_position_embeddings", None)
    need = max(r.input_tokens + r.output_tokens for r in requests)
    if limit is not None and need > int(limit):
        raise UsageError(f"a request of {need} tokens exceeds the model's max_position_embeddings ({limit})")


@contextmanager
def _quiet_engine() -> Iterator[None]:
    """The engine logs a line per request at info level on some versions; keep the terminal for tracekit."""
    import logging

    log = logging.getLogger("transformers.generation.continuous_batching")
    level = log.level
    log.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        log.setLevel(level)


def serve_into(run: RunDir, model: Any, cfg: Any, serve: ServeConfig, opts: RecordOptions,
               progress: Callable[[str], None] | None = None) -> ServeRecording:
    """Warm-up, the unprofiled pass and the recorded pass on one engine, into ``run``."""
    say = progress or (lambda _msg: None)
    vocab = int(model.config.vocab_size)
    prompts = make_prompts(serve.requests, vocab, cfg.seed)
    warm = [ServeRequest(i, f"warmup-{i}", min(r.input_tokens, serve.max_batch_tokens), min(r.output_tokens, 4), 0.0)
            for i, r in enumerate(serve.requests[: max(2, min(4, cfg.warmup))])] if cfg.warmup else []
    with _quiet_engine(), Engine(model, serve, cfg.device) as engine:
        run.update_manifest(serve={**serve.manifest(), "attention": engine.attention,
                                   "engine": "transformers ContinuousBatchingManager"})
        if warm:
            say("warm-up")
            engine.run(warm, make_prompts(warm, vocab, cfg.seed + 10_000), "w")
        say("timing without profiler")
        bare = EngineTracer(annotate=False)
        to_host = PerfToHost()
        with bare:
            outs = engine.run(serve.requests, prompts, "u", bare)
        unprof = records(serve.requests, outs, to_host, bare.steps)
        unprofiled = timings(list(unprof), clock="engine timestamps (time.perf_counter, record_timestamps)")
        unprofiled["load"] = load_metrics(unprof)
        unprofiled["trace_check"] = trace_check(unprof)
        run.update_manifest(timings={"unprofiled": unprofiled})
        say("recording")
        tracer = EngineTracer(annotate=True)
        rec = ServeRecording(run, opts, tracer)
        with rec:
            outs = engine.run(serve.requests, prompts, "p", tracer)
            tracer.requests = list(records(serve.requests, outs, PerfToHost(), tracer.steps))
        prof = [r for r in tracer.requests if isinstance(r, ServeRecord)]
        kinds: dict[str, int] = {}
        for s in tracer.steps:
            kinds[s.kind] = kinds.get(s.kind, 0) + 1
        data = run.read_manifest()
        t = data.get("timings", {})
        t["profiled"]["load"] = load_metrics(prof)
        t["profiled"]["trace_check"] = trace_check(prof)
        # Steps whose forward ran on more tokens than the requests had (the engine pads for its CUDA graphs).
        padded = sum(1 for s in tracer.steps if s.padded_tokens and s.label and s.padded_tokens > s.label.tokens)
        run.update_manifest(timings=t, steps_by_kind=kinds, steps_padded=padded,
                            max_batch=max((len(s.seqs) for s in tracer.steps), default=0))
        bad = [r.name for r in prof if not r.complete]
        if bad:
            run.add_warning(f"--serve: requests {bad[:5]} did not finish with their full output")
    return rec


def run_serve(cfg: Any, serve: ServeConfig, opts: RecordOptions) -> RunDir:
    """Build the model, then ``serve_into`` a new run directory."""
    import sys

    from tracekit.collectors import workload as wl

    why = engine_support()
    if why is not None:
        raise TracekitError(f"--serve: {why}")
    # The build imports the model's modules (and through them optional libraries such as torchao,
    # which log as they load): caught here and kept in the run like the recorded pass's output.
    build_noise = ThirdPartyOutput()
    try:
        with build_noise, build_noise.native():
            model, model_info = wl.build_model(cfg)
    except BaseException:
        text = build_noise.stderr_text()
        if text.strip():
            sys.stderr.write(text if text.endswith("\n") else text + "\n")
        build_noise.close()
        raise
    check_fits(serve.requests, model)
    run = create_run(opts, workload={
        **cfg.manifest(), "kind": "serve", "requests": len(serve.requests), "shape": cfg.shape,
        # Over all requests (serve.plan has each one's): a mix has no single shape.
        "input_tokens": sum(r.input_tokens for r in serve.requests),
        "output_tokens": sum(r.output_tokens for r in serve.requests),
    }, model=model_info)
    keep_third_party(run, build_noise)
    build_noise.close()

    def say(phase: str) -> None:
        if not opts.quiet:
            sys.stderr.write(f"--serve: {phase}: {len(serve.requests)} requests\n")

    try:
        serve_into(run, model, cfg, serve, opts, say)
    except BaseException as exc:
        m = run.read_manifest()
        if m.get("status") != "complete" and not m.get("incomplete_reason"):
            reason = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else \
                f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            run.mark_incomplete(reason)
        raise
    return run
