"""`tracekit report`: terminal summary and the self-contained HTML, checked in headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers import make_run, need

from tracekit.cli import main
from tracekit.model.schema import from_columns
from tracekit.report.charts import KIND_COLORS
from tracekit.store.rundir import RunDir

PLOTS_PER_RUN = 5  # split, timeline, roofline, counters, latency
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    need("chromium", False)
    raise AssertionError("unreachable")


def _run_chromium(tmp_path: Path, html: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    cmd = [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, html.resolve().as_uri()]
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=env, check=True)


def test_terminal_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path, "bs1")
    assert main(["report", str(run.path), "--no-html"]) == 0
    out = capsys.readouterr().out
    ph = run.read_df("phases").set_index("phase")
    # the decode idle share, as the table prints it
    assert f"{100 * ph.loc['decode', 'idle_ns'] / ph.loc['decode', 'time_ns']:.1f}%" in out
    assert "chat-0" in out and "chat-1" in out and "dram_bw_util" in out
    assert not (run.path / "report.html").exists()


@pytest.mark.slow
def test_html_in_headless_chromium(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN two runs (batch 1 and batch 8) WHEN reported together
    a, b = make_run(tmp_path, "bs1"), make_run(tmp_path, "bs8", batch=8, scale=1.3, bound_column=True)
    html = tmp_path / "out" / "report.html"
    assert main(["report", str(a.path), str(b.path), "--html", str(html)]) == 0
    text = html.read_text()
    # self-contained: nothing fetched from anywhere
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:)?//""", text)
    assert "<link" not in text and "@import" not in text
    assert text.count('src="data:image/svg+xml;base64,') == 2 * PLOTS_PER_RUN

    # THEN Chromium decodes every plot (the page marks each decoded image with its size) ...
    dom = _run_chromium(tmp_path, html, "--virtual-time-budget=10000", "--dump-dom").stdout
    assert 'data-loaded="1"' in dom
    drawn = re.findall(r'data-drawn="(\d+)x(\d+)"', dom)
    assert len(drawn) == 2 * PLOTS_PER_RUN and 'data-drawn="no"' not in dom
    assert all(int(w) > 300 and int(h) > 150 for w, h in drawn)
    # ... and the tables are filled: the phase rows and both requests of each run
    cells = re.findall(r"<td>([^<]*)</td>", dom)
    assert cells.count("prefill") >= 4 and cells.count("decode") >= 4  # comparison + per run
    assert cells.count("chat-0") == 2 and cells.count("chat-1") == 2
    assert "not recorded" not in dom

    # AND the screenshot is not blank and shows the plots' colours
    from PIL import Image

    shot = tmp_path / "shot.png"
    _run_chromium(tmp_path, html, "--window-size=1280,2600", f"--screenshot={shot}")
    img = Image.open(shot).convert("RGB")
    assert img.size == (1280, 2600)
    px = np.asarray(img, dtype=np.int32).reshape(-1, 3)
    assert (px.sum(axis=1) < 720).mean() > 0.05  # not blank
    assert len(np.unique(px, axis=0)) > 200  # anti-aliased plots, not flat boxes

    def near(hexcolour: str) -> int:
        rgb = np.array([int(hexcolour[i : i + 2], 16) for i in (1, 3, 5)])
        return int((np.abs(px - rgb).sum(axis=1) < 12).sum())

    # the step bars of the timeline and the latency bars: prefill blue and decode orange areas
    assert near(KIND_COLORS["prefill"]) > 2000
    assert near(KIND_COLORS["decode"]) > 2000


def test_missing_tables_say_not_recorded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = RunDir.create(tmp_path / "bare")
    run.write_table("steps", from_columns("steps", {"step_id": [0, 1], "kind": ["prefill", None],
                                                    "cpu_start_ns": [0, 10_000_000], "cpu_end_ns": [9_000_000, None]}))
    assert main(["report", str(run.path)]) == 0
    out = capsys.readouterr().out
    assert "phases: three-way split: not recorded" in out and "requests: not recorded" in out
    assert "counters: not recorded" in out
    text = (run.path / "report.html").read_text()
    # phases table, split plot, roofline, counters, requests table, latency plot: all but the timeline;
    # and the summary box: workload, ceiling, phase verdicts
    assert text.count("not recorded") == 9
    assert "workload: not recorded" in text and "ceiling: not recorded" in text and "phases: not recorded" in text
    assert text.count('class="plot"') == 1  # only the phase timeline has data


def test_report_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert main(["report"]) == 2
    assert capsys.readouterr().err.count("tracekit: error:") == 2


def test_summary_names_ceiling_and_limiter_on_real_shaped_tables(tmp_path: Path) -> None:
    # GIVEN phases as the bound pass writes them on an H200 (% of peak in percent, ceiling named),
    # dictionary-encoded counter columns as in recorded runs, and counters on another clock than the steps
    import pandas as pd

    from tracekit.report.charts import counters_svg
    from tracekit.report.html import build_html
    from tracekit.report.view import RunView, ceiling_of, verdicts

    ph = pd.DataFrame({
        "request_id": [None, None, None], "phase": ["prefill", "decode", "outside"], "steps": [1, 31, 0],
        "time_ns": [41_751_623.0, 844_283_691.0, None], "gpu_busy_ns": [3_031_530.0, 68_190_721.0, None],
        "compute_bound_ns": [0.0, 0.0, None], "memory_bound_ns": [3_010_218.0, 68_120_066.0, None],
        "idle_ns": [38_720_093.0, 776_092_970.0, None], "other_ns": [0.0, 0.0, None],
        "achieved_tflops": [82.405301, 0.952879, None], "pct_peak_flops": [8.327974, 0.096299, None],
        "achieved_tbps": [1.10542, 0.948638, None], "pct_peak_bandwidth": [23.029582, 19.763297, None],
        "ceiling": ["NVIDIA H200 (datasheet)", "NVIDIA H200 (datasheet)", None], "ceiling_dtype": ["fp16", "fp16", None],
    })
    c = ceiling_of(ph)
    assert c.name == "NVIDIA H200 (datasheet)" and c.dtype == "fp16"
    assert c.tflops is not None and abs(c.tflops - 989.5) < 1 and c.tbps is not None and abs(c.tbps - 4.80) < 0.01
    v = verdicts(ph)
    assert len(v) == 2  # the empty "outside" row is left out
    assert v[1].startswith("decode: 31 step(s), 844.3 ms (27.23 ms per step). Limited by the host")
    assert "92% of the time" in v[1] and "0.95 TB/s = 20% of peak bandwidth" in v[1]

    steps = pd.DataFrame({"kind": ["prefill", "decode"], "gpu_start_ns": [10**18, 10**18 + 50_000_000],
                          "gpu_end_ns": [10**18 + 40_000_000, 10**18 + 80_000_000]})
    counters = pd.DataFrame({"ts_ns": [5 * 10**15 + i * 10**7 for i in range(20)], "device": 0,
                             "metric": pd.Categorical(["gpu_util"] * 20), "value": [float(i % 5) for i in range(20)],
                             "unit": pd.Categorical(["%"] * 20), "source": pd.Categorical(["nvml"] * 20)})
    assert counters_svg(counters, steps) is not None  # categories and an unrelated clock do not break it
    text = build_html([RunView("r80", {"workload": {"model": "tinyllama-1.1b", "dtype": "fp16", "batch": 1},
                                       "environment": {"gpu": "NVIDIA H200"}},
                               {"phases": ph, "steps": steps, "counters": counters})])
    summary = text[text.index('<div class="summary">'):text.index("</div>")]
    assert "tinyllama-1.1b · fp16 · batch 1 · NVIDIA H200" in summary
    assert "ceiling: NVIDIA H200 (datasheet) fp16: 990 TFLOP/s, 4.80 TB/s, ridge 206 FLOP/byte" in summary
    assert summary.count("<li>") == 2 and "Limited by the host" in summary
    # the phase table names the limiter per phase
    assert text.count("<td>host (GPU idle)</td>") == 2
