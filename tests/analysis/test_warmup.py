"""Warm-up requests: out of the run's phase totals (exactly as if they had not run), kept in their own
rows; the first-use rule flags a first request that looks like one; analyze and report take
--warmup-requests N."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from test_analysis import US, Trace

from tracekit.analysis.inputs import AnalysisInput
from tracekit.analysis.pipeline import run_passes
from tracekit.analysis.warmup import first_requests, first_use_flags, rebase, warmup_ids
from tracekit.cli import main
from tracekit.model import schema
from tracekit.model.ceilings import datasheet
from tracekit.model.stepnames import StepLabel, format_step
from tracekit.store.rundir import RunDir

SUMS = ["steps", "steps_captured", "time_ns", "gpu_busy_ns", "idle_ns", "compute_bound_ns", "memory_bound_ns",
        "other_ns", "flops", "bytes"]
RATES = ["achieved_tflops", "achieved_tbps", "achieved_tflops_wall", "achieved_tbps_wall", "pct_peak_flops",
         "pct_peak_bandwidth"]


def requests_run(first_ttft_us: int = 9000, skip: tuple[int, ...] = (), first_prompt: int = 5) -> dict[str, Any]:
    """GIVEN three recorded requests of a prefill and three decode steps, 1 ms apart, every step traced;
    request 0 pays a first-use cost (5x longer kernels, a long TTFT). ``skip``: requests left out of
    the trace and the recorder's tables altogether (the truth a warm-up exclusion must reproduce)."""
    t = Trace()
    rows, prof = [], []
    sid, ts = 0, 0
    for rid in range(3):
        start = ts
        prompt = first_prompt if rid == 0 else 5
        for i in range(4):
            kind, q = ("prefill", prompt) if i == 0 else ("decode", 1)
            if rid not in skip:
                t.annotate(format_step(StepLabel(sid, rid, kind, 1, q, prompt + i)), ts, 900 * US)
                t.forward(ts, 1, q, prompt + i, kernel_us=500 if rid == 0 else 100)
                rows.append({"step_id": sid, "request_id": rid, "kind": kind, "batch": 1, "q_len": q,
                             "kv_len": prompt + i, "tokens": q, "source": "tracekit", "cpu_start_ns": ts,
                             "cpu_end_ns": ts + 900 * US})
            ts += 1000 * US
            sid += 1
        ttft = (first_ttft_us if rid == 0 else 950) * US
        if rid not in skip:
            prof.append({"request_id": rid, "name": f"r{rid}", "batch": 1, "input_tokens": prompt,
                         "output_tokens": 4, "ttft_ns": ttft, "tpot_ns": 1000 * US, "e2e_ns": ttft + 3000 * US,
                         "start_ns": start, "prefill_share": 0.2})
        ts += 2000 * US
    manifest = {"steps": len(rows), "environment": {"gpu": "NVIDIA H200"}, "timings": {"profiled": {"requests": prof}}}
    return dict(t.tables(), recorded_steps=pd.DataFrame(rows), manifest=manifest, ceiling=datasheet("NVIDIA H200"))


def _run_rows(ph: Any) -> pd.DataFrame:
    ph = ph.to_pandas() if isinstance(ph, pa.Table) else ph  # the warm-up pass's phases: an Arrow table
    r = ph[ph["request_id"].isna() & (ph["phase"] != "outside")]
    return r.set_index("phase").sort_index()


def test_marked_warmups_leave_the_run_totals_exactly_as_if_they_had_not_run() -> None:
    tables = requests_run()
    tables["manifest"]["warmup_requests"] = [0]
    out = run_passes(AnalysisInput.of(tables))
    truth = run_passes(AnalysisInput.of(requests_run(skip=(0,))))
    got, want = _run_rows(out["phases"]), _run_rows(truth["phases"])
    assert list(got.index) == ["decode", "prefill"]
    assert got["steps"].tolist() == [6, 2]
    for c in SUMS:
        assert np.allclose(got[c].astype(float), want[c].astype(float)), c
    for c in RATES:
        assert np.allclose(got[c].astype(float), want[c].astype(float), equal_nan=True), c
    # the warm-up keeps its request and its own phase rows
    assert sorted(out["requests"]["request_id"]) == [0, 1, 2]
    phases = out["phases"].to_pandas()  # the warm-up pass's phases: an Arrow table
    per = phases[phases["request_id"] == 0]
    assert sorted(per["phase"]) == ["decode", "prefill"] and (per["gpu_busy_ns"] > 0).all()
    assert out["warmup"] == {"requests": [0], "first_n": None, "flagged": []}
    # a marked warm-up is not flagged again
    assert not any("looks like a warm-up" in w for w in out["warnings"])


def test_first_n_requests_as_warmups_is_the_same_as_marking_them() -> None:
    marked = requests_run()
    marked["manifest"]["warmup_requests"] = [0]
    first = dict(requests_run(), warmup_first=1)
    a, b = run_passes(AnalysisInput.of(marked))["phases"], run_passes(AnalysisInput.of(first))["phases"]
    assert a.equals(b)


def test_a_first_request_that_looks_like_first_use_is_flagged_not_excluded() -> None:
    out = run_passes(AnalysisInput.of(requests_run(first_ttft_us=9000)))
    flagged = [w for w in out["warnings"] if "looks like a warm-up" in w]
    assert flagged == ["request 0 looks like a warm-up (first-use cost): TTFT 9.0 ms against a median of 0.9 ms "
                       "for the others; it is in the phase totals: leave it out with --warmup-requests 1 (or mark "
                       "it in the script with tracekit.warmup())"]
    assert out["warmup"]["flagged"] == [0] and out["warmup"]["requests"] == []
    assert _run_rows(out["phases"])["steps"].tolist() == [9, 3]  # still counted: nobody asked


@pytest.mark.parametrize(("ttft_us", "prompt", "flagged"), [
    (2800, 5, False),   # under 3x the others' median: ordinary spread
    (2850, 5, True),    # 3x 950 us
    (9000, 11, False),  # a prompt over twice as long explains a long prefill
    (9000, 10, True),
])
def test_first_use_rule(ttft_us: int, prompt: int, flagged: bool) -> None:
    req = pd.DataFrame({"request_id": [0, 1, 2], "start_ns": [0, 10, 20], "ttft_ns": [ttft_us * US, 950 * US, 950 * US],
                        "input_tokens": [prompt, 5, 5]})
    assert bool(first_use_flags(req)) is flagged
    # the rule looks at the first request that is not a warm-up: with 0 marked, request 1 is first
    assert first_use_flags(req, warmups=[0]) == []
    assert first_use_flags(req.iloc[:1]) == []  # nothing to compare with


def test_warmup_ids_and_order() -> None:
    req = pd.DataFrame({"request_id": [5, 3, 4], "start_ns": [30, 10, 20]})
    assert first_requests(req, 2) == [3, 4]
    assert warmup_ids(req, marked=[5, 99], first_n=1) == [3, 5]  # 99: no such request
    assert warmup_ids(req) == []


def test_rebase_adds_back_what_it_removed() -> None:
    out = run_passes(AnalysisInput.of(requests_run()))["phases"]
    back = rebase(rebase(out, remove={0, 2}), add={0, 2}).to_pandas()
    for c in SUMS + RATES:
        assert np.allclose(back[c].astype(float), out[c].astype(float), equal_nan=True), c
    assert rebase(out, remove=[1]).shape == out.shape
    only = rebase(out, remove={0, 1, 2}).to_pandas()  # nothing left: the run's phase rows go, outside stays
    assert list(only.loc[only["request_id"].isna(), "phase"]) == ["outside"]


def _write_run(root: Path, tables: dict[str, Any]) -> RunDir:
    run = RunDir.create(root, workload={"model": "synthetic"})
    for name in ("cpu_ops", "runtime", "gpu_activity", "annotations"):
        run.write_table(name, tables[name])
    run.write_table("steps", schema.from_pandas("steps", tables["recorded_steps"]))
    run.update_manifest(**tables["manifest"])
    run.mark_complete()
    return run


def test_analyze_and_report_take_warmup_requests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _write_run(tmp_path / "r", requests_run())
    assert main(["analyze", str(run.path), "--warmup-requests", "1"]) == 0
    out = capsys.readouterr().out
    assert "warm-up requests 0: left out of the phase totals above" in out
    assert "phase prefill: 2 steps" in out and "outside every step: time" in out and "phase outside" not in out
    m = run.read_manifest()
    assert m["analysis"]["warmup_requests"] == [0]
    stored = run.read_df("phases")
    assert _run_rows(stored).loc["prefill", "steps"] == 2

    # the report shows what analyze stored, the warm-up labelled; outside every step is a line, not a phase
    assert main(["report", str(run.path), "--no-html"]) == 0
    text = capsys.readouterr().out
    assert "warm-up: request(s) 0 left out of the phase totals" in text
    assert "r0 (warm-up)" in text and "r1 (warm-up)" not in text
    assert "outside every step: " in text and "│ outside" not in text
    assert "prefill: 2 step(s)" in text

    # --warmup-requests 0 in the report puts request 0 back, without rewriting the run
    assert main(["report", str(run.path), "--no-html", "--warmup-requests", "0"]) == 0
    text = capsys.readouterr().out
    assert "prefill: 3 step(s)" in text and "warm-up:" not in text and "(warm-up)" not in text
    assert _run_rows(run.read_df("phases")).loc["prefill", "steps"] == 2


def test_runs_compared_leave_out_warmups_and_show_outside_as_a_line(tmp_path: Path) -> None:
    a = _write_run(tmp_path / "a", requests_run())
    b = _write_run(tmp_path / "b", requests_run())
    assert main(["analyze", str(a.path)]) == 0 and main(["analyze", str(b.path), "--warmup-requests", "1"]) == 0
    html = tmp_path / "cmp.html"
    assert main(["report", str(a.path), str(b.path), "--html", str(html)]) == 0
    text = html.read_text()
    cmp = text[text.index("<h3>Runs compared</h3>"):text.index('<section class="run"')]
    rows = cmp[cmp.index("<tbody>"):cmp.index("</tbody>")]
    assert "<td>outside</td>" not in rows
    assert "<td>a</td><td>prefill</td><td>3</td>" in rows and "<td>b</td><td>prefill</td><td>2</td>" in rows
    assert cmp.count("outside every step: ") == 2 and "b: warm-up: request(s) 0" in cmp
