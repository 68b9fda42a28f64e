"""The report's largest ops per phase (tracekit.report.view.op_rows)."""

from __future__ import annotations

import pandas as pd

from tracekit.report.view import op_rows


def test_ops_are_ranked_by_kernel_time_within_each_phase() -> None:
    kb = pd.DataFrame({
        "phase": ["decode", "decode", "decode", "prefill", "decode", None, "decode"],
        "op_name": ["aten::index", "aten::bmm", "aten::index", "aten::mm", None, "aten::mm", "aten::index"],
        "kclass": ["copy", "gemm", "copy", "gemm", "reduction", "gemm", "copy"],
        "bound": ["memory", "memory", "memory", "compute", "latency", "compute", "latency"],
        "dur_ns": [600, 300, 300, 1000, 100, 5000, 100],
    })
    headers, rows = op_rows(kb, per_phase=2)
    assert headers[:3] == ["phase", "op", "kernels"]
    # prefill first; the kernel outside every step (phase null) is left out; two ops per phase
    assert [r[:3] for r in rows] == [["prefill", "aten::mm", "1"], ["decode", "aten::index", "3"],
                                     ["decode", "aten::bmm", "1"]]
    index = rows[1]
    assert index[4] == "71.4%"  # 1,000 of the decode's 1,400 ns
    assert index[5] == "memory 90.0%"  # 900 of its 1,000 ns memory-bound
    _, all_rows = op_rows(kb)
    assert all_rows[-1][:2] == ["decode", "(reduction kernels, no op)"]


def test_no_kernel_bound_no_rows() -> None:
    assert op_rows(pd.DataFrame())[1] == []
    assert op_rows(pd.DataFrame({"phase": [None], "dur_ns": [1], "op_name": [None], "kclass": [None],
                                 "bound": [None]}))[1] == []
