#!/usr/bin/env python3
"""Validate the graph-capture merge on the GPU: `record --compile`'s replayed kernels get their captured ops.

Usage (GPU machine, tracekit installed):  python3 scripts/gpu/graphs.py OUT_DIR          (~60-90 s on an H200)
Dry run here (CPU, tiny model):           python3 scripts/gpu/graphs.py OUT_DIR --cpu

1. `tracekit record --model tinyllama-1.1b --compile --shape smoke --warmup 1 --requests 1` (in this process,
   the CLI's own path): compiles in warm-up, then captures the CUDA graphs again under the profiler with
   shapes (collectors/compiled.py record_captures -> RUN/capture_traces/), then times and records.
2. `tracekit analyze RUN`: ingest finds capture_traces/ and matches each replayed graph to its capture
   (tracekit/ingest/capture.py); the bound pass models the replayed kernels from the captured ops.
3. Prints, for the compiled decode steps' GPU kernels: the share of kernel time classified `other`
   (goal < 5%), the share of GEMM kernel time with FLOPs (goal >= 90%), the capture merge's counts
   (replays matched / replayed, activities matched), and writes OUT_DIR/graphs.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path
from typing import Any

OTHER_GOAL_PCT = 5.0
GEMM_GOAL_PCT = 90.0


def _cli(args: list[str]) -> tuple[int, str]:
    from tracekit.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(args)
    return rc, buf.getvalue()


def shares(run: Path) -> dict[str, Any]:
    """Kernel-time shares of the decode steps' kernels (and of all kernels) from kernel_bound."""
    import pandas as pd

    path = run / "tables" / "kernel_bound.parquet"
    if not path.is_file():
        return {"kernels": 0, "note": "no kernel_bound table (no GPU kernels in the trace)"}
    kb = pd.read_parquet(path)
    kern = kb[kb["kind"].astype(str) == "kernel"]
    out: dict[str, Any] = {"kernels": len(kern)}
    for label, part in (("decode", kern[kern.get("phase", pd.Series(index=kern.index)).astype(str) == "decode"]),
                        ("all", kern)):
        t = float(part["dur_ns"].sum())
        replayed = part[part["launch_name"].astype(str).str.contains("GraphLaunch", na=False)]
        gemm = part[part["kclass"] == "gemm"]
        g = float(gemm["dur_ns"].sum())
        out[label] = {
            "kernels": len(part),
            "kernel_ms": round(t / 1e6, 3),
            "replayed_kernels": len(replayed),
            "other_pct": round(100.0 * float(part.loc[part["bound"] == "other", "dur_ns"].sum()) / t, 2) if t else None,
            "gemm_ms": round(g / 1e6, 3),
            "gemm_with_flops_pct": round(100.0 * float(gemm.loc[gemm["flops"] > 0, "dur_ns"].sum()) / g, 2) if g else None,
            "by_bound_ms": {str(k): round(float(v) / 1e6, 3) for k, v in part.groupby("bound")["dur_ns"].sum().items()},
            "other_top": [(str(n)[:70], round(float(v) / 1e6, 3)) for n, v in
                          part[part["bound"] == "other"].groupby("name")["dur_ns"].sum().nlargest(5).items()],
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("out", type=Path)
    ap.add_argument("--cpu", action="store_true", help="dry run: the tiny preset on CPU (no CUDA graphs)")
    ap.add_argument("--model", default=None)
    ap.add_argument("--shape", default="smoke")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    run = a.out / "run"
    model = a.model or ("tiny" if a.cpu else "tinyllama-1.1b")
    rec = ["record", "--model", model, "--compile", "--shape", a.shape, "--warmup", "1", "--requests", "1",
           "--no-nvml", "--quiet", "--force", "--out", str(run)]
    if a.cpu:
        rec += ["--device", "cpu"]
    res: dict[str, Any] = {"model": model, "shape": a.shape, "cpu": a.cpu}
    t0 = time.perf_counter()
    rc, _ = _cli(rec)
    res["record_s"] = round(time.perf_counter() - t0, 1)
    res["record_rc"] = rc
    if rc != 0:
        print(json.dumps(res))
        return 1
    manifest = json.loads((run / "run.json").read_text())
    res["compile_s"] = (manifest.get("compiled") or {}).get("compile_s")
    res["capture_pass"] = (manifest.get("compiled") or {}).get("capture")
    t1 = time.perf_counter()
    rc, _ = _cli(["analyze", str(run)])
    res["analyze_s"] = round(time.perf_counter() - t1, 1)
    res["analyze_rc"] = rc
    manifest = json.loads((run / "run.json").read_text())
    caps = (manifest.get("ingest") or {}).get("captures") or []
    res["captures"] = caps
    res["warnings"] = [w for w in manifest.get("warnings", []) if "capture" in w or "graph" in w]
    res["shares"] = shares(run)
    dec = res["shares"].get("decode") or {}
    res["goals"] = {
        "decode_other_pct_below": OTHER_GOAL_PCT,
        "decode_other_ok": dec.get("other_pct") is not None and dec["other_pct"] < OTHER_GOAL_PCT,
        "gemm_with_flops_pct_at_least": GEMM_GOAL_PCT,
        "gemm_ok": dec.get("gemm_with_flops_pct") is not None and dec["gemm_with_flops_pct"] >= GEMM_GOAL_PCT,
    }
    (a.out / "graphs.json").write_text(json.dumps(res, indent=1, default=str))
    # the summary table, last
    cap = caps[0] if caps else {}
    rows = [
        ("model / shape", f"{model} / {a.shape}{' (CPU dry run)' if a.cpu else ''}"),
        ("record, analyze (s)", f"{res['record_s']}, {res['analyze_s']} (compile {res['compile_s']})"),
        ("capture pass", json.dumps(res["capture_pass"])),
        ("graph replays matched", f"{cap.get('graph_launches_matched', 0)} of {cap.get('graph_launches', 0)}"),
        ("replayed activities with op", f"{cap.get('activities_matched', 0)} of {cap.get('activities_replayed', 0)}"),
        ("decode kernels (replayed)", f"{dec.get('kernels', 0)} ({dec.get('replayed_kernels', 0)}), "
                                      f"{dec.get('kernel_ms', 0)} ms"),
        ("decode kernel time other", f"{dec.get('other_pct')} % (goal < {OTHER_GOAL_PCT})"),
        ("decode GEMM time with FLOPs", f"{dec.get('gemm_with_flops_pct')} % (goal >= {GEMM_GOAL_PCT})"),
        ("decode other, top", "; ".join(f"{n} {ms} ms" for n, ms in dec.get("other_top", [])) or "-"),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))
    return 0 if res["analyze_rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
