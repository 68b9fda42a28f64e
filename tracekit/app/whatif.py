"""What-if projections of a run: the use case behind ``tracekit whatif``, the report's advice and the API.

``load_profile(target)`` reduces a run directory (or a trace file, ingested first as ``analyze``
does) to a tracekit.analysis.whatif_profile.Profile: an analysed run's kernel_bound / steps /
requests are read; a run never analysed (a sweep point keeps only its raw tables and phases) is
analysed in memory, nothing written. ``whatif(target, change)`` projects it
(tracekit.analysis.whatif.project) with the ceilings of tracekit.model.ceilings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from tracekit.analysis import whatif as _w
from tracekit.analysis.whatif_constants import DEFAULT, Constants
from tracekit.analysis.whatif_profile import Profile, profile
from tracekit.errors import TracekitError, UsageError
from tracekit.model import ceilings
from tracekit.store.rundir import RunDir


class WhatifError(TracekitError):
    """A projection the run lacks the data for."""


def ceiling_of(name: str) -> ceilings.Ceiling | None:
    """The ceiling projections compare GPUs by: the datasheet entry of the GPU NVML / torch names."""
    return ceilings.datasheet(name)


def _tables(run: RunDir) -> dict[str, Any]:
    manifest = run.read_manifest()
    analysed = "analysis" in manifest and run.has_table("kernel_bound") and run.has_table("steps")
    if analysed:
        t = {n: run.read_df(n) for n in ("kernel_bound", "steps", "requests", "runtime", "cpu_ops")
             if run.has_table(n)}
        t["manifest"] = manifest
        return t
    from tracekit.analysis.pipeline import DEFAULT_PASSES, run_passes
    from tracekit.app.analyze import as_frames, read_raw, resolve_ceiling

    if not run.has_table("gpu_activity"):
        raise WhatifError(f"{run.path}: no GPU activity recorded (run `tracekit analyze` on its trace first)")
    tables = as_frames(read_raw(run))
    tables["manifest"] = manifest
    c, _ = resolve_ceiling(manifest)
    if c is not None:
        tables["ceiling"] = c
    result = run_passes(tables, DEFAULT_PASSES)
    out = {n: result.get(n) for n in ("kernel_bound", "steps", "requests")}
    out.update({n: tables.get(n) for n in ("runtime", "cpu_ops")})
    out["manifest"] = manifest
    return out


def _frame(v: Any) -> pd.DataFrame | None:
    if v is None:
        return None
    return v if isinstance(v, pd.DataFrame) else v.to_pandas()


def load_profile(target: str | Path | RunDir) -> Profile:
    """The run reduced for projections (see the module doc)."""
    if isinstance(target, RunDir):
        run = target
    else:
        path = Path(target)
        if path.is_file():
            from tracekit.app.analyze import open_or_ingest

            run = open_or_ingest(path, None, False)
        elif path.is_dir():
            run = RunDir.open(path)
        else:
            raise UsageError(f"{path}: no such run directory or trace file")
    t = _tables(run)
    k = _frame(t.get("kernel_bound"))
    steps = _frame(t.get("steps"))
    if k is None or steps is None or k.empty or steps.empty:
        raise WhatifError(f"{run.path}: no steps with GPU kernels to project from")
    prof = profile(k, steps, _frame(t.get("runtime")), _frame(t.get("cpu_ops")), t["manifest"],
                   _frame(t.get("requests")), run=str(run.run_id))
    if prof.gpu is None or ceiling_of(prof.gpu) is None:  # a foreign trace: the GPU its properties identify
        from dataclasses import replace

        from tracekit.app.analyze import resolve_ceiling

        c, _ = resolve_ceiling(t["manifest"])
        if c is not None and ceiling_of(c.gpu) is not None:
            prof = replace(prof, gpu=c.gpu)
    return prof


def project(prof: Profile, change: _w.Change, constants: Constants = DEFAULT) -> _w.Projection:
    """``prof`` under ``change``; WhatifError (one line) where the run lacks what the change needs."""
    try:
        return _w.project(prof, change, ceiling_of, constants)
    except _w.WhatifError as exc:
        raise WhatifError(str(exc)) from None


def whatif(target: str | Path | RunDir, change: _w.Change | None = None, **changes: Any) -> _w.Projection:
    """Project a run under a change (a Change, or its fields as keywords: graphs=True, batch=8, ...)."""
    return project(load_profile(target), change if change is not None else _w.Change(**changes))


def advice_projections(prof: Profile) -> list[tuple[str, _w.Projection]]:
    """The fixes the report's advice names, each projected without the profiler where it applies:
    (label, projection). A fix this run lacks the data for is left out."""
    fixes: list[tuple[str, _w.Change]] = [
        ("without the profiler", _w.Change(no_profiler=True)),
        ("capture CUDA graphs (torch.compile)", _w.Change(graphs=True, no_profiler=True)),
    ]
    b = prof.batch or (prof.phases["decode"].batch if "decode" in prof.phases else 1)
    fixes.append((f"raise the batch to {b * 4}", _w.Change(batch=b * 4, no_profiler=True)))
    fixes.append(("quantize the weights to int4", _w.Change(quant="int4", no_profiler=True)))
    out = []
    for label, ch in fixes:
        if ch.graphs and (prof.mode == "compiled" or any(s.graph_launches for s in prof.phases.values())):
            continue
        try:
            out.append((label, _w.project(prof, ch, ceiling_of)))
        except _w.WhatifError:
            continue
    return out
