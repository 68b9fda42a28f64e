"""Step detection on tiny hand-built traces: what it finds and what it warns about, worked out by hand."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
from helpers import op_tables

from tracekit.analysis import steps
from tracekit.model import schema
from tracekit.model.stepnames import SeqLabel, StepLabel, batch_label, format_step

US = 1000


_tables = op_tables


def _embedding(op_id: int, ts: int, index_shape: list[int]) -> dict[str, Any]:
    return {"op_id": op_id, "ts_ns": ts, "dur_ns": 5 * US, "name": "aten::embedding", "cat": "cpu_op",
            "input_dims": json.dumps([[32000, 64], index_shape])}


def _detect(ops: list[dict[str, Any]], ann: list[dict[str, Any]]) -> Any:
    t = _tables(ops, ann)
    return steps.detect(t["cpu_ops"], t["annotations"], t["runtime"], t["gpu_activity"])


def test_a_batch_step_packed_into_one_row_is_not_a_disagreement() -> None:
    # GIVEN a batch step of two requests (1 + 6 = 7 query tokens) whose embedding runs them as one
    # row [1, 7] (continuous batching), and a plain step whose annotation says q_len 5 while its
    # embedding holds [1, 7]
    batch = batch_label(0, [SeqLabel(0, "d", 1, 10), SeqLabel(2, "p", 6, 6)])
    plain = StepLabel(step_id=1, request_id=3, kind="prefill", batch=1, q_len=5, kv_len=5)
    ann = [{"ts_ns": 0, "dur_ns": 100 * US, "name": format_step(batch), "cat": "user_annotation"},
           {"ts_ns": 200 * US, "dur_ns": 100 * US, "name": format_step(plain), "cat": "user_annotation"}]
    d = _detect([_embedding(0, 10 * US, [1, 7]), _embedding(1, 210 * US, [1, 7])], ann)
    # THEN only the plain step is reported, for its q_len
    about = [w for w in d.warnings if w.startswith("step ")]
    assert len(about) == 1 and about[0].startswith("step 1 ") and "q_len=5" in about[0]
    assert list(d.steps["batch"]) == [2, 1] and list(d.steps["tokens"]) == [7, 5]


def _tables_full(ops: list[dict[str, Any]], rt: list[dict[str, Any]], gpu: list[dict[str, Any]]) -> dict[str, Any]:
    def cols(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, list[Any]]:
        return {k: [r.get(k) for r in rows] for k in keys}

    return {
        "cpu_ops": schema.from_columns("cpu_ops", cols(ops, ("op_id", "ts_ns", "dur_ns", "name", "cat", "input_dims"))),
        "annotations": schema.from_columns("annotations", cols([], ("ts_ns", "dur_ns", "name", "cat"))),
        "runtime": schema.from_columns("runtime", cols(rt, ("ts_ns", "dur_ns", "name", "correlation"))),
        "gpu_activity": schema.from_columns("gpu_activity", cols(
            gpu, ("ts_ns", "dur_ns", "name", "kind", "device", "stream", "correlation"))),
    }


def _op(i: int, name: str, ts: int, dur: int = 5, dims: Any = None) -> dict[str, Any]:
    return {"op_id": i, "ts_ns": ts * US, "dur_ns": dur * US, "name": name, "cat": "cpu_op",
            "input_dims": json.dumps(dims) if dims is not None else None}


def _rt(name: str, ts: int, corr: int | None = None) -> dict[str, Any]:
    return {"ts_ns": ts * US, "dur_ns": 5 * US, "name": name, "correlation": corr}


def _act(name: str, kind: str, ts: int, dur: int, corr: int) -> dict[str, Any]:
    return {"ts_ns": ts * US, "dur_ns": dur * US, "name": name, "kind": kind, "device": 0, "stream": 7,
            "correlation": corr}


def _cols(d: Any, *names: str) -> list[tuple]:
    return [tuple(None if pd.isna(v) else v for v in row) for row in d.steps[list(names)].itertuples(index=False)]


def test_eager_passes_from_the_embedding_with_kv_and_token_times() -> None:
    # GIVEN three eager passes at batch 2: a 5-token prefill, then two decodes; attention's key length
    # grows 5, 6, 7; each pass's lm_head (linear) launches a GEMM, then the token is copied to the host
    ops, rt, gpu = [], [], []
    for i, (t, q, kv) in enumerate([(1000, 5, 5), (2000, 1, 6), (3000, 1, 7)]):
        ops += [_op(3 * i, "aten::embedding", t, dims=[[32000, 64], [2, q]]),
                _op(3 * i + 1, "aten::scaled_dot_product_attention", t + 20,
                    dims=[[2, 4, q, 16], [2, 2, kv, 16], [2, 2, kv, 16]]),
                _op(3 * i + 2, "aten::linear", t + 30, dur=10)]
        rt += [_rt("cudaLaunchKernel", t + 35, 2 * i + 1), _rt("cudaMemcpyAsync", t + 45, 2 * i + 2)]
        gpu += [_act("gemm", "kernel", t + 50, 100 if i == 0 else 50, 2 * i + 1),
                _act("Memcpy DtoH (Device -> Pageable)", "memcpy", t + 160 if i == 0 else t + 110, 10, 2 * i + 2)]
    t = _tables_full(ops, rt, gpu)
    d = steps.detect(t["cpu_ops"], t["annotations"], t["runtime"], t["gpu_activity"])
    assert d.warnings == []
    # each pass runs to the next; the last ends with its lm_head (3030 + 10 µs)
    assert _cols(d, "step_id", "kind", "batch", "q_len", "kv_len", "tokens", "source") == [
        (0, "prefill", 2, 5, 5, 10, "model_ops"), (1, "decode", 2, 1, 6, 2, "model_ops"),
        (2, "decode", 2, 1, 7, 2, "model_ops")]
    assert _cols(d, "cpu_start_ns", "cpu_end_ns") == [(1000 * US, 2000 * US), (2000 * US, 3000 * US),
                                                     (3000 * US, 3040 * US)]
    # GPU columns: the GEMM and the token copy of each step; the last copy is launched after its window
    assert _cols(d, "gpu_start_ns", "gpu_end_ns", "gpu_busy_ns") == [
        (1050 * US, 1170 * US, 110 * US), (2050 * US, 2120 * US, 60 * US), (3050 * US, 3100 * US, 50 * US)]
    assert _cols(d, "token_ns", "graph_launches") == [(1170 * US, 0), (2120 * US, 0), (None, 0)]
    assert [None if pd.isna(s) else int(s) for s in d.kernel_steps["step_id"]] == [0, 0, 1, 1, 2, None]


def test_compiled_decode_steps_from_graph_launches() -> None:
    # GIVEN an eager 4-token prefill, then two compiled decode steps: the first replays two graphs (piecewise:
    # no token copy between them), each step's token leaves in a device-to-host copy
    ops = [_op(0, "aten::embedding", 1000, dims=[[32000, 64], [1, 4]]), _op(1, "aten::linear", 1030, dur=10)]
    rt = [_rt("cudaGraphLaunch", 2000), _rt("cudaGraphLaunch", 2010), _rt("cudaMemcpyAsync", 2100, 11),
          _rt("cudaGraphLaunch", 3000), _rt("cudaMemcpyAsync", 3100, 12)]
    gpu = [_act("Memcpy DtoH (Device -> Pageable)", "memcpy", 2150, 10, 11),
           _act("Memcpy DtoH (Device -> Pageable)", "memcpy", 3150, 10, 12)]
    t = _tables_full(ops, rt, gpu)
    d = steps.detect(t["cpu_ops"], t["annotations"], t["runtime"], t["gpu_activity"])
    assert _cols(d, "kind", "batch", "q_len", "kv_len", "tokens", "source", "graph_launches") == [
        ("prefill", 1, 4, 4, 4, "model_ops", 0), ("decode", 1, 1, 5, 1, "cuda_graph", 2),
        ("decode", 1, 1, 6, 1, "cuda_graph", 1)]
    # the last step ends with its launch (3000 + 5 µs)
    assert _cols(d, "cpu_start_ns", "cpu_end_ns") == [(1000 * US, 2000 * US), (2000 * US, 3000 * US),
                                                     (3000 * US, 3005 * US)]
    # the token of the first decode: the copy launched after its last graph launch
    assert _cols(d, "token_ns") == [(None,), (2160 * US,), (None,)]


def test_overlapping_annotated_steps_are_cut_and_reported() -> None:
    a = StepLabel(step_id=0, request_id=0, kind="prefill", batch=1, q_len=5, kv_len=5)
    b = StepLabel(step_id=1, request_id=0, kind="decode", batch=1, q_len=1, kv_len=6)
    ann = [{"ts_ns": 0, "dur_ns": 120 * US, "name": format_step(a), "cat": "user_annotation"},
           {"ts_ns": 100 * US, "dur_ns": 50 * US, "name": format_step(b), "cat": "user_annotation"}]
    d = _detect([], ann)
    # the first ends where the second starts: no GPU activity counts twice
    assert _cols(d, "cpu_start_ns", "cpu_end_ns") == [(0, 100 * US), (100 * US, 150 * US)]
    assert [w for w in d.warnings if "overlap" in w] == [
        "steps 0 and 1 overlap (20000 ns; source tracekit): the first is cut at the second's start so no GPU "
        "activity counts twice"]
    assert _cols(d, "kind", "q_len", "kv_len", "tokens", "batch") == [("prefill", 5, 5, 5, 1), ("decode", 1, 6, 1, 1)]


def test_engine_annotations_idle_and_unknown_formats() -> None:
    names = ["execute_new_1_cached_0", "execute_new_0_cached_0", "execute_something_else", "step[DECODE bs=4 toks=4]"]
    ann = [{"ts_ns": i * 100 * US, "dur_ns": 50 * US, "name": n, "cat": "user_annotation"} for i, n in enumerate(names)]
    d = _detect([], ann)
    assert _cols(d, "source", "kind") == [("vllm", "prefill"), ("sglang", "decode")]
    assert _cols(d, "cpu_start_ns", "cpu_end_ns") == [(0, 50 * US), (300 * US, 350 * US)]
    w = " | ".join(d.warnings)
    assert "1 annotations look like engine steps but match no known format (e.g. 'execute_something_else'" in w
    assert "1 idle engine steps (nothing scheduled) are not steps" in w
    assert "both vLLM and SGLang step annotations in one trace: both kept" in w


def test_graph_launches_of_two_requests_are_two_steps() -> None:
    # GIVEN a prefill and a graph replay inside one "generate" window and a second replay inside the next
    # window, with no token copy between the two replays (the only copy comes after the second)
    ops = [_op(0, "aten::embedding", 1000, dims=[[32000, 64], [1, 4]]), _op(1, "aten::linear", 1030, dur=10)]
    rt = [_rt("cudaGraphLaunch", 2000), _rt("cudaGraphLaunch", 3000), _rt("cudaMemcpyAsync", 3100, 12)]
    gpu = [_act("Memcpy DtoH (Device -> Pageable)", "memcpy", 3150, 10, 12)]
    t = _tables_full(ops, rt, gpu)
    ann = schema.from_columns("annotations", {"ts_ns": [900 * US, 2900 * US], "dur_ns": [1600 * US, 1100 * US],
                                              "name": ["generate", "generate"],
                                              "cat": ["user_annotation", "user_annotation"]})
    d = steps.detect(t["cpu_ops"], ann, t["runtime"], t["gpu_activity"])
    # THEN the replays are not pieces of one pass: a request window lies between them; each step's window
    # ends at its next pass or at its request window's end
    assert _cols(d, "kind", "source") == [("prefill", "model_ops"), ("decode", "cuda_graph"), ("decode", "cuda_graph")]
    assert _cols(d, "cpu_start_ns", "cpu_end_ns") == [(1000 * US, 2000 * US), (2000 * US, 2500 * US),
                                                     (3000 * US, 4000 * US)]


def test_embeddings_without_an_input_dims_column_are_no_passes() -> None:
    cpu = pd.DataFrame({"op_id": [0], "ts_ns": [1000], "dur_ns": [5], "name": ["aten::embedding"], "cat": ["cpu_op"]})
    empty = pd.DataFrame(columns=["ts_ns", "dur_ns", "name", "cat", "correlation", "kind", "device"])
    d = steps.detect(cpu, empty, empty, empty)
    assert d.steps.empty and any("no model steps found" in w for w in d.warnings)


def _kv_chain(kinds_q: list[tuple[str, int]], attn_kv: list[int | None]) -> list[int | None]:
    rows = [{"kind": k, "q_len": q, "kv_len": kv} for (k, q), kv in zip(kinds_q, attn_kv, strict=True)]
    steps._fill_kv(rows)
    return [r["kv_len"] for r in rows]


def test_a_prefill_chunk_after_cached_tokens_keeps_attention_kv_length() -> None:
    # a 5-token prefill chunk after 100 cached prompt tokens attends 105 keys, then two decodes 106 and
    # 107: attention grows by each step's query tokens, so its lengths are the KV lengths (not 5, 6, 7)
    assert _kv_chain([("prefill", 5), ("decode", 1), ("decode", 1)], [105, 106, 107]) == [105, 106, 107]


def test_a_pass_takes_its_kv_length_from_attention_and_skips_ops_without_shapes() -> None:
    # one pass of 5 new prompt tokens after 100 cached ones: attention's keys are 105 long; a second
    # attention op in it has no shapes (NaN where the column was filled in)
    cpu = pd.DataFrame([_op(0, "aten::embedding", 1000, dims=[[32000, 64], [1, 5]]),
                        _op(1, "aten::scaled_dot_product_attention", 1020, dims=[[1, 4, 5, 16], [1, 2, 105, 16]]),
                        _op(2, "aten::scaled_dot_product_attention", 1025)])
    cpu.loc[2, "input_dims"] = np.nan
    empty = pd.DataFrame(columns=["ts_ns", "dur_ns", "name", "cat", "correlation", "kind", "device"])
    d = steps.detect(cpu, empty, empty, empty)
    assert _cols(d, "kind", "batch", "q_len", "kv_len", "tokens") == [("prefill", 1, 5, 105, 5)]


def test_a_step_whose_batch_disagrees_with_its_embedding_is_reported() -> None:
    # the annotation says batch 2, the embedding's index is [1, 5]: one sequence of 5
    label = StepLabel(step_id=0, request_id=0, kind="prefill", batch=2, q_len=5, kv_len=5)
    ann = [{"ts_ns": 0, "dur_ns": 100 * US, "name": format_step(label), "cat": "user_annotation"}]
    d = _detect([_embedding(0, 10 * US, [1, 5])], ann)
    about = [w for w in d.warnings if w.startswith("step ")]
    assert len(about) == 1 and "batch=2 but aten::embedding shows batch=1" in about[0]


def test_no_annotations_no_request_fences() -> None:
    f = steps.request_fences(pd.DataFrame(columns=["ts_ns", "dur_ns", "name", "cat"]))
    assert f.shape == (0, 2)  # [start, end) pairs, none


def test_a_window_of_one_decode_step_keeps_its_attention_length() -> None:
    assert _kv_chain([("decode", 1)], [57]) == [57]
    assert _kv_chain([("prefill", 7)], [None]) == [7]  # no attention witness: the prompt's tokens


def test_a_packed_embedding_whose_token_count_disagrees_is_reported() -> None:
    # the annotation says one sequence of 5 tokens; the packed embedding index [9] holds 9
    label = StepLabel(step_id=0, request_id=0, kind="prefill", batch=1, q_len=5, kv_len=5)
    ann = [{"ts_ns": 0, "dur_ns": 100 * US, "name": format_step(label), "cat": "user_annotation"}]
    d = _detect([_embedding(0, 10 * US, [9])], ann)
    about = [w for w in d.warnings if w.startswith("step ")]
    assert len(about) == 1 and "tokens=5 but the packed aten::embedding input holds 9 tokens" in about[0]
