"""Issue 5's "done when" claims, checked on a real H200 trace.

Fixture: tests/fixtures/gpu/bound_h200.json.gz, scripts/gpu/bound_fixture.py's trace
(TinyLlama-1.1B shape, random weights, fp16, eager Transformers 5.17, torch 2.11,
plain generate at batch 1 of a 1,000-token prompt) trimmed by trim_bound_trace.py to
the prefill step and the first 4 decode steps; h200_ceiling.json is what
`tracekit calibrate` measured on that GPU the same day (4.04 TB/s, fp16 735 TFLOP/s).
Numbers and method: docs/roofline.md.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers import FIXTURES

from tracekit.analysis import bound, intervals
from tracekit.analysis.inputs import AnalysisInput
from tracekit.analysis.modelcheck import decode_check, shape_from_config
from tracekit.analysis.pipeline import run_passes
from tracekit.ingest import read_trace_tables
from tracekit.store import calibration

GPU = FIXTURES / "gpu"


@pytest.fixture(scope="module")
def timings() -> dict[str, Any]:
    return json.loads((GPU / "bound_h200_timings.json").read_text())


@pytest.fixture(scope="module")
def run(timings: dict[str, Any]) -> dict[str, Any]:
    tables: dict[str, Any] = dict(read_trace_tables(GPU / "bound_h200.json.gz"))
    tables["manifest"] = {"environment": {"gpu": timings["gpu"]}, "model": {"config": timings["model_config"]}}
    tables["ceiling"] = calibration.load(GPU / "h200_ceiling.json")
    # The claims of this module are the roofline's (which roof each kernel is under); the latency
    # class on the same trace: tests/analysis/test_latency.py.
    tables["bound_options"] = bound.ROOFLINE_ONLY
    res = dict(run_passes(AnalysisInput.of(tables)))
    res["cpu_ops_in"] = tables["cpu_ops"].to_pandas()
    return res


def _rows_of_first_input(cpu_ops: pd.DataFrame, op_ids: pd.Series) -> pd.Series:
    """Rows (all dims but the last) of each op's first input, from the trace's own Input Dims."""
    dims = cpu_ops.set_index("op_id")["input_dims"]

    def rows(o: Any) -> int:
        d = json.loads(dims.get(int(o), "[]") or "[]")
        return int(np.prod(d[0][:-1])) if d and d[0] else 0

    return op_ids.map(rows)


def test_run_uses_the_measured_ceiling(run: dict[str, Any]) -> None:
    ph = run["phases"]
    assert set(ph["ceiling"].dropna()) == {"NVIDIA H200 (measured)"}
    assert {"prefill", "decode"} <= set(ph["phase"].astype(str))


def test_prefill_gemms_of_the_prompt_are_compute_bound(run: dict[str, Any]) -> None:
    k = run["kernel_bound"]
    g = k[(k["phase"] == "prefill") & (k["kclass"] == "gemm") & (k["model"] == bound.MODEL_SHAPE)]
    rows = _rows_of_first_input(run["cpu_ops_in"], g["op_id"])
    prompt = g[(rows >= 1000).to_numpy()]
    # 22 layers × (q, k, v, o, gate, up, down): every projection over the 1,000 prompt tokens
    assert len(prompt) >= 22 * 7
    assert (prompt["bound"] == bound.COMPUTE).all(), prompt[prompt["bound"] != bound.COMPUTE][["op_name", "intensity"]]
    # what is left is single-row work (lm_head on the last position, rotary's 1-row matmul): memory-bound, rightly
    rest = g[(rows < 1000).to_numpy()]
    assert (rest["bound"] == bound.MEMORY).all()
    assert rest["dur_ns"].sum() < 0.05 * g["dur_ns"].sum()


def test_batch1_decode_gemvs_are_memory_bound(run: dict[str, Any]) -> None:
    k = run["kernel_bound"]
    g = k[(k["phase"] == "decode") & (k["kclass"] == "gemm") & (k["model"] == bound.MODEL_SHAPE)]
    assert len(g) >= 4 * 22 * 7  # 4 steps × 22 layers × 7 projections (+ lm_head, split-K reductions)
    assert (g["bound"] == bound.MEMORY).all()
    assert float(g["intensity"].max()) < 2.0  # a GEMV does ~1 FLOP per byte of weight it streams


def test_decode_is_mostly_host_bound_idle(run: dict[str, Any]) -> None:
    ph = run["phases"]
    dec = ph[ph["request_id"].isna() & (ph["phase"] == "decode")].iloc[0]
    # independent of the sweep: union of the decode steps' kernels, clipped to their windows
    w = intervals.step_windows(run["steps"] if isinstance(run["steps"], pd.DataFrame) else run["steps"].to_pandas())
    w = w[w["kind"].astype(str) == "decode"]
    k = run["kernel_bound"]
    k = k[k["phase"] == "decode"]
    busy = 0
    for r in w.itertuples():
        kk = k[k["step_id"] == r.step_id]
        s = np.clip(kk["ts_ns"].to_numpy(), r.start_ns, r.end_ns)
        e = np.clip((kk["ts_ns"] + kk["dur_ns"]).to_numpy(), r.start_ns, r.end_ns)
        u = intervals.union(s, e)
        busy += int((u[:, 1] - u[:, 0]).sum())
    assert int(dec["idle_ns"]) == int(w["time_ns"].sum()) - busy
    idle_share = dec["idle_ns"] / dec["time_ns"]
    assert idle_share > 0.5  # "mostly": on this run 91%, docs/roofline.md
    assert dec["compute_bound_ns"] == 0


def test_decode_step_bytes_within_10pct_of_weights_plus_kv(run: dict[str, Any], timings: dict[str, Any]) -> None:
    shape = shape_from_config(timings["model_config"], "float16")
    chk = decode_check(shape, run["step_bound"])
    assert len(chk) == 4
    assert ((chk["bytes_ratio"] - 1).abs() < 0.10).all(), chk[["kv_len", "bytes", "model_bytes", "bytes_ratio"]]
    assert ((chk["flops_ratio"] - 1).abs() < 0.10).all()


def test_time_classes_of_every_phase_add_up(run: dict[str, Any]) -> None:
    ph = run["phases"]
    rows = ph[ph["time_ns"].notna()]
    assert len(rows) >= 4  # prefill and decode, for the run and for request 0
    parts = sum(rows[c] for c in bound.TIME_COLUMNS.values())
    assert (parts == rows["time_ns"]).all()
    # the four classes of the issue: compute + memory + idle + other (comm and memcpy are "other" there)
    four = rows["compute_bound_ns"] + rows["memory_bound_ns"] + rows["idle_ns"] + (
        rows["other_ns"] + rows["comm_ns"] + rows["memcpy_ns"])
    assert (four == rows["time_ns"]).all()


def test_kv_bytes_per_token_formula_and_allocator(timings: dict[str, Any]) -> None:
    shape = shape_from_config(timings["model_config"], "float16")
    assert shape.kv_bytes_per_token == 2 * 22 * 4 * 64 * 2 == 22_528
    # torch.cuda.memory_allocated() before each decode step of the unprofiled generate
    mem = [s["mem_allocated_bytes"] for s in timings["steps"] if s["kind"] == "decode"]
    growth = np.diff(mem)
    assert len(growth) >= 20
    assert float(np.median(growth)) == shape.kv_bytes_per_token


def test_html_report_draws_the_per_kernel_roofline(run: dict[str, Any]) -> None:
    import base64

    from tracekit.report.html import kernel_roofline_svg, run_section
    from tracekit.report.view import RunView

    phases = run["phases"]
    with_kernels = RunView("h200", {}, {"phases": phases, "kernel_bound": run["kernel_bound"]})
    svg = kernel_roofline_svg(with_kernels)
    assert svg is not None and svg.startswith("<svg")
    assert base64.b64encode(svg.encode()).decode("ascii") in run_section(with_kernels)
    # without the table the report keeps its per-phase roofline
    assert kernel_roofline_svg(RunView("h200", {}, {"phases": phases})) is None
