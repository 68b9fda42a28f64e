"""Execution mode ``compiled``: static KV cache + torch.compile, as Transformers offers it.

Transformers compiles the decode forward itself when a generate call uses a
static cache (``generation_config.cache_implementation = "static"``) on a GPU:
``model.forward`` goes through ``torch.compile(mode="reduce-overhead")``, i.e.
CUDA graphs, while the prefill stays eager. We use exactly that path rather
than compiling by hand, so the numbers are what a Transformers user gets.

Compilation is expensive (tens of seconds) and must not land in a timed
region: ``warm_up`` runs generate calls at every batch size a sweep will use,
times them, and the caller writes that time to run.json as ``compile_s``.
The static cache is sized once for the largest point (``max_cache_len``) so
that later points reuse the compiled graphs instead of recompiling.

Replayed CUDA graphs carry no shapes. ``record_captures`` re-captures them under the
profiler after the warm-up (compiled already, so no compilation is profiled): the
capture trace it writes beside the run (capture_traces/, tracekit.ingest.capture finds
it) holds each graph's launches under the ops that made them, with their shapes, and
ingest gives every replayed kernel its captured op.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODE_EAGER = "eager"
MODE_COMPILED = "compiled"
CAPTURE_DIR = "capture_traces"  # beside the run's trace: where tracekit.ingest.capture looks
CAPTURE_FILE = "compile_capture.pt.trace.json.gz"


@dataclass(frozen=True)
class CompiledSetup:
    """What ``enable`` did, for run.json."""

    cache_implementation: str
    compile_mode: str
    max_cache_len: int
    auto_compile: bool  # False on CPU: Transformers only auto-compiles on accelerators
    notes: tuple[str, ...] = ()

    def manifest(self) -> dict[str, Any]:
        return {
            "cache_implementation": self.cache_implementation,
            "compile_mode": self.compile_mode,
            "max_cache_len": self.max_cache_len,
            "auto_compile": self.auto_compile,
            "notes": list(self.notes),
        }


def enable(model: Any, *, max_cache_len: int, compile_mode: str = "reduce-overhead") -> CompiledSetup:
    """Switch ``model`` (in place) to a static cache with compiled decode."""
    import torch
    from transformers import GenerationConfig

    notes: list[str] = []
    gc: GenerationConfig = model.generation_config
    gc.cache_implementation = "static"
    try:
        from transformers import CompileConfig

        gc.compile_config = CompileConfig(mode=compile_mode)
    except ImportError:  # older Transformers: its default config is reduce-overhead too
        notes.append("transformers has no CompileConfig; its default compile settings were used")
    # Size the cache for the worst case once. Newer Transformers reads
    # generation_config.max_cache_len; older ones keep the largest length seen
    # on the model, which we seed the same way.
    with contextlib.suppress(AttributeError):
        gc.max_cache_len = max_cache_len
    model._previous_max_cache_length = max_cache_len
    # Every batch size is its own graph; the default recompile limit (8) would
    # make dynamo fall back to eager silently after a few sweep points.
    dyn = torch._dynamo.config
    for attr in ("recompile_limit", "cache_size_limit"):
        if hasattr(dyn, attr):
            setattr(dyn, attr, max(64, getattr(dyn, attr)))
    device = getattr(model, "device", torch.device("cpu"))
    auto = device.type != "cpu"
    if not auto:
        notes.append("on CPU Transformers does not auto-compile: static cache only")
    return CompiledSetup("static", compile_mode, max_cache_len, auto, tuple(notes))


def disable(model: Any) -> None:
    """Back to eager with a dynamic cache (the model is shared between sweep points)."""
    gc = model.generation_config
    gc.cache_implementation = None
    if hasattr(gc, "compile_config"):
        gc.compile_config = None
    # A leftover max_cache_len makes Transformers warn on every eager generate.
    if getattr(gc, "max_cache_len", None) is not None:
        with contextlib.suppress(AttributeError):
            gc.max_cache_len = None


def warm_up(run_once: Callable[[int], Any], batches: Iterable[int]) -> float:
    """Run one short generate per batch size; return the seconds it took (compilation included)."""
    t0 = time.perf_counter()
    for b in sorted(set(batches)):
        run_once(b)
    return time.perf_counter() - t0


class _CallFailed(Exception):
    """A warm-up call raised inside the profiled capture pass (carries the call's exception)."""

    def __init__(self, exc: Exception) -> None:
        super().__init__(str(exc))
        self.exc = exc


def record_captures(run_once: Callable[[], Any], run_dir: Path, *, cuda: bool, calls: int = 2) -> dict[str, Any]:
    """The first warm-up calls of a compiled model, under the profiler with shapes; what run.json records.

    torch.compile's CUDA-graph trees (mode "reduce-overhead") capture a graph the second time a compiled
    function runs with a shape: ``calls`` generate calls (``run_once``: one generate of the run's shape)
    cover the decode graphs (captured in the first call's second decode step) and the prefill graph
    (captured in the second call). Running them under ``record_shapes`` records each launch inside its
    ``cudaStreamBeginCapture`` window with the op that made it; the timed requests that follow replay
    those same graphs. The trace goes to ``run_dir/capture_traces/compile_capture.pt.trace.json.gz``.
    Without CUDA (no graphs) or if the profiler fails, the calls still run, unprofiled: they are the
    run's warm-up either way.
    """
    if not cuda:
        for _ in range(calls):
            run_once()
        return {"captured": False, "reason": "no CUDA graphs without a GPU"}
    import torch
    from torch.profiler import ProfilerActivity, profile

    path = run_dir / CAPTURE_DIR / CAPTURE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    done = 0
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            for _ in range(calls):
                try:
                    run_once()
                except Exception as exc:
                    raise _CallFailed(exc) from exc
                done += 1
            torch.cuda.synchronize()
        prof.export_chrome_trace(str(path))  # gzipped by its .gz name
    except _CallFailed as failed:  # the warm-up itself failed: that is the run's failure, not the profiler's
        raise failed.exc from None
    except Exception as exc:  # the profiler failed: the warm-up goes on unprofiled, run.json says why
        for _ in range(calls - done):
            run_once()
        return {"captured": False, "reason": f"capture pass failed: {type(exc).__name__}: {exc}"}
    return {"captured": True, "file": str(path.relative_to(run_dir)), "calls": calls,
            "seconds": round(time.perf_counter() - t0, 3)}
