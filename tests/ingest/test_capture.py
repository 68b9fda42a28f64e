"""Graph capture merge (tracekit.ingest.capture) and the op nesting it relies on (tracekit.ingest.linkage)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from engine_traces import Kineto, forward_ops, sglang_capture_file, vllm_capture_file, vllm_trace

from tracekit.ingest import capture, read_file
from tracekit.ingest.linkage import _nest_parents


def test_nesting_finds_the_innermost_enclosing_op_past_siblings() -> None:
    # _dummy_run around a run of sibling ops, one of which has a child: every sibling's parent is the
    # outer op (a sibling whose own candidate still climbs must not lose its parent)
    start = np.array([0, 90, 101, 112, 123, 125, 156], dtype=np.int64)
    end = np.array([1000, 100, 111, 122, 144, 135, 166], dtype=np.int64)
    key = np.zeros(len(start), dtype=np.int64)
    assert _nest_parents(key, start, end).tolist() == [-1, 0, 0, 0, 0, 4, 0]
    # another thread's ops are never parents; equal spans nest outer-first
    key2 = np.array([0, 0, 1, 1], dtype=np.int64)
    assert _nest_parents(key2, np.array([0, 5, 5, 5]), np.array([10, 10, 10, 10])).tolist() == [-1, 0, -1, 2]


def test_nesting_in_a_real_capture_trace(tmp_path: Path) -> None:
    f = vllm_capture_file(tmp_path, 8, "FULL", hip=False)
    cpu = read_file(f).tables["cpu_ops"].to_pandas()
    dummy = cpu.loc[cpu["name"].astype(str).str.endswith("_dummy_run"), "op_id"].iloc[0]
    top = cpu[cpu["name"].astype(str).isin(["aten::mm", "_C::rms_norm", "_C::silu_and_mul"])]
    assert (top["parent_id"] == dummy).all()


def test_captured_graphs_of_each_engine(tmp_path: Path) -> None:
    full = vllm_capture_file(tmp_path / "v", 32, "FULL", hip=True)
    pw = vllm_capture_file(tmp_path / "v", 16, "PIECEWISE", hip=False)
    sg = sglang_capture_file(tmp_path / "capture_traces", 8, hip=True)
    files, warnings = capture.read_captures([full, pw, sg], 10)
    assert not warnings
    g_full, g_pw, g_sg = (f.graphs for f in files)
    n_full = sum(len(op.kernels) + sum(len(c.kernels) for c in op.children) for op in forward_ops(32, True))
    assert [(g.size, g.size_kind, g.mode, g.piece, len(g.launches)) for g in g_full] == [(32, "tokens", "FULL", 0, n_full)]
    assert [g.piece for g in g_pw] == list(range(5)) and {g.mode for g in g_pw} == {"PIECEWISE"}
    # SGLang's file has no capture markers: all its launches, its two input copies first
    assert [(g.size, g.size_kind) for g in g_sg] == [(8, "batch")]
    assert [launch.kind for launch in g_sg[0].launches[:3]] == ["memcpy", "memcpy", "kernel"]
    # the captured ops carry their op ids (file index 10 onwards)
    assert all(launch.op_id is not None and launch.op_id >= 10 << 40 for launch in g_full[0].launches)


def test_names_and_discovery(tmp_path: Path) -> None:
    for name in ("graph_capture_rank_0.1773709679453551615.pt.trace.json.gz", "bs_8_rank0.json.gz",
                 "decode_bs_16_rank1.json.gz", "cuda_graph_capture-decode-TP-0.json.gz"):
        assert capture.is_capture_file(Path(name)), name
    assert not capture.is_capture_file(Path("dp0_pp0_tp0_dcp0_ep0_rank0.177370968.pt.trace.json.gz"))
    assert not capture.is_capture_file(Path("run-TP-0.trace.json.gz"))
    (tmp_path / "capture_traces").mkdir()
    (tmp_path / "graph_capture_profile").mkdir()
    for p in (tmp_path / "capture_traces" / "a.json.gz", tmp_path / "graph_capture_profile" / "bs_1_rank0.json.gz",
              tmp_path / "graph_capture_rank_0.1.pt.trace.json", tmp_path / "capture_traces" / "execution_details.json",
              tmp_path / "trace.json"):
        p.write_text("{}")
    found = [p.relative_to(tmp_path).as_posix() for p in capture.find_captures(tmp_path / "trace.json")]
    assert found == ["capture_traces/a.json.gz", "graph_capture_profile/bs_1_rank0.json.gz",
                     "graph_capture_rank_0.1.pt.trace.json"]


def _tables(trace: Path) -> dict:
    return read_file(trace).tables


def _without_kernels(path: Path) -> Path:
    """The capture file without the kernels its warm-up ran: only its capture windows are left."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "kernel"]
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def test_equal_captures_without_a_key_match_nothing(tmp_path: Path) -> None:
    # two captures of the same ops and no engine step to tell which one a replay is: a shape would be
    # a guess, so none is taken
    a = _without_kernels(vllm_capture_file(tmp_path / "c", 8, "FULL", hip=True))
    b = _without_kernels(vllm_capture_file(tmp_path / "c", 16, "FULL", hip=True))
    k = Kineto(hip=True)
    k.replay(forward_ops(8, True), 100.0, 100.0, None)
    trace = k.write(tmp_path / "t.json")
    files, _ = capture.read_captures([a, b], 1)
    tables, rep = capture.merge(_tables(trace), files)
    assert rep.graph_launches == 1 and rep.graph_launches_matched == 0
    assert any("fit equally" in w or "nothing tells them apart" in w for w in rep.warnings)
    assert tables["gpu_activity"]["op_id"].null_count == tables["gpu_activity"].num_rows
    # with one of them only, the count and order decide
    files, _ = capture.read_captures([a], 1)
    _, rep = capture.merge(_tables(trace), files)
    assert rep.graph_launches_matched == 1


def test_kernels_run_in_a_captures_warm_up_tell_equal_captures_apart(tmp_path: Path) -> None:
    # the same two captures with their warm-up kernels: aten::mm of [8, 1024] launched MT8x... GEMMs
    # there, of [16, 1024] MT16x...; the replay's GEMMs are MT8x..., so the size-8 capture is the one
    a = vllm_capture_file(tmp_path / "c", 8, "FULL", hip=True)
    b = vllm_capture_file(tmp_path / "c", 16, "FULL", hip=True)
    k = Kineto(hip=True)
    k.replay(forward_ops(8, True), 100.0, 100.0, None)
    files, _ = capture.read_captures([a, b], 1)
    tables, rep = capture.merge(_tables(k.write(tmp_path / "t.json")), files)
    assert (rep.graph_launches_matched, files[0].graphs[0].used, files[1].graphs[0].used) == (1, 1, 0)
    assert rep.matched_by == {"capture trace": 1, "trace capture": 0, "eager run": 0}
    assert rep.activities_matched == rep.activities_replayed == tables["gpu_activity"].num_rows


def test_a_replay_longer_than_every_capture_is_not_matched(tmp_path: Path) -> None:
    cap = vllm_capture_file(tmp_path / "c", 8, "FULL", hip=True)
    k = Kineto(hip=True)
    ops = forward_ops(8, True)
    k.replay([*ops, ops[-1]], 100.0, 100.0, None)  # one kernel more than captured
    files, _ = capture.read_captures([cap], 1)
    _, rep = capture.merge(_tables(k.write(tmp_path / "t.json")), files)
    assert rep.graph_launches_matched == 0 and rep.activities_matched == 0
    assert any("no captured graph has its" in w for w in rep.warnings)


def test_triton_names_decide_between_captures(tmp_path: Path) -> None:
    # tracekit's own compiled runs: Inductor launches Triton kernels under a record_function of the
    # kernel's name, so the replay's names pick the capture
    def own(path: Path, kernel: str) -> Path:
        k = Kineto(hip=False)
        k.annotation("## Call CompiledFxGraph fabc ##", 10.0, 500.0, gpu=False)
        from engine_traces import Op

        k.capture([Op("aten::mm", [[1, 64], [64, 64]], ["c10::Half"] * 2, [("nvjet_sm90_hsh_64x8", "kernel", 2.0)]),
                   Op(kernel, [[1, 64], [64]], ["c10::Half"] * 2, [(kernel, "kernel", 1.0)])], 20.0)
        return k.write(path)

    a = own(tmp_path / "c" / "compile_capture_a.json", "triton_poi_fused_add_0")
    b = own(tmp_path / "c" / "compile_capture_b.json", "triton_per_fused_mean_1")
    k = Kineto(hip=False)
    from engine_traces import Op

    k.replay([Op("aten::mm", [], [], [("nvjet_sm90_hsh_64x8", "kernel", 2.0)]),
              Op("x", [], [], [("triton_per_fused_mean_1", "kernel", 1.0)])], 100.0, 100.0, 7)
    files, _ = capture.read_captures([a, b], 1)
    _, rep = capture.merge(_tables(k.write(tmp_path / "t.json")), files)
    assert rep.graph_launches_matched == 1 and files[1].graphs[0].used == 1 and files[0].graphs[0].used == 0


def test_captured_ops_join_the_run_marked(tmp_path: Path) -> None:
    caps = tmp_path / "capture_traces"
    vllm_capture_file(caps, 8, "FULL", hip=False)
    trace = vllm_trace(tmp_path / "w.pt.trace.json.gz", [("execute_context_0(0)_generation_5(5)", 5, 0)], hip=False)
    from tracekit.ingest import ingest

    run = ingest([trace], tmp_path / "run", jobs=1)
    cpu = run.read_table("cpu_ops").to_pandas()
    cap = cpu[cpu["captured"].fillna(False).astype(bool)]
    assert len(cap) and cap["op_id"].is_unique and cpu["op_id"].is_unique
    # the capture's own warm-up ops (outside the windows) stay out; the enclosing _dummy_run comes in
    assert cap["name"].astype(str).str.endswith("_dummy_run").sum() == 1
    n_ops = len(forward_ops(8, False)) + sum(len(o.children) for o in forward_ops(8, False))
    assert len(cap) == n_ops + 1
    # ingest is cached on the captures too: another capture set is another ingest
    m = run.read_manifest()
    assert m["ingest"]["captures"][0]["graph_launches_matched"] == 1
    doc = json.loads(gzip.decompress(next(caps.iterdir()).read_bytes()))
    assert doc["deviceProperties"][0]["numSms"] == 132


@pytest.mark.parametrize("hip", [False, True])
def test_no_graphs_no_change(tmp_path: Path, hip: bool) -> None:
    k = Kineto(hip=hip)
    k.eager(forward_ops(4, hip)[1], 10.0, 10.0)
    tables = _tables(k.write(tmp_path / "t.json"))
    out, rep = capture.merge(tables, [])
    assert out is tables and rep.graph_launches == 0 and not rep.warnings


def test_a_graph_captured_twice_is_one_answer(tmp_path: Path) -> None:
    # the same ops with the same shapes in two capture windows (a graph recorded again): either is right
    k = Kineto(hip=False)
    ops = forward_ops(8, False)
    t = k.capture(ops, 100.0)
    k.capture(ops, t + 50.0)
    cap = k.write(tmp_path / "c" / "compile_capture.pt.trace.json.gz")
    r = Kineto(hip=False)
    r.replay(ops, 100.0, 100.0, 3)
    files, _ = capture.read_captures([cap], 1)
    assert len(files[0].graphs) == 2
    _, rep = capture.merge(_tables(r.write(tmp_path / "t.json")), files)
    assert rep.graph_launches_matched == 1 and not rep.warnings
