#!/usr/bin/env python3
"""Why do MoE prefill's grouped GEMMs (torch._grouped_mm, cutlass 128x256 tiles, 2x1 clusters) run at about
half the dense bf16 rate while Nsight Compute finds their tensor pipe 72-81% busy? Tile padding per expert
(rows routed to an expert rounded up to the tile) or the kernel's own efficiency at any routing?

    python3 scripts/gpu/grouped_mm.py OUTDIR            # timings (CUDA events), then the same launches under ncu

For Mixtral-8x7B's and Qwen3-30B-A3B's expert shapes, the gate/up and down grouped GEMMs at three routings
of the same rows: "uniform" (every expert the same count, a multiple of 256), "routed" (the counts a
random-weight router gives: top-k of softmax(x W) with transformers' init), and "one-hot" (all rows on one
expert). Prints useful TFLOP/s (2 * rows * K * N), the rows padded to 128 and to 256 per expert, and
writes OUTDIR/grouped_mm.json; with ncu present, OUTDIR/grouped_mm_ncu.csv holds one launch per case.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SHAPES = {  # name: (tokens, hidden, intermediate, experts, top_k)
    "mixtral": (1024, 4096, 14336, 8, 2),
    "qwen3moe": (128, 2048, 768, 128, 8),
}
METRICS = ["gpu__time_duration.sum", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
           "dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes.sum",
           "smsp__inst_executed_pipe_tensor_op_gmma.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed"]


def counts(torch, routing: str, tokens: int, hidden: int, experts: int, top_k: int):
    rows = tokens * top_k
    if routing == "uniform":
        return [rows // experts] * experts
    if routing == "one-hot":
        return [rows] + [0] * (experts - 1)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(tokens, hidden, device="cuda", generator=g, dtype=torch.bfloat16)
    w = torch.randn(hidden, experts, device="cuda", generator=g, dtype=torch.bfloat16) * 0.02
    sel = torch.topk(torch.softmax((x @ w).float(), -1), top_k, dim=-1).indices.flatten()
    return torch.bincount(sel, minlength=experts).tolist()


def cases(torch):
    for name, (tokens, hidden, inter, experts, top_k) in SHAPES.items():
        for routing in ("uniform", "routed", "one-hot"):
            c = counts(torch, routing, tokens, hidden, experts, top_k)
            for proj, (k, n) in (("gate_up", (hidden, 2 * inter)), ("down", (inter, hidden))):
                yield f"{name}.{proj}.{routing}", c, k, n, experts


def run(torch, label, c, k, n, experts, reps):
    rows = sum(c)
    x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)  # [E, K, N], as traced
    offs = torch.tensor(c, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
    from tracekit.collectors.calibrate import time_ms

    times = sorted(ms * 1e-3 for ms in time_ms(torch, lambda: torch._grouped_mm(x, w, offs=offs), 3, reps))
    t = times[len(times) // 2]
    pad = {q: sum(-(-r // q) * q for r in c if r) for q in (128, 256)}
    useful = 2.0 * rows * k * n
    return {"case": label, "counts": c, "k": k, "n": n, "rows": rows, "median_s": t,
            "useful_tflops": useful / t / 1e12,
            "padded128_tflops": 2.0 * pad[128] * k * n / t / 1e12,
            "padded256_tflops": 2.0 * pad[256] * k * n / t / 1e12}


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    import torch
    if os.environ.get("GROUPED_MM_NCU_CHILD"):  # under ncu: one launch per case, marked by NVTX
        for label, c, k, n, e in cases(torch):
            torch.cuda.nvtx.range_push(label)
            run(torch, label, c, k, n, e, reps=1)
            torch.cuda.nvtx.range_pop()
        return 0
    res = [run(torch, label, c, k, n, e, reps=20) for label, c, k, n, e in cases(torch)]
    for r in res:
        print(f"{r['case']:28s} rows {r['rows']:5d} max/expert {max(r['counts']):5d} "
              f"{r['median_s'] * 1e6:8.1f} us  useful {r['useful_tflops']:6.1f}  pad128 {r['padded128_tflops']:6.1f}"
              f"  pad256 {r['padded256_tflops']:6.1f} TFLOP/s")
    (out / "grouped_mm.json").write_text(json.dumps({"gpu": torch.cuda.get_device_name(0), "cases": res}, indent=1))
    ncu = shutil.which("ncu")
    if ncu:
        q = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True).stdout
        metrics = [m for m in METRICS if m.split(".")[0] in q]
        print("ncu metrics:", metrics)
        cmd = [ncu, "--csv", "--page", "raw", "--metrics", ",".join(metrics), "--nvtx",
               "-k", "regex:device_kernel", "--launch-skip", "0", sys.executable, __file__, str(out)]
        p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "GROUPED_MM_NCU_CHILD": "1"})
        (out / "grouped_mm_ncu.csv").write_text(p.stdout)
        print("ncu rc", p.returncode, p.stderr[-600:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
