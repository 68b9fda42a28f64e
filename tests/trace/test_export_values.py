"""Exported Chrome JSON, value by value on a synthetic run: microseconds as exact text (three decimals,
zero-padded) and events clipped to an export window. Hand-worked numbers in each test."""

from __future__ import annotations

import io
import json
import re

import pyarrow as pa

from tracekit.model.schema import from_columns
from tracekit.trace.tracks import build_tracks, write_chrome_json
from tracekit.trace.trackset import Window

T0 = 1_732_900_000_000_000_000  # epoch-scale ns, as Kineto writes them


def _tables() -> dict[str, pa.Table]:
    # one step on the CPU [T0+5, T0+1_000_005) and the GPU [T0+7, T0+900_007); one kernel of 2,050 ns at T0+40_005
    steps = from_columns("steps", {
        "step_id": [0], "request_id": [0], "kind": ["decode"], "batch": [1], "q_len": [1], "kv_len": [9],
        "tokens": [1], "source": ["tracekit"], "cpu_start_ns": [T0 + 5], "cpu_end_ns": [T0 + 1_000_005],
        "gpu_start_ns": [T0 + 7], "gpu_end_ns": [T0 + 900_007], "gpu_busy_ns": [2_050]})
    gpu = from_columns("gpu_activity", {
        "ts_ns": [T0 + 40_005], "dur_ns": [2_050], "kind": ["kernel"], "name": ["gemv"], "device": [0],
        "stream": [7], "correlation": [1]})
    return {"steps": steps, "gpu_activity": gpu}


def _json(window: Window | None) -> str:
    buf = io.StringIO()
    write_chrome_json(build_tracks(_tables(), window=window), buf)
    return buf.getvalue()


def _slices(text: str) -> dict[str, tuple[str, str]]:
    """name -> (ts text, dur text) of each complete event, as written (before any float parsing)."""
    out = {}
    for line in text.splitlines():
        m = re.search(r'"name":("[^"]*").*"ts":([-0-9.]+),"dur":([-0-9.]+)', line)
        if m and '"ph":"X"' in line:
            out[json.loads(m.group(1))] = (m.group(2), m.group(3))
    return out


def test_microseconds_are_exact_zero_padded_text() -> None:
    got = _slices(_json(None))
    # the kernel: T0+40_005 ns is 1_732_900_000_000_040.005 us (not .5); 2_050 ns is 2.050 us (not 2.50)
    assert got["gemv"] == ("1732900000000040.005", "2.050")
    # the step's slice on the GPU: T0+7 ns is ....000.007 us, 900,000 ns long is 900.000 us
    assert got["decode"] == ("1732900000000000.007", "900.000")


def test_events_are_clipped_to_the_export_window() -> None:
    # a window from T0+41_000 to T0+500_000: the kernel [T0+40_005, T0+42_055) keeps [T0+41_000, T0+42_055),
    # 1,055 ns; the step's GPU slice [T0+7, T0+900_007) keeps the whole window, 459,000 ns
    got = _slices(_json(Window(T0 + 41_000, T0 + 500_000)))
    assert got["gemv"] == ("1732900000000041.000", "1.055")
    assert got["decode"] == ("1732900000000041.000", "459.000")
    # nothing outside the window is left
    assert all(float(ts) >= T0 // 1000 + 41 and float(ts) + float(d) <= T0 / 1000 + 500.0001 for ts, d in got.values())
