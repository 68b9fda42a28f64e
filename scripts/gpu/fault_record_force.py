#!/usr/bin/env python3
"""Validate that record/analyze on the GPU never lose or mix a run: kill -9, --force, one writer at a time.

Usage (tracekit installed):

    python3 scripts/gpu/fault_record_force.py OUT_DIR          # H200: tinyllama-1.1b smoke on cuda, ~3 min
    python3 scripts/gpu/fault_record_force.py OUT_DIR --cpu    # dry run: the tiny preset on CPU, ~1.5 min

  1. `tracekit record` a good run (GOOD) and time it;
  2. `record --force` over GOOD killed with SIGKILL at 3 points of its run (30%, 60%, 90% of the
     measured time): GOOD must be byte for byte as it was (the new run is built beside it);
  3. a second writer while a `record --force` runs: `tracekit analyze GOOD` must fail at once with
     one line naming the recorder's pid, and the record must finish and swap in a complete run;
  4. `tracekit analyze GOOD` killed at 2 points: GOOD as it was, or completely analysed; then an
     analysis that finishes; nothing but hidden staging left beside GOOD, removed by the next writer;
  5. where the run directory lives: whether the file system swaps directories atomically
     (renameat2 RENAME_EXCHANGE) and has hard links (analysis' one-step rewrite).
Prints a table (check, result, detail) and writes OUT_DIR/fault_record_force.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def snapshot(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name != ".tracekit.lock" and not (p.name.startswith(".") and p.name.endswith(".tmp")):
            out[str(p.relative_to(root))] = hashlib.blake2b(p.read_bytes(), digest_size=12).hexdigest()
    return out


def complete(run: Path) -> tuple[bool, str]:
    """run.json says complete, and every table it counts has that many rows."""
    import pyarrow.parquet as pq

    m = json.loads((run / "run.json").read_text())
    if m.get("status") != "complete":
        return False, f"status {m.get('status')}: {m.get('incomplete_reason')}"
    for key in ("ingest", "analysis"):
        info = m.get(key) or {}
        rows = (info.get("counts") or {}).get("rows_by_table") if key == "ingest" else info.get("rows")
        for name, n in (rows or {}).items():
            got = pq.ParquetFile(run / "tables" / f"{name}.parquet").metadata.num_rows
            if got != n:
                return False, f"{name}: {got} rows, run.json says {n}"
    return True, "complete"


def tk(*args: Any) -> list[str]:
    return [sys.executable, "-m", "tracekit", *map(str, args)]


def run_killed(argv: list[str], delay: float) -> int | None:
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return p.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL)
        p.wait()
        return None


def beside(run: Path) -> list[str]:
    return sorted(p.name for p in run.parent.iterdir() if p != run)


def fs_facts(d: Path) -> dict[str, Any]:
    from tracekit.store.fsops import exchange

    a, b = d / "fs-a", d / "fs-b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    swapped = exchange(a, b)
    linked = True
    try:
        os.link(b / "x" if swapped else a / "x", d / "fs-link")
    except OSError:
        linked = False
    return {"atomic_exchange": swapped, "hard_links": linked}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--cpu", action="store_true", help="dry run: the tiny preset on CPU")
    args = ap.parse_args()
    out: Path = args.out
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    model = ["--model", "tiny", "--device", "cpu"] if args.cpu else ["--model", "tinyllama-1.1b", "--device", "cuda"]
    record = [*model, "--shape", "smoke", "--warmup", "0", "--no-nvml", "-q"]
    good = runs / "GOOD"
    results: list[dict[str, Any]] = []

    def check(name: str, ok: bool, detail: str) -> None:
        results.append({"check": name, "ok": bool(ok), "detail": detail})

    # 1. a good run, timed
    t0 = time.perf_counter()
    p = subprocess.run(tk("record", *record, "--out", good), capture_output=True, text=True)
    dur = time.perf_counter() - t0
    ok, why = complete(good) if p.returncode == 0 else (False, p.stderr.strip()[-300:])
    check("record GOOD", ok, f"{dur:.1f} s; {why}")
    if not ok:
        return _finish(out, results, 1)
    before = snapshot(good)

    # 2. record --force killed at three points
    for frac in (0.3, 0.6, 0.9):
        rc = run_killed(tk("record", *record, "--out", good, "--force"), frac * dur)
        same = snapshot(good) == before
        if same:
            ok, why = rc is None, "as it was"
        else:  # it swapped its run in before the kill (or finished): then a complete new run
            ok, why = complete(good)
            before = snapshot(good)
        left = [n for n in beside(good) if not n.startswith(".tracekit-new-")]
        check(f"record --force killed at {frac:.0%}", ok and not left, f"{'finished' if rc == 0 else 'killed'}: {why}"
              + (f"; left beside: {left}" if left else ""))

    # 3. a second writer while record --force runs
    rec = subprocess.Popen(tk("record", *record, "--out", good, "--force"), stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 2 * dur
    while rec.poll() is None and time.monotonic() < deadline and not any(
            n.startswith(".tracekit-new-") for n in beside(good)):
        time.sleep(0.05)  # the recorder holds GOOD's lock once its new run exists beside it
    writing = rec.poll() is None
    second = subprocess.run(tk("analyze", good), capture_output=True, text=True)
    _, err = rec.communicate(timeout=600)
    lines = [ln for ln in second.stderr.splitlines() if ln.strip()]
    named = second.returncode == 1 and len(lines) == 1 and f"pid {rec.pid}" in second.stderr
    check("second writer during record --force", named if writing else second.returncode == 0,
          (lines[-1][:160] if lines else f"rc {second.returncode}") + ("" if writing else " (the record had finished)"))
    ok, why = complete(good) if rec.returncode == 0 else (False, err.strip()[-200:])
    check("record --force swapped in", ok and snapshot(good) != before, why)
    left = beside(good)
    check("staging removed by the next writer", not left, f"beside GOOD: {left}")

    # 4. analyze killed, then finished
    t0 = time.perf_counter()
    probe = runs / "PROBE"
    subprocess.run(["cp", "-a", str(good), str(probe)], check=True)
    subprocess.run(tk("analyze", probe), capture_output=True)
    adur = time.perf_counter() - t0
    before = snapshot(good)
    for frac in (0.4, 0.8):
        rc = run_killed(tk("analyze", good), frac * adur)
        state = snapshot(good)
        ok, why = (True, "as it was") if state == before else complete(good)
        check(f"analyze killed at {frac:.0%}", ok, f"{'finished' if rc == 0 else 'killed'}: {why}")
        before = state
    a = subprocess.run(tk("analyze", good), capture_output=True, text=True)
    ok, why = complete(good) if a.returncode == 0 else (False, a.stderr.strip()[-200:])
    check("analyze finishes", ok and json.loads((good / "run.json").read_text())["analysis"]["status"] == "complete",
          f"{adur:.1f} s; {why}")
    check("nothing left beside", beside(good) == ["PROBE"], f"beside GOOD: {beside(good)}")

    # 5. the file system
    facts = fs_facts(out)
    check("file system", True, ", ".join(f"{k} {v}" for k, v in facts.items()))
    return _finish(out, results, 0 if all(r["ok"] for r in results) else 1)


def _finish(out: Path, results: list[dict[str, Any]], code: int) -> int:
    (out / "fault_record_force.json").write_text(json.dumps({"results": results}, indent=1) + "\n")
    width = max(len(r["check"]) for r in results)
    print(f"{'check':{width}}  result  detail")
    for r in results:
        print(f"{r['check']:{width}}  {'ok' if r['ok'] else 'FAIL':6}  {r['detail']}")
    return code


if __name__ == "__main__":
    sys.exit(main())
