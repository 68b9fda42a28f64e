"""A recording session: profiler + NVML sampler + generate annotations around a block of work.

Three ways in, one machinery (``Recording``):

* ``with tracekit.record("name", out=...) as run:`` around user code (the Python API);
* ``tracekit record -- python my_script.py ARGS``: the script runs in-process
  (runpy) inside a Recording;
* ``tracekit record`` with no script: the built-in workload (``run_workload``),
  which also measures the same requests once without the profiler.

While a Recording is open every ``GenerationMixin.generate`` call is a
request with step annotations and host token timers. On exit (normal, an
exception or Ctrl-C) whatever was captured is written: the merged trace, the
steps/requests/counters tables, run.json; the run is marked complete only when
the block finished without an exception.

Libraries' own output (Kineto's lines, torch and transformers warnings) is not printed between
tracekit's lines: tracekit.collectors.noise catches it, ``keep_third_party`` writes it to
``third_party.log`` in the run directory, keeps what matters as run.json warnings ("third-party: ...")
and counts it under run.json ``third_party`` for the summary's one line.
"""

from __future__ import annotations

import os
import platform
import runpy
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.collectors.hooks import GenerationTracker, RequestRecord, StepRecord, patch_generate
from tracekit.collectors.noise import LOG_NAME, ThirdPartyOutput
from tracekit.collectors.profiler import KinetoCapture, ProfilerConfig, StepWindow
from tracekit.errors import TracekitError, UsageError
from tracekit.model import schema as _schema
from tracekit.model.stepnames import parse_step
from tracekit.store.rundir import STATUS_COMPLETE, STATUS_INCOMPLETE, RunDir, default_run_id
from tracekit.trace import chrome as chrome_trace

RAW_TRACE = "kineto.raw.json"


@dataclass(frozen=True)
class RecordOptions:
    out: Path
    force: bool = False
    nvml: bool = True
    sample_hz: float = 100.0
    trace_steps: StepWindow | None = None
    cuda: bool | None = None  # None: profile CUDA activity where CUDA is available
    device_index: int = 0  # torch's cuda:<i>; NvmlSampler.for_torch_device maps it to NVML's index
    quiet: bool = True
    command: tuple[str, ...] = field(default_factory=tuple)
    nvml_off_reason: str = "disabled with --no-nvml"
    all_threads: bool = False  # profile every thread (an engine stepping in a background thread)
    memory: bool = False  # --memory: the profiler's memory events (profile_memory) on


def process_rank() -> int:
    """This process's rank: torch.distributed's ``RANK`` (set by torchrun and ``--tp``), else 0."""
    try:
        return max(int(os.environ.get("RANK", "0")), 0)
    except ValueError:
        return 0


def default_out(label: str) -> Path:
    return Path("runs") / default_run_id(label)


# --- environment -------------------------------------------------------------------


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
    }
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name(0)
            env["gpu_count"] = torch.cuda.device_count()
            cap = torch.cuda.get_device_capability(0)
            env["compute_capability"] = f"{cap[0]}.{cap[1]}"
    except ImportError:
        pass
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        pass
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            drv = pynvml.nvmlSystemGetDriverVersion()
            env["driver"] = drv.decode() if isinstance(drv, bytes) else str(drv)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML on this machine: the driver stays unknown
        env.setdefault("driver", None)
    return env


def _make_sampler(opts: RecordOptions) -> tuple[Any, dict[str, Any] | None]:
    if not opts.nvml:
        return None, {"available": False, "reason": opts.nvml_off_reason}
    try:
        from tracekit.collectors.nvml import NvmlSampler
    except ImportError as exc:
        return None, {"available": False, "reason": f"nvml: not available ({exc})"}
    try:
        # torch numbers only CUDA_VISIBLE_DEVICES; NVML numbers every GPU: map, don't assume equal.
        return NvmlSampler.for_torch_device(opts.device_index, interval_s=1.0 / opts.sample_hz), None
    except Exception as exc:  # a bad rate, or NVML refusing: record why and go on
        return None, {"available": False, "reason": f"{type(exc).__name__}: {exc}"}


# --- timings -----------------------------------------------------------------------


def timings(
    records: list[RequestRecord],
    clock: str = "host time.time_ns, synchronised",
    warmup: frozenset[int] = frozenset(),
) -> dict[str, Any]:
    """Per-request metrics and their means over the requests that completed, warm-ups
    (request ids in ``warmup``, flagged ``"warmup": true``) left out of the means."""
    per = [r.metrics() for r in records]
    for m in per:
        if m["request_id"] in warmup:
            m["warmup"] = True
    done = [m for m in per if m["complete"] and m["ttft_ns"] is not None and not m.get("warmup")]
    agg: dict[str, Any] = {"requests": len(done)}
    if warmup:
        agg["warmup_requests"] = sum(1 for m in per if m.get("warmup"))

    def mean(key: str) -> float | None:
        vals = [m[key] for m in done if m.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    for key in ("ttft_ns", "tpot_ns", "e2e_ns", "prefill_share"):
        agg[key] = mean(key)
    pre = [m["batch"] * m["input_tokens"] / (m["ttft_ns"] / 1e9) for m in done if m["ttft_ns"]]
    dec = [
        m["batch"] * (m["output_tokens"] - 1) / ((m["e2e_ns"] - m["ttft_ns"]) / 1e9)
        for m in done
        if m["output_tokens"] > 1 and m["e2e_ns"] > m["ttft_ns"]
    ]
    agg["prefill_tok_s"] = sum(pre) / len(pre) if pre else None
    agg["decode_tok_s"] = sum(dec) / len(dec) if dec else None
    return {"clock": clock, "aggregate": agg, "requests": per}


EVENTS_CLOCK = (
    "CUDA events (torch.cuda.Event elapsed_time) recorded on the current stream at request start, "
    "at each token as it reached the host (then synchronised on), and at the end: same requests as the host timers"
)


def event_timings(records: list[RequestRecord]) -> dict[str, Any] | None:
    """The same requests timed by their CUDA events, and how far the host timers are from them (%)."""
    views = [r.event_view() for r in records]
    if not any(v is not None for v in views):
        return None
    ev = timings([v for v in views if v is not None], clock=EVENTS_CLOCK)
    host = timings([r for r, v in zip(records, views, strict=True) if v is not None])
    diff: dict[str, float | None] = {}
    for key in ("ttft_ns", "tpot_ns", "e2e_ns"):
        h, e = host["aggregate"].get(key), ev["aggregate"].get(key)
        diff[key.replace("_ns", "_pct")] = round(100.0 * (h - e) / e, 3) if h and e else None
    ev["host_minus_events_pct"] = diff
    return ev


def _event_factory(model: Any) -> Any:
    """Where the unprofiled pass gets its timing events (tests substitute a fake on CPU)."""
    from tracekit.collectors.hooks import cuda_event_factory

    return cuda_event_factory(model)


def overhead(profiled: dict[str, Any], unprofiled: dict[str, Any]) -> dict[str, float | None]:
    """Profiler overhead in %, per metric: (profiled - unprofiled) / unprofiled."""
    out: dict[str, float | None] = {}
    for key in ("ttft_ns", "tpot_ns", "e2e_ns"):
        p, u = profiled["aggregate"].get(key), unprofiled["aggregate"].get(key)
        out[key.replace("_ns", "_pct")] = round(100.0 * (p - u) / u, 2) if p and u else None
    return out


# --- the session -------------------------------------------------------------------


class Recording:
    """Profiler, NVML sampler and generate annotations over a block; writes the run on exit."""

    def __init__(
        self,
        run: RunDir,
        opts: RecordOptions,
        on_token: Callable[[RequestRecord], None] | None = None,
        noise: ThirdPartyOutput | None = None,
        *,
        tracker: Any = None,
        patch: Any = None,
        memory: Any = None,
    ):
        """``tracker`` (default: a GenerationTracker around every generate) keeps the host log of
        ``steps`` and ``requests``; ``patch`` is the context manager that installs its hooks."""
        self.run = run
        self.opts = opts
        self._on_token = on_token
        # Given: the caller (the built-in workload) catches over a wider span and owns it.
        self.noise = noise if noise is not None else ThirdPartyOutput()
        self._own_noise = noise is None
        self.capture: KinetoCapture | None = None
        self.sampler: Any = None
        self._nvml_status: dict[str, Any] | None = None
        self.tracker = tracker if tracker is not None else GenerationTracker(annotate=True)
        self._patch = patch if patch is not None else patch_generate(self.tracker)
        self.result: dict[str, Any] = {}
        self.extra_manifest: dict[str, Any] = {}
        self._traced_steps: dict[int, chrome_trace.Annotation] = {}
        self._warmup: set[int] = set()
        # --memory: a collectors.memory.MemoryProbe driven by the step hooks, written as step_memory.
        self.memory = memory
        self._cuda = True  # set on entry: whether the profiler traced CUDA (else the run gets its CPU split)

    @property
    def path(self) -> Path:
        return self.run.path

    def name_next(self, name: str) -> None:
        """Name the next generate call's request (default ``request-<id>``)."""
        self.tracker.next_name = name

    def warmup(self) -> Warmup:
        """Mark warm-up requests: ``rec.warmup()`` marks the next generate call; ``with rec.warmup():``
        marks every generate call inside the block. Warm-ups are recorded like any request but left
        out of the timing means and of the run's phase totals (run.json ``warmup_requests``)."""
        return Warmup(self)

    def warmup_ids(self) -> frozenset[int]:
        """The request ids marked as warm-ups that were actually issued."""
        issued = len(self.tracker.requests)
        return frozenset(i for i in self._warmup if i < issued)

    def __enter__(self) -> Recording:
        import torch

        cuda = torch.cuda.is_available() if self.opts.cuda is None else self.opts.cuda
        self._cuda = cuda
        if self._own_noise:
            self.noise.__enter__()
        self.sampler, self._nvml_status = _make_sampler(self.opts)
        if self.sampler is not None:
            self.sampler.start()
        self.capture = KinetoCapture(
            ProfilerConfig(cuda=cuda, window=self.opts.trace_steps, all_threads=self.opts.all_threads,
                           profile_memory=self.opts.memory),
            self.run.path / RAW_TRACE,
            native=self.noise.native,
        )
        self.tracker.on_step_start = self.capture.on_step_start
        self.tracker.on_step_end = self.capture.on_step_end
        if self.memory is not None:
            self.tracker.on_step_start = _both(self.memory.on_step_start, self.capture.on_step_start)
            self.tracker.on_step_end = _both(self.memory.on_step_end, self.capture.on_step_end)
            self.memory.start()
        self.tracker.on_token = self._on_token
        self.run.update_manifest(
            profiler={
                "activities": ["cpu", "cuda"] if cuda else ["cpu"],
                "record_shapes": True,
                "with_stack": False,
                "trace_steps": str(self.opts.trace_steps) if self.opts.trace_steps else "all",
            }
        )
        self._patch.__enter__()
        ACTIVE.append(self)
        try:
            self.capture.start()
        except BaseException:
            self._patch.__exit__(None, None, None)
            if self._own_noise:
                self.noise.__exit__(None, None, None)
            ACTIVE.remove(self)
            raise
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.finish(exc)

    def finish(self, exc: BaseException | None = None) -> None:
        """Stop every collector and write what was captured; complete only if ``exc`` is None."""
        problems: list[str] = []
        self._patch.__exit__(None, None, None)
        if self.memory is not None:
            self.memory.stop()
        if self in ACTIVE:
            ACTIVE.remove(self)
        t_stop = time.perf_counter()
        if self.capture is not None:
            try:
                self.capture.stop()
            except Exception as e:  # keep going: the host-side log is still worth writing
                problems.append(f"profiler stop failed: {type(e).__name__}: {e}")
        self._profiler_export_s = time.perf_counter() - t_stop
        if self.sampler is not None:
            self.sampler.stop()
            self._nvml_status = self.sampler.status()
        if self._own_noise:
            self.noise.__exit__(None, None, None)
        try:
            self._write(problems)
        finally:
            keep_third_party(self.run, self.noise)
            if self._own_noise:
                self.noise.close()
            for p in problems:
                self.run.add_warning(p)
            if exc is None and not problems_fatal(problems):
                self.run.mark_complete()
                if not self._cuda:  # every recording on a CPU (workload, script, API, serve): its split
                    _cpu_split(self.run)
            else:
                reason = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else _describe(exc)
                self.run.mark_incomplete(reason or "; ".join(problems))

    def _write(self, problems: list[str]) -> None:
        run = self.run
        t0 = time.perf_counter()
        raw = run.path / RAW_TRACE
        have_raw = raw.is_file() and raw.stat().st_size > 0
        raw_bytes = raw.stat().st_size if have_raw else 0
        annotations = own_annotations(raw) if have_raw else []  # a byte search, not a read of every event
        syncs = chrome_trace.clock_syncs(annotations)
        t_scan = time.perf_counter()
        # Every step annotation is a sync pair too: its host start was read just before it opened.
        traced_steps: dict[int, chrome_trace.Annotation] = {}
        for a in annotations:
            label = parse_step(a.name)
            if label is not None:
                traced_steps[label.step_id] = a
        by_id = {s.step_id: s for s in self.tracker.steps}
        step_syncs = [
            chrome_trace.ClockSync(a.ts_ns, by_id[i].cpu_start_ns)
            for i, a in traced_steps.items()
            if i in by_id
        ]
        offset = chrome_trace.clock_offset([*syncs, *step_syncs])
        clock: dict[str, Any] = {
            "trace_clock": "Kineto ts converted to int64 ns",
            "clock_syncs": len(syncs),
            "step_syncs": len(step_syncs),
        }
        if offset is None:
            # No marker (no trace, or a window never reached): tables stay on the host clock.
            offset = 0
            clock["source"] = "none: host clock used as the trace clock"
            problems.append("no tracekit.clock_sync in the trace: tables use the host clock")
        else:
            clock["source"] = "tracekit.clock_sync and step annotations (minimum offset)"
            offs = sorted(s.offset_ns - offset for s in [*syncs, *step_syncs])
            clock["sync_excess_ns_p50"] = offs[len(offs) // 2]
        clock["offset_ns"] = offset  # trace_ns = host_ns + offset_ns
        self._traced_steps = traced_steps
        steps_t, requests_t = self._tables(offset)
        rank = process_rank()
        run.write_table("steps", _schema.fill_rank(steps_t, rank))
        run.write_table("requests", _schema.fill_rank(requests_t, rank))
        counters = self.sampler.counters() if self.sampler is not None else _schema.empty("counters")
        if counters.num_rows:
            import pyarrow.compute as pc

            shifted = pc.add(counters.column("ts_ns"), offset)
            counters = counters.set_column(counters.schema.get_field_index("ts_ns"), "ts_ns", shifted)
        run.write_table("counters", _schema.fill_rank(counters, rank))
        step_memory = None
        if self.memory is not None:
            step_memory = _schema.fill_rank(self.memory.table(steps_t), rank)
            run.write_table("step_memory", step_memory)
            self.extra_manifest["memory"] = self.memory.manifest()
        events = record_track_events(steps_t, requests_t, counters, step_memory)
        t_tables = time.perf_counter()
        try:
            chrome_trace.merge(raw if have_raw else None, run.trace_path, events)
            if have_raw:
                raw.unlink()
        except TracekitError as e:
            problems.append(f"trace merge failed ({e.message}); raw Kineto trace kept as {RAW_TRACE}")
        t_merge = time.perf_counter()
        blind = self.unstepped_requests()
        if blind:
            # Tokens but no forward pass: this model's generate bypassed module __call__ (hooks).
            problems.append(f"requests {blind}: tokens were timed but no forward pass was seen; no step rows")
        warm = self.warmup_ids()
        profiled = timings(self.tracker.requests, warmup=warm)
        self.result = {"profiled": profiled}
        data = run.read_manifest()
        t = data.get("timings", {})
        t["profiled"] = profiled
        if t.get("unprofiled"):
            t["profiler_overhead"] = overhead(profiled, t["unprofiled"])
        nvml = self._nvml_status or {"available": False, "reason": "not started"}
        if self.capture is not None and self.capture.windowed and not self.capture.exported:
            problems.append(
                f"--trace-steps {self.opts.trace_steps}: the window was never reached; no kernels captured"
            )
        run.update_manifest(
            timings=t,
            clock=clock,
            nvml=nvml,
            steps=len(self.tracker.steps),
            requests=len(self.tracker.requests),
            # Requests per step source: "hooks" (one forward each) or "streamer" (token to token, compiled mode).
            step_boundaries=dict(self.tracker.step_sources),
            # Request ids the user marked as warm-ups (rec.warmup() / tracekit.warmup()): left out of
            # the timing means here and of the run-level phase totals in tracekit analyze.
            warmup_requests=sorted(warm),
            # What recording cost after the workload: the profiler's own stop and export, then
            # tracekit's reading of the trace, its tables and the merged trace (seconds).
            postprocess={
                "profiler_export_s": round(getattr(self, "_profiler_export_s", 0.0), 3),
                "trace_bytes": raw_bytes,
                "annotations_s": round(t_scan - t0, 3),
                "tables_s": round(t_tables - t_scan, 3),
                "merge_s": round(t_merge - t_tables, 3),
                "seconds": round(time.perf_counter() - t0, 3),
            },
            **self.extra_manifest,
        )

    def unstepped_requests(self) -> list[int]:
        """Requests with tokens but no step: their model's forward bypassed the hooks."""
        stepped = {s.request_id for s in self.tracker.steps}
        return [r.request_id for r in self.tracker.requests if r.output_tokens and r.request_id not in stepped]

    def _tables(self, offset: int) -> tuple[Any, Any]:
        steps = self.tracker.steps
        reqs = self.tracker.requests

        def tr(ns: int | None) -> int | None:
            return None if ns is None else ns + offset

        # Where Kineto recorded the step's annotation, its own timestamps are the
        # trace clock exactly; elsewhere (outside a --trace-steps window) map the host's.
        def start_of(s: StepRecord) -> int | None:
            a = self._traced_steps.get(s.step_id)
            return a.ts_ns if a is not None else tr(s.cpu_start_ns)

        def end_of(s: StepRecord) -> int | None:
            a = self._traced_steps.get(s.step_id)
            return a.ts_ns + a.dur_ns if a is not None else tr(s.cpu_end_ns)

        steps_t = _schema.from_columns(
            "steps",
            {
                "step_id": [s.step_id for s in steps],
                "request_id": [s.request_id for s in steps],
                "kind": [s.kind for s in steps],
                "batch": [s.batch for s in steps],
                "q_len": [s.q_len for s in steps],
                "kv_len": [s.kv_len for s in steps],
                "tokens": [s.batch * s.q_len for s in steps],
                "source": ["tracekit"] * len(steps),
                "cpu_start_ns": [start_of(s) for s in steps],
                "cpu_end_ns": [end_of(s) for s in steps],
            },
        )
        metrics = [r.metrics() for r in reqs]
        requests_t = _schema.from_columns(
            "requests",
            {
                "request_id": [r.request_id for r in reqs],
                "name": [r.name for r in reqs],
                "batch": [r.batch for r in reqs],
                "input_tokens": [r.input_tokens for r in reqs],
                "output_tokens": [r.output_tokens for r in reqs],
                "start_ns": [tr(r.start_ns) for r in reqs],
                "end_ns": [tr(r.end_ns) for r in reqs],
                "ttft_ns": [m["ttft_ns"] for m in metrics],
                "tpot_ns": [m["tpot_ns"] for m in metrics],
                "e2e_ns": [m["e2e_ns"] for m in metrics],
                "prefill_share": [m["prefill_share"] for m in metrics],
                "source": ["tracekit"] * len(reqs),
            },
        )
        return steps_t, requests_t


class Warmup:
    """What ``Recording.warmup()`` returns: called, it has marked the next request; entered, it marks
    every request issued until the block exits instead."""

    def __init__(self, rec: Recording) -> None:
        self._rec = rec
        self._next = len(rec.tracker.requests)
        rec._warmup.add(self._next)

    def __enter__(self) -> Warmup:
        self._rec._warmup.discard(self._next)
        self._next = len(self._rec.tracker.requests)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._rec._warmup.update(range(self._next, len(self._rec.tracker.requests)))


# The recordings open in this process, innermost last: what tracekit.warmup() marks.
ACTIVE: list[Recording] = []


def warmup() -> Any:
    """``tracekit.warmup()``: ``Recording.warmup()`` of the innermost open recording (a script under
    ``tracekit record --`` has no handle on it). Outside any recording it does nothing, so the
    script runs unchanged without tracekit."""
    import contextlib

    return ACTIVE[-1].warmup() if ACTIVE else contextlib.nullcontext()


def _both(first: Callable[[int], None], then: Callable[[int], None]) -> Callable[[int], None]:
    def call(step_id: int) -> None:
        first(step_id)
        then(step_id)

    return call


_OWN = ("tracekit.clock_sync ", "tracekit.step ", "tracekit.request ")


def own_annotations(raw: Path) -> list[chrome_trace.Annotation]:
    """tracekit's own CPU-side annotations in the raw Kineto trace, as chrome_trace.find_annotations
    gives them, read from those events alone (tracekit.ingest.named: a byte search for their names),
    or by that full read where the search cannot stand in for it."""
    from tracekit.ingest.framing import offset_ns
    from tracekit.ingest.named import read_named

    res = read_named(raw, "tracekit.")
    if res is None:
        return chrome_trace.find_annotations(raw)
    t = res.tables.get("annotations")
    if t is None or t.num_rows == 0:
        return []
    base = offset_ns(res.meta)
    found: dict[tuple[str, int], chrome_trace.Annotation] = {}
    cols = (t.column(c).to_pylist() for c in ("name", "cat", "ts_ns", "dur_ns"))
    for name, cat, t0, d in zip(*cols, strict=True):
        if not name or not name.startswith(_OWN) or cat == "gpu_user_annotation" or t0 is None:
            continue
        a = chrome_trace.Annotation(name, int(t0) - base, int(d or 0))
        found[(a.name, a.ts_ns)] = a
    return sorted(found.values(), key=lambda a: a.ts_ns)


def record_track_events(steps: Any, requests: Any, counters: Any, step_memory: Any = None) -> list[dict[str, Any]]:
    """tracekit's tracks for the recorded trace: the same builder ``tracekit export`` uses.

    The bound track is left out: nothing is classified at record time (the
    roofline pass runs in ``tracekit analyze``), so it would be a row of
    "not classified" slices.
    """
    from tracekit.trace.tracks import build_tracks, chrome_event_dicts

    tables = {"steps": steps, "requests": requests, "counters": counters}
    if step_memory is not None:
        tables["step_memory"] = step_memory
    ts = build_tracks(tables, include_trace=False)
    bound = {k for k in ts.tracks if k.startswith("tracekit/bound")}
    ts.tracks = {k: t for k, t in ts.tracks.items() if k not in bound}
    ts.slices = [sl for sl in ts.slices if sl.track not in bound]
    return chrome_event_dicts(ts)


def keep_third_party(run: RunDir, noise: ThirdPartyOutput) -> None:
    """What ``noise`` caught, into the run: third_party.log, run.json ``third_party`` and warnings."""
    info = noise.summary()
    if not info["messages"]:
        return
    try:
        noise.write_log(run.path / LOG_NAME)
    except OSError as exc:  # the counts and warnings below still say what happened
        info["log_error"] = str(exc)
    run.update_manifest(
        third_party={
            "messages": info["messages"],
            "routine": info["routine"],
            "kept": len(info["warnings"]),
            "by_origin": info["by_origin"],
            "log": LOG_NAME,
        }
    )
    for w in info["warnings"]:
        run.add_warning(f"third-party: {w}")


def problems_fatal(problems: list[str]) -> bool:
    # A failed merge leaves no trace.json.gz: that run is not complete.
    return any(p.startswith("trace merge failed") or p.startswith("profiler stop failed") for p in problems)


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def create_run(opts: RecordOptions, **manifest: Any) -> RunDir:
    return RunDir.create(
        opts.out,
        force=opts.force,
        command=list(opts.command) or sys.argv,
        environment=environment(),
        **manifest,
    )


def record(
    name: str = "record",
    out: str | os.PathLike[str] | None = None,
    *,
    force: bool = False,
    nvml: bool = True,
    sample_hz: float = 100.0,
    trace_steps: str | None = None,
    device_index: int = 0,
) -> Recording:
    """``with tracekit.record("name", out="runs/x") as run: model.generate(...)``.

    Every ``generate`` inside becomes an annotated, timed request; on exit the
    run directory holds trace.json.gz, the steps/requests/counters tables and
    run.json (complete only if the block raised nothing). ``run.path`` is the
    directory.
    """
    from tracekit.collectors.profiler import parse_trace_steps

    opts = RecordOptions(
        out=Path(out) if out is not None else default_out(name),
        force=force,
        nvml=nvml,
        sample_hz=sample_hz,
        trace_steps=parse_trace_steps(trace_steps),
        device_index=device_index,
    )
    run = create_run(opts, workload={"kind": "python-api", "name": name})
    return Recording(run, opts)


# --- a user's script ---------------------------------------------------------------


def parse_script_argv(argv: list[str]) -> tuple[str, str, list[str]]:
    """``python x.py A`` / ``python -m pkg A`` / ``x.py A`` -> (kind, target, args)."""
    if not argv:
        raise UsageError("nothing to run after --")
    rest = list(argv)
    if Path(rest[0]).name.startswith("python"):
        rest = rest[1:]
        while rest and rest[0].startswith("-") and rest[0] != "-m":
            rest = rest[1:]  # interpreter flags (-u, -O): meaningless in-process
        if not rest:
            raise UsageError("no script after python")
        if rest[0] == "-m":
            if len(rest) < 2:
                raise UsageError("python -m needs a module name")
            return "module", rest[1], rest[2:]
    if not rest[0].endswith(".py"):
        raise UsageError(
            f"can only wrap Python scripts: tracekit record -- python SCRIPT.py ARGS (got {argv[0]!r})"
        )
    if not Path(rest[0]).is_file():
        raise UsageError(f"script not found: {rest[0]}")
    return "script", rest[0], rest[1:]


def run_script(argv: list[str], opts: RecordOptions) -> tuple[RunDir, int]:
    """Run a Python script in-process under a Recording; (run, the script's exit code)."""
    kind, target, args = parse_script_argv(argv)
    run = create_run(opts, workload={"kind": "script", "argv": list(argv)})
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    code = 0
    rec = Recording(run, opts)
    rec.__enter__()
    exc: BaseException | None = None
    try:
        if kind == "script":
            sys.argv = [target, *args]
            sys.path.insert(0, str(Path(target).resolve().parent))
            runpy.run_path(target, run_name="__main__")
        else:
            sys.argv = [target, *args]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code != 0:
            exc = RuntimeError(f"script exited with status {code}")
    except KeyboardInterrupt as e:
        exc = e
    except Exception as e:
        traceback.print_exc()
        exc = e
        code = 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        rec.finish(exc)
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    if exc is not None and code == 0:
        code = 1
    run.update_manifest(script_exit_code=code)
    return run, code


# --- the built-in workload -------------------------------------------------------


class Progress:
    """One status line on stderr while generating (``\\r``-updated on a terminal)."""

    def __init__(self, quiet: bool, total_requests: int, output_tokens: int, stream: Any = None) -> None:
        self.quiet = quiet
        self.total = total_requests
        self.out = output_tokens
        self.phase = ""
        self.index = 0
        self.stream = stream if stream is not None else sys.stderr
        self._tty = self.stream.isatty()
        self._last = 0.0

    def start(self, phase: str, index: int) -> None:
        self.phase, self.index = phase, index
        self._line(0, force=True)

    def on_token(self, rec: RequestRecord) -> None:
        self._line(rec.output_tokens, force=rec.output_tokens >= self.out)

    def _line(self, tokens: int, force: bool = False) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        text = f"{self.phase}: request {self.index + 1}/{self.total}, {tokens}/{self.out} tokens"
        if self._tty:
            self.stream.write("\r\033[K" + text)
            if tokens >= self.out:
                self.stream.write("\n")
        elif tokens >= self.out:
            self.stream.write(text + "\n")
        self.stream.flush()


def run_workload(cfg: Any, opts: RecordOptions) -> RunDir:
    """Build the model, warm up, time the requests without the profiler, then record them.

    Everything here is library code, so third-party output is caught from the first line: the
    model build, warm-up and both passes run with descriptor 2 redirected (tracekit's progress
    line goes to the real terminal).
    """
    noise = ThirdPartyOutput()
    holder: list[RunDir] = []
    try:
        with noise, noise.native():
            return _run_workload(cfg, opts, noise, holder)
    except BaseException:
        if not holder:  # failed before the run directory existed: nowhere to keep it, so show it
            text = noise.stderr_text()
            if text.strip():
                sys.stderr.write(text if text.endswith("\n") else text + "\n")
        raise
    finally:
        noise.close()


def _run_workload(cfg: Any, opts: RecordOptions, noise: ThirdPartyOutput, holder: list[RunDir]) -> RunDir:
    from tracekit.collectors import hostload
    from tracekit.collectors import workload as wl

    on_cpu = str(cfg.device) == "cpu"
    before = hostload.probe() if on_cpu else None  # the load before our own work adds to it
    model, model_info = wl.build_model(cfg)
    wl.check_fits(cfg, model)
    vocab = int(model.config.vocab_size)
    prompts = wl.make_prompts(cfg, vocab, cfg.requests)
    warm = wl.make_prompts(cfg, vocab, cfg.warmup, seed_offset=10_000)
    setup = None
    if cfg.compile:
        from tracekit.collectors import compiled

        # Sized for exactly this shape: every request fits, nothing recompiles for a longer cache.
        setup = compiled.enable(model, max_cache_len=cfg.input_tokens + cfg.output_tokens)
        if not warm:  # compilation must land in an untimed request, never in the timed ones
            warm = wl.make_prompts(cfg, vocab, 1, seed_offset=10_000)
    run = create_run(opts, workload=cfg.manifest(), model=model_info)
    holder.append(run)
    progress = Progress(opts.quiet, cfg.requests, cfg.output_tokens, stream=noise.terminal)
    phase = "warm-up"
    rec: Recording | None = None
    try:
        with _oom_guard(cfg):
            t0 = time.perf_counter()
            capture: dict[str, Any] | None = None
            if setup is not None:
                from tracekit.collectors import compiled

                # The first warm-up calls compile and capture the CUDA graphs: under the profiler with
                # shapes, so the timed requests' replays get the ops that launched their kernels.
                phase = "graph capture"
                progress.total = len(warm)
                progress.start("warm-up", 0)
                capture = compiled.record_captures(lambda: model.generate(**wl.generate_kwargs(cfg, warm[0])),
                                                   run.path, cuda=setup.auto_compile)
                phase = "warm-up"
            for i, p in enumerate(warm[1:] if setup is not None else warm, 1 if setup is not None else 0):
                progress.total = len(warm)
                progress.start("warm-up", i)
                model.generate(**wl.generate_kwargs(cfg, p))
            if setup is not None:
                compile_s = round(time.perf_counter() - t0, 3)
                run.update_manifest(
                    compiled={
                        **setup.manifest(),
                        # The first warm-up calls carry the compilation and the capture; reported, not timed.
                        "compile_s": compile_s,
                        "warmup_requests": len(warm),  # the first one runs capture["calls"] times
                        "capture": capture,
                    }
                )
            phase = "unprofiled"
            progress.total = cfg.requests
            bare = GenerationTracker(annotate=False, on_token=progress.on_token, events=_event_factory(model))
            window = hostload.Window(threads=(before or {}).get("torch_threads") or 1)
            try:
                with patch_generate(bare), window:
                    for i, p in enumerate(prompts):
                        progress.start("timing without profiler", i)
                        bare.next_name = f"{cfg.shape}-{i}"
                        model.generate(**wl.generate_kwargs(cfg, p))
                if before is not None:  # a CPU run: was the machine free enough for the timings to hold?
                    run.update_manifest(host_load={**before, "timed": window.result})
                    for w in hostload.warnings(before, window.result):
                        run.add_warning(w)
            finally:
                unprofiled = timings(bare.requests)
                by_events = event_timings(bare.requests)
                if by_events is not None:
                    unprofiled["cuda_events"] = by_events
                run.update_manifest(timings={"unprofiled": unprofiled})
            phase = "profiled"
            probe = None
            if cfg.memory:
                from tracekit.collectors.memory import MemoryProbe, kv_formula

                probe = MemoryProbe(model, kv_bytes_per_token=kv_formula(model_info.get("config") or {}, model),
                                    hook_cache=setup is None)
            rec = Recording(run, opts, on_token=progress.on_token, noise=noise, memory=probe)
            with rec:
                for i, p in enumerate(prompts):
                    progress.start("recording", i)
                    rec.name_next(f"{cfg.shape}-{i}")
                    model.generate(**wl.generate_kwargs(cfg, p))
    except BaseException as exc:
        if rec is None:  # failed before the profiled pass: say so in run.json
            reason = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else _describe(exc)
            run.mark_incomplete(f"{phase}: {reason}")
            keep_third_party(run, noise)
        if not opts.quiet or isinstance(exc, KeyboardInterrupt | TracekitError):
            noise.terminal.write(f"\ntracekit: {_kept(run)}: {run.path}\n")
            noise.terminal.flush()
        raise
    return run


def _cpu_split(run: RunDir) -> None:
    """A CPU run: each phase's time by operator class into run.json (``cpu_split``) for the summary."""
    from tracekit.app.opsplit import cpu_split, manifest_entry

    try:
        split = cpu_split(run)
    except (OSError, ValueError, KeyError, TracekitError) as e:
        run.add_warning(f"the split by operator class failed ({e}); tracekit analyze computes it again")
        return
    if split is not None:
        run.update_manifest(cpu_split=manifest_entry(split))


def _kept(run: RunDir) -> str:
    """What an interrupted record leaves, as run.json says (an interrupt after the recording finished
    leaves a complete run)."""
    try:
        status = run.status
    except (OSError, ValueError, TracekitError):
        status = STATUS_INCOMPLETE
    return "run kept (status complete)" if status == STATUS_COMPLETE else "partial run kept (status incomplete)"


class _oom_guard:
    """CUDA out-of-memory becomes one line naming the shape and batch."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            return
        import torch

        oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
        if isinstance(exc, oom):
            c = self.cfg
            raise TracekitError(
                f"CUDA out of memory at shape {c.shape} ({c.input_tokens} in / {c.output_tokens} out), "
                f"batch {c.batch}, model {c.model.label}, {c.dtype}: try a smaller --batch or shape"
            ) from None
