"""tracekit: where did the time of this LLM request go?

The public API::

    run = tracekit.open("runs/my-run")          # a run directory, a trace file, or a dataset
    run.phases, run.steps, run.kernels           # tables as pandas DataFrames
    run.sql("select kind, count(*) from steps group by kind")
    run.analyze(); run.export(); run.report()
    tracekit.ingest_traces(["trace.json.gz"], "runs/x")  # traces -> a run directory
    tracekit.diff("runs/a", "runs/b")            # what changed, per phase and kernel class
    tracekit.whatif("runs/a", graphs=True, no_profiler=True)  # projected TTFT / TPOT under a change
    with tracekit.record("name") as rec: ...     # record a block of generation
    with rec.warmup(): model.generate(...)      # a warm-up: out of the timing means and phase totals
    tracekit.warmup()                            # the same, in a script run by `tracekit record --`

Everything loads lazily: ``import tracekit`` pulls in neither pandas nor torch.
"""

from __future__ import annotations

import os
import sys
from typing import Any

# Arrow memory from the C library's malloc unless the user chose otherwise: pyarrow's default
# pool keeps freed pages resident (docs/measurements/2026-11-29-ingest.md). pyarrow reads this
# variable once, when it is imported, so it only applies if tracekit comes first.
if "pyarrow" not in sys.modules:
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

from tracekit.model.version import VERSION as __version__

__all__ = ["Dataset", "Run", "__version__", "diff", "ingest_traces", "open", "record", "warmup", "whatif"]


def open(path: Any, *, out: Any = None, force: bool = False) -> Any:
    """A Run (run directory or trace file, ingested when needed) or a Dataset; see tracekit._api."""
    from tracekit._api import open_run

    return open_run(path, out=out, force=force)


def diff(a: Any, b: Any) -> Any:
    """What changed from run A to run B, per phase and kernel class, as a DataFrame."""
    from tracekit._api import diff as _diff

    return _diff(a, b)


def ingest_traces(paths: Any, out: Any, *, force: bool = False) -> Any:
    """Traces (one file, or several: one per rank) into the run directory ``out``: a Run."""
    from tracekit._api import ingest_traces as _ingest

    return _ingest(paths, out, force=force)


def whatif(run: Any, **changes: Any) -> Any:
    """A run's prefill and decode projected under a change (graphs=True, batch=8, gpu="H100 SXM",
    quant="int4", no_profiler=True, ...): a Projection; ``.to_dict()`` is ``tracekit whatif --json``."""
    from tracekit._api import whatif as _whatif

    return _whatif(run, **changes)


def record(*args: Any, **kwargs: Any) -> Any:
    """Record a block of user code: ``with tracekit.record("name") as run: ...``.

    See ``tracekit.collectors.recording.record`` for the arguments.
    """
    from tracekit.collectors.recording import record as _record

    return _record(*args, **kwargs)


def warmup() -> Any:
    """Mark warm-up requests of the open recording: called, the next ``generate``; as a context
    (``with tracekit.warmup(): ...``), every ``generate`` inside. Does nothing outside a recording."""
    from tracekit.collectors.warmup import warmup as _warmup

    return _warmup()


def __getattr__(name: str) -> Any:
    # Run and Dataset load on first use (they import pandas).
    if name in ("Run", "Dataset"):
        from tracekit import _api

        return getattr(_api, name)
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
