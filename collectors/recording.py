"""A recording: profiler + NVML sampler + generate annotations around a block of work.

While a Recording is open every ``GenerationMixin.generate`` call is a request with step
annotations and host token timers. On exit (normal, an exception or Ctrl-C) whatever was captured is
written: the merged trace, the steps/requests/counters tables, run.json; the run is marked complete
only when the block finished without an exception. Three ways in share it: ``tracekit.record()``
(``record`` here), a user's script (collectors.script) and the built-in workload
(collectors.workload_runner).

Libraries' own output (Kineto's lines, torch and transformers warnings) is not printed between
tracekit's lines: tracekit.collectors.noise catches it and ``keep_third_party`` keeps it in the run
(``third_party.log``, run.json ``third_party`` and warnings).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from tracekit.collectors.clock import Alignment, align
from tracekit.collectors.environment import environment
from tracekit.collectors.hooks import GenerationTracker, RequestRecord, patch_generate
from tracekit.collectors.noise import ThirdPartyOutput, keep_third_party
from tracekit.collectors.options import RecordOptions, default_out, process_rank
from tracekit.collectors.profiler import KinetoCapture, ProfilerConfig
from tracekit.collectors.tables import requests_table, steps_table
from tracekit.collectors.timing import overhead, timings
from tracekit.collectors.warmup import ACTIVE, Warmup
from tracekit.errors import TracekitError
from tracekit.ingest.own import own_annotations
from tracekit.model import schema as _schema
from tracekit.store.rundir import RunDir
from tracekit.trace import chrome as chrome_trace

RAW_TRACE = "kineto.raw.json"


def make_sampler(opts: RecordOptions) -> tuple[Any, dict[str, Any] | None]:
    """The NVML sampler for ``opts`` (None), or None and run.json ``nvml`` saying why there is none."""
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


class Recording:
    """Profiler, NVML sampler and generate annotations over a block; writes the run on exit.

    Subclasses with steps of their own (an engine's scheduler steps, draft/verify forwards)
    override ``_tables`` and ``unstepped_requests``."""

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
        self.alignment = Alignment(0, {}, {})
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
        return Warmup(self._warmup, lambda: len(self.tracker.requests))

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
        self.sampler, self._nvml_status = make_sampler(self.opts)
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
                reason = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else describe(exc)
                self.run.mark_incomplete(reason or "; ".join(problems))

    def _write(self, problems: list[str]) -> None:
        from tracekit.trace.recorded import record_track_events

        run = self.run
        t0 = time.perf_counter()
        raw = run.path / RAW_TRACE
        have_raw = raw.is_file() and raw.stat().st_size > 0
        raw_bytes = raw.stat().st_size if have_raw else 0
        annotations = own_annotations(raw) if have_raw else []  # a byte search, not a read of every event
        t_scan = time.perf_counter()
        self.alignment = align(annotations, self.tracker.steps)
        offset = self.alignment.offset_ns
        if self.alignment.problem is not None:
            problems.append(self.alignment.problem)
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
            clock=self.alignment.manifest,
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

    def _tables(self, offset: int) -> tuple[pa.Table, pa.Table]:
        """The ``steps`` and ``requests`` tables on the trace clock (``offset``: trace - host ns)."""
        al = self.alignment
        steps_t = steps_table(self.tracker.steps, lambda s: al.start_of(s.step_id, s.cpu_start_ns),
                              lambda s: al.end_of(s.step_id, s.cpu_end_ns))
        return steps_t, requests_table(self.tracker.requests, offset)


def _both(first: Callable[[int], None], then: Callable[[int], None]) -> Callable[[int], None]:
    def call(step_id: int) -> None:
        first(step_id)
        then(step_id)

    return call


def problems_fatal(problems: list[str]) -> bool:
    # A failed merge leaves no trace.json.gz: that run is not complete.
    return any(p.startswith("trace merge failed") or p.startswith("profiler stop failed") for p in problems)


def describe(exc: BaseException | None) -> str:
    """An exception in one line: its type and the first line of its message."""
    if exc is None:
        return ""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def create_run(opts: RecordOptions, **manifest: Any) -> RunDir:
    """The run directory at ``opts.out``, with the command line, this machine's environment and ``manifest``."""
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
