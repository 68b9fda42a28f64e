"""Time and peak memory per event from 100 MB to 10 GB of trace: ingest, analyze, diff, export.

    python benchmarks/stream_scale.py [--sizes 100,1000,3000,10000] [--stages ingest,analyze,diff,export]
        [--export-max-mb 3000] [--clean]

Each size is a generation trace of that many MB of JSON (benchmarks/gentrace.py: the committed H200
recording's decode steps repeated, ~3,460 events per MB), kept under $TMPDIR/tracekit_stream/ for the
next run (--clean deletes each trace and run directory once measured). Each stage runs in its own
child process (benchmarks/pipeline.py's child: the stage call timed alone, peak RSS of the process):
ingest (trace -> run directory), analyze (tracekit.app.analyze.analyse_run: window by window above
tracekit.app.windowed.WINDOW_EVENTS raw events), diff (the run against itself, tracekit.app.diff),
export (Perfetto protobuf of the whole run) and export_json (its Chrome JSON), only up to --export-max-mb; ``whole``: analyze with
every run on the whole-run path (the baseline; run it after analyze, it rewrites the same tables). Prints per size and stage: wall
seconds, CPU seconds (user + system: what a shared machine's load does not inflate) and CPU µs per
event, peak RSS MB, and the machine's 1-minute load average before each size.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from pipeline import _HEAD, STAGES  # noqa: E402  (benchmarks/pipeline.py: the stages' code)

CACHE = Path(tempfile.gettempdir()) / "tracekit_stream"
DIFF = """
from pathlib import Path
from tracekit.app.diff import diff
def stage():
    diff(Path(sys.argv[2]), Path(sys.argv[2]))
"""
WHOLE = """
from pathlib import Path
from tracekit.app import windowed
from tracekit.app.analyze import analyse_run
from tracekit.store.rundir import RunDir
windowed.WINDOW_EVENTS = 2**62  # every run on the whole-run path: the baseline
def stage():
    analyse_run(RunDir.open(Path(sys.argv[2])))
"""
CODE = {"ingest": STAGES["ingest"], "analyze": STAGES["analyze"], "diff": DIFF, "export": STAGES["export proto"],
        "export_json": STAGES["export json"], "whole": WHOLE}


# The stage call alone: wall s, CPU s (user + system), peak RSS KiB of the process (imports included).
_TAIL = """
t0, c0 = time.perf_counter(), time.process_time()
stage()
print(time.perf_counter() - t0, time.process_time() - c0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def child(code: str, *args: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _HEAD + code + _TAIL, *args], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"child failed ({' '.join(args)}):\n{out.stderr[-3000:]}")
    s, cpu, peak = out.stdout.strip().splitlines()[-1].split()
    return {"s": float(s), "cpu": float(cpu), "mb": int(peak) / 1024}


def trace(mb: int) -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"generation_{mb}mb.json.gz"
    if not path.exists():
        tmp = path.with_name(path.name + ".tmp")
        subprocess.run([sys.executable, str(HERE / "gentrace.py"), str(tmp), str(mb), str(os.cpu_count() or 1)],
                       check=True)
        tmp.rename(path)
    return path


def events(run: Path) -> int:
    m = json.loads((run / "run.json").read_text())
    return int(m.get("ingest", {}).get("counts", {}).get("events_read", 0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,3000,10000")
    ap.add_argument("--stages", default="ingest,analyze,diff,export")
    ap.add_argument("--export-max-mb", type=int, default=3000)
    ap.add_argument("--clean", action="store_true")
    args = ap.parse_args(argv)
    stages = [s for s in args.stages.split(",") if s]
    print(f"{os.cpu_count()} CPUs; stages: {', '.join(stages)}")
    print(f"{'MB':>6} {'events':>11} {'load':>5}  " + "  ".join(
        f"{s + ' s':>10} {'CPU s':>7} {'CPU us/ev':>9} {'MB RSS':>7}" for s in stages), flush=True)
    for mb in (int(x) for x in args.sizes.split(",")):
        path = trace(mb)
        run = CACHE / f"run_{mb}mb"
        load = os.getloadavg()[0]
        cells = []
        n = 0
        for s in stages:
            if s.startswith("export") and mb > args.export_max_mb:
                cells.append(f"{'-':>10} {'-':>7} {'-':>9} {'-':>7}")
                continue
            if s != "ingest" and not run.is_dir():
                child(CODE["ingest"], str(path), str(run))
            r = child(CODE[s], str(path), str(run))
            n = n or events(run)
            cells.append(f"{r['s']:10.1f} {r['cpu']:7.1f} {r['cpu'] / max(n, 1) * 1e6:9.2f} {r['mb']:7.0f}")
        print(f"{mb:6d} {n:11,d} {load:5.1f}  " + "  ".join(cells), flush=True)
        if args.clean:
            shutil.rmtree(run, ignore_errors=True)
            path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
