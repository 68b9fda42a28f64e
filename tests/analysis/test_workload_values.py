"""Nested engine annotations, workload kinds and their steps, on tiny hand-built traces (values worked by hand)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
from helpers import op_tables

from tracekit.analysis import requests, steps, workload

US = 1000


_tables = op_tables


def _ann(ts: int, dur: int, name: str) -> dict[str, Any]:
    return {"ts_ns": ts * US, "dur_ns": dur * US, "name": name, "cat": "user_annotation"}


def _op(i: int, ts: int, name: str, dur: int = 5, dims: Any = None) -> dict[str, Any]:
    return {"op_id": i, "ts_ns": ts * US, "dur_ns": dur * US, "name": name, "cat": "cpu_op",
            "input_dims": json.dumps(dims) if dims is not None else None}


def _run(ops: list[dict[str, Any]], ann: list[dict[str, Any]]) -> tuple[Any, pd.DataFrame, pd.DataFrame, list[str]]:
    t = _tables(ops, ann)
    d = steps.detect(t["cpu_ops"], t["annotations"], t["runtime"], t["gpu_activity"])
    req, st, _, warn = requests.build(d.steps, d.kernel_steps, t["annotations"], t["cpu_ops"],
                                      workload=d.workload.as_dict())
    return d, req, st, d.warnings + warn


EXTEND_OUTER = ("execute_15360_context_15(sq15360sk15360sqsq15728640sqsk15728640)"
                "_generation_0(sq0sk0sqsq0sqsk0)")
DECODE_OUTER = "execute_15_context_0(sq0sk0sqsq0sqsk0)_generation_15(sq15sk15375sqsq15sqsk15375)"


def test_sglang_step_inside_a_detailed_outer_one_is_one_step() -> None:
    # GIVEN the SGLang trace's shape: a profiling patch's execute_… around SGLang's own step[…], for a
    # prefill of 15 prompts of 1,024 tokens and one decode step of the same 15 sequences
    ann = [_ann(0, 100, EXTEND_OUTER), _ann(2, 96, "step[EXTEND bs=15 toks=15360]"),
           _ann(200, 50, DECODE_OUTER), _ann(201, 48, "step[DECODE bs=15]")]
    d, req, _st, warn = _run([], ann)
    # THEN one step per pass, with the outer one's window and sums, the inner one's engine
    s = d.steps
    assert s["kind"].tolist() == ["prefill", "decode"]
    assert s["batch"].tolist() == [15, 15] and s["tokens"].tolist() == [15360, 15]
    assert s["q_len"].tolist() == [1024, 1] and s["kv_len"].tolist() == [1024, 1025]
    assert s["cpu_start_ns"].tolist() == [0, 200 * US] and s["cpu_end_ns"].tolist() == [100 * US, 250 * US]
    assert set(s["source"]) == {"sglang"}
    assert json.loads(s["seq_stats"][0])["context"]["sqsq"] == 15 * 1024 ** 2
    # AND one request: 15 sequences of 1,024 tokens, 2 tokens out each
    assert len(req) == 1 and (req["batch"][0], req["input_tokens"][0], req["output_tokens"][0]) == (15, 1024, 2)
    assert any("nested engine annotations" in w for w in warn)


def test_an_engine_annotation_holding_two_passes_is_not_a_step() -> None:
    # GIVEN an execute_… around two disjoint step[DECODE] spans
    ann = [_ann(0, 100, DECODE_OUTER), _ann(1, 40, "step[DECODE bs=15]"), _ann(50, 40, "step[DECODE bs=15]")]
    d = _run([], ann)[0]
    # THEN the two inner ones are the steps
    assert d.steps["cpu_start_ns"].tolist() == [1 * US, 50 * US]
    assert any("hold several others" in w for w in d.warnings)


def test_nested_annotations_that_disagree_keep_the_detailed_kind_and_say_so() -> None:
    ann = [_ann(0, 100, DECODE_OUTER), _ann(1, 90, "step[EXTEND bs=15 toks=15360]")]
    d = _run([], ann)[0]
    assert d.steps["kind"].tolist() == ["decode"]
    assert any("disagree on its kind" in w for w in d.warnings)


def test_profiler_steps_of_a_training_loop_are_iterations() -> None:
    # GIVEN two ProfilerStep windows, each a forward (an embedding [4, 128]) and a backward
    ops, ann = [], []
    for k in range(2):
        t0 = 1000 * k
        ann.append(_ann(t0, 900, f"ProfilerStep#{k + 5}"))
        ops += [_op(3 * k, t0 + 10, "aten::embedding", dims=[[32000, 64], [4, 128]]),
                _op(3 * k + 1, t0 + 400, "autograd::engine::evaluate_function: MmBackward0"),
                _op(3 * k + 2, t0 + 800, "Optimizer.step#AdamW.step")]
    d, req, st, warn = _run(ops, ann)
    assert d.workload.kind == "iterations"
    assert d.steps["kind"].tolist() == ["iteration"] * 2
    assert d.steps["cpu_start_ns"].tolist() == [0, 1000 * US] and d.steps["cpu_end_ns"].tolist() == [900 * US, 1900 * US]
    assert req.empty and st["request_id"].isna().all() and not any("outside every request" in w for w in warn)


def test_profiler_steps_of_generation_stay_llm() -> None:
    # GIVEN ProfilerStep windows around a prefill and a decode (no backward): an LLM with a scheduled profiler
    ann = [_ann(0, 900, "ProfilerStep#0"), _ann(1000, 900, "ProfilerStep#1")]
    ops = [_op(0, 10, "aten::embedding", dims=[[32000, 64], [1, 7]]),
           _op(1, 1010, "aten::embedding", dims=[[32000, 64], [1, 1]])]
    d = _run(ops, ann)[0]
    assert d.workload.kind == "llm" and d.steps["kind"].tolist() == ["prefill", "decode"]


def test_a_denoising_loop_is_cut_where_its_body_starts_again() -> None:
    # GIVEN a user range naming a denoising loop: 3 repeats of a body of 16 top-level ops, the last one's
    # tail two ops shorter (a scheduler's last step), and a child op inside the first op of each body
    body = [f"aten::op{i}" for i in range(16)] + ["aten::tail_a", "aten::tail_b"]
    ops: list[dict[str, Any]] = []
    t = 10
    starts = []
    for rep in range(3):
        starts.append(t)
        for j, name in enumerate(body if rep < 2 else body[:-2]):
            ops.append(_op(len(ops), t, name, dur=4))
            if j == 0:
                ops.append(_op(len(ops), t + 1, "aten::child", dur=1))
            t += 5
    ann = [_ann(0, t + 10, "denoise_loop")]
    d, req, st, _warn = _run(ops, ann)
    assert d.workload.kind == "diffusion"
    s = d.steps
    assert s["kind"].tolist() == ["denoise"] * 3 and set(s["source"]) == {"loop"}
    assert s["cpu_start_ns"].tolist() == [x * US for x in starts]
    assert s["cpu_end_ns"].tolist() == [starts[1] * US, starts[2] * US, (t + 10) * US]
    assert len(req) == 1 and req["e2e_ns"][0] == (t + 10) * US and pd.isna(req["ttft_ns"][0])
    assert st["request_id"].tolist() == [0, 0, 0]


def test_loop_starts_needs_two_repeats() -> None:
    names = ["a", "b", "c", "d"] * 3
    assert workload.loop_starts(names, head=4) == [0, 4, 8]
    assert workload.loop_starts(["a", "b", "c", "d", "e"], head=4) == []


def test_nothing_known_is_other() -> None:
    w = workload.decide(pd.DataFrame(columns=["ts_ns", "dur_ns", "name", "cat"]), pd.DataFrame(), None, False)
    assert w.kind == "other"


def _emb(i: int, ts: int, q: int) -> dict[str, Any]:
    return _op(i, ts, "aten::embedding", dims=[[32000, 64], [1, q]])


def test_user_ranges_around_hand_written_requests() -> None:
    # GIVEN record_function("request_i") around a prefill and 3 decodes each, all inside a range "bench"
    ann = [_ann(0, 2000, "bench"), _ann(10, 900, "request_0"), _ann(1010, 900, "request_1")]
    ops = []
    for r, t0 in enumerate((10, 1010)):
        ops += [_emb(4 * r, t0 + 10, 48), *[_emb(4 * r + k, t0 + 10 + 200 * k, 1) for k in (1, 2, 3)]]
    _d, req, st, warn = _run(ops, ann)
    # THEN each user range is its request (the innermost holding one prefill), every step inside one
    assert req["name"].tolist() == ["request_0", "request_1"] and set(req["source"]) == {"user_annotation"}
    assert req["input_tokens"].tolist() == [48, 48] and req["output_tokens"].tolist() == [4, 4]
    assert st["request_id"].tolist() == [0] * 4 + [1] * 4
    assert not any("overlap" in w or "holds" in w for w in warn)


def test_ambiguous_user_ranges_are_reported() -> None:
    # GIVEN two ranges crossing each other around one prefill each, and a loop range over two prefills
    ann = [_ann(0, 450, "req_a"), _ann(400, 600, "req_b"), _ann(2000, 1000, "loop")]
    ops = [_emb(0, 10, 8), _emb(1, 500, 8), _emb(2, 2010, 8), _emb(3, 2500, 8)]
    warn = _run(ops, ann)[3]
    assert any("overlap without one holding the other" in w and "'req_a' and 'req_b'" in w for w in warn)
    assert any("user range 'loop' holds 2 prefills" in w for w in warn)
