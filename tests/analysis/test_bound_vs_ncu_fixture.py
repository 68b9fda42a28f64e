"""The model-only bound class against Nsight Compute's, on a real H200 pair: a trace and its counters.

Fixtures (tests/fixtures/ncu/compiled_<shape>_b1.*): benchmarks/bound_vs_ncu.py's smallest joined
cells, written by its runs on the H200 (Qwen2.5-0.5B and Llama-3.2-1B layer sizes, 2 layers, bf16, batch
1, static cache + torch.compile, one prefill and one decode step): the trace under torch.profiler and, from
a second run of the same calls under ncu, the one-pass counters of exactly those steps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import FIXTURES

from tracekit.analysis import counters as C
from tracekit.analysis.pipeline import DEFAULT_PASSES, run_passes
from tracekit.ingest import ncu, read_trace_tables
from tracekit.model.ceilings import datasheet

PAIRS = [FIXTURES / "ncu" / f"compiled_{shape}_b1" for shape in ("qwen2.5-0.5b", "llama-3.2-1b")]
pairs = pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p.name)


def _analysed(pair: Any) -> tuple[Any, Any]:
    tables: dict[str, Any] = {k: v.to_pandas() for k, v in read_trace_tables(f"{pair}.json.gz").items()}
    tables["manifest"] = {"environment": {"gpu": "NVIDIA H200"}}
    tables["ceiling"] = datasheet("NVIDIA H200")
    res = run_passes(tables, DEFAULT_PASSES)
    kb = res["kernel_bound"]
    return kb.assign(model_bound=kb["bound"]), ncu.read_csv(f"{pair}.counters.csv").to_pandas()


@pairs
def test_every_kernel_of_the_measured_steps_joins_to_its_counters(pair: Any) -> None:
    kb, counters = _analysed(pair)
    order = C.launch_order(kb)
    for sid in sorted(counters["step_id"].dropna().unique()):
        trace_k = order[order["step_id"] == sid]
        joined, rep = C.join(trace_k, counters[counters["step_id"] == sid])
        assert rep.kernels_matched == len(trace_k) == (counters["step_id"] == sid).sum() > 10, (sid, rep)
        assert joined["dram_pct"].notna().all()


@pairs
def test_model_class_agrees_with_nsight_compute_on_nine_tenths_of_kernel_time(pair: Any) -> None:
    kb, counters = _analysed(pair)
    order = C.launch_order(kb)
    for sid in sorted(counters["step_id"].dropna().unique()):
        joined, _ = C.join(order[order["step_id"] == sid], counters[counters["step_id"] == sid])
        k = joined[~joined["model_bound"].isin(["comm", "memcpy"])].copy()
        ncu_class = C.counter_classes(k)
        dur = k["dur_ns"].to_numpy(dtype=float)
        agree = dur[(k["model_bound"] == ncu_class).to_numpy()].sum() / dur.sum()
        assert agree >= 0.9, (sid, agree)
        # batch 1 on an H200: Nsight Compute calls most of this kernel time latency-bound
        assert dur[(ncu_class == "latency").to_numpy()].sum() / dur.sum() > 0.5
        assert np.isfinite(dur).all()
