"""vLLM and SGLang traces end to end (`tracekit analyze`): steps, requests, graph-capture merge, FLOPs.

The traces are built from the engines' own source (tests/engine_traces.py says from where): vLLM on an
MI300X (HIP graphs, "AMD Radeon Graphics") and on an H100 (CUDA graphs, an empty device name), FULL
decode graphs and a piecewise mixed step; SGLang decode graphs from per-batch capture files.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from engine_traces import (
    MODEL,
    Kineto,
    Model,
    Op,
    forward_ops,
    padded,
    pieces,
    sglang_capture_file,
    sglang_trace,
    vllm_capture_file,
    vllm_trace,
)
from helpers import FIXTURES

from tracekit.cli import main

L = MODEL.layers


def analyze(trace: Path, *args: str) -> dict[str, Any]:
    out = trace.parent / (trace.name.split(".")[0] + ".run")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["analyze", str(trace), "--out", str(out), "--force", *args]) == 0
    tables = {t: pd.read_parquet(out / "tables" / f"{t}.parquet") for t in
              ("steps", "requests", "phases", "kernel_bound", "cpu_ops", "gpu_activity")}
    tables["manifest"] = json.loads((out / "run.json").read_text())
    tables["summary"] = buf.getvalue()
    return tables


def gemm_flop_share(kb: pd.DataFrame) -> float:
    g = kb[(kb["kclass"] == "gemm") & (kb["kind"].astype(str) == "kernel")]
    return float(g.loc[g["flops"] > 0, "dur_ns"].sum() / g["dur_ns"].sum())


@pytest.fixture(scope="module")
def vllm_rocm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """vLLM on an MI300X: two FULL decode steps (27 and 30 requests: the 32-token graph), a piecewise
    mixed step (1 prompt chunk of 100 + 31 decodes: the 136-token pieces), an idle step; captures of 32
    (FULL), 136 (PIECEWISE) and 8 (FULL, unused) in capture_traces/ beside the trace."""
    root = tmp_path_factory.mktemp("vllm_rocm")
    for size, mode in ((32, "FULL"), (136, "PIECEWISE"), (8, "FULL")):
        vllm_capture_file(root / "capture_traces", size, mode, hip=True)
    trace = vllm_trace(root / "dp0_pp0_tp0_dcp0_ep0_rank0.1773709680000000000.pt.trace.json.gz", [
        ("execute_context_0(0)_generation_27(27)", 27, 0),
        ("execute_context_1(100)_generation_31(31)", 131, 1),
        ("execute_context_0(0)_generation_30(30)", 30, 0),
    ], hip=True)
    return analyze(trace)


def test_vllm_one_engine_step_is_one_step_however_many_graphs(vllm_rocm: dict[str, Any]) -> None:
    st = vllm_rocm["steps"].sort_values("cpu_start_ns")
    assert list(st["source"]) == ["vllm"] * 3
    assert list(st["kind"]) == ["decode", "mixed", "decode"]
    assert list(st["batch"]) == [27, 32, 30]
    assert list(st["tokens"]) == [27, 131, 30]
    assert list(st["q_len"]) == [1, 100, 1]
    # the piecewise step launched a graph per piece (layers + 1), and is still one step
    assert list(st["graph_launches"]) == [1, L + 1, 1]
    stats = json.loads(st["seq_stats"].iloc[1])
    assert stats == {"context": {"requests": 1, "sq": 100}, "generation": {"requests": 31, "sq": 31}}
    # the token: the device-to-host copy after the step (sampling follows vLLM's execute span)
    assert st["token_ns"].notna().all() and (st["token_ns"] > st["cpu_end_ns"]).all()


def test_vllm_replayed_kernels_get_the_captured_ops(vllm_rocm: dict[str, Any]) -> None:
    cap = vllm_rocm["manifest"]["ingest"]["captures"][0]
    assert len(cap["files"]) == 3 and cap["graphs"] == 1 + (L + 1) + 1
    assert cap["graph_launches"] == cap["graph_launches_matched"] == 2 + (L + 1)
    assert cap["activities_matched"] == cap["activities_replayed"] > 0
    # the captured ops are in cpu_ops, marked, and every replayed kernel launches one of them
    cpu, gpu = vllm_rocm["cpu_ops"], vllm_rocm["gpu_activity"]
    captured = cpu[cpu["captured"].fillna(False).astype(bool)]
    assert len(captured) == cap["ops_added"] > 0
    replayed = gpu[gpu["launch_name"].astype(str) == "hipGraphLaunch"]
    assert len(replayed) == cap["activities_replayed"]
    assert replayed["op_id"].isin(captured["op_id"]).all()
    names = dict(zip(cpu["op_id"], cpu["name"].astype(str), strict=True))
    gemms = replayed[replayed["name"].astype(str).str.startswith("Cijk_")]
    assert {names[o] for o in gemms["op_id"]} == {"aten::mm"}
    # the unused 8-token capture is no warning: an engine captures every size it may replay
    assert not any("capture" in w for w in vllm_rocm["manifest"]["warnings"])
    assert not any("without a launching CPU op" in w for w in vllm_rocm["manifest"]["warnings"])


def test_vllm_gemm_time_has_flops_and_the_mi300x_is_identified(vllm_rocm: dict[str, Any]) -> None:
    kb = vllm_rocm["kernel_bound"]
    assert gemm_flop_share(kb) >= 0.9
    # the captured shapes are the padded ones: a 27-request step runs the 32-token graph
    first = kb[(pd.to_numeric(kb["step_id"]) == 0) & (kb["op_name"] == "aten::mm")]
    qkv = (MODEL.q_heads + 2 * MODEL.kv_heads) * MODEL.head_dim
    flops = set(first["flops"])
    assert 2 * padded(27) * MODEL.hidden * 2 * MODEL.inter in flops and 2 * 32 * MODEL.hidden * qkv in flops
    assert 2 * 27 * MODEL.hidden * qkv not in flops
    # "AMD Radeon Graphics" in the trace; its deviceProperties say MI300X, whose achievable rates decide classes
    ph = vllm_rocm["phases"]
    assert set(ph["ceiling"].dropna()) == {"AMD Instinct MI300X (achievable)"}
    assert any("identified from the trace's deviceProperties as AMD Instinct MI300X" in w
               for w in vllm_rocm["manifest"]["warnings"])
    decode = ph[ph["request_id"].isna() & (ph["phase"] == "decode")].iloc[0]
    # classified against the MI300X's roofs: memory-bound or (under the latency line of both peaks) latency-bound
    assert decode["flops"] > 0 and decode["memory_bound_ns"] + decode["latency_bound_ns"] > 0


@pytest.fixture(scope="module")
def vllm_cuda(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """vLLM on an H100 (an empty device name), detailed annotations, the captures passed with --capture
    from a folder of their own."""
    root = tmp_path_factory.mktemp("vllm_cuda")
    caps = [vllm_capture_file(root / "elsewhere", size, mode, hip=False) for size, mode in
            ((32, "FULL"), (136, "PIECEWISE"))]
    trace = vllm_trace(root / "worker.pt.trace.json.gz", [
        ("execute_27_context_0(sq0sk0sqsq0sqsk0)_generation_27(sq27sk13500sqsq27sqsk13500)", 27, 0),
        ("execute_131_context_1(sq100sk100sqsq10000sqsk10000)_generation_31(sq31sk15531sqsq31sqsk15531)", 131, 1),
    ], hip=False)
    return analyze(trace, *[a for c in caps for a in ("--capture", str(c))])


def test_vllm_detailed_steps_and_their_attention_flops(vllm_cuda: dict[str, Any]) -> None:
    st = vllm_cuda["steps"].sort_values("cpu_start_ns")
    assert list(st["kind"]) == ["decode", "mixed"] and list(st["kv_len"]) == [500, round((100 + 15531) / 32)]
    cap = vllm_cuda["manifest"]["ingest"]["captures"][0]
    assert cap["graph_launches_matched"] == cap["graph_launches"] == 1 + (L + 1)
    kb = vllm_cuda["kernel_bound"]
    assert gemm_flop_share(kb) >= 0.9
    # attention per layer from the step's sums (TraceLens's InferenceAttention): decode at 500 KV each
    att = kb[(kb["op_name"] == "tracekit::step_attention")]
    per_step = att.groupby(pd.to_numeric(att["step_id"]))["flops"].sum()
    hq, d = MODEL.q_heads, MODEL.head_dim
    assert per_step[0] == pytest.approx(L * hq * 2 * 13500 * 2 * d)
    assert per_step[1] == pytest.approx(L * (hq * (2 * 10000 - 10000) * 2 * d + hq * 2 * 15531 * 2 * d))
    # the flash kernels carry it; the KV-cache write is a copy of its own op
    assert set(att["name"].astype(str).str.split("<").str[0]) == {
        "void flash::flash_fwd_splitkv_kernel", "void flash::flash_fwd_splitkv_combine_kernel"}
    assert any("identified from the trace's deviceProperties as NVIDIA H100 SXM" in w
               for w in vllm_cuda["manifest"]["warnings"])


def test_sglang_decode_graphs_tokens_and_ttft(tmp_path: Path) -> None:
    for bs in (16, 32):
        sglang_capture_file(tmp_path / "capture_traces", bs, hip=True)
    trace = sglang_trace(tmp_path / "sglang-TP-0.trace.json.gz", [
        ("step[EXTEND bs=2 toks=30]", 2),
        ("step[DECODE bs=30]", 30),
        ("step[DECODE bs=30]", 30),
        ("step[DECODE bs=12]", 12),
    ], hip=True)
    t = analyze(trace)
    st = t["steps"].sort_values("cpu_start_ns")
    assert list(st["kind"]) == ["prefill", "decode", "decode", "decode"]
    assert list(st["tokens"]) == [30, 30, 30, 12] and list(st["q_len"]) == [15, 1, 1, 1]
    # decode graphs matched to bs_32 (30 -> 32) and bs_16 (12 -> 16), past the file's two input copies
    cap = t["manifest"]["ingest"]["captures"][0]
    assert cap["graph_launches"] == cap["graph_launches_matched"] == 3
    assert cap["activities_matched"] == cap["activities_replayed"]
    assert gemm_flop_share(t["kernel_bound"]) >= 0.9
    # the token of each step: the copy after its forward, not the metadata copy at the span's start
    gpu = t["gpu_activity"]
    d2h = gpu[gpu["name"].astype(str) == "Memcpy DtoH (Device -> Host)"].sort_values("ts_ns")
    ends = (d2h["ts_ns"] + d2h["dur_ns"]).tolist()
    assert st["token_ns"].tolist() == ends
    r = t["requests"].iloc[0]
    assert r["ttft_ns"] == ends[0] - r["start_ns"]
    # batch from the steps; decode throughput from the real token count (30 + 30 + 12), not steps x 1
    assert r["batch"] == 2 and r["input_tokens"] == 15
    assert r["decode_tok_s"] == pytest.approx((30 + 30 + 12) / ((r["e2e_ns"] - r["ttft_ns"]) / 1e9))


def test_bad_inputs_warn_and_invent_nothing(tmp_path: Path) -> None:
    # a capture of another model (2 layers), graphs without a fitting capture, unknown annotations
    other = Model(layers=2)
    vllm_capture_file(tmp_path / "capture_traces", 32, "FULL", hip=True, model=other)
    trace = vllm_trace(tmp_path / "w.pt.trace.json.gz", [
        ("execute_context_0(0)_generation_27(27)", 27, 0),
        ("execute_context_0(0)_generation_28(28)", 28, 0),
    ], hip=True)
    # an annotation in no known format around a third pass
    doc = json.loads(__import__("gzip").decompress(trace.read_bytes()))
    last = max(e["ts"] + e.get("dur", 0) for e in doc["traceEvents"])
    doc["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": "step[FOO bs=3]", "pid": 4242,
                               "tid": 4242, "ts": last + 100, "dur": 50, "args": {}})
    trace.write_bytes(__import__("gzip").compress(json.dumps(doc).encode()))
    t = analyze(trace)
    w = t["manifest"]["warnings"]
    assert any("2 graph launches matched no captured graph" in x for x in w)
    assert any("1 of 1 capture traces matched no replay" in x and "graph_capture_rank_0" in x for x in w)
    assert any("match no known format" in x and "step[FOO bs=3]" in x for x in w)
    # the known steps are found; no replayed kernel was given a captured op
    assert list(t["steps"]["kind"]) == ["decode", "decode"]
    cpu = t["cpu_ops"]
    assert not cpu["captured"].fillna(False).astype(bool).any()
    assert t["manifest"]["ingest"]["captures"][0]["activities_matched"] == 0


def test_graphs_without_captures_are_reported(tmp_path: Path) -> None:
    trace = vllm_trace(tmp_path / "w.pt.trace.json.gz", [("execute_context_0(0)_generation_8(8)", 8, 0)], hip=False)
    t = analyze(trace)
    w = t["manifest"]["warnings"]
    assert any("1 graph launches matched no captured graph: no capture of it in the trace or beside it" in x
               for x in w)
    assert any("replayed from graphs without its ops' shapes" in x and "--capture" in x for x in w)
    cap = t["manifest"]["ingest"]["captures"][0]
    assert cap["unmatched_ns"] == cap["replayed_ns"] > 0
    # no ceiling asked for, none lost: the H100 is identified; the eager logits GEMM still has FLOPs
    kb = t["kernel_bound"]
    assert kb.loc[kb["op_name"] == "aten::mm", "flops"].gt(0).any()


def test_no_ceiling_keeps_flops_and_bytes(tmp_path: Path) -> None:
    # a GPU nothing can name (no datasheet, properties of no known part)
    props = {"id": 0, "name": "", "totalGlobalMem": 8 * 2**30, "computeMajor": 7, "computeMinor": 2,
             "warpSize": 32, "numSms": 7, "sharedMemPerBlockOptin": 49152}
    vllm_capture_file(tmp_path / "capture_traces", 8, "FULL", hip=False)
    trace = vllm_trace(tmp_path / "w.pt.trace.json.gz", [("execute_context_0(0)_generation_8(8)", 8, 0)],
                       hip=False, props=props)
    t = analyze(trace)
    assert any(w.startswith("analyze: no ceiling") for w in t["manifest"]["warnings"])
    kb, ph = t["kernel_bound"], t["phases"]
    assert kb["flops"].sum() > 0 and kb["bytes"].sum() > 0 and gemm_flop_share(kb) >= 0.9
    assert not kb["bound"].isin(["compute", "memory"]).any() or (kb.loc[kb["model"] == "shape", "bound"] == "other").all()
    decode = ph[ph["phase"] == "decode"]
    assert (decode["flops"] > 0).all() and decode["compute_bound_ns"].isna().all()
    assert decode["ceiling"].isna().all()


def test_ceiling_option_by_name_and_file(tmp_path: Path) -> None:
    vllm_capture_file(tmp_path / "capture_traces", 8, "FULL", hip=True)
    trace = vllm_trace(tmp_path / "w.pt.trace.json.gz", [("execute_context_0(0)_generation_8(8)", 8, 0)], hip=True)
    t = analyze(trace, "--ceiling", "AMD Instinct MI325X")
    assert set(t["phases"]["ceiling"].dropna()) == {"AMD Instinct MI325X (achievable)"}
    t = analyze(trace, "--ceiling", "datasheet")  # the datasheet of the GPU the trace identifies
    assert set(t["phases"]["ceiling"].dropna()) == {"AMD Instinct MI300X (datasheet)"}
    t = analyze(trace, "--ceiling", str(FIXTURES / "gpu" / "h200_ceiling.json"))
    assert set(t["phases"]["ceiling"].dropna()) == {"NVIDIA H200 (measured)"}
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        assert main(["analyze", str(trace), "--out", str(tmp_path / "x"), "--ceiling", "Mystery GPU 9000"]) == 2
    assert "Mystery GPU 9000" in buf.getvalue()


def test_ingest_cli_takes_captures(tmp_path: Path) -> None:
    caps = tmp_path / "caps"
    vllm_capture_file(caps, 8, "FULL", hip=True)
    (caps / "execution_details.json").write_text("[]")
    trace = vllm_trace(tmp_path / "w.pt.trace.json.gz", [("execute_context_0(0)_generation_8(8)", 8, 0)], hip=True)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["ingest", str(trace), "--out", str(tmp_path / "run"), "--capture", str(caps)]) == 0
    assert "graphs: 1 of 1 replays matched" in buf.getvalue()
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(["ingest", str(trace), "--out", str(tmp_path / "r2"), "--capture", str(tmp_path / "nope")]) == 2


def test_a_folder_of_traces_keeps_its_captures_out_of_the_ranks(tmp_path: Path) -> None:
    # vLLM 0.14's patch writes graph_capture_rank_0.* straight into the profiler folder
    vllm_capture_file(tmp_path, 8, "FULL", hip=True)
    vllm_trace(tmp_path / "w.pt.trace.json.gz", [("execute_context_0(0)_generation_8(8)", 8, 0)], hip=True)
    from tracekit.ingest import ingest

    run = ingest([tmp_path], tmp_path / "run", jobs=1)
    m = run.read_manifest()
    assert len(m["ingest"]["files"]) == 1
    assert m["ingest"]["captures"][0]["graph_launches_matched"] == 1


def test_execution_details_key_captures_without_labels(tmp_path: Path) -> None:
    # TraceLens's sidecar names each capture file's size and mode
    caps = tmp_path / "capture_traces"
    for size in (8, 16):
        f = vllm_capture_file(caps, size, "FULL", hip=True)
        doc = json.loads(__import__("gzip").decompress(f.read_bytes()))
        doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name")).startswith("capture_")]
        f.write_bytes(__import__("gzip").compress(json.dumps(doc).encode()))
    names = sorted(p.name for p in caps.iterdir())
    (caps / "execution_details.json").write_text(json.dumps(
        [{"file": n, "batch_size": s, "mode": "FULL"} for n, s in zip(names, (8, 16), strict=True)]))
    trace = vllm_trace(tmp_path / "w.pt.trace.json.gz", [("execute_context_0(0)_generation_12(12)", 12, 0)], hip=True)
    t = analyze(trace)
    cap = t["manifest"]["ingest"]["captures"][0]
    assert cap["graph_launches_matched"] == 1
    kb = t["kernel_bound"]
    assert kb.loc[kb["op_name"] == "aten::mm", "flops"].max() >= 2 * 16 * MODEL.hidden * 2 * MODEL.inter


def test_without_annotations_packed_inputs_and_piecewise_graphs(tmp_path: Path) -> None:
    # vLLM with its step annotation off: each pass is an embedding of a packed [N] index, or (captured)
    # a run of graph launches; the token's copy closes a pass
    k = Kineto(hip=False)
    t, g = 1000.0, 1000.0
    for n in (40, 1):  # a packed pass of 40 tokens, then one of a single token (batch 1, decode)
        for op in forward_ops(n, False)[:3]:  # embedding, norm, qkv: eager
            t, g = k.eager(op, t, g)
        t, g = k.token_copy(t + 5.0, g)
        t += 200.0
    for _ in range(2):  # two piecewise passes: a graph per piece, eager work between
        for i, piece in enumerate(pieces(forward_ops(8, False))):
            t, g = k.replay(piece, t, g, None)
            if i < MODEL.layers:
                t, g = k.eager(Op("aten::add", [[8, 8], [8, 8]], ["float", "float"],
                                  [("void at::native::vectorized_elementwise_kernel<4>", "kernel", 2.0)]), t, g)
        t, g = k.token_copy(t + 5.0, g)
        t += 200.0
    t = analyze(k.write(tmp_path / "plain.json.gz"))
    st = t["steps"].sort_values("cpu_start_ns")
    assert list(st["source"]) == ["model_ops", "model_ops", "cuda_graph", "cuda_graph"]
    first = st.iloc[0]
    assert first["kind"] == "mixed" and pd.isna(first["batch"]) and pd.isna(first["q_len"]) and first["tokens"] == 40
    assert (st.iloc[1]["kind"], st.iloc[1]["batch"], st.iloc[1]["q_len"]) == ("decode", 1, 1)
    assert list(st["graph_launches"]) == [0, 0, L + 1, L + 1]
    assert any("packed (flat) token index" in w for w in t["manifest"]["warnings"])
