"""A CPU run's split by operator class, straight from its stored tables (no full analysis).

``tracekit record`` on a CPU puts it in run.json (``cpu_split``) for its summary; ``tracekit analyze``
writes the same numbers as the op_class_split table (tracekit.analysis.opclass).
"""

from __future__ import annotations

from typing import Any

from tracekit.analysis import opclass
from tracekit.store.rundir import RunDir


def cpu_split(run: RunDir) -> Any | None:
    """op_class_split for a run with no GPU activity (None for a GPU run or without steps or ops). A run
    not yet ingested is read from its trace in memory (nothing is written)."""
    steps_name = "recorded_steps" if run.has_table("recorded_steps") else "steps"
    if not run.has_table(steps_name):
        return None
    if run.has_table("cpu_ops"):
        if run.has_table("gpu_activity") and run.read_table("gpu_activity").num_rows:
            return None
        ops = run.read_df("cpu_ops")
    elif run.trace_path.is_file():
        from tracekit.ingest.reader import read_trace_tables

        tables = read_trace_tables(run.trace_path)
        if tables.get("gpu_activity") is not None and tables["gpu_activity"].num_rows:
            return None
        ops = tables["cpu_ops"].to_pandas()
    else:
        return None
    steps = run.read_df(steps_name)
    if ops.empty or steps.empty:
        return None
    # The recorder's steps are on the host clock; the trace's ops on the profiler's: run.json's clock
    # offset (host - trace, measured at record time) moves the steps onto the ops' clock.
    offset = (run.read_manifest().get("clock") or {}).get("offset_ns")
    if offset is None:
        return None
    steps = steps.assign(cpu_start_ns=steps["cpu_start_ns"] - int(offset), cpu_end_ns=steps["cpu_end_ns"] - int(offset))
    live = ops[~ops["captured"].fillna(False).astype(bool)] if "captured" in ops else ops
    ts = live["ts_ns"].dropna()
    span = None
    if len(ts):
        end = ts + live.loc[ts.index, "dur_ns"].fillna(0)
        span = (int(ts.min()), int(end.max()))
    split = opclass.split(opclass.step_op_classes(ops, steps, span)).to_pandas()
    return None if split.empty else split


def manifest_entry(split: Any) -> list[dict[str, Any]]:
    """run.json's ``cpu_split``: per phase, its steps, time and each class's ns (CPU runs)."""
    out = []
    for phase, part in split.groupby("phase", sort=False):
        out.append({"phase": str(phase), "steps": int(part["steps"].max()), "time_ns": int(part["time_ns"].sum()),
                    "classes": {str(c): int(t) for c, t in zip(part["op_class"], part["time_ns"], strict=True)}})
    return out
