"""Graph replays matched wherever their graph was captured: in the trace itself, or to the same kernels
run eagerly (tracekit.ingest.capture.merge, tracekit.ingest.replay_match)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from engine_traces import Kineto, Op

from tracekit.ingest import capture, read_file
from tracekit.ingest import replay_match as RM
from tracekit.report.terminal import replay_line

H = "c10::Half"


def _ops(tag: str, n: int = 3) -> list[Op]:
    """A small forward: a GEMM and two elementwise ops, each launching one kernel (names carry ``tag``)."""
    return [Op("aten::mm", [[1, 64], [64, 128]], [H, H], [(f"gemm_{tag}", "kernel", 2.0)]),
            Op("aten::add", [[1, 128], [1, 128]], [H, H], [(f"add_{tag}", "kernel", 3.0)]),
            Op("aten::mul", [[1, 128], [1, 128]], [H, H], [(f"mul_{tag}", "kernel", 4.0)])][:n]


def _frame(tables: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    return tables["gpu_activity"].to_pandas(), tables["cpu_ops"].to_pandas()


def test_a_graph_captured_inside_the_trace_lends_its_ops(tmp_path: Path) -> None:
    # torch.cuda.graph by hand: the capture window (launches, no kernels run) then three replays
    k = Kineto(hip=False)
    ops = _ops("a")
    t = k.capture(ops, 100.0)
    g = t
    for _ in range(3):
        t, g = k.replay(ops, t + 10.0, g, None)
    tables, rep = capture.merge(read_file(k.write(tmp_path / "t.json")).tables, [])
    assert (rep.graphs_in_trace, rep.graph_launches, rep.graph_launches_matched) == (1, 3, 3)
    assert rep.matched_by == {"capture trace": 0, "trace capture": 3, "eager run": 0}
    assert rep.activities_matched == rep.activities_replayed == 9 and rep.unmatched_ns == 0
    gpu, cpu = _frame(tables)
    name_of = dict(zip(cpu["op_id"], cpu["name"].astype(str), strict=True))
    # each replayed kernel now has the op that launched it at capture
    got = [name_of[o] for o in gpu.sort_values("ts_ns")["op_id"]]
    assert got == ["aten::mm", "aten::add", "aten::mul"] * 3
    assert rep.ops_added == 0  # the trace's own ops: nothing to add
    # the ops inside the capture window launched nothing that ran: marked captured (steps skip them)
    cap = cpu["captured"].fillna(False).astype(bool)
    assert sorted(cpu.loc[cap, "name"].astype(str)) == ["aten::add", "aten::mm", "aten::mul"]
    assert set(gpu["op_id"]) <= set(cpu.loc[cap, "op_id"])


def test_replays_take_the_ops_of_the_same_kernels_run_eagerly(tmp_path: Path) -> None:
    # cudagraph trees: a warm-up pass runs the graph's kernels eagerly, the capture is outside the trace;
    # graph a is replayed twice, graph b once, a graph nobody ran eagerly once
    k = Kineto(hip=False)
    t, g = 100.0, 100.0
    for op in _ops("a") + _ops("b", 2):
        t, g = k.eager(op, t, g)
    for ops in (_ops("a"), _ops("b", 2), _ops("a"), _ops("z")):
        t, g = k.replay(ops, t + 10.0, g, None)
    tables, rep = capture.merge(read_file(k.write(tmp_path / "t.json")).tables, [])
    assert (rep.graph_launches, rep.graph_launches_matched) == (4, 3)
    assert rep.matched_by == {"capture trace": 0, "trace capture": 0, "eager run": 3}
    gpu, _ = _frame(tables)
    eager = gpu[gpu["launch_name"].astype(str) == "cudaLaunchKernel"]
    eager = eager.set_index(eager["name"].astype(str))
    replayed = gpu[gpu["launch_name"].astype(str) == "cudaGraphLaunch"]
    for name, op in zip(replayed["name"].astype(str), replayed["op_id"], strict=True):
        if name.endswith("_z"):
            assert pd.isna(op)  # unmatched: no op
        else:
            assert op == eager.loc[name, "op_id"]
    # the unmatched replay's time, by hand: kernels of 2, 3 and 4 µs
    assert rep.unmatched_ns == 9_000 and rep.activities_matched == 8
    assert rep.unmatched == {"no capture of it in the trace or beside it; its kernels (name, grid, block) "
                             "were not run eagerly in the trace": 1}
    assert any("0.01 ms of kernel time" in w and "without its ops' shapes" in w for w in rep.warnings)


def test_alignment_steps_over_eager_extras_and_replay_gaps() -> None:
    # eager: 10 11 [90] 12 13 14 15 16 17 18 19 ; replay: 10 11 12 13 14 [77] 15 16 17 18 19
    eager = np.array([10, 11, 90, 12, 13, 14, 15, 16, 17, 18, 19])
    runs = RM.EagerRuns(eager, np.arange(100, 111), np.arange(11) * 10)
    replay = np.array([10, 11, 12, 13, 14, 77, 15, 16, 17, 18, 19])
    got = RM.match(runs, replay, 1000)
    assert isinstance(got, RM.EagerMatch)
    assert got.op_id.tolist() == [100, 101, 103, 104, 105, -1, 106, 107, 108, 109, 110]
    assert got.agreement == 10 / 11
    # two mismatches in eleven: 9/11 < 90%
    bad = replay.copy()
    bad[0] = 78
    assert isinstance(RM.match(runs, bad, 1000), str)


def test_equal_eager_runs_the_latest_before_the_replay_wins() -> None:
    # the same three kernels run at t=0, 100 and 300; a replay at t=200 takes the run at 100
    tokens = np.array([1, 2, 3, 1, 2, 3, 1, 2, 3])
    runs = RM.EagerRuns(tokens, np.arange(9), np.array([0, 1, 2, 100, 101, 102, 300, 301, 302]))
    got = RM.match(runs, np.array([1, 2, 3]), 200)
    assert isinstance(got, RM.EagerMatch) and got.op_id.tolist() == [3, 4, 5]
    # before every run: the earliest after it
    got = RM.match(runs, np.array([1, 2, 3]), -5)
    assert isinstance(got, RM.EagerMatch) and got.op_id.tolist() == [0, 1, 2]


def test_tokens_tell_grids_apart(tmp_path: Path) -> None:
    k = Kineto(hip=False)
    k.eager(_ops("a", 1)[0], 10.0, 10.0)
    k.eager(_ops("a", 1)[0], 100.0, 100.0)
    k.events[-1]["args"]["grid"] = [128, 1, 1]  # the second GEMM launched on another grid
    gpu = read_file(k.write(tmp_path / "t.json")).tables["gpu_activity"]
    tok = RM.activity_tokens(gpu)
    assert len(tok) == 2 and tok[0] != tok[1]


def test_the_replay_line() -> None:
    ingest = {"captures": [{"graph_launches": 7, "graph_launches_matched": 4, "kernel_ns": 20_000_000,
                            "unmatched_ns": 5_000_000, "matched_by": {"trace capture": 1, "eager run": 3},
                            "unmatched": {"no capture of it": 3}}]}
    assert replay_line(ingest) == (
        "graph replays: 4 of 7 launches matched to their ops (1 by trace capture, 3 by eager run); 5.00 ms of "
        "replayed kernel time (25% of all GPU activity time) left without op shapes (no FLOP or byte model): "
        "no capture of it")
    assert replay_line({"captures": [{"graph_launches": 0}]}) is None and replay_line({}) is None


def test_kernels_run_eagerly_tell_two_captures_in_the_trace_apart(tmp_path: Path) -> None:
    # cudagraph trees: a warm-up pass runs each graph's ops eagerly, then each is captured, then replayed.
    # The two graphs have the same ops and launch count; only their shapes (and so their kernels) differ.
    def shaped(tag: str, rows: int) -> list[Op]:
        return [Op("aten::mm", [[rows, 64], [64, 128]], [H, H], [(f"gemm_{tag}", "kernel", 2.0)]),
                Op("aten::add", [[rows, 128], [rows, 128]], [H, H], [(f"add_{tag}", "kernel", 3.0)])]

    a, b = shaped("a", 1), shaped("b", 8)
    k = Kineto(hip=False)
    t, g = 100.0, 100.0
    for op in a + b:  # the warm-up
        t, g = k.eager(op, t, g)
    t = k.capture(a, t + 10.0)
    t = k.capture(b, t + 10.0)
    for ops in (b, a, a):
        t, g = k.replay(ops, t + 10.0, g, None)
    trace = k.write(tmp_path / "t.json")
    tables, rep = capture.merge(read_file(trace).tables, [])
    assert (rep.graphs_in_trace, rep.graph_launches, rep.graph_launches_matched) == (2, 3, 3)
    assert rep.matched_by["trace capture"] == 3
    gpu, cpu = _frame(tables)
    dims = dict(zip(cpu["op_id"], cpu["input_dims"], strict=True))
    replayed = gpu[gpu["launch_name"].astype(str) == "cudaGraphLaunch"].sort_values("ts_ns")
    rows = [json.loads(dims[o])[0][0] for o in replayed["op_id"]]
    assert rows == [8, 8, 1, 1, 1, 1]
    # the captured ops are the capture window's, not the warm-up's
    ts = dict(zip(cpu["op_id"], cpu["ts_ns"], strict=True))
    first_capture = int(read_file(trace).tables["runtime"].to_pandas().query(
        "name == 'cudaStreamBeginCapture'")["ts_ns"].min())
    assert all(ts[o] > first_capture for o in replayed["op_id"])


def test_cudagraph_trees_in_one_trace_leave_no_decode_kernel_other(tmp_path: Path) -> None:
    # torch.compile reduce-overhead as Transformers runs it: an eager prefill, a warm-up decode pass run
    # eagerly (Inductor's Triton kernels under ops of their names, the GEMMs under aten::mm), the next
    # pass captured (launches only), then replays, each after a copy of its inputs into the graph's
    import contextlib
    import io

    from tracekit.cli import main

    def decode_ops() -> list[Op]:
        return [Op("triton_red_fused_embedding_mean_pow_rsqrt_0", [[1, 1, 64]], [H],
                   [("triton_red_fused_embedding_mean_pow_rsqrt_0", "kernel", 3.0)]),
                Op("aten::mm", [[1, 64], [64, 4096]], [H, H], [("nvjet_hsh_64x8_1x1_v_bz_TNT", "kernel", 9.0)]),
                Op("triton_poi_fused_add_mul_silu_1", [[1, 4096]], [H],
                   [("triton_poi_fused_add_mul_silu_1", "kernel", 2.0)]),
                Op("aten::mm", [[1, 4096], [4096, 64]], [H, H], [("nvjet_hsh_64x8_1x1_v_bz_NNT", "kernel", 9.0)])]

    k = Kineto(hip=False, props=None)
    t, g = 100.0, 100.0
    for op in [Op("aten::embedding", [[32000, 64], [1, 24], [], [], []], [H, "long int", "Scalar", "Scalar", "Scalar"],
                  [("void at::native::indexSelectLargeIndex<c10::Half, long, unsigned int>", "kernel", 5.0)]),
               Op("aten::mm", [[24, 64], [64, 4096]], [H, H], [("nvjet_hsh_128x64_1x1_v_bz_TNT", "kernel", 20.0)])]:
        t, g = k.eager(op, t, g)
    for op in decode_ops():  # the warm-up pass
        t, g = k.eager(op, t + 50.0, g)
    t = k.capture(decode_ops(), t + 50.0)
    for _ in range(6):
        ext = k.op("aten::copy_", t + 30.0, 8.0, [[1, 1], [1, 1], []], ["long int", "long int", "Scalar"])
        c = k.runtime(k.launch_name("memcpy"), t + 31.0, 5.0, ext)
        k.device("Memcpy DtoD (Device -> Device)", "memcpy", max(g, t + 37.0), 1.0, c, ext, nbytes=8)
        t, g = k.replay(decode_ops(), t + 45.0, max(g, t + 40.0), None)
        t = max(t, g) + 200.0
    trace = k.write(tmp_path / "compiled.json")
    out = tmp_path / "run"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["analyze", str(trace), "--out", str(out), "--ceiling", "H100"]) == 0
    kb = pd.read_parquet(out / "tables" / "kernel_bound.parquet")
    rep = kb[kb["launch_name"].astype(str) == "cudaGraphLaunch"]
    assert len(rep) == 24 and rep["op_id"].notna().all()
    assert set(rep["op_name"].dropna().astype(str)) >= {"aten::mm"}
    assert (rep["bound"].astype(str) != "other").all()
    # each replayed GEMM has its captured op's FLOPs, per replay: 2 * 1 * 64 * 4096
    assert sorted(set(rep.loc[rep["kclass"] == "gemm", "flops"])) == [2 * 64 * 4096]
    assert "graph replays: 6 of 6 launches matched to their ops (6 by trace capture)" in buf.getvalue()


def test_overlapping_replays_keep_their_own_kernels(tmp_path: Path) -> None:
    # GIVEN a graph captured in the trace, then two replays launched 1 us apart whose kernels interleave
    # on the GPU: A's gemm [g, g+2), B's gemm [g+1, g+3), A's add [g+2.5, g+5.5), B's add [g+3.5, ...) ...
    k = Kineto(hip=False)
    ops = _ops("a")
    t = k.capture(ops, 100.0)
    k.replay(ops, t + 10.0, t + 40.0, None)
    k.replay(ops, t + 11.0, t + 41.0, None)
    tables, rep = capture.merge(read_file(k.write(tmp_path / "t.json")).tables, [])
    # THEN both replays are matched, each kernel to the op that launched it at capture
    assert (rep.graph_launches, rep.graph_launches_matched, rep.activities_matched) == (2, 2, 6)
    gpu, cpu = _frame(tables)
    name_of = dict(zip(cpu["op_id"], cpu["name"].astype(str), strict=True))
    got = [(str(n), name_of[o]) for n, o in gpu.sort_values("ts_ns")[["name", "op_id"]].itertuples(index=False)]
    assert got == [("gemm_a", "aten::mm"), ("gemm_a", "aten::mm"), ("add_a", "aten::add"), ("add_a", "aten::add"),
                   ("mul_a", "aten::mul"), ("mul_a", "aten::mul")]
