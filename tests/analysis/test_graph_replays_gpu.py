"""Graph replays on real traces recorded with plain torch.profiler on an H100 (scripts/gpu/foreign_traces.py):
the kernels a CUDA graph replays get the ops that launched them where the graph was captured, in the
trace itself, or where the same kernels ran eagerly. Decode kernel time classed ``other`` (no model, no
class) must stay under 5%. Where nothing holds the graph, the time left without shapes is reported."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from helpers import FIXTURES

from tracekit.cli import main


def _analyze(tmp_path: Path, name: str, trace: Path | None = None) -> dict[str, Any]:
    if trace is None:
        trace = tmp_path / f"{name}.json.gz"
        shutil.copyfile(FIXTURES / "gpu" / f"{name}.json.gz", trace)
    out = tmp_path / f"{name}.run"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["analyze", str(trace), "--out", str(out)]) == 0
    return {"kb": pd.read_parquet(out / "tables" / "kernel_bound.parquet"),
            "steps": pd.read_parquet(out / "tables" / "steps.parquet"),
            "manifest": json.loads((out / "run.json").read_text()), "text": buf.getvalue()}


def _other_share(kb: pd.DataFrame, phase: str) -> float:
    k = kb[(kb["kind"].astype(str) == "kernel") & (kb["phase"].astype(str) == phase)]
    return float(k.loc[k["bound"].astype(str) == "other", "dur_ns"].sum() / k["dur_ns"].sum())


@pytest.mark.slow
def test_manual_graph_captured_in_the_trace(tmp_path: Path) -> None:
    # torch.cuda.graph around one decode forward of a 4-layer Llama (warm-up outside the trace), then
    # 12 replays: 225 activities each, launched in the capture window by 225 launch calls
    truth = json.loads((FIXTURES / "gpu" / "h100_manual_graph.truth.json").read_text())
    r = _analyze(tmp_path, "h100_manual_graph")
    cap = r["manifest"]["ingest"]["captures"][0]
    assert (cap["graphs_in_trace"], cap["graph_launches"], cap["graph_launches_matched"]) == (
        truth["captures"], truth["replays"], truth["replays"])
    assert cap["matched_by"]["trace capture"] == 12
    assert cap["activities_replayed"] == cap["activities_matched"] == 12 * 225
    assert cap["unmatched_ns"] == 0
    assert "graph replays: 12 of 12 launches matched to their ops (12 by trace capture)" in r["text"]
    # one decode step per replay: the captured forward pass (its ops ran, its kernels did not) is none
    assert list(r["steps"]["source"]) == ["cuda_graph"] * truth["replays"]
    # before: 37.8% of decode kernel time was other (the replays kept the graph launch as their op)
    assert _other_share(r["kb"], "decode") < 0.05
    # every replayed kernel has its captured op; the GEMMs are modelled from their aten::mm / aten::bmm shapes
    kb = r["kb"]
    rep = kb[kb["launch_name"].astype(str) == "cudaGraphLaunch"]
    assert rep["op_id"].notna().all()
    gemm = rep[rep["kclass"] == "gemm"]
    assert len(gemm) and (gemm["flops"] > 0).all() and set(gemm["op_name"].astype(str)) == {"aten::mm", "aten::bmm"}


def _strip_captures(src: Path, dst: Path) -> Path:
    """The trace without its cudaStreamBeginCapture / EndCapture events: as if captured before it."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if "Capture" not in str(e.get("name", ""))]
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


@pytest.mark.slow
def test_reduce_overhead_graphs_recorded_in_the_trace(tmp_path: Path) -> None:
    # Transformers' static-cache auto-compile (cudagraph trees): the first generate warms up (eager), then
    # captures twice: an empty graph (no launch in the window: no graph), then the decode graph (78
    # launches), replayed by both generates: 29 replays of 78 activities.
    r = _analyze(tmp_path, "h100_reduce_overhead")
    cap = r["manifest"]["ingest"]["captures"][0]
    assert (cap["graphs_in_trace"], cap["graph_launches"], cap["graph_launches_matched"]) == (1, 29, 29)
    assert cap["matched_by"]["trace capture"] == 29
    assert cap["activities_replayed"] == cap["activities_matched"] == 29 * 78
    assert "graph replays: 29 of 29 launches matched to their ops (29 by trace capture)" in r["text"]
    # before: 52.9% of decode kernel time was other
    assert _other_share(r["kb"], "decode") < 0.05
    # the same trace as if its graphs had been captured before it: the warm-up pass's kernels give the
    # same ops' shapes, so the same FLOPs and bytes
    bare = _strip_captures(FIXTURES / "gpu" / "h100_reduce_overhead.json.gz", tmp_path / "nocap.json.gz")
    e = _analyze(tmp_path, "nocap", trace=bare)
    cap = e["manifest"]["ingest"]["captures"][0]
    assert (cap["graphs_in_trace"], cap["graph_launches_matched"], cap["matched_by"]["eager run"]) == (0, 29, 29)
    assert _other_share(e["kb"], "decode") < 0.05
    rep = [x["kb"][x["kb"]["launch_name"].astype(str) == "cudaGraphLaunch"] for x in (r, e)]
    assert rep[0]["flops"].sum() == rep[1]["flops"].sum() > 0
    assert rep[0]["bytes"].sum() == rep[1]["bytes"].sum() > 0


@pytest.mark.slow
def test_replays_without_their_capture_are_reported(tmp_path: Path) -> None:
    # d_compiled: tracekit's record --compile trace without its capture_traces/: nothing in the trace
    # holds the decode graph (its eager prefill runs the same Triton kernels on other grids)
    r = _analyze(tmp_path, "d_compiled")
    doc = json.loads(gzip.decompress((FIXTURES / "gpu" / "d_compiled.json.gz").read_bytes()))
    launches = {e["args"]["correlation"] for e in doc["traceEvents"] if e.get("name") == "cudaGraphLaunch"}
    replayed_us = sum(e["dur"] for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                      and e.get("args", {}).get("correlation") in launches)
    cap = r["manifest"]["ingest"]["captures"][0]
    assert (cap["graph_launches"], cap["graph_launches_matched"], len(launches)) == (7, 0, 7)
    assert abs(cap["unmatched_ns"] / 1e3 - replayed_us) < 1.0  # all of it, to the trace's ns rounding
    line = next(x for x in r["text"].splitlines() if "graph replays:" in x)
    assert f"0 of 7 launches matched to their ops; {replayed_us / 1e3:.2f} ms of replayed kernel time" in line
    assert "no capture of it in the trace or beside it" in line
    assert any(w.startswith("capture: ") and "replayed from graphs without its ops' shapes" in w
               for w in r["manifest"]["warnings"])
