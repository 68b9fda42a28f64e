#!/usr/bin/env python3
"""How many bytes cuDNN's decode attention reads for a static cache of S slots (Nsight Compute).

Usage (on the GPU machine, ncu on PATH):

    python3 scripts/gpu/sdpa_tile.py OUT_DIR [--slots 128,129,136,144,160,161,192,256] [--dims 64,128]

For each head dim D and cache length S: Q [64, 32, 1, D], K and V [64, 32, S, D] (contiguous, bf16, the
KV heads already repeated, as Inductor hands them to the kernel in a compiled decode), an additive mask
[64, 1, 1, S]; ``torch.nn.functional.scaled_dot_product_attention`` under the cuDNN backend, called twice
(the second measured). Nsight Compute reads the DRAM bytes of every cuDNN attention kernel (one pass,
caches flushed). Writes OUT_DIR/sdpa_tile.json and prints, per case, the tensors' bytes, the DRAM bytes
and their ratio.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path


def cases(dims: list[int], slots: list[int]) -> list[tuple[int, int]]:
    return [(d, s) for d in dims for s in slots]


def child(dims: list[int], slots: list[int]) -> None:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for d, s in cases(dims, slots):
        q = torch.randn(64, 32, 1, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(64, 32, s, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(64, 32, s, d, device="cuda", dtype=torch.bfloat16)
        mask = torch.zeros(64, 1, 1, s, device="cuda", dtype=torch.bfloat16)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            for _ in range(2):
                F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.cuda.synchronize()
        print(f"case {d} {s}", flush=True)


def tensor_bytes(d: int, s: int) -> int:
    q = o = 64 * 32 * d * 2
    return q + o + 2 * 64 * 32 * s * d * 2 + 64 * s * 2


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--slots", default="128,129,136,144,160,161,192,256")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--child", action="store_true")
    a = ap.parse_args()
    dims = [int(x) for x in a.dims.split(",")]
    slots = [int(x) for x in a.slots.split(",")]
    if a.child:
        child(dims, slots)
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    ncu = shutil.which("ncu")
    if ncu is None:
        print("ncu not found", file=sys.stderr)
        return 1
    cmd = [ncu, "--csv", "--page", "raw", "-k", "regex:sdpa|attn|fmha|flash",
           "--metrics", "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum",
           sys.executable, __file__, str(a.out), "--slots", a.slots, "--dims", a.dims, "--child"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    (a.out / "ncu.log").write_text(p.stdout + "\n" + p.stderr)
    rows = [r for r in csv.DictReader(io.StringIO(p.stdout[p.stdout.find('"ID"'):]))][1:]
    want = cases(dims, slots)
    if len(rows) != 2 * len(want):
        print(f"{len(rows)} kernels measured for {len(want)} cases (2 each expected); see ncu.log", file=sys.stderr)
    out = []
    for i, (d, s) in enumerate(want):
        if 2 * i + 1 >= len(rows):
            break
        r = rows[2 * i + 1]  # the second call
        read = float(r["dram__bytes_read.sum"].replace(",", ""))
        tb = tensor_bytes(d, s)
        out.append({"head_dim": d, "slots": s, "kernel": r["Kernel Name"], "tensor_bytes": tb, "dram_read": read,
                    "dram_write": float(r["dram__bytes_write.sum"].replace(",", "")),
                    "ns": float(r["gpu__time_duration.sum"].replace(",", "")), "ratio": read / tb})
        print(f"D={d:4d} S={s:4d} tensors {tb / 1e6:8.2f} MB  read {read / 1e6:8.2f} MB  x{read / tb:5.3f}  "
              f"{r['Kernel Name'][:70]}")
    (a.out / "sdpa_tile.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
