"""What-if projections of a run: the use case behind ``tracekit whatif``, the report's advice and the API.

``analysed_profile(run)`` reduces an analysed run directory to a tracekit.analysis.whatif_profile.Profile
(its kernel_bound / steps / requests / runtime / cpu_ops and run.json); ``project(profile, change)``
projects it (tracekit.analysis.whatif.project) with the ceilings of tracekit.model.ceilings, and
``advice_projections`` projects the fixes the report's advice names. Runs not analysed and trace files:
tracekit.app.whatif_load.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any

import pandas as pd

from tracekit.analysis import whatif as _w
from tracekit.analysis.whatif_constants import DEFAULT, Constants
from tracekit.analysis.whatif_profile import Profile, profile
from tracekit.errors import TracekitError
from tracekit.model import ceilings
from tracekit.store.rundir import RunDir


class WhatifError(TracekitError):
    """A projection the run lacks the data for."""


def ceiling_of(name: str) -> ceilings.Ceiling | None:
    """The ceiling projections compare GPUs by: the datasheet entry of the GPU NVML / torch names."""
    return ceilings.datasheet(name)


def _frame(v: Any) -> pd.DataFrame | None:
    if v is None:
        return None
    return v if isinstance(v, pd.DataFrame) else v.to_pandas()


def profile_of(tables: dict[str, Any], run_id: str) -> Profile:
    """A Profile from the tables the passes give (kernel_bound, steps, requests, runtime, cpu_ops) and
    run.json (``manifest``); WhatifError where there are no steps with kernels."""
    k = _frame(tables.get("kernel_bound"))
    steps = _frame(tables.get("steps"))
    if k is None or steps is None or k.empty or steps.empty:
        raise WhatifError(f"{run_id}: no steps with GPU kernels to project from")
    manifest = tables["manifest"]
    prof = profile(k, steps, _frame(tables.get("runtime")), _frame(tables.get("cpu_ops")), manifest,
                   _frame(tables.get("requests")), run=run_id)
    c = tables.get("ceiling")
    if (prof.gpu is None or ceiling_of(prof.gpu) is None) and c is not None and ceiling_of(c.gpu) is not None:
        prof = replace(prof, gpu=c.gpu)  # a foreign trace: the GPU its properties identify
    return prof


PROFILE_COLUMNS = {
    "kernel_bound": ("ts_ns", "dur_ns", "name", "correlation", "op_id", "launch_name", "bytes", "kclass", "op_name",
                     "flops", "dtype", "bound", "issued_ns"),
    "runtime": ("name", "ts_ns", "dur_ns", "correlation"),
    "cpu_ops": ("op_id", "ts_ns", "input_dims"),
}


def analysed_profile(run: RunDir) -> Profile:
    """The Profile of a run ``tracekit analyze`` has analysed (its stored tables); WhatifError otherwise."""
    manifest = run.read_manifest()
    if not ("analysis" in manifest and run.has_table("kernel_bound") and run.has_table("steps")):
        raise WhatifError(f"{run.path}: not analysed (run `tracekit analyze` first)")
    t: dict[str, Any] = {n: run.read_df(n) for n in ("steps", "requests") if run.has_table(n)}
    # the big tables: only the columns a Profile reads (tracekit.analysis.whatif_profile, idle.sync_intervals)
    for n, cols in PROFILE_COLUMNS.items():
        if run.has_table(n):
            t[n] = run.read_columns(n, cols).to_pandas()
    t["manifest"] = manifest
    c = (manifest.get("analysis") or {}).get("ceiling")
    if isinstance(c, dict):
        with contextlib.suppress(ValueError):
            t["ceiling"] = ceilings.Ceiling.from_dict(c)
    return profile_of(t, str(run.run_id))


def project(prof: Profile, change: _w.Change, constants: Constants = DEFAULT) -> _w.Projection:
    """``prof`` under ``change``; WhatifError (one line) where the run lacks what the change needs."""
    try:
        return _w.project(prof, change, ceiling_of, constants)
    except _w.WhatifError as exc:
        raise WhatifError(str(exc)) from None


def advice_projections(prof: Profile) -> list[tuple[str, _w.Projection | None, _w.Projection]]:
    """The fixes the report's advice names, each projected: (label, the baseline it is compared with,
    the projection). The profiler's line compares with the run as traced; every other fix is projected
    without the profiler and compared with the run without it. A fix the run lacks the data for is
    left out."""
    try:
        bare = _w.project(prof, _w.Change(no_profiler=True), ceiling_of)
    except _w.WhatifError:
        return []
    out: list[tuple[str, _w.Projection | None, _w.Projection]] = [("without the profiler", None, bare)]
    b = prof.batch or (prof.phases["decode"].batch if "decode" in prof.phases else 1)
    fixes: list[tuple[str, _w.Change]] = []
    if not (prof.mode == "compiled" or any(s.graph_launches for s in prof.phases.values())):
        fixes.append(("capture CUDA graphs (torch.compile, static cache)", _w.Change(graphs=True, no_profiler=True)))
    fixes.append((f"raise the batch to {b * 4}", _w.Change(batch=b * 4, no_profiler=True)))
    if prof.quant in ("none", ""):
        fixes.append(("quantize the weights to int4 (torchao)", _w.Change(quant="int4", no_profiler=True)))
    for label, ch in fixes:
        try:
            out.append((label, bare, _w.project(prof, ch, ceiling_of)))
        except _w.WhatifError:
            continue
    return out
