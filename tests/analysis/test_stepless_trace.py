"""A trace with no model steps (a micro-benchmark's torch.profiler trace) still gets its kernels'
bound classes, and the whole trace's split in the ``outside`` phase row.

The trace is real: 45 `torch._int_mm` launches on an H200 (tests/fixtures/ncu/intmm_h200.trace.json.gz;
no ProfilerStep, no embedding, no tracekit annotations).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tracekit.analysis.bound import BoundOptions
from tracekit.store.rundir import RunDir

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "ncu" / "intmm_h200.trace.json.gz"


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pd.DataFrame]:
    import tracekit.ingest
    from tracekit.app.analyze import analyse_run

    run = tmp_path_factory.mktemp("stepless") / "run"
    tracekit.ingest.ingest([str(FIX)], str(run), force=True, use_cache=False, jobs=1)
    r = analyse_run(RunDir.open(run))
    assert len(r["steps"]) == 0
    return {name: pd.read_parquet(run / "tables" / f"{name}.parquet") for name in ("kernel_bound", "phases")}


def test_every_kernel_is_modelled_and_classed(analysed: dict[str, pd.DataFrame]) -> None:
    k = analysed["kernel_bound"]
    assert len(k) == 45 and set(k["op_name"]) == {"aten::_int_mm"}
    assert k["step_id"].isna().all()
    assert (k["bytes"] > 0).all() and (k["flops"] > 0).all()
    assert set(k["bound"]) <= {"compute", "memory", "latency"}
    # the classes follow the latency line: a kernel reaching neither roof's line is latency-bound
    # (the largest, 128 x 2048 x 32000, reaches 6% of int8's peak and 12% of the bandwidth in 143 us)
    line = 100.0 * BoundOptions().latency_threshold
    below = k[["flops_pct_of_peak", "bw_pct_of_peak"]].max(axis=1) < line
    assert ((k["bound"] == "latency") == below).all()


def test_the_outside_row_splits_the_whole_trace(analysed: dict[str, pd.DataFrame]) -> None:
    ph = analysed["phases"]
    assert list(ph["phase"]) == ["outside"]
    o = ph.iloc[0]
    k = analysed["kernel_bound"]
    busy = int(o["gpu_busy_ns"])
    assert busy == int(k["dur_ns"].sum())  # one stream, no overlap
    split = sum(int(o[c]) for c in ("compute_bound_ns", "memory_bound_ns", "latency_bound_ns", "other_ns"))
    assert split == busy
    assert int(o["idle_ns"]) == int(o["time_ns"]) - busy
    by_class = k.groupby("bound")["dur_ns"].sum()
    assert int(o["latency_bound_ns"]) == int(by_class.get("latency", 0))


def test_an_mi250_trace_gets_its_gcds_ceiling(corpus_dir: Path, tmp_path: Path) -> None:
    """The corpus's ROCm 6.2 MI250 trace names its GPU only "AMD Radeon Graphics": the GPU is identified
    from deviceProperties as one MI250 GCD, whose datasheet ceiling splits the whole trace by class
    (its iterations and what lies outside them)."""
    import json

    from tracekit.app.analyze import analyse_run
    from tracekit.ingest import ingest

    run = ingest([corpus_dir / "hta" / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"], tmp_path / "r",
                 force=True, use_cache=False, jobs=1)
    r = analyse_run(run)
    assert r["ceiling"].gpu == "AMD Instinct MI250 (1 GCD)"
    assert json.loads((tmp_path / "r" / "run.json").read_text())["analysis"]["ceiling"]["gpu"] == r["ceiling"].gpu
    # its two ProfilerStep windows are its steps (workload iterations); each run row splits its busy time
    ph = pd.read_parquet(tmp_path / "r" / "tables" / "phases.parquet")
    assert r["workload"]["kind"] == "iterations"
    run_rows = ph[ph["request_id"].isna() & ph["phase"].isin(["iteration", "outside"])]
    assert int(run_rows.set_index("phase").loc["iteration", "steps"]) == 2
    busy = 0
    for o in run_rows.to_dict("records"):
        split = [o[c] for c in ("compute_bound_ns", "memory_bound_ns", "latency_bound_ns", "other_ns")]
        assert all(pd.notna(v) for v in split)
        # busy time is the kernels' split plus the copies (this trace has no collectives)
        assert sum(int(v) for v in split) + int(o["memcpy_ns"]) == int(o["gpu_busy_ns"])
        busy += int(o["gpu_busy_ns"])
    assert busy > 0
    k = pd.read_parquet(tmp_path / "r" / "tables" / "kernel_bound.parquet")
    kern = k[k["bound"].ne("memcpy") | k["bound"].isna()]
    assert len(kern) == 14 and kern["bound"].isin(["compute", "memory", "latency"]).all()
