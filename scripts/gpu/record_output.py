"""Validate that `tracekit record` prints only its own lines on the GPU machine (Kineto, inductor and torch kept out).

    python3 scripts/gpu/record_output.py OUT_DIR          # on the H200: tiny model on cuda, a window, --compile
    python3 scripts/gpu/record_output.py OUT_DIR --cpu    # dry run: tiny model on the CPU, no --compile

Runs `tracekit record --model tiny --requests 2` twice as subprocesses with every Python warning
enabled: with `--trace-steps 2:6` (the profiler then starts and stops inside the step hooks) and, on
the GPU, with `--compile` (its warm-up is where inductor's TF32 hint comes from; on the CPU the second
run is plain). Each must pass: every line on stdout/stderr is tracekit's (progress and summary),
third_party.log holds Kineto's profiler_start/profiler_stop lines, run.json `third_party` counts
them, and the summary has the one `libraries` line. Writes OUT_DIR/record_output.json and prints a summary table last. About 40-90 s
on the GPU (compilation dominates; 30 s on the CPU VM). Exit 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

OWN_LINE = re.compile(r"^(warm-up|timing without profiler|recording): request \d+/\d+, \d+/\d+ tokens$"
                      r"|^tracekit record: |^  \S|^ {18}open it at ")


def check_one(name: str, extra: list[str], out_dir: Path) -> dict[str, Any]:
    run = out_dir / name
    cmd = [sys.executable, "-m", "tracekit", "record", "--model", "tiny", "--requests", "2", "--out", str(run),
           "--force", *extra]
    env = {**os.environ, "PYTHONWARNINGS": "default"}  # every warning a library raises would print
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    wall = time.perf_counter() - t0
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    foreign = [ln for ln in lines if not OWN_LINE.search(ln)]
    manifest = json.loads((run / "run.json").read_text()) if (run / "run.json").is_file() else {}
    log = (run / "third_party.log").read_text() if (run / "third_party.log").is_file() else ""
    info = manifest.get("third_party") or {}
    summary = [ln for ln in lines if ln.startswith("  libraries")]
    checks = [
        ("exit code 0", proc.returncode == 0, str(proc.returncode)),
        ("run complete", manifest.get("status") == "complete", str(manifest.get("status"))),
        ("no foreign line", not foreign, f"{len(foreign)} foreign"),
        ("Kineto lines in the log", "profiler_start" in log and "profiler_stop" in log,
         f"{log.count('profiler_start')} start, {log.count('profiler_stop')} stop"),
        ("counted in run.json", bool(info.get("messages")) and info.get("log") == "third_party.log",
         f"messages {info.get('messages')}, kept {info.get('kept')}"),
        ("one summary line", len(summary) == 1, f"{len(summary)} line(s)"),
    ]
    return {"name": name, "command": cmd, "wall_s": round(wall, 1), "ok": all(h for _, h, _ in checks),
            "checks": [{"check": c, "held": h, "got": g} for c, h, g in checks], "foreign_lines": foreign[:50],
            "third_party": info, "summary_line": summary, "output": lines[-40:],
            "kept_warnings": [w for w in manifest.get("warnings", []) if str(w).startswith("third-party: ")]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--cpu", action="store_true", help="dry run on the CPU, without --compile")
    args = ap.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    device = ["--device", "cpu"] if args.cpu else ["--device", "cuda"]
    cases = [("window", [*device, "--trace-steps", "2:6"])]
    cases.append(("plain", device) if args.cpu else ("compiled", [*device, "--compile"]))
    results = [check_one(name, extra, args.out_dir) for name, extra in cases]
    ok = all(r["ok"] for r in results)
    (args.out_dir / "record_output.json").write_text(
        json.dumps({"mode": "cpu" if args.cpu else "gpu", "ok": ok, "cases": results}, indent=1))
    for r in results:
        print(f"--- {r['name']}: {' '.join(r['command'][3:])}")
        for ln in r["output"][-16:]:
            print(ln)
    print(f"\n{'case':<10} {'check':<26} {'got':<34} held")
    for r in results:
        for c in r["checks"]:
            print(f"{r['name']:<10} {c['check']:<26} {c['got'][:34]:<34} {'yes' if c['held'] else 'NO'}")
        for w in r["kept_warnings"]:
            print(f"{r['name']:<10} kept warning: {w[:140]}")
    walls = ", ".join(f"{r['name']} {r['wall_s']:.0f} s" for r in results)
    print(f"record output validation ({'cpu' if args.cpu else 'gpu'}): {'PASS' if ok else 'FAIL'} ({walls}); "
          f"wrote {args.out_dir / 'record_output.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
