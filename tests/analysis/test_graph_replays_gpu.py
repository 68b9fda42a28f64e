"""Graph replays on real traces recorded with plain torch.profiler on an H100 (scripts/gpu/foreign_traces.py):
the kernels a CUDA graph replays get the ops that launched them where the graph was captured, in the
trace itself. Decode kernel time classed ``other`` (no model, no class) must stay under 5%."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
from helpers import FIXTURES

from tracekit.cli import main


def _analyze(tmp_path: Path, name: str) -> dict[str, Any]:
    trace = tmp_path / f"{name}.json.gz"
    shutil.copyfile(FIXTURES / "gpu" / f"{name}.json.gz", trace)
    out = tmp_path / "run"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["analyze", str(trace), "--out", str(out)]) == 0
    return {"kb": pd.read_parquet(out / "tables" / "kernel_bound.parquet"),
            "steps": pd.read_parquet(out / "tables" / "steps.parquet"),
            "manifest": json.loads((out / "run.json").read_text()), "text": buf.getvalue()}


def _other_share(kb: pd.DataFrame, phase: str) -> float:
    k = kb[(kb["kind"].astype(str) == "kernel") & (kb["phase"].astype(str) == phase)]
    return float(k.loc[k["bound"].astype(str) == "other", "dur_ns"].sum() / k["dur_ns"].sum())


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
