"""The cost of one request inside a batch (analysis/cost.py): the split rule and its invariant."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tracekit.analysis import cost
from tracekit.analysis.cost import cost_pass
from tracekit.model.schema import empty, from_pandas
from tracekit.model.stepnames import SeqLabel, batch_label, format_step

# TinyLlama-1.1B's config (collectors/presets.py), as the recorder writes it into run.json.
CONFIG = {"vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
          "num_attention_heads": 32, "num_key_value_heads": 4}
MANIFEST = {"model": {"config": CONFIG, "parameters": 1_100_048_384}, "workload": {"dtype": "fp16"}}
MODEL = cost.CostModel.from_manifest(MANIFEST)
CLASSES = cost.TIME_CLASSES


def test_split_int_is_exact_for_awkward_weights() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 9))
        total = int(rng.integers(0, 10**12))
        w = rng.random(n) * rng.choice([1e-9, 1.0, 1e9])
        parts = cost.split_int(total, w)
        assert parts.dtype == np.int64 and int(parts.sum()) == total and (parts >= 0).all()
    assert cost.split_int(7, np.zeros(3)).tolist() == [3, 2, 2]  # no weight at all: evenly


def test_weights_follow_tokens_flops_and_kv_reads() -> None:
    assert MODEL is not None
    # A 512-token prefill chunk beside two decodes, one with a long context.
    w = cost.weights([512, 1, 1], [512, 2000, 10], MODEL)
    for arr in (w.tokens, w.flops, w.bytes):
        assert math.isclose(float(arr.sum()), 1.0)
    assert w.tokens.tolist() == pytest.approx([512 / 514, 1 / 514, 1 / 514])
    assert w.flops[0] > 0.99  # the prefill does nearly all the arithmetic
    assert w.bytes[1] > w.bytes[2]  # the long context reads more KV cache ...
    assert w.bytes[0] > w.bytes[1]  # ... but the prefill's tokens carry most of the one weight read
    # Without a model config every resource goes by query tokens.
    plain = cost.weights([512, 1, 1], [512, 2000, 10], None)
    assert plain.flops.tolist() == plain.bytes.tolist() == plain.tokens.tolist()


def test_a_steps_shares_sum_to_it_exactly() -> None:
    step = {"time_ns": 30_000_001, "compute_bound_ns": 9_000_007, "memory_bound_ns": 7_333_333,
            "latency_bound_ns": 1_000_003, "other_ns": 555_557, "comm_ns": 0, "memcpy_ns": 111_111,
            "idle_ns": 12_000_000 - 10, "flops": 3.3e12, "bytes": 2.7e9, "energy_j": 4.123}
    # (latency + memory + ... + idle) == time_ns on one device
    step["idle_ns"] = step["time_ns"] - sum(step[c] for c in CLASSES if c != "idle_ns")
    parts = cost.split_step(step, [37, 1, 1, 1, 250], [37, 900, 14, 3000, 1200], MODEL)
    for c in (*CLASSES, "step_time_ns"):
        assert parts[c].dtype == np.int64
        assert int(parts[c].sum()) == (step[c] if c != "step_time_ns" else step["time_ns"]), c
    assert int(parts["gpu_time_ns"].sum()) == step["time_ns"] - step["idle_ns"]
    for c in ("flops", "bytes", "energy_j"):
        assert math.fsum(parts[c]) == pytest.approx(step[c], rel=1e-12)
    assert float(parts["share"].sum()) == pytest.approx(1.0)
    # On one device the classes of a request add up to its share of the step's wall time.
    per_req = sum(parts[c] for c in CLASSES)
    assert per_req.tolist() == parts["step_time_ns"].tolist()


def test_missing_classes_split_the_window_by_tokens_and_leave_nulls() -> None:
    parts = cost.split_step({"time_ns": 1001}, [3, 1], [3, 9], MODEL)
    assert parts["step_time_ns"].tolist() == [751, 250]
    assert np.isnan(parts["gpu_time_ns"]).all() and np.isnan(parts["flops"]).all()


# --- the pass on tables ----------------------------------------------------------------


def _tables(with_bound: bool = True) -> dict[str, object]:
    """Three steps: a mixed batch step (3 requests), a decode batch step (2), a one-request decode step."""
    ms = 1_000_000
    seqs = [
        [SeqLabel(0, "d", 1, 130), SeqLabel(1, "f", 64, 64), SeqLabel(2, "p", 200, 200)],
        [SeqLabel(0, "d", 1, 131), SeqLabel(1, "d", 1, 65)],
        [SeqLabel(2, "f", 10, 210)],
    ]
    labels = [batch_label(i, s) for i, s in enumerate(seqs)]
    t0 = 10_000 * ms
    steps = pd.DataFrame({
        "step_id": [0, 1, 2], "request_id": [lab.request_id for lab in labels], "kind": [lab.kind for lab in labels],
        "batch": [lab.batch for lab in labels], "q_len": [lab.q_len for lab in labels],
        "kv_len": [lab.kv_len for lab in labels], "tokens": [lab.tokens for lab in labels],
        "source": "tracekit", "cpu_start_ns": [t0, t0 + 30 * ms, t0 + 55 * ms],
        "cpu_end_ns": [t0 + 29 * ms, t0 + 54 * ms, t0 + 70 * ms], "captured": True,
    })
    rows = [{"step_id": i, "request_id": q.request_id, "phase": q.phase, "q_len": q.q_len, "kv_len": q.kv_len}
            for i, s in enumerate(seqs) for q in s]
    t: dict[str, object] = {
        "steps": steps,
        "requests": pd.DataFrame({"request_id": [0, 1, 2], "name": ["a", "b", "c"], "ttft_ns": [1, 2, 3]}),
        "step_requests": from_pandas("step_requests", pd.DataFrame(rows)),
        "manifest": MANIFEST,
        "annotations": pd.DataFrame(columns=["ts_ns", "dur_ns", "name", "cat"]),
        "cpu_ops": pd.DataFrame(),
        # NVML's energy counter, moving every 10 ms, over the whole span (J).
        "counters": pd.DataFrame({"ts_ns": [t0 - 10 * ms + k * 10 * ms for k in range(10)], "metric": "energy",
                                  "value": [100.0 + 2.5 * k for k in range(10)], "device": 0}),
    }
    if with_bound:
        bound = []
        for i, (s, e) in enumerate(zip(steps["cpu_start_ns"], steps["cpu_end_ns"], strict=True)):
            time_ns = int(e - s)
            row = {"step_id": i, "time_ns": time_ns, "compute_bound_ns": 3 * ms + i, "memory_bound_ns": 5 * ms + 7,
                   "latency_bound_ns": 1 * ms, "other_ns": 123_457, "comm_ns": 0, "memcpy_ns": 50_001,
                   "flops": 1e12 / (i + 1), "bytes": 2.2e9}
            row["idle_ns"] = time_ns - sum(v for k, v in row.items() if k.endswith("_ns") and k != "time_ns")
            bound.append(row)
        t["step_bound"] = pd.DataFrame(bound)
    return t


def _cost(t: dict[str, Any]) -> dict[str, Any]:
    """The cost pass as the pipeline calls it: a raw table the run lacks is an empty one."""
    raw = {n: t[n] if n in t else empty(n) for n in ("annotations", "cpu_ops", "counters", "gpu_activity")}
    return cost_pass(t["steps"], t["requests"], t.get("step_requests"), raw["annotations"], raw["cpu_ops"],
                     t.get("step_bound"), raw["counters"], raw["gpu_activity"], manifest=t.get("manifest") or {})


def test_the_pass_adds_each_requests_cost_and_its_shares_sum_to_every_step() -> None:
    t = _tables()
    out = _cost(t)
    sr, req, sb = out["step_requests"], out["requests"], t["step_bound"]
    assert isinstance(sb, pd.DataFrame)
    assert len(sr) == 6
    for c in (*CLASSES, "flops", "bytes"):
        got = sr.groupby("step_id")[c].sum()
        want = sb.set_index("step_id")[c]
        if c in ("flops", "bytes"):
            assert np.allclose(got.to_numpy(dtype=float), want.to_numpy(dtype=float), rtol=1e-12)
        else:
            assert got.astype("int64").tolist() == want.astype("int64").tolist(), c
    assert sr.groupby("step_id")["step_time_ns"].sum().astype("int64").tolist() == sb["time_ns"].tolist()
    e = sr.groupby("step_id")["energy_j"].sum()
    assert (e > 0).all()
    # The requests' sums are their rows' sums; the one-request step is wholly request 2's.
    by = req.set_index("request_id")
    assert by["steps"].tolist() == [2, 2, 2]
    for c in ("step_time_ns", "gpu_time_ns", "compute_bound_ns", "memory_bound_ns", "idle_ns"):
        assert by[c].astype("int64").tolist() == sr.groupby("request_id")[c].sum().astype("int64").tolist()
    last = sr[sr["step_id"] == 2]
    assert last["share"].tolist() == [1.0] and int(last["step_time_ns"].iloc[0]) == int(sb["time_ns"].iloc[2])
    # The 200-token prompt chunk gets most of step 0's compute; the decodes little of it.
    s0 = sr[sr["step_id"] == 0].set_index("request_id")
    assert s0.loc[2, "compute_bound_ns"] > 10 * s0.loc[0, "compute_bound_ns"]
    # The table conforms to its schema.
    from_pandas("step_requests", sr)
    assert out["warnings"] == []


def test_without_the_bound_pass_the_windows_are_split_and_gpu_columns_stay_null() -> None:
    t = _tables(with_bound=False)
    t["manifest"] = {}
    out = _cost(t)
    sr = out["step_requests"]
    windows = pd.Series([29_000_000, 24_000_000, 15_000_000], index=[0, 1, 2])
    assert sr.groupby("step_id")["step_time_ns"].sum().astype("int64").tolist() == windows.tolist()
    assert sr["gpu_time_ns"].isna().all() and sr["flops"].isna().all()
    assert any("split by query tokens" in w for w in out["warnings"])


def test_engine_steps_plug_in_through_annotations_or_one_request_steps() -> None:
    """Per-sequence metadata from the trace's batch annotations, and --batch N style one-request steps."""
    t = _tables(with_bound=False)
    steps = t["steps"]
    assert isinstance(steps, pd.DataFrame)
    names = [format_step(batch_label(0, [SeqLabel(0, "d", 1, 130), SeqLabel(1, "f", 64, 64),
                                         SeqLabel(2, "p", 200, 200)]))]
    seqs, source = cost.sequences(steps.iloc[:1], None,
                                  pd.DataFrame({"ts_ns": [1], "dur_ns": [5], "name": names, "cat": "user_annotation"}))
    assert source == "annotations" and seqs["q_len"].tolist() == [1, 64, 200]
    # A one-request step of batch 4 (record --batch 4): the request is the whole batch.
    one = pd.DataFrame({"step_id": [5], "request_id": [3], "kind": ["decode"], "batch": [4], "q_len": [1],
                        "kv_len": [40], "cpu_start_ns": [0], "cpu_end_ns": [10]})
    seqs, source = cost.sequences(one)
    assert source == "steps" and seqs[["request_id", "q_len", "kv_len"]].values.tolist() == [[3, 4, 160]]
    parts = cost.split(one, seqs, cost.step_costs(one, None, None), MODEL)
    assert parts["share"].tolist() == [1.0] and parts["step_time_ns"].tolist() == [10]


@pytest.mark.slow
def test_a_real_h200_run_gets_each_requests_cost_from_its_bound_and_nvml(tmp_path) -> None:
    """tests/fixtures/record_gpu_smoke (tinyllama fp16 on the H200, 3 requests, the trace keeps steps 0-2)."""
    import shutil

    from helpers import FIXTURES

    from tracekit.app.analyze import analyze

    src = FIXTURES / "record_gpu_smoke"
    if not src.is_dir():
        pytest.skip("GPU record fixture not committed")
    shutil.copytree(src, tmp_path / "run")
    run, _ = analyze(tmp_path / "run")
    sr = run.read_df("step_requests").set_index("step_id")
    sb = pd.read_parquet(run.table_path("step_bound")).set_index("step_id")
    steps = run.read_df("steps").set_index("step_id")
    assert len(sr) == len(steps) == 24 and (sr["share"] == 1.0).all()
    for c in ("compute_bound_ns", "memory_bound_ns", "idle_ns", "other_ns"):
        assert sr.loc[sb.index, c].astype("int64").tolist() == sb[c].astype("int64").tolist()
    assert sr.loc[sb.index, "gpu_time_ns"].astype("int64").tolist() == sb["gpu_busy_ns"].astype("int64").tolist()
    assert sr.loc[sb.index, "flops"].tolist() == pytest.approx(sb["flops"].tolist())
    # Every step has NVML energy (the counters cover the run); GPU columns only where kernels were captured.
    assert sr["energy_j"].notna().all() and (sr["energy_j"] > 0).all()
    assert sr.drop(index=sb.index)["gpu_time_ns"].isna().all()
    req = run.read_df("requests").set_index("request_id")
    assert req["energy_j"].tolist() == pytest.approx(sr.groupby("request_id")["energy_j"].sum().tolist())
    # Request 0 has 5 of its 8 steps outside the capture: no partial GPU time is passed off as its whole.
    assert req["gpu_time_ns"].isna().all()
    window = (steps["cpu_end_ns"].astype("Int64") - steps["cpu_start_ns"].astype("Int64"))
    assert int(req["step_time_ns"].sum()) == int(window.sum())
