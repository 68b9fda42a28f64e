"""Analysis passes on synthetic tables built in code: every step source and edge case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tracekit.analysis import intervals, timeline
from tracekit.analysis.inputs import AnalysisInput
from tracekit.analysis.pipeline import run_passes
from tracekit.cli import main
from tracekit.model import schema
from tracekit.model.stepnames import RequestLabel, StepLabel, format_request, format_step
from tracekit.store.rundir import RunDir

US = 1000


class Trace:
    """Builds raw tables: ops, runtime calls, kernels (linked by correlation), annotations."""

    def __init__(self) -> None:
        self.ops: list[dict[str, Any]] = []
        self.rt: list[dict[str, Any]] = []
        self.gpu: list[dict[str, Any]] = []
        self.ann: list[dict[str, Any]] = []
        self.corr = 0

    def op(self, name: str, ts: int, dur: int = 5 * US, dims: Any = None) -> int:
        oid = len(self.ops)
        self.ops.append({"op_id": oid, "ts_ns": ts, "dur_ns": dur, "name": name, "cat": "cpu_op",
                         "input_dims": json.dumps(dims) if dims is not None else None})
        return oid

    def launch(self, ts: int, k_ts: int, k_dur: int, name: str = "gemm", kind: str = "kernel",
               api: str = "cudaLaunchKernel", device: int = 0, n: int = 1) -> None:
        self.corr += 1
        self.rt.append({"ts_ns": ts, "dur_ns": 2 * US, "name": api, "correlation": self.corr})
        for i in range(n):
            self.gpu.append({"ts_ns": k_ts + i * k_dur, "dur_ns": k_dur, "name": name, "kind": kind,
                             "device": device, "stream": 7, "correlation": self.corr})

    def annotate(self, name: str, ts: int, dur: int, cat: str = "user_annotation") -> None:
        self.ann.append({"ts_ns": ts, "dur_ns": dur, "name": name, "cat": cat})

    def forward(self, ts: int, batch: int, q: int, kv: int, kernel_us: int = 100) -> None:
        self.op("aten::embedding", ts, dims=[[32000, 64], [batch, q]])
        self.op("aten::scaled_dot_product_attention", ts + 20 * US,
                dims=[[batch, 4, q, 16], [batch, 2, kv, 16], [batch, 2, kv, 16]])
        self.op("aten::linear", ts + 28 * US, 10 * US)  # the lm_head; launches the kernel below
        self.launch(ts + 30 * US, ts + 40 * US, kernel_us * US)

    def tables(self) -> dict[str, pa.Table]:
        def cols(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, list[Any]]:
            return {k: [r.get(k) for r in rows] for k in keys}

        return {
            "cpu_ops": schema.from_columns("cpu_ops", cols(self.ops, ("op_id", "ts_ns", "dur_ns", "name", "cat",
                                                                      "input_dims"))),
            "runtime": schema.from_columns("runtime", cols(self.rt, ("ts_ns", "dur_ns", "name", "correlation"))),
            "gpu_activity": schema.from_columns("gpu_activity", cols(
                self.gpu, ("ts_ns", "dur_ns", "name", "kind", "device", "stream", "correlation"))),
            "annotations": schema.from_columns("annotations", cols(self.ann, ("ts_ns", "dur_ns", "name", "cat"))),
        }


def generate(t: Trace, start: int, batch: int, q: int, new: int, gap: int = 1000 * US) -> int:
    for i in range(new):
        t.forward(start + i * gap, batch, q if i == 0 else 1, q + i)
    return start + new * gap


# --- interval arithmetic -------------------------------------------------------------


def test_union_merges_overlaps_once() -> None:
    u = intervals.union([0, 5, 20, 21], [10, 12, 25, 22])
    assert u.tolist() == [[0, 12], [20, 25]]
    assert intervals.length(u) == 17
    assert intervals.length(intervals.clip(u, 8, 21)) == 5


def test_device_split_counts_overlapping_streams_once_and_separates_categories() -> None:
    import pandas as pd

    g = pd.DataFrame({"ts_ns": [0, 50, 200, 400], "dur_ns": [100, 100, 50, 100], "device": [0, 0, 0, 1],
                      "kind": ["kernel", "kernel", "memcpy", "kernel"],
                      "name": ["gemm", "ncclDevKernel_AllReduce", "Memcpy HtoD", "gemm"]})
    s = timeline.device_split(g)
    assert s == {"busy": 150 + 50 + 100, "compute": 100 + 100, "memcpy": 50, "comm": 100}


# --- model ops: plain generate -----------------------------------------------------------


def test_model_ops_steps_and_gpu_assignment() -> None:
    t = Trace()
    end = generate(t, 0, batch=2, q=24, new=4)
    t.launch(end + 5000 * US, end + 5000 * US, 10 * US, name="stray")  # after the run: outside every step
    out = run_passes(AnalysisInput.of(t.tables()))
    st = out["steps"]
    assert list(st["kind"]) == ["prefill", "decode", "decode", "decode"]
    assert list(st["q_len"]) == [24, 1, 1, 1]
    assert list(st["kv_len"]) == [24, 25, 26, 27]
    assert list(st["gpu_busy_ns"]) == [100 * US] * 4
    assert list(st["gpu_start_ns"]) == [40 * US + i * 1000 * US for i in range(4)]
    ks = out["kernel_steps"]
    assert len(ks) == 5 and ks["step_id"].isna().sum() == 1  # every kernel: one step or outside
    r = out["requests"].iloc[0]
    # first token: end of the prefill's GPU work; request starts at the prefill's host start
    assert r["ttft_ns"] == 140 * US
    assert r["e2e_ns"] == 3 * 1000 * US + 140 * US
    assert r["tpot_ns"] == pytest.approx(1000 * US)
    assert r["itl_p50_ns"] == pytest.approx(1000 * US)
    assert r["prefill_gpu_ns_per_token"] == pytest.approx(100 * US / 48)
    assert r["decode_gpu_ns_per_token"] == pytest.approx(100 * US / 2)
    ph = out["phases"]
    run_decode = ph[(ph["request_id"].isna()) & (ph["phase"] == "decode")].iloc[0]
    assert run_decode["steps"] == 3 and run_decode["gpu_busy_ns"] == 300 * US
    assert run_decode["idle_ns"] == run_decode["time_ns"] - 300 * US
    outside = ph[ph["phase"] == "outside"].iloc[0]
    assert outside["gpu_busy_ns"] == 10 * US


def test_compiled_decode_one_graph_launch_per_step() -> None:
    t = Trace()
    t.forward(0, batch=1, q=16, kv=16)  # eager prefill
    for i in range(1, 4):  # decode: a CUDA graph replay, no aten ops
        t.launch(i * 1000 * US, i * 1000 * US + 10 * US, 20 * US, api="cudaGraphLaunch", n=5)
    out = run_passes(AnalysisInput.of(t.tables()))
    st = out["steps"]
    assert list(st["source"]) == ["model_ops"] + ["cuda_graph"] * 3
    assert list(st["kind"]) == ["prefill", "decode", "decode", "decode"]
    assert list(st["batch"]) == [1, 1, 1, 1]
    assert list(st["kv_len"]) == [16, 17, 18, 19]
    assert list(st["gpu_busy_ns"])[1:] == [100 * US] * 3
    assert out["requests"].iloc[0]["output_tokens"] == 4


def test_piecewise_graph_after_embedding_is_the_same_step() -> None:
    t = Trace()
    t.op("aten::embedding", 0, dims=[[32000, 64], [1, 1]])
    t.launch(10 * US, 20 * US, 50 * US, api="cudaGraphLaunch")
    t.op("aten::embedding", 1000 * US, dims=[[32000, 64], [1, 1]])
    t.launch(1010 * US, 1020 * US, 50 * US, api="cudaGraphLaunch")
    st = run_passes(AnalysisInput.of(t.tables()))["steps"]
    assert len(st) == 2 and set(st["source"]) == {"model_ops"}


# --- annotation sources --------------------------------------------------------------------


def test_tracekit_annotations_decide_and_contradictions_are_reported() -> None:
    t = Trace()
    t.annotate(format_request(RequestLabel(0, "chat", 1, 5, 2)), 0, 2000 * US)
    t.annotate(format_step(StepLabel(0, 0, "prefill", 1, 5, 5)), 0, 900 * US)
    t.forward(0, 1, 5, 5)
    # the annotation says decode, the embedding inside says q_len 5: reported, annotation kept
    t.annotate(format_step(StepLabel(1, 0, "decode", 1, 1, 6)), 1000 * US, 900 * US)
    t.forward(1000 * US, 1, 5, 6)
    out = run_passes(AnalysisInput.of(t.tables()))
    st = out["steps"]
    assert list(st["source"]) == ["tracekit", "tracekit"]
    assert list(st["kind"]) == ["prefill", "decode"]
    assert any("step 1" in w and "q_len=1" in w and "q_len=5" in w for w in out["warnings"])
    r = out["requests"].iloc[0]
    assert (r["name"], r["source"], r["input_tokens"], r["output_tokens"]) == ("chat", "tracekit", 5, 2)


def test_overlapping_annotated_steps_are_reported_and_cut() -> None:
    t = Trace()
    t.annotate(format_step(StepLabel(0, 0, "prefill", 1, 5, 5)), 0, 1500 * US)
    t.annotate(format_step(StepLabel(1, 0, "decode", 1, 1, 6)), 1000 * US, 900 * US)
    t.launch(1200 * US, 1300 * US, 10 * US)
    out = run_passes(AnalysisInput.of(t.tables()))
    assert any("overlap" in w for w in out["warnings"])
    ks = out["kernel_steps"]
    assert ks["step_id"].tolist() == [1]  # counted once, in the later step


@pytest.mark.parametrize(
    ("name", "kind", "batch", "q_len", "tokens", "source"),
    [
        ("execute_7_context_2(300)_generation_6(6)", "mixed", 8, 150, 306, "vllm"),
        ("execute_3_context_1(128)_generation_0(0)", "prefill", 1, 128, 128, "vllm"),
        ("execute_4_context_0(0)_generation_5(5)", "decode", 5, 1, 5, "vllm"),
        ("execute_new_0_cached_4", "decode", 4, 1, None, "vllm"),
        ("execute_new_2_cached_3", "mixed", 5, None, None, "vllm"),
        ("step[DECODE bs=8]", "decode", 8, 1, 8, "sglang"),
        ("step[EXTEND bs=2]", "prefill", 2, None, None, "sglang"),
        ("step[MIXED bs=3 extra=1]", "mixed", 3, None, None, "sglang"),
    ],
)
def test_engine_annotations(name: str, kind: str, batch: int, q_len: int | None, tokens: int | None,
                            source: str) -> None:
    t = Trace()
    t.annotate(name, 0, 500 * US)
    t.launch(10 * US, 20 * US, 30 * US)
    st = run_passes(AnalysisInput.of(t.tables()))["steps"]
    assert len(st) == 1
    r = st.iloc[0]
    assert (r["kind"], r["batch"], r["source"]) == (kind, batch, source)
    assert (None if r.isna()["q_len"] else r["q_len"]) == q_len
    assert (None if r.isna()["tokens"] else r["tokens"]) == tokens
    assert r["gpu_busy_ns"] == 30 * US


def test_no_steps_still_gives_the_gpu_timeline() -> None:
    t = Trace()
    t.launch(0, 10 * US, 50 * US, name="ncclDevKernel_AllReduce")
    t.launch(100 * US, 200 * US, 20 * US, kind="memcpy", name="Memcpy DtoH")
    out = run_passes(AnalysisInput.of(t.tables()))
    assert out["steps"].empty and out["requests"].empty
    assert any("no model steps found" in w for w in out["warnings"])
    ph = out["phases"]
    assert list(ph["phase"]) == ["outside"]
    assert (ph.iloc[0]["gpu_busy_ns"], ph.iloc[0]["comm_ns"], ph.iloc[0]["memcpy_ns"]) == (70 * US, 50 * US, 20 * US)
    tl = out["gpu_timeline"].to_pylist()[0]
    assert tl["outside_steps"] == 2 and tl["idle_ns"] == tl["span_ns"] - 70 * US


# --- requests from idle gaps (requests.GAP_FACTOR / GAP_FLOOR_NS) ------------------------------

MS = 1000 * US


def decode_burst(t: Trace, start: int, n: int, kv0: int, every: int = 1 * MS) -> int:
    """n decode passes (q_len 1), one every ``every`` ns; returns the time after the last."""
    for i in range(n):
        t.forward(start + i * every, 1, 1, kv0 + i)
    return start + n * every


def test_decode_only_bursts_split_at_the_long_gap() -> None:
    # GIVEN a decode-only trace (no prefill, no annotation): 4 steps, a 200 ms idle gap, 3 steps
    t = Trace()
    decode_burst(t, 0, 4, 10)
    decode_burst(t, 4 * MS + 200 * MS, 3, 50)
    tables = t.tables()
    before = {k: v.to_pydict() for k, v in tables.items()}
    # WHEN analysed
    out = run_passes(AnalysisInput.of(tables))
    # THEN two requests from gaps, holding 4 and 3 steps; the inputs untouched
    req, st = out["requests"], out["steps"].sort_values("cpu_start_ns")
    assert list(req["source"]) == ["gap", "gap"]
    assert list(st["request_id"]) == [0] * 4 + [1] * 3
    assert list(req["output_tokens"]) == [4, 3]
    assert req["end_ns"].iloc[0] < req["start_ns"].iloc[1]
    assert req["e2e_ns"].iloc[0] < 10 * MS  # the idle gap is in neither request
    assert {k: v.to_pydict() for k, v in tables.items()} == before


def test_evenly_spaced_decode_steps_are_one_request() -> None:
    t = Trace()
    decode_burst(t, 0, 12, 10, every=30 * MS)  # slow steps, even gaps (~29.9 ms > the 20 ms floor)
    out = run_passes(AnalysisInput.of(t.tables()))
    req = out["requests"]
    assert list(req["source"]) == ["gap"] and int(req["output_tokens"].iloc[0]) == 12
    assert out["steps"]["request_id"].notna().all()


def test_gap_below_the_floor_does_not_split() -> None:
    # 15 ms is > 10 x the ~0.86 ms median gap but under the 20 ms floor: one request
    t = Trace()
    decode_burst(t, 0, 4, 10)
    decode_burst(t, 4 * MS + 15 * MS, 4, 14)
    out = run_passes(AnalysisInput.of(t.tables()))
    assert list(out["requests"]["source"]) == ["gap"]


def test_long_gap_inside_a_prefill_request_splits_it_and_is_reported() -> None:
    # GIVEN a prefill + 3 decodes, a 300 ms idle gap, 3 more decodes; no annotations
    t = Trace()
    end = generate(t, 0, 1, 6, 4)
    decode_burst(t, end + 300 * MS, 3, 10)
    out = run_passes(AnalysisInput.of(t.tables()))
    req, st = out["requests"], out["steps"].sort_values("cpu_start_ns")
    # THEN the prefill request ends before the gap, the rest is a request of its own
    assert list(req["source"]) == ["prefill_boundary", "gap"]
    assert list(st["request_id"]) == [0] * 4 + [1] * 3
    assert (int(req["input_tokens"].iloc[0]), int(req["output_tokens"].iloc[0])) == (6, 4)
    assert req["end_ns"].iloc[0] < req["start_ns"].iloc[1]
    split = [w for w in out["warnings"] if "idle gap" in w]
    assert len(split) == 1 and "split there" in split[0] and "300" in split[0]


def test_trace_starting_mid_generation_keeps_the_leading_decodes_apart() -> None:
    # GIVEN 3 decode steps of a request whose prefill is not in the trace, 100 ms idle, a new request
    t = Trace()
    end = decode_burst(t, 0, 3, 40)
    generate(t, end + 100 * MS, 1, 5, 3)
    out = run_passes(AnalysisInput.of(t.tables()))
    req, st = out["requests"], out["steps"].sort_values("cpu_start_ns")
    assert list(req["source"]) == ["gap", "prefill_boundary"]
    assert list(st["request_id"]) == [0] * 3 + [1] * 3
    assert int(req["input_tokens"].iloc[1]) == 5


# --- the pipeline -------------------------------------------------------------------------


def test_run_passes_never_mutates_inputs_and_takes_only_input_tables() -> None:
    t = Trace()
    generate(t, 0, 1, 4, 3)
    tables = t.tables()
    before = {k: v.to_pydict() for k, v in tables.items()}
    inp = AnalysisInput.of(tables)
    out = run_passes(inp)
    assert {k: v.to_pydict() for k, v in tables.items()} == before
    assert "steps" not in tables and "steps" not in inp.tables and len(out["steps"]) == 3  # 1 prefill, 2 decodes
    assert isinstance(out.warnings, tuple) and out["warnings"] == list(out.warnings)
    with pytest.raises(ValueError, match="not analysis input tables"):
        AnalysisInput(tables={"steps": tables["cpu_ops"]})


def test_host_timings_from_manifest_sit_beside_trace_ones() -> None:
    t = Trace()
    generate(t, 0, 1, 4, 3)
    out = run_passes(AnalysisInput.of(dict(t.tables(), manifest={"timings": {"requests": [{"ttft_ms": 0.15, "tpot_ms": 1.0}]}})))
    r = out["requests"].iloc[0]
    assert r["host_ttft_ns"] == pytest.approx(150 * US) and r["host_tpot_ns"] == pytest.approx(1000 * US)


# --- the CLI -------------------------------------------------------------------------------


def test_analyze_run_dir_writes_tables_and_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = Trace()
    generate(t, 0, 2, 8, 3)
    run = RunDir.create(tmp_path / "run")
    for name, table in t.tables().items():
        run.write_table(name, table)
    assert main(["analyze", str(run.path)]) == 0
    text = capsys.readouterr().out
    assert "1 prefill (model_ops)" in text and "TTFT" in text
    steps = run.read_table("steps")
    assert steps.num_rows == 3 and steps.schema.equals(schema.schema("steps"))
    assert run.read_table("requests").num_rows == 1
    assert run.read_table("kernel_steps").num_rows == 3
    phases = run.read_df("phases")
    assert set(phases["phase"]) >= {"prefill", "decode"}
    assert np.isnan(phases["compute_bound_ns"]).all()  # no ceiling for this GPU: the bound split is unknown, not zero
    assert run.read_manifest()["analysis"]["steps"] == 3


def test_analyze_bad_path_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(tmp_path / "nope.json")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_complement_of_intervals_within_a_span() -> None:
    u = intervals.union([10, 30, 35], [20, 40, 50])
    assert intervals.complement(u, 0, 60).tolist() == [[0, 10], [20, 30], [50, 60]]
    assert intervals.complement(u, 10, 50).tolist() == [[20, 30]]  # touching ends leave nothing
    assert intervals.complement(intervals.EMPTY, 5, 9).tolist() == [[5, 9]]
    assert intervals.complement(u, 15, 15).size == 0
