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

from tracekit.app.analyze import RAW, RECORDED, analyse_run, open_or_ingest, resolve_ceiling
from tracekit.errors import TracekitError
from tracekit.store.rundir import RunDir


@dataclass(frozen=True)
class Attached:
    kernels: int  # rows of the counters table
    joined: int  # trace kernels that got counters
    classified: int  # of those, classified by their counters (not comm / memcpy)
    lines: tuple[str, ...]  # the join report
    result: dict[str, Any]  # the analysis, as tracekit analyze returns it


def _counts(result: dict[str, Any]) -> tuple[int, int, list[str]]:
    kb = result.get("kernel_bound")
    joined = int(kb["ncu_match"].notna().sum()) if kb is not None and "ncu_match" in kb else 0
    classified = int((kb["source"] == "ncu").sum()) if kb is not None and "source" in kb else 0
    lines = [w for w in result.get("warnings", []) if str(w).startswith("counters:")]
    return joined, classified, lines


def preview(run: RunDir, table: Any) -> dict[str, Any]:
    """The default passes over the run's tables plus ``table``, in memory: nothing is written."""
    from tracekit.analysis.pipeline import DEFAULT_PASSES, run_passes

    tables: dict[str, Any] = {name: run.read_table(name) for name in RAW}
    tables["ncu_counters"] = table
    manifest = run.read_manifest()
    tables["manifest"] = manifest
    for name, keep in RECORDED.items():
        if run.has_table(keep):
            tables[keep] = run.read_df(keep)
        elif "analysis" not in manifest and run.has_table(name):
            tables[keep] = run.read_df(name)
    ceiling, _ = resolve_ceiling(manifest)
    if ceiling is not None:
        tables["ceiling"] = ceiling
    return dict(run_passes(tables, DEFAULT_PASSES))


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
