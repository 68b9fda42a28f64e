#!/usr/bin/env python3
"""The int8 x int8 GEMM's op model against Nsight Compute: `torch._int_mm` on contiguous operands.

Usage (on the GPU machine, tracekit installed; ncu on PATH):

    python3 scripts/gpu/intmm.py OUT_DIR
    python3 scripts/gpu/intmm.py OUT_DIR --analyse-only   # again from OUT_DIR's kept trace and ncu.json (any machine)

torchao's eager int8 paths never let the GEMM read its weight from HBM (the weight is copied or
converted by the kernel just before, and the GEMM reads the copy from L2), so this measures the op
model where the operands do come from HBM: `torch._int_mm(a [M,K] int8, b [K,N] int8)` at TinyLlama's
layer shapes for M = 32, 64 (decode at that batch) and 128 (a prefill chunk), three launches each.

1. Records the launches under torch.profiler (record_shapes), ingests the trace with tracekit and
   models each aten::_int_mm op (`tracekit.analysis.opmodels.op_costs`; docs/roofline.md, "Quantized
   GEMMs": MK + KN + 4MN bytes), the cost kernel_bound gives its one GEMM kernel.
2. Runs the same launches under Nsight Compute (an NVTX range selects them; ncu flushes the caches
   before each kernel) for dram__bytes_read.sum + dram__bytes_write.sum.
3. Prints, per shape, modelled bytes against DRAM bytes (medians of the three), and writes
   OUT_DIR/intmm.json.
"""

from __future__ import annotations

import csv
import io
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

LAYERS = ((2048, 2048), (2048, 256), (2048, 5632), (5632, 2048), (2048, 32000))  # (K, N): q/o, k/v, up, down, lm head
SHAPES = tuple((m, k, n) for m in (32, 64, 128) for k, n in LAYERS)
REPS = 3
METRICS = "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum"


def launches(profile_to: str | None) -> None:
    """Every shape REPS times inside the NVTX range "intmm"; a trace to profile_to when given."""
    import torch

    torch.manual_seed(0)
    ops = [(torch.randint(-128, 127, (m, k), dtype=torch.int8, device="cuda"),
            torch.randint(-128, 127, (k, n), dtype=torch.int8, device="cuda")) for m, k, n in SHAPES]
    torch._int_mm(*ops[0])  # cuBLAS handle and heuristics outside the window
    torch.cuda.synchronize()

    def body() -> None:
        torch.cuda.nvtx.range_push("intmm")
        for a, b in ops:
            for _ in range(REPS):
                torch._int_mm(a, b)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()

    if profile_to is None:
        body()
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        body()
    prof.export_chrome_trace(profile_to)


def modelled(trace: Path, work: Path) -> list[dict]:
    """Each aten::_int_mm op of the trace, in launch order, with its op model's bytes (tracekit's ingest
    and `op_costs`: the model kernel_bound gives the op's one GEMM kernel)."""
    import pandas as pd

    import tracekit.ingest
    from tracekit.analysis.opmodels import op_costs

    run = work / "run"
    tracekit.ingest.ingest([str(trace)], str(run), force=True, use_cache=False, jobs=1)
    ops = pd.read_parquet(run / "tables" / "cpu_ops.parquet")
    ops = ops[ops["name"] == "aten::_int_mm"].sort_values("ts_ns")
    costs = op_costs(ops).set_index("op_id")
    return [{"op_class": str(costs.at[i, "op_class"]), "bytes": float(costs.at[i, "bytes"]),
             "dims": str(d)} for i, d in zip(ops["op_id"], ops["input_dims"], strict=True)]


def measured(work: Path) -> list[dict]:
    """The same launches under ncu: every kernel in the NVTX range, in order, with its DRAM bytes."""
    ncu = os.environ.get("NCU") or "ncu"
    cmd = [ncu, "--nvtx", "--nvtx-include", "intmm/", "--metrics", METRICS, "--csv", "--page", "raw",
           "--print-units", "base", "--clock-control", "none", sys.executable, __file__, "--launch"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    (work / "ncu.log").write_text(p.stdout + "\n--- stderr\n" + p.stderr)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(rows) < 3:
        raise SystemExit(f"intmm.py: ncu gave no kernel rows (rc {p.returncode}); see {work / 'ncu.log'}")
    head, body = rows[0], rows[2:]  # rows[1]: units
    col = {h: i for i, h in enumerate(head)}
    return [{"name": r[col["Kernel Name"]],
             "dram_bytes": float(r[col["dram__bytes_read.sum"]].replace(",", ""))
             + float(r[col["dram__bytes_write.sum"]].replace(",", "")),
             "ncu_dur_ns": float(r[col["gpu__time_duration.sum"]].replace(",", ""))} for r in body]


def main() -> int:
    if sys.argv[1:] == ["--launch"]:
        launches(None)
        return 0
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    if "--analyse-only" in sys.argv[2:]:  # a kept trace (gzip) and ncu.json: the comparison again, offline
        trace = out / "intmm_trace.json.gz"
        meas = json.loads((out / "ncu.json").read_text())
    else:
        trace = out / "intmm_trace.json"
        launches(str(trace))
        meas = measured(out)
        (out / "ncu.json").write_text(json.dumps(meas))
    model = modelled(trace, out)
    gemm_meas = [m for m in meas if "splitK" not in m["name"] and "reduce" not in m["name"].lower()]
    if len(model) != len(SHAPES) * REPS or len(gemm_meas) != len(model):
        print(f"intmm.py: {len(model)} modelled and {len(gemm_meas)} measured GEMM kernels "
              f"(expected {len(SHAPES) * REPS}); kernels under ncu: {sorted({m['name'][:60] for m in meas})}")
    rows = []
    for i, (m, k, n) in enumerate(SHAPES):
        mod = model[i * REPS:(i + 1) * REPS]
        mea = gemm_meas[i * REPS:(i + 1) * REPS]
        if len(mod) < REPS or len(mea) < REPS:
            break
        b = statistics.median(x["bytes"] for x in mod)
        d = statistics.median(x["dram_bytes"] for x in mea)
        rows.append({"m": m, "k": k, "n": n, "kernel": mea[0]["name"][:70], "op_class": mod[0]["op_class"],
                     "modelled_bytes": b, "dram_bytes": d, "ratio": b / d if d else None,
                     "ncu_dur_ns": statistics.median(x["ncu_dur_ns"] for x in mea)})
    tot_b, tot_d = sum(r["modelled_bytes"] for r in rows), sum(r["dram_bytes"] for r in rows)
    if not rows:
        return 1
    (out / "intmm.json").write_text(json.dumps({"rows": rows, "modelled_total": tot_b, "dram_total": tot_d,
                                                "kernels_under_ncu": len(meas)}, indent=2))
    print(f"{'M':>4} {'K':>5} {'N':>6}  {'modelled MB':>11} {'DRAM MB':>8} {'ratio':>6} {'us':>6}  kernel")
    for r in rows:
        print(f"{r['m']:>4} {r['k']:>5} {r['n']:>6}  {r['modelled_bytes'] / 1e6:>11.2f} {r['dram_bytes'] / 1e6:>8.2f} "
              f"{r['ratio']:>6.3f} {r['ncu_dur_ns'] / 1e3:>6.1f}  {r['kernel']}")
    print(f"all shapes: modelled {tot_b / 1e6:,.1f} MB, DRAM {tot_d / 1e6:,.1f} MB, ratio {tot_b / tot_d:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
