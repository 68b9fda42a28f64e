"""torch._int_mm's op model against Nsight Compute's DRAM bytes, on a real H200 pair.

tests/fixtures/ncu/intmm_h200.*: `scripts/gpu/intmm.py` on the H200 (contiguous int8 operands,
TinyLlama's layer shapes at M = 32, 64, 128, three launches each): its torch.profiler trace and the
same 45 launches' dram__bytes_read + dram__bytes_write under ncu (caches flushed before each kernel).
The model's reads (MK + KN) are what the kernel reads from HBM to within 3%; its int32 output
(4MN) stays in the 60 MiB L2 while the kernel runs, so the whole model is within 10% of the DRAM
bytes at decode's M = 32 and counts more at larger M.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import pytest

from tracekit.analysis.opmodels import GEMM, op_costs

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
REPS = 3


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    import tracekit.ingest

    run = tmp_path_factory.mktemp("intmm") / "run"
    tracekit.ingest.ingest([str(FIX / "intmm_h200.trace.json.gz")], str(run), force=True, use_cache=False, jobs=1)
    ops = pd.read_parquet(run / "tables" / "cpu_ops.parquet")
    ops = ops[ops["name"] == "aten::_int_mm"].sort_values("ts_ns")
    costs = op_costs(ops).set_index("op_id")
    meas = json.loads((FIX / "intmm_h200.ncu.json").read_text())
    assert len(ops) == len(meas) == 45
    out = []
    for i in range(0, len(ops), REPS):
        (m, k), (_, n) = json.loads(ops["input_dims"].iloc[i])[:2]
        ids = ops["op_id"].iloc[i:i + REPS]
        assert {costs.at[j, "op_class"] for j in ids} == {GEMM}
        out.append({"m": m, "k": k, "n": n, "modelled": statistics.median(costs.at[j, "bytes"] for j in ids),
                    "dram": statistics.median(x["dram_bytes"] for x in meas[i:i + REPS])})
    return out


def test_the_model_reads_what_the_kernel_reads_from_hbm(pairs: list[dict]) -> None:
    reads = []
    for p in pairs:
        r = p["modelled"] - 4 * p["m"] * p["n"]
        assert r == p["m"] * p["k"] + p["k"] * p["n"]
        assert 0.93 <= r / p["dram"] <= 1.03, p  # the smallest (N = 256, 0.6 MB) writes part of its output back
        reads.append(r)
    assert 0.98 <= sum(reads) / sum(p["dram"] for p in pairs) <= 1.01


def test_decode_shapes_are_within_ten_percent_and_larger_m_counts_the_l2_resident_output(pairs: list[dict]) -> None:
    def ratio(m: int) -> float:
        sel = [p for p in pairs if p["m"] == m]
        return sum(p["modelled"] for p in sel) / sum(p["dram"] for p in sel)

    assert 1.0 <= ratio(32) <= 1.10
    assert ratio(32) < ratio(64) < ratio(128)
