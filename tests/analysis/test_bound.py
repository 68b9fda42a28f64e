from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import bound_pass_of
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.analysis import bound, energy, intervals
from tracekit.analysis.kernels import kernel_class
from tracekit.analysis.opmodels import op_cost
from tracekit.model.ceilings import datasheet

H200 = datasheet("NVIDIA H200")
assert H200 is not None
HALF = "c10::Half"
# The synthetic kernels below have arbitrary durations: their tests check the roofline side (which roof)
# and the attribution; the latency class has its own tests (test_latency.py).
ROOF = bound.ROOFLINE_ONLY


def _op(op_id: int, name: str, dims: list, types: list, parent: int | None = None) -> dict:
    return {
        "op_id": op_id,
        "name": name,
        "input_dims": json.dumps(dims),
        "input_types": json.dumps(types),
        "parent_id": parent,
    }


def _k(ts: int, dur: int, name: str, op_id: int | None, kind: str = "kernel", stream: int = 7, **kw: object) -> dict:
    return {"ts_ns": ts, "dur_ns": dur, "name": name, "op_id": op_id, "kind": kind, "stream": stream, **kw}


@pytest.fixture
def tables() -> dict[str, pd.DataFrame]:
    cpu_ops = pd.DataFrame(
        [
            _op(1, "aten::linear", [[1, 1000, 2048], [5632, 2048], []], [HALF, HALF, ""]),  # prefill GEMM
            _op(2, "aten::linear", [[1, 1, 2048], [5632, 2048], []], [HALF, HALF, ""]),  # decode GEMV
            _op(3, "aten::mul", [[1, 1000, 2048], [1, 1000, 2048]], [HALF, HALF]),
            _op(10, "aten::scaled_dot_product_attention", [[1, 32, 1000, 64]] * 3, [HALF] * 3),
            _op(11, "aten::_scaled_dot_product_flash_attention", [[1, 32, 1000, 64]] * 3, [HALF] * 3, parent=10),
            _op(12, "aten::empty_like", [[1, 32, 1000, 64]], [HALF], parent=10),
            _op(13, "aten::some_custom_op", [[4]], [HALF]),
        ]
    )
    gpu = pd.DataFrame(
        [
            _k(100, 300, "sm90_xmma_gemm_f16f16_f32", 1),
            _k(400, 100, "sm90_xmma_gemm_f16f16_f32_splitK", 1),
            _k(500, 200, "vectorized_elementwise_kernel", 3),
            _k(700, 100, "flash_fwd_kernel", 11),
            _k(800, 50, "fill_kernel", 12),  # ancestor 10 is covered by 11: no model, class copy -> memory
            _k(850, 50, "my_weird_kernel", 13),  # nothing at all: other
            _k(900, 100, "Memcpy DtoD", None, kind="memcpy", bytes=1000, memcpy_kind="DtoD"),
            _k(950, 100, "ncclKernel_AllReduce", None, stream=9),  # overlaps the memcpy: comm wins
            _k(1300, 20, "gemv_kernel", 2),
            _k(1400, 30, "elementwise_kernel", None),
        ]
    )
    steps = pd.DataFrame(
        {
            "step_id": [0, 1],
            "request_id": [0, 0],
            "kind": ["prefill", "decode"],
            "tokens": [1000, 1],
            "cpu_start_ns": [0, 1200],
            "cpu_end_ns": [1000, 1250],
            "gpu_start_ns": [100, 1300],
            "gpu_end_ns": [1100, 1430],
        }
    )
    return {"cpu_ops": cpu_ops, "gpu_activity": gpu, "steps": steps}


def test_kernel_costs_classify_and_split(tables: dict[str, pd.DataFrame]) -> None:
    before = {k: v.copy() for k, v in tables.items()}
    k = bound.kernel_costs(tables["gpu_activity"], tables["cpu_ops"], H200, ROOF)
    for name, df in tables.items():  # inputs untouched
        pd.testing.assert_frame_equal(df, before[name])
    gemm = op_cost("aten::linear", "[[1,1000,2048],[5632,2048],[]]", json.dumps([HALF, HALF, ""]))
    assert gemm is not None
    # GIVEN one op launching two kernels (300 ns, 100 ns) THEN its FLOPs split 3:1 by duration
    assert k.loc[0, "flops"] == pytest.approx(0.75 * gemm.flops)
    assert k.loc[1, "flops"] == pytest.approx(0.25 * gemm.flops)
    assert k.loc[0, "flops"] + k.loc[1, "flops"] == pytest.approx(gemm.flops)
    assert list(k["bound"]) == [
        "compute", "compute", "memory", "compute", "memory", "other", "memcpy", "comm", "memory", "memory",
    ]
    assert list(k["model"][:6]) == ["shape", "shape", "shape", "shape", "kernel_class", "none"]
    assert k.loc[6, "bytes"] == 2000  # DtoD reads and writes
    # decode GEMV intensity is ~1 FLOP/byte, far under the H200 fp16 ridge (~206)
    assert k.loc[8, "intensity"] < 2 < H200.ridge_point("fp16")  # type: ignore[operator]
    assert k.loc[0, "intensity"] > H200.ridge_point("fp16")  # type: ignore[operator]


def test_class_fallback_can_be_switched_off(tables: dict[str, pd.DataFrame]) -> None:
    k = bound.kernel_costs(
        tables["gpu_activity"], tables["cpu_ops"], H200, bound.BoundOptions(class_fallback_memory=False, latency_threshold=None)
    )
    assert k.loc[4, "bound"] == "other" and k.loc[9, "bound"] == "other"


def test_step_attribution_by_interval_arithmetic(tables: dict[str, pd.DataFrame]) -> None:
    out = bound.bound_tables(tables["gpu_activity"], tables["cpu_ops"], tables["steps"], H200, options=ROOF)
    st_ = out["step_bound"].set_index("step_id")
    # prefill window [cpu_start, max(cpu_end, gpu_end)) = [0, 1100)
    p = st_.loc[0]
    assert p["time_ns"] == 1100
    assert p["compute_bound_ns"] == 300 + 100 + 100
    assert p["memory_bound_ns"] == 200 + 50
    assert p["other_ns"] == 50
    assert p["memcpy_ns"] == 50  # 900-950; 950-1000 is hidden by the comm kernel
    assert p["comm_ns"] == 100
    assert p["idle_ns"] == 100 + 50  # 0-100 before the first kernel, 1050-1100
    d = st_.loc[1]
    assert d["time_ns"] == 1430 - 1200
    assert d["memory_bound_ns"] == 50 and d["idle_ns"] == 180
    for _, r in out["step_bound"].iterrows():
        assert sum(int(r[c]) for c in bound.TIME_COLUMNS.values()) == r["time_ns"]


def test_phases_identity_rates_and_ceiling_name(tables: dict[str, pd.DataFrame]) -> None:
    out = bound.bound_tables(tables["gpu_activity"], tables["cpu_ops"], tables["steps"], H200, options=ROOF)
    ph = out["phases"]
    assert set(ph["phase"]) == {"prefill", "decode"}
    assert len(ph) == 4  # run-level and request-level rows
    for _, r in ph.iterrows():
        assert sum(int(r[c]) for c in bound.TIME_COLUMNS.values()) == int(r["time_ns"])
        assert r["ceiling"].startswith("NVIDIA H200 (datasheet)")
    dec = ph[(ph["phase"] == "decode") & ph["request_id"].isna()].iloc[0]
    k = out["kernels"]
    assert dec["flops"] == pytest.approx(k.loc[8, "flops"])
    assert dec["achieved_tflops"] == pytest.approx(k.loc[8, "flops"] / dec["gpu_busy_ns"] / 1e3)
    assert dec["achieved_tbps_wall"] == pytest.approx(dec["bytes"] / dec["time_ns"] / 1e3)
    assert dec["pct_peak_bandwidth"] == pytest.approx(100 * dec["achieved_tbps"] * 1e12 / H200.peak_bytes_per_s)


def test_merges_into_existing_phases_table(tables: dict[str, pd.DataFrame]) -> None:
    given = pd.DataFrame(
        {"request_id": [None, 0, 0], "phase": ["decode", "decode", "outside"], "steps": [1, 1, 0], "time_ns": [9, 9, 5]}
    )
    out = bound.bound_tables(tables["gpu_activity"], tables["cpu_ops"], tables["steps"], H200, phases=given,
                             options=ROOF)
    ph = out["phases"]
    assert len(ph) == 3
    assert list(ph["time_ns"][:2]) == [230, 230]
    assert pd.isna(ph.loc[2, "compute_bound_ns"])


def test_empty_inputs() -> None:
    steps = pd.DataFrame(columns=["step_id", "request_id", "kind", "cpu_start_ns", "cpu_end_ns"])
    gpu = pd.DataFrame(columns=["ts_ns", "dur_ns", "name", "kind", "op_id"])
    out = bound.bound_tables(gpu, pd.DataFrame(columns=["op_id", "name", "input_dims", "input_types"]), steps, H200)
    assert len(out["phases"]) == 0 and len(out["kernels"]) == 0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 800), st.sampled_from(bound.PRIORITY)), max_size=40),
    st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 1500)), min_size=1, max_size=6),
)
def test_sweep_sums_exactly_and_matches_brute_force(kern: list, wins: list) -> None:
    kernels = pd.DataFrame(
        {
            "ts_ns": [t for t, _, _ in kern],
            "dur_ns": [d for _, d, _ in kern],
            "bound": [c for _, _, c in kern],
            "device": 0,
            "flops": 0.0,
            "bytes": 0.0,
            "model": "shape",
        }
    )
    windows = intervals.union(np.array([s for s, _ in wins]), np.array([s + d for s, d in wins]))
    row = bound.attribute_windows(windows, kernels)
    # brute force: the class of every nanosecond, then only the nanoseconds inside the windows
    horizon = 8000
    cls = np.full(horizon, len(bound.PRIORITY))
    for t, d, c in kern:
        cls[t : t + d] = np.minimum(cls[t : t + d], bound.PRIORITY.index(c))
    inside = np.zeros(horizon, dtype=bool)
    for s, e in windows:
        inside[s:e] = True
    assert row["time_ns"] == int(inside.sum())
    for i, c in enumerate([*bound.PRIORITY, bound.IDLE]):
        assert row[bound.TIME_COLUMNS[c]] == int((cls[inside] == i).sum())
    assert sum(row[c] for c in bound.TIME_COLUMNS.values()) == row["time_ns"]


def test_kernel_name_classes() -> None:
    assert kernel_class("ncclDevKernel_AllReduce_Sum_f16_RING_LL") == "communication"
    assert kernel_class("void pytorch_flash::flash_fwd_kernel<...>") == "attention"
    assert kernel_class("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64") == "gemm"
    assert kernel_class("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_TNT") == "gemm"
    assert kernel_class("void gemv2T_kernel_val<int, int, __half>") == "gemm"
    assert kernel_class("void at::native::vectorized_elementwise_kernel<4, ...>") == "elementwise"
    assert kernel_class("void at::native::reduce_kernel<512, 1, ...>") == "reduction"
    assert kernel_class("void at::native::(anonymous namespace)::CatArrayBatchedCopy<...>") == "copy"
    assert kernel_class("Memcpy HtoD (Pageable -> Device)", "memcpy") == "copy"
    assert kernel_class("mystery") == "other"


def test_pipeline_pass_fills_phases_and_conforms_to_schema(tables: dict[str, pd.DataFrame]) -> None:
    from tracekit.model import schema

    ks = pd.DataFrame({"row": range(10), "step_id": [0] * 8 + [1] * 2, "device": 0})
    phases = pd.DataFrame({"request_id": pd.array([None, 0, None], "Int64"), "phase": ["decode", "decode", "outside"],
                           "steps": [1, 1, 0], "time_ns": [230, 230, 7]})
    counters = pd.DataFrame({"ts_ns": [0, 1000, 2000], "metric": ["energy"] * 3, "value": [0.0, 1.0, 2.0],
                             "device": 0})
    t = {**tables, "kernel_steps": ks, "phases": phases, "counters": counters,
         "manifest": {"environment": {"gpu": "NVIDIA H200"}}, "ceiling": H200}
    t["gpu_activity"] = t["gpu_activity"].assign(device=0)
    out = bound_pass_of(t)
    # the energy pass runs right after
    out["phases"] = energy.energy_pass(t["gpu_activity"], t["steps"], out["phases"], counters, bound_ran=True,
                                       ceiling=H200)
    ph = out["phases"].to_pandas()  # the energy pass's phases: an Arrow table
    assert list(ph["phase"]) == ["decode", "decode", "outside"]
    assert ph.loc[0, "energy_j"] == pytest.approx(0.23)  # 230 ns at 1 J per 1,000 ns
    assert ph.loc[0, "ceiling"] == "NVIDIA H200 (datasheet)"
    assert set(out["kernel_bound"]["phase"].dropna()) == {"prefill", "decode"}
    schema.from_pandas("phases", ph)  # every column the pass adds is in the schema
    assert any("no model" in w for w in out["warnings"])
    # no ceiling for an unknown GPU: a warning, and the compute / memory / latency / other split unknown
    t2 = {**t, "manifest": {"environment": {"gpu": "Mystery GPU 9000"}}, "ceiling": None}
    out2 = bound_pass_of(t2)
    assert any("no ceiling for GPU 'Mystery GPU 9000'" in w for w in out2["warnings"])
    split = ["compute_bound_ns", "memory_bound_ns", "latency_bound_ns", "other_ns"]
    assert out2["phases"][split].isna().all().all() and out2["step_bound"][split].isna().all().all()
    # a measured ceiling handed in wins
    from dataclasses import replace

    meas = replace(H200, kind="measured", peak_bytes_per_s=4.0e12)
    assert bound_pass_of({**t, "ceiling": meas})["phases"].loc[0, "ceiling"] == "NVIDIA H200 (measured)"


def test_real_trace_from_corpus(corpus_dir: Path) -> None:
    from tracekit.ingest import read_trace_tables

    path = corpus_dir / "hta" / "trace_filter__sampled_rank-0.json.gz"
    if not path.is_file():
        pytest.skip("corpus trace absent")
    t = read_trace_tables(path)
    gpu, cpu = t["gpu_activity"].to_pandas(), t["cpu_ops"].to_pandas()
    v100 = datasheet("Tesla V100-SXM2-16GB")
    assert v100 is not None
    k = bound.kernel_costs(gpu, cpu, v100, ROOF)
    assert len(k) == len(gpu)
    shape = k[k["model"] == "shape"]
    assert len(shape) > len(k) / 2  # this recsys trace has shapes: most kernels get a model
    assert (shape["flops"] >= 0).all() and (shape["bytes"] > 0).all()
    # splitting by duration conserves each op's cost
    from tracekit.analysis.opmodels import op_costs

    costs = op_costs(cpu).set_index("op_id")
    per_op = shape.groupby("op_id")["bytes"].sum()
    direct = per_op.index.intersection(costs.index)
    assert len(direct) > 0
    assert np.allclose(per_op.loc[direct].to_numpy(), costs.loc[direct, "bytes"].to_numpy())
    assert set(k["bound"]) <= {"compute", "memory", "other", "comm", "memcpy"}
    assert (k.loc[k["kclass"] == "communication", "bound"] == "comm").all()


def test_pipeline_on_recorded_shapes_with_synthetic_kernels(fixtures_dir: Path) -> None:
    """The default passes on a real (CPU-recorded) generate trace, one kernel per modelled launcher op.

    GIVEN the shapes torch.profiler recorded for a tiny Llama (tests/fixtures/cpu/record_cpu_traces.py)
    WHEN each modelled op without a modelled descendant launches one kernel (as on a GPU)
    THEN every phase's classes add up to its time and a decode step's modelled FLOPs match the config's.
    """
    from tracekit.analysis.inputs import AnalysisInput
    from tracekit.analysis.modelcheck import decode_check, shape_from_config
    from tracekit.analysis.opmodels import op_costs
    from tracekit.analysis.pipeline import run_passes
    from tracekit.ingest import read_trace_tables

    t = {k: v.to_pandas() for k, v in read_trace_tables(fixtures_dir / "cpu" / "two_requests.json.gz").items()}
    cpu = t["cpu_ops"]
    modelled = set(op_costs(cpu)["op_id"])
    parent = dict(zip(cpu["op_id"], cpu["parent_id"], strict=True))
    ancestors: set[int] = set()
    for o in modelled:
        p = parent.get(o)
        while p is not None and not pd.isna(p):
            ancestors.add(int(p))
            p = parent.get(int(p))
    launch = cpu[cpu["op_id"].isin(modelled - ancestors)]
    t["gpu_activity"] = pd.DataFrame({
        "ts_ns": launch["ts_ns"].to_numpy() + 1000, "dur_ns": np.maximum(launch["dur_ns"].to_numpy() // 10, 1),
        "name": "some_kernel", "kind": "kernel", "device": 0, "stream": 7, "op_id": launch["op_id"].to_numpy(),
    })
    t["runtime"] = t["runtime"].iloc[0:0]
    t["manifest"] = {"environment": {"gpu": "NVIDIA H200"}}
    t["ceiling"] = datasheet("NVIDIA H200")
    t["bound_options"] = ROOF
    r = run_passes(AnalysisInput.of(t))
    ph = r["phases"][r["phases"]["phase"] != "outside"]
    assert set(ph["phase"]) == {"prefill", "decode"}
    for _, row in ph.iterrows():
        assert sum(int(row[c]) for c in bound.TIME_COLUMNS.values()) == int(row["time_ns"])
        assert row["kernels_unmodelled"] == 0 and row["kernels_modelled"] > 0
    # tiny fp32 shapes are far below the H200's ridge: all memory-bound
    assert ph["compute_bound_ns"].sum() == 0 and ph["memory_bound_ns"].sum() > 0
    cfg = {"model_type": "llama", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
           "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "torch_dtype": "float32"}
    d = decode_check(shape_from_config(cfg), r["step_bound"])
    assert len(d) > 0
    # GEMMs + attention are the config's FLOPs; elementwise ops add a few percent on this tiny model
    assert d["flops_ratio"].between(1.0, 1.1).all()
