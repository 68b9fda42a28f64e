"""The report's largest ops per phase (tracekit.report.view.kernel_ops, op_rows)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from tracekit.report.view import kernel_ops, op_rows


def _kernels() -> pa.Table:
    return pa.table({
        "phase": ["decode", "decode", "decode", "prefill", "decode", None, "decode"],
        "op_name": ["aten::index", "aten::bmm", "aten::index", "aten::mm", None, "aten::mm", "aten::index"],
        "kclass": ["copy", "gemm", "copy", "gemm", "reduction", "gemm", "copy"],
        "bound": ["memory", "memory", "memory", "compute", "latency", "compute", "latency"],
        "dur_ns": pa.array([600, 300, 300, 1000, 100, 5000, None], pa.int64()),
    })


def test_kernels_are_summed_per_phase_op_and_class() -> None:
    ops = kernel_ops(_kernels())
    got = {(r.phase, r.op_name, r.bound): (r.time_ns, r.kernels) for r in ops.itertuples()}
    # the kernel outside every step (phase null) is left out; a kernel without a duration counts, for 0 ns
    assert got == {("decode", "aten::index", "memory"): (900.0, 2), ("decode", "aten::index", "latency"): (0.0, 1),
                   ("decode", "aten::bmm", "memory"): (300.0, 1), ("prefill", "aten::mm", "compute"): (1000.0, 1),
                   ("decode", None, "latency"): (100.0, 1)}


def test_ops_are_ranked_by_kernel_time_within_each_phase() -> None:
    ops = kernel_ops(_kernels())
    headers, rows = op_rows(ops, per_phase=2)
    assert headers[:3] == ["phase", "op", "kernels"]
    assert [r[:3] for r in rows] == [["prefill", "aten::mm", "1"], ["decode", "aten::index", "3"],
                                     ["decode", "aten::bmm", "1"]]
    index = rows[1]
    assert index[4] == "69.2%"  # 900 of the decode's 1,300 ns
    assert index[5] == "memory 100.0%"
    _, all_rows = op_rows(ops)
    assert all_rows[-1][:2] == ["decode", "(reduction kernels, no op)"]


def test_no_kernels_no_rows() -> None:
    assert op_rows(pd.DataFrame())[1] == []
    assert op_rows(kernel_ops(_kernels().slice(5, 1)))[1] == []  # only a kernel outside every step
