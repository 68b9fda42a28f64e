"""Requests and their latency metrics from hand-built steps; every value worked out by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracekit.analysis import requests

US = 1000
NAN = np.nan


def _steps() -> pd.DataFrame:
    # two generations without request annotations: a 10-token prefill and two decodes, then a 20-token
    # prefill and one decode. (step_id, kind, q_len, cpu_start, cpu_end, gpu_end, gpu_busy) in µs
    rows = [(0, "prefill", 10, 1000, 1100, 1150, 80), (1, "decode", 1, 1200, 1250, 1260, 20),
            (2, "decode", 1, 1300, 1350, 1360, 20), (3, "prefill", 20, 2000, 2100, 2200, 100),
            (4, "decode", 1, 2300, 2350, 2380, 30)]
    df = pd.DataFrame(rows, columns=["step_id", "kind", "q_len", "cpu_start_ns", "cpu_end_ns", "gpu_end_ns",
                                     "gpu_busy_ns"])
    for c in ("cpu_start_ns", "cpu_end_ns", "gpu_end_ns", "gpu_busy_ns"):
        df[c] = df[c] * US
    df["tokens"] = df["q_len"]
    df["batch"] = 1
    df["request_id"] = pd.array([None] * 5, dtype="Int64")
    df["source"] = "vllm"
    return df


ANN = pd.DataFrame(columns=["ts_ns", "dur_ns", "name", "cat"])
# the first host op, 50 µs before the first forward pass: the caller's timer starts there
OPS = pd.DataFrame({"ts_ns": [950 * US], "dur_ns": [10 * US], "name": ["aten::empty"], "cat": ["cpu_op"]})


def test_prefills_split_requests_and_give_their_latency() -> None:
    ks = pd.DataFrame({"row": [0, 1, 2, 3], "step_id": pd.array([0, 2, 3, None], dtype="Int64")})
    manifest = {"timings": {"requests": [{"ttft_ms": 0.3, "tpot_us": 100, "e2e_s": 0.0005}]}}
    req, steps, kernel_steps, warnings = requests.build(_steps(), ks, ANN, OPS, manifest)
    assert warnings == []
    assert list(steps["request_id"]) == [0, 0, 0, 1, 1]
    assert list(kernel_steps["request_id"].astype(object)) == [0, 0, 1, pd.NA]
    r0, r1 = req.iloc[0], req.iloc[1]
    assert (r0["source"], r0["batch"], r0["input_tokens"], r0["output_tokens"]) == ("prefill_boundary", 1, 10, 3)
    # request 0: from the first host op (950 µs) to its last token (1360 µs); first token at 1150 µs
    assert (r0["start_ns"], r0["end_ns"], r0["ttft_ns"], r0["e2e_ns"]) == (950 * US, 1360 * US, 200 * US, 410 * US)
    assert r0["tpot_ns"] == 105 * US  # (410 - 200) / 2
    assert r0["prefill_share"] == pytest.approx(200 / 410)
    # token gaps 110 and 100 µs
    assert (r0["itl_p50_ns"], r0["itl_p90_ns"], r0["itl_p99_ns"]) == pytest.approx((105 * US, 109 * US, 109.9 * US))
    assert r0["prefill_tok_s"] == pytest.approx(10 / 200e-6) and r0["decode_tok_s"] == pytest.approx(2 / 210e-6)
    assert (r0["prefill_gpu_ns_per_token"], r0["decode_gpu_ns_per_token"]) == (8 * US, 20 * US)
    assert (r0["host_ttft_ns"], r0["host_tpot_ns"], r0["host_e2e_ns"]) == pytest.approx((300_000, 100_000, 500_000))
    # request 1 starts at its prefill
    assert (r1["start_ns"], r1["end_ns"], r1["ttft_ns"], r1["e2e_ns"], r1["tpot_ns"]) == \
        (2000 * US, 2380 * US, 200 * US, 380 * US, 180 * US)
    assert (r1["input_tokens"], r1["output_tokens"], r1["itl_p50_ns"], r1["itl_p99_ns"]) == (20, 2, 180 * US, 180 * US)
    assert (r1["prefill_gpu_ns_per_token"], r1["decode_gpu_ns_per_token"]) == (5 * US, 30 * US)
    assert pd.isna(r1["host_ttft_ns"])
    # the inputs are untouched
    assert _steps()["request_id"].isna().all()


def test_a_named_annotation_around_one_prefill_is_the_request() -> None:
    # a record_function "generate" [900, 1400) µs around the first generation; the second has none
    ann = pd.DataFrame({"ts_ns": [900 * US], "dur_ns": [500 * US], "name": ["generate"], "cat": ["user_annotation"]})
    req, steps, _, _ = requests.build(_steps(), pd.DataFrame(columns=["row", "step_id"]), ann, OPS)
    assert list(req["source"]) == ["user_annotation", "prefill_boundary"]
    assert list(req["name"]) == ["generate", "request-1"]
    # the window is the annotation's; it ends with its last token or its end, whichever is later
    assert (req.iloc[0]["start_ns"], req.iloc[0]["end_ns"], req.iloc[0]["ttft_ns"]) == (900 * US, 1400 * US, 250 * US)
    assert list(steps["request_id"]) == [0, 0, 0, 1, 1]


def test_steps_without_a_prefill_split_at_long_gaps() -> None:
    # decode steps only (a trace that starts mid-generation): a 30 ms idle gap starts a new request
    st = _steps()
    st["kind"] = "decode"
    st.loc[3:, ["cpu_start_ns", "cpu_end_ns", "gpu_end_ns"]] += 30_000 * US
    req, steps, _, _ = requests.build(st, pd.DataFrame(columns=["row", "step_id"]), ANN, OPS)
    assert list(req["source"]) == ["gap", "gap"]
    assert list(steps["request_id"]) == [0, 0, 0, 1, 1]
    assert (req.iloc[0]["start_ns"], req.iloc[0]["end_ns"]) == (1000 * US, 1360 * US)
    assert (req.iloc[1]["start_ns"], req.iloc[1]["end_ns"]) == (32_000 * US, 32_380 * US)


def test_from_recorded_takes_the_host_timers_and_the_captured_steps_gpu_time() -> None:
    rec = pd.DataFrame([{"request_id": 0, "name": "r0", "batch": 2, "input_tokens": 10, "output_tokens": 5,
                         "start_ns": 0, "end_ns": 1000, "ttft_ns": 200, "tpot_ns": 200, "e2e_ns": 1000,
                         "prefill_share": 0.2, "queue_ns": 7}])
    manifest = {"timings": {
        "profiled": {"requests": [{"request_id": 0, "itl_ns": {"p50": 190, "p90": 210, "p99": 250}}]},
        "unprofiled": {"requests": [{"request_id": 0, "ttft_ns": 150, "tpot_ns": 180, "e2e_ns": 870}]}}}
    steps = pd.DataFrame({"step_id": [0, 1, 2, 3], "request_id": [0, 0, 0, 0],
                          "kind": ["prefill", "decode", "decode", "decode"], "q_len": [10, 1, 1, 1],
                          "gpu_busy_ns": [400, 50, 70, 999], "captured": [True, True, True, False]})
    ks = pd.DataFrame({"row": [0, 1], "step_id": [0, 3]})
    out, _, kernel_steps, warnings = requests.from_recorded(rec, steps, ks, manifest)
    r = out.iloc[0]
    assert warnings == [] and r["source"] == "tracekit_host" and list(kernel_steps["request_id"]) == [0, 0]
    assert (r["ttft_ns"], r["tpot_ns"], r["e2e_ns"], r["prefill_share"]) == (200, 200, 1000, 0.2)
    assert (r["itl_p50_ns"], r["itl_p90_ns"], r["itl_p99_ns"]) == (190, 210, 250)
    # batch 2: 20 prompt tokens in 200 ns; 4 x 2 decode tokens in 800 ns
    assert r["prefill_tok_s"] == pytest.approx(1e8) and r["decode_tok_s"] == pytest.approx(1e7)
    # the captured steps' GPU time: 400 ns over 20 prompt tokens, 120 ns over 2 steps x 2 sequences
    assert (r["prefill_gpu_ns_per_token"], r["decode_gpu_ns_per_token"]) == (20, 30)
    assert (r["host_ttft_ns"], r["host_tpot_ns"], r["host_e2e_ns"]) == (150, 180, 870)
    assert r["queue_ns"] == 7
    # no recorded table: the profiled timings name the requests; without timings, a warning
    out2, _, _, w2 = requests.from_recorded(None, steps, ks, {"timings": {"profiled": {"requests": [
        {"request_id": 0, "ttft_ns": 100, "e2e_ns": 300, "output_tokens": 3, "input_tokens": 4}]}}})
    assert out2.iloc[0]["ttft_ns"] == 100 and out2.iloc[0]["decode_tok_s"] == pytest.approx(2 / 200e-9)
    assert w2 == []
    _, _, _, w3 = requests.from_recorded(None, steps, ks, None)
    assert w3 == ["request 0: the recorder has no host timings for it"]


def test_a_model_ops_step_ends_with_its_last_matmul_when_its_window_runs_on() -> None:
    # decode steps found from the model's ops (no prefill in the trace): each window runs to the next
    # pass, so a step's work ends at its last matmul (a linear with no recorded duration: its start)
    st = _steps().iloc[1:3].reset_index(drop=True)
    st["source"] = "model_ops"
    st["cpu_end_ns"] = [1300 * US, 1400 * US]
    ops = pd.DataFrame({"ts_ns": [950 * US, 1380 * US], "dur_ns": [10 * US, None],
                        "name": ["aten::empty", "aten::linear"], "cat": ["cpu_op", "cpu_op"]})
    req, _, _, _ = requests.build(st, pd.DataFrame(columns=["row", "step_id"]), ANN, ops)
    assert (req.iloc[0]["source"], req.iloc[0]["start_ns"], req.iloc[0]["end_ns"]) == ("gap", 1200 * US, 1380 * US)


def test_long_idle_gaps_split_a_prefill_request_into_gap_requests() -> None:
    # one prefill then decodes 40-50 µs apart, twice interrupted by a 30 ms idle gap (the gap rule's
    # threshold: max(10 x the 40 µs median gap, 20 ms) = 20 ms)
    rows = [(0, "prefill", 5, 1000, 1100, 1150)] + [(i, "decode", 1, t, t + 50, t + 60) for i, t in
                                                     [(1, 1200), (2, 1300), (3, 1400), (4, 31500), (5, 31600),
                                                      (6, 61700), (7, 61800)]]
    st = pd.DataFrame(rows, columns=["step_id", "kind", "q_len", "cpu_start_ns", "cpu_end_ns", "gpu_end_ns"])
    for c in ("cpu_start_ns", "cpu_end_ns", "gpu_end_ns"):
        st[c] = st[c] * US
    st = st.assign(gpu_busy_ns=10 * US, tokens=st["q_len"], batch=1, source="vllm",
                   request_id=pd.array([None] * len(st), dtype="Int64"))
    req, steps, _, warnings = requests.build(st, pd.DataFrame(columns=["row", "step_id"]), ANN, OPS)
    assert list(req["name"]) == ["request-0", "request-0.1", "request-0.2"]
    assert list(req["source"]) == ["prefill_boundary", "gap", "gap"]
    # each piece ends with its own last step's work; the last one with the request's end
    assert list(req["end_ns"]) == [1460 * US, 31660 * US, 61860 * US]
    assert list(req["start_ns"]) == [950 * US, 31500 * US, 61700 * US]
    assert list(steps["request_id"]) == [0, 0, 0, 0, 1, 1, 2, 2]
    split = [w for w in warnings if "idle gap" in w]
    assert len(split) == 2 and all("idle gap of 30.0 ms" in w for w in split)


def test_without_token_counts_a_batch_of_two_counts_every_sequence() -> None:
    # The same steps at batch 2 and without the engine's own token counts: each prefill step carries
    # q_len tokens per sequence, each decode one per sequence.
    st = _steps().drop(columns=["tokens"])
    st["batch"] = 2
    req, _, _, _ = requests.build(st, pd.DataFrame(columns=["row", "step_id"]), ANN, OPS)
    r0 = req.iloc[0]
    assert (r0["batch"], r0["input_tokens"], r0["output_tokens"]) == (2, 10, 3)
    # prefill: 2 x 10 = 20 tokens in 200 µs (950 -> 1150), 80 µs of GPU time; decode: 2 steps x 2 = 4 tokens
    # in 210 µs, 40 µs of GPU time
    assert r0["prefill_tok_s"] == pytest.approx(20 / 200e-6) and r0["decode_tok_s"] == pytest.approx(4 / 210e-6)
    assert (r0["prefill_gpu_ns_per_token"], r0["decode_gpu_ns_per_token"]) == (4 * US, 10 * US)


def test_host_timings_in_nanoseconds_and_as_a_bare_list() -> None:
    manifest = {"timings": [{"ttft_ns": 300_000, "tpot_ns": 100_000, "e2e_ns": 500_000}]}
    req, _, _, _ = requests.build(_steps(), pd.DataFrame(columns=["row", "step_id"]), ANN, OPS, manifest)
    r0 = req.iloc[0]
    assert (r0["host_ttft_ns"], r0["host_tpot_ns"], r0["host_e2e_ns"]) == (300_000, 100_000, 500_000)


def test_chunked_prefill_ttft_is_at_the_last_chunk() -> None:
    # GIVEN one request (a tracekit.request range [1000, 1700) µs) whose 1,124-token prompt is prefilled in three
    # chunks (GPU ends 1150, 1350, 1480 µs), then two decodes (GPU ends 1560, 1660 µs)
    rows = [(0, "prefill", 512, 1000, 1100, 1150), (1, "prefill", 512, 1200, 1300, 1350),
            (2, "prefill", 100, 1400, 1450, 1480), (3, "decode", 1, 1500, 1550, 1560),
            (4, "decode", 1, 1600, 1650, 1660)]
    st = pd.DataFrame(rows, columns=["step_id", "kind", "q_len", "cpu_start_ns", "cpu_end_ns", "gpu_end_ns"])
    for c in ("cpu_start_ns", "cpu_end_ns", "gpu_end_ns"):
        st[c] = st[c] * US
    st = st.assign(gpu_busy_ns=10 * US, tokens=st["q_len"], batch=1, source="vllm",
                   request_id=pd.array([None] * 5, dtype="Int64"))
    ann = pd.DataFrame({"ts_ns": [1000 * US], "dur_ns": [700 * US], "cat": ["user_annotation"],
                        "name": ["tracekit.request id=0 name=chat batch=1 input_tokens=1124 output_tokens=3"]})
    req, *_ = requests.build(st, pd.DataFrame({"row": [], "step_id": pd.array([], dtype="Int64")}), ann,
                             OPS.iloc[:0])
    r = req.iloc[0]
    assert len(req) == 1
    # THEN the first token is the last chunk's: TTFT 1480 - 1000 = 480 µs (not the first chunk's 150 µs);
    # e2e 1700 - 1000 = 700 µs; TPOT (700 - 480) / (3 - 1) = 110 µs
    assert (r.ttft_ns, r.e2e_ns, r.tpot_ns) == (480 * US, 700 * US, 110 * US)
    # AND the gaps between tokens are those after the first token: 1560 - 1480 = 80, 1660 - 1560 = 100 µs
    # (a chunk yields no token: the 200 and 130 µs between chunks are not inter-token latency)
    assert (r.itl_p50_ns, r.itl_p99_ns) == (90 * US, pytest.approx(99.8 * US))
