"""Linkage details a wrong number would hide in: which op a kernel belongs to, and which op is whose parent.

Expected values are worked out by hand from the events, not from the linkage code's own constants.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tracekit.ingest import read_trace_tables


def _trace(events: list[dict]) -> dict:
    return {"traceEvents": events, "baseTimeNanoseconds": 0}


def _write(path: Path, doc: dict) -> Path:
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def test_kernel_links_to_the_innermost_op_that_shares_its_external_id(tmp_path: Path) -> None:
    # GIVEN an outer op and an inner op that carry the same External id (a record_function around an
    # aten op both stamped with it), and a kernel with that External id
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "outer", "pid": 1, "tid": 1, "ts": 100, "dur": 100, "args": {"External id": 5}},
        {"ph": "X", "cat": "cpu_op", "name": "inner", "pid": 1, "tid": 1, "ts": 120, "dur": 30, "args": {"External id": 5}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 125, "dur": 5,
         "args": {"correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 140, "dur": 10,
         "args": {"correlation": 9, "External id": 5, "device": 0, "stream": 7}},
    ]
    t = read_trace_tables(_write(tmp_path / "t.json.gz", _trace(ev)))
    cpu = t["cpu_ops"].to_pandas().set_index("name")
    gpu = t["gpu_activity"].to_pandas()
    # THEN the kernel belongs to the inner op (the one that launched it), not the outer one
    assert gpu.loc[0, "op_id"] == cpu.loc["inner", "op_id"]
    assert gpu.loc[0, "op_id"] != cpu.loc["outer", "op_id"]


def test_an_op_that_starts_with_its_parent_is_nested_in_it_whatever_the_file_order(tmp_path: Path) -> None:
    # GIVEN two ops on one thread starting at the same instant, the inner (shorter) one written first
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "inner", "pid": 1, "tid": 1, "ts": 100, "dur": 20},
        {"ph": "X", "cat": "cpu_op", "name": "outer", "pid": 1, "tid": 1, "ts": 100, "dur": 50},
        {"ph": "X", "cat": "cpu_op", "name": "later", "pid": 1, "tid": 1, "ts": 130, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "other_thread", "pid": 1, "tid": 2, "ts": 100, "dur": 500},
    ]
    t = read_trace_tables(_write(tmp_path / "t.json.gz", _trace(ev)))
    cpu = t["cpu_ops"].to_pandas().set_index("name")
    # THEN the longer one is the parent of the shorter one and of the op that starts inside it later;
    # an op on another thread is nobody's parent here
    assert cpu.loc["inner", "parent_id"] == cpu.loc["outer", "op_id"]
    assert cpu.loc["later", "parent_id"] == cpu.loc["outer", "op_id"]
    assert cpu["parent_id"].isna().sum() == 2  # outer and other_thread are top level
