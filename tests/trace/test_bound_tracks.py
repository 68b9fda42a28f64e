"""The bound classes on the timeline: each step's dominant class, each kernel's class and colour."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import FIXTURES

from tracekit.app.analyze import analyse_run, open_or_ingest
from tracekit.app.export import load_tables
from tracekit.trace.tracks import BOUND_CNAME, build_tracks


@pytest.mark.slow
def test_steps_and_kernels_carry_the_bound_pass_classes(tmp_path: Path) -> None:
    # GIVEN a real H200 recording analysed (tests/fixtures/record_gpu_smoke)
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "record_gpu_smoke", run_dir)
    run = open_or_ingest(run_dir, None, False)
    result = analyse_run(run)
    tables = load_tables(run)
    assert set(tables["kernel_bound"].column_names) == {"bound", "source"}  # only what the tracks need
    ts = build_tracks(tables)
    sb = result["step_bound"].set_index("step_id")
    bound = [sl for sl in ts.slices if sl.cat == "tracekit.bound" and sl.args.get("bound_source") == "step_bound"]
    assert bound  # every captured step
    names = {"compute_bound_ns": "compute-bound", "memory_bound_ns": "memory-bound",
             "latency_bound_ns": "latency-bound", "idle_host_ns": "host-bound", "idle_wait_ns": "waiting",
             "idle_profiler_ns": "profiler", "other_ns": "other", "comm_ns": "comm", "memcpy_ns": "memcpy"}
    for sl in bound:
        row = sb.loc[sl.args["step_id"]]
        top = max(names, key=lambda c: float(row[c]) if row[c] == row[c] else 0.0)
        assert sl.name == names[top] and sl.cname == BOUND_CNAME[sl.name]
        shares = {k: v for k, v in sl.args.items() if k.endswith(" share")}
        assert abs(sum(shares.values()) - 1.0) < 0.01  # every class, with its share of the step
    # THEN each kernel slice says its class, coloured by it, in gpu_activity's order
    kern = [sl for sl in ts.slices if sl.cat == "kernel"]
    kb = result["kernel_bound"]
    assert [sl.args["bound"] for sl in kern] == list(kb.loc[kb["kind"] == "kernel", "bound"])
    assert all(sl.cname == BOUND_CNAME[sl.args["bound"]] for sl in kern)


def test_without_the_bound_pass_the_tracks_stay_as_they_were(tmp_path: Path) -> None:
    steps = pa.table({"step_id": [0], "kind": ["decode"], "cpu_start_ns": [0], "cpu_end_ns": [100],
                      "gpu_busy_ns": [10]})
    gpu = pa.table({"ts_ns": [10], "dur_ns": [10], "kind": ["kernel"], "name": ["k"], "device": [0], "stream": [7]})
    ts = build_tracks({"steps": steps, "gpu_activity": gpu, "kernel_bound": pa.table({"bound": ["a", "b"]})})
    b = [sl for sl in ts.slices if sl.cat == "tracekit.bound"]
    assert [sl.name for sl in b] == ["host-bound"] and b[0].args["bound_source"] == "gpu_busy_share"
    k = [sl for sl in ts.slices if sl.cat == "kernel"]
    assert "bound" not in k[0].args  # a kernel_bound of another length is not this trace's: ignored
