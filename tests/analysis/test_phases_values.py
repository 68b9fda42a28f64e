"""The phases table and the per-device timeline on a two-GPU hand-built run; every value worked out by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from tracekit.analysis import phases

NAN = np.nan
# step_id, request_id, kind, cpu_start, cpu_end, gpu_end, captured
STEPS = pd.DataFrame(
    [(0, 0, "prefill", 0, 800, 1000, True),  # window [0, 1000): the GPU ends after the host
     (1, 0, "decode", 1000, 1500, NAN, True),  # [1000, 1500): no GPU end
     (2, 1, "decode", 2000, 2400, 2600, True),  # [2000, 2600)
     (3, 1, "decode", 2700, 2800, NAN, False)],  # outside the kernel-capture window: not idle time
    columns=["step_id", "request_id", "kind", "cpu_start_ns", "cpu_end_ns", "gpu_end_ns", "captured"])
# step_id, device, kind, name, ts, dur
KERNELS = pd.DataFrame(
    [(0, 0, "kernel", "gemm", 100, 400), (0, 1, "kernel", "gemm", 200, 100), (0, 0, "memcpy", "Memcpy HtoD", 450, 150),
     (1, 0, "kernel", "ncclDevKernel_AllReduce", 1100, 200), (1, 1, "kernel", "gemm", 1100, 100),
     (2, 0, "kernel", "gemm", 2100, 100),
     (None, 1, "kernel", "gemm", 3000, 100)],  # launched outside every step
    columns=["step_id", "device", "kind", "name", "ts_ns", "dur_ns"]).astype({"step_id": "Int64"})


def _rows(table: pa.Table) -> dict[tuple[object, str], tuple]:
    df = table.to_pandas()
    cols = ["steps", "steps_captured", "time_ns", "gpu_busy_ns", "idle_ns", "comm_ns", "memcpy_ns"]
    return {(None if pd.isna(r.request_id) else int(r.request_id), r.phase): tuple(int(getattr(r, c)) for c in cols)
            for r in df.itertuples()}


def test_phase_rows_per_request_and_for_the_run_on_two_devices() -> None:
    rows = _rows(phases.build(STEPS, KERNELS, span=(0, 4000)))
    # (steps, captured, time, busy, idle = time x 2 devices - busy, comm, memcpy)
    # request 0 prefill: busy device 0 [100, 600) = 500 (the copy overlaps the GEMM), device 1 100
    assert rows[(0, "prefill")] == (1, 1, 1000, 600, 1400, 0, 150)
    assert rows[(0, "decode")] == (1, 1, 500, 300, 700, 200, 0)
    assert rows[(1, "decode")] == (2, 1, 600, 100, 1100, 0, 0)
    assert rows[(None, "prefill")] == rows[(0, "prefill")]
    assert rows[(None, "decode")] == (3, 2, 1100, 400, 1800, 200, 0)
    # outside: 4000 - 2100 ns of captured windows; one 100 ns kernel on device 1
    assert rows[(None, "outside")] == (0, 0, 1900, 100, 3700, 0, 0)
    assert len(rows) == 6


def test_the_outside_row_spans_its_kernels_without_a_trace_span() -> None:
    rows = _rows(phases.build(STEPS, KERNELS))
    assert rows[(None, "outside")] == (0, 0, 100, 100, 100, 0, 0)
    # no kernels at all: a CPU trace says nothing about GPU time, and there is no outside row
    cpu_only = phases.build(STEPS, KERNELS.iloc[:0]).to_pandas()
    assert cpu_only["gpu_busy_ns"].isna().all() and cpu_only["idle_ns"].isna().all()
    assert list(cpu_only["time_ns"]) == [1000, 500, 600, 1000, 1100]
    assert "outside" not in set(cpu_only["phase"])


def test_device_timeline_splits_each_device() -> None:
    t = phases.device_timeline(KERNELS, (0, 4000)).to_pandas().set_index("device")
    cols = ["span_ns", "busy_ns", "compute_ns", "memcpy_ns", "comm_ns", "idle_ns", "activities", "outside_steps"]
    assert t.loc[0, cols].tolist() == [4000, 800, 500, 150, 200, 3200, 4, 0]
    assert t.loc[1, cols].tolist() == [4000, 300, 300, 0, 0, 3700, 3, 1]
    own = phases.device_timeline(KERNELS, None).to_pandas().set_index("device")
    assert own.loc[0, "span_ns"] == 2200 - 100 and own.loc[1, "span_ns"] == 3100 - 200
    assert own.loc[1, "idle_ns"] == 2900 - 300


def test_a_span_covered_by_captured_steps_leaves_no_outside_time() -> None:
    # the trace spans [0, 1500): exactly steps 0 and 1; no kernel outside them
    rows = _rows(phases.build(STEPS, KERNELS.iloc[:-1], span=(0, 1500)))
    assert rows[(None, "outside")] == (0, 0, 0, 0, 0, 0, 0)


def test_a_device_busy_its_whole_span_has_no_idle_time() -> None:
    # two back-to-back kernels: [0, 100) and [100, 250)
    k = pd.DataFrame([(0, 0, "kernel", "gemm", 0, 100), (0, 0, "kernel", "gemm", 100, 150)],
                     columns=["step_id", "device", "kind", "name", "ts_ns", "dur_ns"]).astype({"step_id": "Int64"})
    t = phases.device_timeline(k, None).to_pandas().set_index("device")
    assert t.loc[0, ["span_ns", "busy_ns", "idle_ns"]].tolist() == [250, 250, 0]


def test_arrow_and_pandas_inputs_give_the_same_tables() -> None:
    steps, kernels = pa.Table.from_pandas(STEPS), pa.Table.from_pandas(KERNELS)
    for span in ((0, 4000), None):
        assert phases.build(steps, kernels, span).equals(phases.build(STEPS, KERNELS, span))
        assert phases.device_timeline(kernels, span).equals(phases.device_timeline(KERNELS, span))
