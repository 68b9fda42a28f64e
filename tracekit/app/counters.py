"""Attach Nsight Compute counters to a run: join them in memory, and write only what joins.

``attach(run, table)``: ``table`` is an ``ncu_counters`` table (tracekit.ingest.ncu.read_csv). The
default passes run in memory with it; if no profiled kernel joins the run's trace (a counters file
from another run, another step window, another workload), nothing is written and a one-line
TracekitError says why. Otherwise the table is written and the run re-analysed, so kernel_bound,
step_bound and phases carry the counters' classes (tracekit.analysis.bound.apply_counters).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracekit.analysis.inputs import RAW, AnalysisInput, AnalysisOutput
from tracekit.app.analyze import RECORDED, analyse_run, open_or_ingest
from tracekit.app.ceiling import decide
from tracekit.errors import TracekitError
from tracekit.store.rundir import RunDir


@dataclass(frozen=True)
class Attached:
    kernels: int  # rows of the counters table
    joined: int  # trace kernels that got counters
    classified: int  # of those, classified by their counters (not comm / memcpy)
    lines: tuple[str, ...]  # the join report
    result: AnalysisOutput  # the analysis, as tracekit analyze returns it


def _counts(result: AnalysisOutput) -> tuple[int, int, list[str]]:
    kb = result.get("kernel_bound")
    joined = int(kb["ncu_match"].notna().sum()) if kb is not None and "ncu_match" in kb else 0
    classified = int((kb["source"] == "ncu").sum()) if kb is not None and "source" in kb else 0
    lines = [w for w in result.get("warnings", []) if str(w).startswith("counters:")]
    return joined, classified, lines


def preview(run: RunDir, table: Any) -> AnalysisOutput:
    """The default passes over the run's tables plus ``table``, in memory: nothing is written."""
    from tracekit.analysis.pipeline import run_passes

    snap = run.snapshot(RAW, optional=tuple(RECORDED.values()))
    tables: dict[str, Any] = {**snap.tables, "ncu_counters": table}
    manifest = snap.manifest
    for name, keep in RECORDED.items():
        if keep not in tables and "analysis" not in manifest and run.has_table(name):
            tables[keep] = run.read_table(name)
    return run_passes(AnalysisInput(tables=tables, manifest=manifest, ceilings=decide(manifest)))


def attach(run_dir: Any, table: Any) -> Attached:
    """Join ``table`` to the run; write it and re-analyse only if at least one kernel joined."""
    run = open_or_ingest(RunDir.open(run_dir).path, None, False)
    if run.read_table("gpu_activity").num_rows == 0:
        raise TracekitError(f"{run.path}: the run has no GPU kernels to join counters to")
    joined, _, lines = _counts(preview(run, table))
    if joined == 0:
        detail = "; ".join(ln.removeprefix("counters: ") for ln in lines[1:3]) or "no step of the counters is in the trace"
        raise TracekitError(f"the counters do not match this run: 0 of {table.num_rows} profiled kernels joined "
                            f"({detail})")
    run.write_table("ncu_counters", table)
    result = analyse_run(run)
    joined, classified, lines = _counts(result)
    return Attached(table.num_rows, joined, classified, tuple(lines), result)
