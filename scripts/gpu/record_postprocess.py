#!/usr/bin/env python3
"""Validate that record's post-processing is no slower than ingest of the same trace, and time the whole path on it.

Usage (tracekit installed):

    python3 scripts/gpu/record_postprocess.py OUT_DIR          # H200: tinyllama-1.1b, 128 in / 32 out, ~2 min
    python3 scripts/gpu/record_postprocess.py OUT_DIR --cpu    # dry run: the tiny preset on CPU, ~1 min

  1. `tracekit record` (shapes recorded, NVML on) into OUT_DIR/run; run.json's ``postprocess`` says
     what the work after the workload took (reading the trace, tables, merged trace) and the summary
     prints it;
  2. `tracekit ingest` of the run's merged trace.json.gz, then analyze, export (proto and JSON) and
     report, each a fresh process, timed from outside (process wall time);
  3. post-processing seconds / ingest's own seconds (run.json's ingest.seconds) must be <= 1.
Prints a table (step, seconds, detail) last and writes OUT_DIR/record_postprocess.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def tk(*args: Any) -> list[str]:
    return [sys.executable, "-m", "tracekit", *map(str, args)]


def timed(argv: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    return time.perf_counter() - t0, proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--cpu", action="store_true", help="dry run: the tiny preset on CPU")
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    model = ["--model", "tiny", "--device", "cpu"] if args.cpu else ["--model", "tinyllama-1.1b", "--device", "cuda"]
    run = out / "run"
    rows: list[dict[str, Any]] = []
    s, proc = timed(tk("record", *model, "--shape", "chat", "--output-tokens", "32", "--warmup", "1",
                       "--out", run, "--force"))
    if proc.returncode:
        print(proc.stdout[-2000:], proc.stderr[-2000:])
        return 1
    manifest = json.loads((run / "run.json").read_text())
    post = manifest.get("postprocess") or {}
    summary = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip().startswith("post-processing")]
    rows.append({"step": "record (whole process)", "s": s, "detail": summary[0] if summary else "NO summary line"})
    rows.append({"step": "record post-processing", "s": post.get("seconds"),
                 "detail": f"trace {post.get('trace_bytes', 0) / 1e6:.0f} MB raw; annotations {post.get('annotations_s')} s, "
                           f"tables {post.get('tables_s')} s, merge {post.get('merge_s')} s; profiler export "
                           f"{post.get('profiler_export_s')} s"})
    trace = run / "trace.json.gz"
    ing = out / "ingested"
    steps = [("ingest", tk("ingest", trace, "--out", ing, "--force", "--no-cache", "-q")),
             ("analyze", tk("analyze", ing, "-q")),
             ("export proto", tk("export", ing, "--format", "proto", "--out", out / "t.pftrace", "-q")),
             ("export json", tk("export", ing, "--format", "json", "--out", out / "t.json.gz", "-q")),
             ("report", tk("report", ing, "--html", out / "report.html"))]
    ingest_s = None
    for name, argv in steps:
        s, proc = timed(argv)
        rows.append({"step": name, "s": s, "detail": f"rc {proc.returncode}" + (
            f": {proc.stderr.strip().splitlines()[-1][:150]}" if proc.returncode and proc.stderr.strip() else "")})
        if name == "ingest" and proc.returncode == 0:
            # ingest's own seconds (run.json), like post-processing's: the process's imports left out of both
            ingest_s = json.loads((ing / "run.json").read_text())["ingest"]["seconds"]
            rows[-1]["detail"] += f"; ingest's own time {ingest_s:.2f} s"
    ok = bool(summary) and post.get("seconds") is not None and ingest_s is not None and post["seconds"] <= ingest_s
    ratio = post["seconds"] / ingest_s if ingest_s and post.get("seconds") is not None else None
    rows.append({"step": "post-processing / ingest", "s": ratio,
                 "detail": ("ok: <= 1" if ok else "FAIL: > 1 or missing") + " (both as run.json times them)"})
    (out / "record_postprocess.json").write_text(json.dumps({"rows": rows, "ok": ok, "postprocess": post}, indent=1) + "\n")
    for p in (out / "t.pftrace", out / "t.json.gz"):
        p.unlink(missing_ok=True)
    width = max(len(r["step"]) for r in rows)
    print(f"{'step':{width}}  {'seconds':>8}  detail")
    for r in rows:
        v = "" if r["s"] is None else f"{r['s']:8.2f}"
        print(f"{r['step']:{width}}  {v:>8}  {r['detail']}")
    return 0 if ok and all(r["detail"].startswith("rc 0") for r in rows if r["step"] in dict(steps)) else 1


if __name__ == "__main__":
    sys.exit(main())
