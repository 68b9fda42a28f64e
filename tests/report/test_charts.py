"""The report's SVG charts plot the tables' values: every bar, span, line point and dot read back from
the SVG (through the scales each axes group records) is the value the table holds."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from helpers import make_run

from tracekit.model.ceilings import datasheet
from tracekit.report.charts import (
    KIND_COLORS,
    SPLIT,
    counters_svg,
    latency_svg,
    phase_roofline_svg,
    phase_timeline_svg,
    roofline_svg,
    split_svg,
)
from tracekit.report.view import RunView, implied_peak, load_view, run_phases, shown_phases

NS = "{http://www.w3.org/2000/svg}"


def _inverse(attr: str) -> Callable[[float], float]:
    kind, lo, hi, p0, p1 = attr.split()
    a, b, q0, q1 = float(lo), float(hi), float(p0), float(p1)
    if kind == "log":
        a, b = math.log10(a), math.log10(b)
    return lambda px: (lambda t: 10 ** t if kind == "log" else t)(a + (px - q0) / (q1 - q0) * (b - a))


def _axes(svg: str) -> list[tuple[ET.Element, Callable[[float], float], Callable[[float], float]]]:
    root = ET.fromstring(svg)
    return [(g, _inverse(g.get("data-x", "")), _inverse(g.get("data-y", ""))) for g in root.iter(f"{NS}g")
            if g.get("class") == "axes"]


def _series(ax: ET.Element) -> dict[str, ET.Element]:
    return {g.get("data-label", ""): g for g in ax.iter(f"{NS}g") if g.get("class") == "series"}


def _bars(g: ET.Element, fx: Callable[[float], float]) -> list[tuple[float, float]]:
    """(start, width) of each bar along x, in data units."""
    out = []
    for r in g.iter(f"{NS}rect"):
        x, w = float(r.get("x", 0)), float(r.get("width", 0))
        out.append((fx(x), fx(x + w) - fx(x)))
    return out


def _points(path: str) -> list[tuple[float, float]]:
    return [(float(a), float(b)) for a, b in re.findall(r"[ML](-?[\d.]+) (-?[\d.]+)", path)]


PX = 0.006  # coordinates are written to 1/100 px: a value read back is within this many px of its place


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> RunView:
    return load_view(make_run(tmp_path_factory.mktemp("charts"), "bs1", requests=2, decode_steps=4))


def test_split_bars_are_each_class_share_of_the_phase(view: RunView) -> None:
    ph = shown_phases(view.df("phases"))
    if "idle_host_ns" not in ph or ph["idle_host_ns"].isna().all():  # a table from before the idle split
        ph = ph.assign(idle_host_ns=ph["idle_ns"])
    ((ax, fx, _),) = _axes(split_svg(view.df("phases")) or "")
    series = _series(ax)
    drawn = [label for _, label, _ in SPLIT if label in series]
    assert drawn  # the fixture's phases split their time
    left = [0.0] * len(ph)
    for col, label, _ in SPLIT:
        if label not in series:
            continue
        want = [100 * float(v) / float(t) for v, t in zip(ph[col].fillna(0), ph["time_ns"], strict=True)]
        got = _bars(series[label], fx)
        assert len(got) == len(ph)
        for (x0, w), v, lft in zip(got, want, left, strict=True):
            assert x0 == pytest.approx(lft, abs=100 * PX / 700) and w == pytest.approx(v, abs=100 * PX / 700)
        assert [float(r.get("data-v", "nan")) for r in series[label].iter(f"{NS}rect")] == pytest.approx(want)
        left = [a + b for a, b in zip(left, want, strict=True)]
    assert "idle: host issuing" in series and "memory-bound" in series
    assert left == pytest.approx([100.0] * len(ph), abs=0.5)  # the classes add up to the phase's wall time


def test_latency_bars_are_ttft_and_the_rest(view: RunView) -> None:
    r = view.df("requests")
    ((ax, fx, _),) = _axes(latency_svg(r) or "")
    s = _series(ax)
    ttft = _bars(s["TTFT"], fx)
    rest = _bars(s["after first token"], fx)
    tol = (fx(1) - fx(0)) * PX * 2
    assert [w for _, w in ttft] == pytest.approx((r["ttft_ns"] / 1e6).tolist(), abs=tol)
    assert [x for x, _ in rest] == pytest.approx((r["ttft_ns"] / 1e6).tolist(), abs=tol)
    assert [w for _, w in rest] == pytest.approx(((r["e2e_ns"] - r["ttft_ns"]) / 1e6).tolist(), abs=tol)


def test_timeline_spans_are_the_steps_and_their_busy_share(view: RunView) -> None:
    st = view.df("steps")
    ((ax, fx, _),) = _axes(phase_timeline_svg(st) or "")
    t0 = st["gpu_start_ns"].min()
    tol = (fx(1) - fx(0)) * PX * 2
    series = _series(ax)
    assert set(series) == set(st["kind"].astype(str))
    for kind, g in series.items():
        rows = st[st["kind"].astype(str) == kind]
        steps_g, busy_g = [x for x in g if x.tag == f"{NS}g"]
        assert steps_g.get("fill") == busy_g.get("fill") == KIND_COLORS[kind]
        spans = _bars(steps_g, fx)
        assert [x for x, _ in spans] == pytest.approx(((rows["gpu_start_ns"] - t0) / 1e6).tolist(), abs=tol)
        assert [w for _, w in spans] == pytest.approx(((rows["gpu_end_ns"] - rows["gpu_start_ns"]) / 1e6).tolist(), abs=tol)
        busy = _bars(busy_g, fx)
        assert [w for _, w in busy] == pytest.approx((rows["gpu_busy_ns"] / 1e6).tolist(), abs=tol)


def test_counter_lines_are_the_samples(view: RunView) -> None:
    c, st = view.df("counters"), view.df("steps")
    axes = _axes(counters_svg(c, st) or "")
    t0 = st["gpu_start_ns"].min()  # the samples overlap the steps: time from the first step
    assert len(axes) == c["metric"].nunique()
    for ax, fx, fy in axes:
        ((label, g),) = _series(ax).items()
        metric = label.split(".")[-1].split(" (")[0]
        rows = c[c["metric"].astype(str) == metric].sort_values("ts_ns")
        pts = _points(next(g.iter(f"{NS}path")).get("d", ""))
        assert [fx(x) for x, _ in pts] == pytest.approx(((rows["ts_ns"] - t0) / 1e6).tolist(), abs=(fx(1) - fx(0)) * PX * 2)
        assert [fy(y) for _, y in pts] == pytest.approx(rows["value"].astype(float).tolist(),
                                                         abs=abs(fy(1) - fy(0)) * PX * 2)
        # the steps are shaded behind every panel, one span per step
        assert len(list(next(x for x in ax.iter(f"{NS}g") if x.get("class") == "spans"))) == len(st)


def test_phase_roofline_dots_and_roof(view: RunView) -> None:
    ph = run_phases(view.df("phases"))
    ph = ph[ph["flops"].fillna(0) > 0]
    ((ax, fx, fy),) = _axes(phase_roofline_svg(view.df("phases")) or "")
    s = _series(ax)
    for r in ph.to_dict("records"):
        ((x, y),) = [(fx(a), fy(b)) for a, b in _points(next(s[r["phase"]].iter(f"{NS}path")).get("d", "").replace(
            "h0", ""))]
        assert x == pytest.approx(r["flops"] / r["bytes"], rel=1e-3)
        assert y == pytest.approx(r["flops"] / r["time_ns"] * 1e9 / 1e12, rel=1e-3)
    peak_f, peak_b = implied_peak(ph, "achieved_tflops", "pct_peak_flops"), implied_peak(ph, "achieved_tbps",
                                                                                          "pct_peak_bandwidth")
    roof = next(g for label, g in s.items() if label.startswith("roof"))
    assert float(roof.get("data-ridge", "nan")) == pytest.approx(peak_f / peak_b)
    for a, b in _points(next(roof.iter(f"{NS}path")).get("d", "")):
        assert fy(b) == pytest.approx(min(peak_f, peak_b * fx(a)), rel=1e-3)


def test_kernel_roofline_dots_per_phase() -> None:
    h200 = datasheet("NVIDIA H200")
    assert h200 is not None
    k = pd.DataFrame({"model": ["shape", "shape", "shape", "class"], "flops": [2e10, 2e7, 4e9, 1e9],
                      "bytes": [4e7, 2e7, 1e8, 1e6], "dur_ns": [50_000, 10_000, 80_000, 1_000],
                      "phase": ["prefill", "decode", None, "decode"]})
    k["intensity"] = k["flops"] / k["bytes"]
    ((ax, fx, fy),) = _axes(roofline_svg(k, h200))
    s = _series(ax)
    assert set(s) >= {"prefill (1)", "decode (1)", "outside steps (1)"}  # the class-modelled kernel is left out
    for label, row in (("prefill (1)", 0), ("decode (1)", 1), ("outside steps (1)", 2)):
        ((x, y),) = [(fx(a), fy(b)) for a, b in _points(next(s[label].iter(f"{NS}path")).get("d", "").replace("h0", ""))]
        assert x == pytest.approx(k["intensity"][row], rel=1e-3)
        assert y == pytest.approx(k["flops"][row] / (k["dur_ns"][row] * 1e-9) / 1e12, rel=1e-3)  # TFLOP/s
    roofs = [label for label in s if "roof" in label]
    assert len(roofs) == len({h200.flops(d) for d in ("fp8", "fp16", "bf16", "tf32", "fp32") if h200.flops(d)})


def test_no_data_no_chart(tmp_path: Path) -> None:
    empty = pd.DataFrame()
    assert split_svg(empty) is None and latency_svg(empty) is None and phase_timeline_svg(empty) is None
    assert counters_svg(empty) is None and phase_roofline_svg(empty) is None
