"""``tracekit record`` with no script: build the model, warm up, time the requests without the
profiler, then record them.

Progress goes to a ``tracekit.model.progress`` listener the caller makes for the real terminal
(``progress(terminal)``; the command hands in the report's status line): each request's stage
(``recording: request 2/4``) with its tokens so far out of the tokens it will generate.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, Any

from tracekit.collectors.hooks import GenerationTracker, RequestRecord, patch_generate
from tracekit.collectors.noise import ThirdPartyOutput, keep_third_party
from tracekit.collectors.options import RecordOptions
from tracekit.collectors.recording import Recording, create_run, describe
from tracekit.collectors.timing import event_timings, timings
from tracekit.errors import TracekitError
from tracekit.model.progress import Listener
from tracekit.store.rundir import STATUS_COMPLETE, STATUS_INCOMPLETE, RunDir

# Makes the progress listener for the terminal stream it is given.
ProgressFactory = Callable[[IO[str]], Listener]


class _Requests:
    """Reports each request's stage and tokens to ``listener`` (None: to nobody)."""

    def __init__(self, listener: Listener | None, output_tokens: int) -> None:
        self.listener = listener
        self.out = output_tokens
        self.total = 0
        self.stage = ""

    def start(self, phase: str, index: int) -> None:
        self.stage = f"{phase}: request {index + 1}/{self.total}"
        if self.listener is not None:
            self.listener(self.stage, 0, self.out)

    def on_token(self, rec: RequestRecord) -> None:
        if self.listener is not None:
            self.listener(self.stage, rec.output_tokens, self.out)


def _event_factory(model: Any) -> Any:
    """Where the unprofiled pass gets its timing events (tests substitute a fake on CPU)."""
    from tracekit.collectors.hooks import cuda_event_factory

    return cuda_event_factory(model)


def run_workload(cfg: Any, opts: RecordOptions, progress: ProgressFactory | None = None) -> RunDir:
    """Build the model, warm up, time the requests without the profiler, then record them.

    Everything here is library code, so third-party output is caught from the first line: the
    model build, warm-up and both passes run with descriptor 2 redirected (tracekit's progress
    line goes to the real terminal).
    """
    noise = ThirdPartyOutput()
    holder: list[RunDir] = []
    try:
        with noise, noise.native():
            listener = progress(noise.terminal) if progress is not None else None
            return _run_workload(cfg, opts, noise, holder, _Requests(listener, cfg.output_tokens))
    except BaseException:
        if not holder:  # failed before the run directory existed: nowhere to keep it, so show it
            text = noise.stderr_text()
            if text.strip():
                sys.stderr.write(text if text.endswith("\n") else text + "\n")
        raise
    finally:
        noise.close()


def _run_workload(cfg: Any, opts: RecordOptions, noise: ThirdPartyOutput, holder: list[RunDir],
                  progress: _Requests) -> RunDir:
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
    progress.total = cfg.requests
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
            reason = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else describe(exc)
            run.mark_incomplete(f"{phase}: {reason}")
            keep_third_party(run, noise)
        if not opts.quiet or isinstance(exc, KeyboardInterrupt | TracekitError):
            noise.terminal.write(f"\ntracekit: {_kept(run)}: {run.path}\n")
            noise.terminal.flush()
        raise
    return run


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
