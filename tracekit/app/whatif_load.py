"""Any run or trace to a what-if Profile: ``load_profile(target)`` and ``whatif(target, change)``.

An analysed run directory is read (tracekit.app.whatif.analysed_profile); a run never analysed (a
sweep point keeps only its raw tables and phases) is analysed in memory, nothing written; a trace
file, or a run holding only its trace, is ingested first, as ``analyze`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracekit.analysis import whatif as _w
from tracekit.analysis.inputs import RAW
from tracekit.analysis.whatif_profile import Profile
from tracekit.app.whatif import WhatifError, analysed_profile, profile_of, project
from tracekit.errors import UsageError
from tracekit.store.rundir import RunDir


def _in_memory(run: RunDir) -> Profile:
    from tracekit.analysis.frames import as_df
    from tracekit.analysis.inputs import AnalysisInput
    from tracekit.analysis.pipeline import run_passes
    from tracekit.app.analyze import RAW_COLUMNS
    from tracekit.app.ceiling import decide

    if not run.has_table("gpu_activity"):
        raise WhatifError(f"{run.path}: no GPU activity recorded")
    snap = run.snapshot(RAW, RAW_COLUMNS)
    inp = AnalysisInput(tables=snap.tables, manifest=snap.manifest, ceilings=decide(snap.manifest))
    result = run_passes(inp)
    out: dict[str, Any] = {n: result.tables.get(n) for n in ("kernel_bound", "steps", "requests")}
    out.update({n: as_df(inp.table(n)) for n in ("runtime", "cpu_ops")})
    out["manifest"] = dict(inp.manifest)
    out["ceiling"] = inp.ceiling
    return profile_of(out, str(run.run_id))


def load_profile(target: str | Path | RunDir) -> Profile:
    """The run reduced for projections (see the module doc)."""
    if isinstance(target, RunDir):
        run = target
    else:
        path = Path(target)
        if not path.exists():
            raise UsageError(f"{path}: no such run directory or trace file")
        from tracekit.app.analyze import open_or_ingest

        run = open_or_ingest(path, None, False)  # a trace file, or a run with only its trace: ingested
    try:
        return analysed_profile(run)
    except WhatifError:
        return _in_memory(run)


def whatif(target: str | Path | RunDir, change: _w.Change | None = None, **changes: Any) -> _w.Projection:
    """Project a run under a change (a Change, or its fields as keywords: graphs=True, batch=8, ...)."""
    return project(load_profile(target), change if change is not None else _w.Change(**changes))
