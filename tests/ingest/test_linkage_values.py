"""Linkage of a hand-written trace: op ids, parents per thread, and each kernel's launching op, by hand."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd

from tracekit.ingest import read_file
from tracekit.ingest.linkage import OP_ID_STRIDE


def _x(cat: str, name: str, pid: int, tid: int, ts: int, dur: int, **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _kernel(name: str, ts: int, corr: int, **args: object) -> dict:
    return _x("kernel", name, 0, 7, ts, 5, correlation=corr, device=0, stream=7, **args)


EVENTS = [
    # thread (1, 1): outer [0, 100) holds mid [10, 50) holds inner [20, 30); second [60, 90) is outer's;
    # straddle [95, 200) starts inside outer but ends after it: nobody's child
    _x("cpu_op", "outer", 1, 1, 0, 100, **{"External id": 1}),
    _x("cpu_op", "mid", 1, 1, 10, 40, **{"External id": 2}),
    _x("cpu_op", "inner", 1, 1, 20, 10, **{"External id": 3}),
    _x("cpu_op", "second", 1, 1, 60, 30),
    _x("cpu_op", "straddle", 1, 1, 95, 105),
    _x("cpu_op", "other_thread", 1, 2, 15, 50),  # (1, 2): holds the graph launch at 30
    _x("cpu_op", "pid2", 2, 1, 0, 1000),  # another process, same tid
    _x("cpu_op", "pid2_child", 2, 1, 5, 10),
    # runtime calls: the first carries the External id its kernel lacks; the second and third none
    _x("cuda_runtime", "cudaLaunchKernel", 1, 1, 22, 2, correlation=11, **{"External id": 3}),
    _x("cuda_runtime", "cudaLaunchKernel", 1, 1, 65, 2, correlation=12),
    _x("cuda_runtime", "cudaGraphLaunch", 1, 2, 30, 5, correlation=13),
    _x("cuda_runtime", "cudaLaunchKernel", 2, 1, 7, 2, correlation=14, **{"External id": 77}),
    _kernel("k_inner", 300, 11),  # -> inner, through its runtime call's External id
    _kernel("k_second", 310, 12),  # -> second: the innermost op of (1, 1) holding the call at 65
    _kernel("k_graph_a", 320, 13),  # both graph kernels -> other_thread, by time on (1, 2)
    _kernel("k_graph_b", 330, 13),
    _kernel("k_orphan", 340, 99),  # no runtime call with its correlation: no launching op
    _kernel("k_own_ext", 350, 14, **{"External id": 2}),  # its own External id wins: mid
]


def test_linkage_of_a_hand_written_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": EVENTS, "baseTimeNanoseconds": 0}).encode()))
    res = read_file(path, file_index=2)
    cpu = res.tables["cpu_ops"].to_pandas().set_index("name")
    base = 2 * OP_ID_STRIDE
    # rows sorted by process, thread, start (outer first): op ids are the file's base + the row
    order = ["outer", "mid", "inner", "second", "straddle", "other_thread", "pid2", "pid2_child"]
    assert [int(cpu.loc[n, "op_id"]) - base for n in order] == list(range(8))
    parent = {n: None if pd.isna(cpu.loc[n, "parent_id"]) else order[int(cpu.loc[n, "parent_id"]) - base]
              for n in order}
    assert parent == {"outer": None, "mid": "outer", "inner": "mid", "second": "outer", "straddle": None,
                      "other_thread": None, "pid2": None, "pid2_child": "pid2"}
    gpu = res.tables["gpu_activity"].to_pandas().set_index("name")
    op_of = {n: None if pd.isna(gpu.loc[n, "op_id"]) else order[int(gpu.loc[n, "op_id"]) - base] for n in gpu.index}
    assert op_of == {"k_inner": "inner", "k_second": "second", "k_graph_a": "other_thread",
                     "k_graph_b": "other_thread", "k_orphan": None, "k_own_ext": "mid"}
    assert gpu.loc["k_graph_b", "launch_name"] == "cudaGraphLaunch"
    assert gpu.loc["k_inner", "launch_name"] == "cudaLaunchKernel"
    assert pd.isna(gpu.loc["k_orphan", "launch_name"])
    assert res.counts.warnings["kernels linked to CPU ops by time nesting"] == 3
    assert res.counts.warnings["GPU activity without a launching CPU op"] == 1


def test_a_launch_nested_only_in_the_first_op_links_to_it(tmp_path: Path) -> None:
    # the only CPU op (row 0 of cpu_ops) holds a runtime call without an External id
    events = [_x("cpu_op", "only", 1, 1, 0, 100), _x("cuda_runtime", "cudaLaunchKernel", 1, 1, 40, 2, correlation=5),
              _kernel("k", 200, 5)]
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 0}).encode()))
    res = read_file(path, file_index=0)
    gpu = res.tables["gpu_activity"].to_pandas()
    assert gpu["op_id"].tolist() == [res.tables["cpu_ops"].to_pandas()["op_id"].iloc[0]] == [0]
    assert res.counts.warnings["kernels linked to CPU ops by time nesting"] == 1


def test_a_kernel_linked_to_op_zero_by_its_external_id_stays_there(tmp_path: Path) -> None:
    # op 0 (outer) carries External id 1; the runtime call, inside inner (op 1, no External id), names it
    events = [_x("cpu_op", "outer", 1, 1, 0, 100, **{"External id": 1}), _x("cpu_op", "inner", 1, 1, 10, 40),
              _x("cuda_runtime", "cudaLaunchKernel", 1, 1, 20, 2, correlation=5, **{"External id": 1}),
              _kernel("k", 200, 5)]
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 0}).encode()))
    res = read_file(path, file_index=0)
    cpu = res.tables["cpu_ops"].to_pandas().set_index("name")
    assert int(cpu.loc["outer", "op_id"]) == 0
    assert res.tables["gpu_activity"].to_pandas()["op_id"].tolist() == [0]
    assert res.counts.warnings["kernels linked to CPU ops by time nesting"] == 0
