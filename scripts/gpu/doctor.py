"""Validate `tracekit doctor` on the GPU machine: the lines it must print there, measured for real (budget 20 s).

    python3 scripts/gpu/doctor.py OUT_DIR          # on the H200: every capability expected present
    python3 scripts/gpu/doctor.py OUT_DIR --cpu    # dry run on a machine without a GPU

Runs `tracekit doctor --json OUT_DIR/doctor.json` (on the GPU with --probe-counters: Nsight Compute
profiles one small kernel for real), checks each expected line, writes OUT_DIR/doctor_validate.json
(the doctor's checks, each expectation and whether it held, wall time) and prints a summary table last.
Exit 1 if an expectation fails. Needs tracekit installed (or this checkout's editable install).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BUDGET_S = 20.0

# (check name, statuses accepted, text the detail must contain) per machine kind.
H200 = [
    ("torch", {"ok"}, "CUDA build 13"),
    ("GPU 0", {"ok"}, "H200"),
    ("transformers", {"ok"}, ""),
    ("driver", {"ok"}, "NVIDIA "),
    ("NVML", {"ok"}, "GPU(s)"),
    ("GPM 0", {"ok"}, "DRAM bandwidth"),
    ("Nsight Compute", {"ok"}, " at "),
    ("counters", {"ok"}, "permitted: ncu read gpu__time_duration"),
    ("ingest", {"ok", "warn"}, ""),  # the C scanner is built where the install found a compiler
    ("ceiling", {"ok", "warn"}, "H200"),
    ("runs folder", {"ok"}, "writable"),
]
CPU = [
    ("torch", {"ok"}, ""),
    ("GPU", {"warn"}, "recording runs on the CPU"),
    ("transformers", {"ok"}, ""),
    ("NVML", {"ok", "warn"}, ""),
    ("Nsight Compute", {"ok", "warn"}, ""),
    ("counters", {"warn"}, "not checked"),
    ("ingest", {"ok", "warn"}, ""),
    ("ceiling", {"ok"}, "no GPU"),
    ("runs folder", {"ok"}, "writable"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--cpu", action="store_true", help="dry run without a GPU (no counter probe)")
    args = ap.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    args.out_dir = args.out_dir.resolve()
    report = args.out_dir / "doctor.json"
    cmd = [sys.executable, "-m", "tracekit", "doctor", "--runs", str(args.out_dir / "runs"), "--json", str(report)]
    if not args.cpu:
        cmd.append("--probe-counters")
    t0 = time.perf_counter()
    # From the output directory: `python -m` puts the working directory first on sys.path, and a
    # checkout there would shadow the installed tracekit.
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=args.out_dir.resolve())
    wall = time.perf_counter() - t0
    print(proc.stdout, end="")
    if proc.stderr.strip():
        print(proc.stderr, end="", file=sys.stderr)
    data: dict[str, Any] = json.loads(report.read_text()) if report.is_file() else {"checks": []}
    checks = {c["name"]: c for c in data["checks"]}
    rows = []
    for name, statuses, needle in CPU if args.cpu else H200:
        c = checks.get(name)
        held = c is not None and c["status"] in statuses and needle in c["detail"]
        rows.append({"check": name, "expected": "/".join(sorted(statuses)) + (f" ~ {needle!r}" if needle else ""),
                     "status": c["status"] if c else "absent", "held": held,
                     "detail": c["detail"] if c else ""})
    rows.append({"check": "exit code", "expected": "0", "status": str(proc.returncode), "held": proc.returncode == 0,
                 "detail": ""})
    rows.append({"check": "wall time", "expected": f"< {BUDGET_S:.0f} s", "status": f"{wall:.1f} s",
                 "held": wall < BUDGET_S, "detail": ""})
    every = [line for line in proc.stdout.splitlines()[1:-1] if line.startswith(("  warn", "  FAIL"))]
    lines = proc.stdout.splitlines()
    fixes = all(lines[lines.index(w) + 1].strip().startswith("fix: ") for w in every)
    rows.append({"check": "fix lines", "expected": "one under each warn/FAIL", "status": f"{len(every)} warn/FAIL",
                 "held": fixes, "detail": ""})
    ok = all(r["held"] for r in rows)
    out = {"mode": "cpu" if args.cpu else "gpu", "ok": ok, "wall_s": round(wall, 2), "command": cmd,
           "expectations": rows, "doctor": data}
    (args.out_dir / "doctor_validate.json").write_text(json.dumps(out, indent=1))
    print(f"\n{'check':<16} {'expected':<50} {'got':<12} held")
    for r in rows:
        print(f"{r['check']:<16} {r['expected'][:50]:<50} {r['status'][:12]:<12} {'yes' if r['held'] else 'NO'}")
    print(f"doctor validation ({out['mode']}): {'PASS' if ok else 'FAIL'} in {wall:.1f} s; "
          f"wrote {args.out_dir / 'doctor_validate.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
