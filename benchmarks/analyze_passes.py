"""Where analyze's time goes, pass by pass, in one or more source trees side by side.

    .venv/bin/python benchmarks/analyze_passes.py [--mb 84] [--repeat 5] [--warm N] [NAME=TREE ...]

Ingests benchmarks/pipeline.py's generated trace of --mb MB once, then, for each repeat and each tree
in turn (default: this checkout, as "here"), analyses a fresh copy of that run in a fresh process
whose PYTHONPATH is the tree, and prints the medians of each pass's wall and CPU milliseconds (from
the progress line each pass reports; "start" holds the lazy imports, the input's read and the span
check, "writing tables" the outputs written), the whole analysis's, and the process's peak RSS. A tree
is a checkout with tracekit/analysis and tracekit/collectors linked in (scripts/setup.sh does it).
``--warm N``: also, per repeat and tree, one process that runs the passes once (the raw tables' frames
made) and then each pass N times more on the same arguments: the least CPU ms of each pass, the figure
least moved by other work on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from pipeline import STAGES, child, generated  # noqa: E402

# One analysis of a copy of argv[1] at argv[2]; prints a JSON line: totals and per-pass seconds.
ONE = """
import json, resource, shutil, sys, time
from pathlib import Path
shutil.copytree(sys.argv[1], sys.argv[2])
from tracekit.app.analyze import analyse_run
from tracekit.model import progress
from tracekit.store.rundir import RunDir
marks = []
progress.report = lambda msg, *a, **k: marks.append((msg, time.perf_counter(), time.process_time()))
t0, c0 = time.perf_counter(), time.process_time()
analyse_run(RunDir.open(Path(sys.argv[2])))
marks.append(("end", time.perf_counter(), time.process_time()))
wall, cpu, prev = {}, {}, ("start", t0, c0)
for m in marks:
    key = prev[0].removeprefix("analyzing: ")
    wall[key] = wall.get(key, 0.0) + m[1] - prev[1]
    cpu[key] = cpu.get(key, 0.0) + m[2] - prev[2]
    prev = m
print(json.dumps({"wall": marks[-1][1] - t0, "cpu": marks[-1][2] - c0, "passes_wall": wall, "passes_cpu": cpu,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

# argv[1]: the run; argv[2]: N. The passes once, then each N times; prints {pass: least CPU seconds}.
WARM = """
import json, sys, time
from pathlib import Path
import tracekit.analysis.pipeline as P
from tracekit.app.analyze import load_input
from tracekit.store.rundir import RunDir
passes = {"steps": (P._steps, "steps_pass"), "requests": (P._requests, "requests_pass"),
          "phases": (P._phases, "phases_pass"), "bound": (P._bound, "bound_pass"),
          "energy": (P._energy, "energy_pass"), "cost": (P._cost, "cost_pass"),
          "warmup": (P._warmup, "warmup_pass"), "check": (P._health, "check")}
calls = {}
for name, (mod, fn) in passes.items():
    def keep(*a, _f=getattr(mod, fn), _n=name, **k):
        calls[_n] = (_f, a, k)
        return _f(*a, **k)
    setattr(mod, fn, keep)
P.run_passes(load_input(RunDir.open(Path(sys.argv[1]))))
least = {}
for name, (f, a, k) in calls.items():
    times = []
    for _ in range(int(sys.argv[2])):
        c0 = time.process_time()
        f(*a, **k)
        times.append(time.process_time() - c0)
    least[name] = min(times)
print(json.dumps(least))
"""


def warm(tree: Path, run: Path, n: int) -> dict:
    out = subprocess.run([sys.executable, "-c", WARM, str(run), str(n)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree)
    if out.returncode:
        raise RuntimeError(f"passes in {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def once(tree: Path, run: Path, tmp: Path) -> dict:
    dest = tmp / "copy"
    shutil.rmtree(dest, ignore_errors=True)
    out = subprocess.run([sys.executable, "-c", ONE, str(run), str(dest)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree)
    if out.returncode:
        raise RuntimeError(f"analysis in {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=84.0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--warm", type=int, default=0, help="also each pass N times in one process (least CPU ms)")
    ap.add_argument("trees", nargs="*", help="NAME=TREE (default: here=this checkout)")
    a = ap.parse_args()
    trees = dict(t.split("=", 1) for t in a.trees) or {"here": str(HERE.parent)}
    print(f"load average {os.getloadavg()[0]:.1f}; medians of {a.repeat}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        child(STAGES["ingest"], str(generated(a.mb)), str(run))
        res: dict[str, list[dict]] = {n: [] for n in trees}
        least: dict[str, list[dict]] = {n: [] for n in trees}
        for _ in range(a.repeat):
            for name, tree in trees.items():
                res[name].append(once(Path(tree), run, Path(tmp)))
                if a.warm:
                    least[name].append(warm(Path(tree), run, a.warm))
    print(f"load average at the end {os.getloadavg()[0]:.1f}\n")
    passes = list(dict.fromkeys(k for r in res.values() for x in r for k in x["passes_cpu"]))
    print(f"  {'ms':24}" + "".join(f"{n + ' wall':>14}{n + ' CPU':>14}" for n in trees))
    for key in ["analyze", *passes]:
        cells = ""
        for name in trees:
            w = [x["wall"] if key == "analyze" else x["passes_wall"].get(key, 0.0) for x in res[name]]
            c = [x["cpu"] if key == "analyze" else x["passes_cpu"].get(key, 0.0) for x in res[name]]
            cells += f"{1000 * statistics.median(w):14.0f}{1000 * statistics.median(c):14.0f}"
        print(f"  {key:24}{cells}")
    print("  peak RSS MB             " + "".join(f"{statistics.median(x['peak_mb'] for x in res[n]):28.0f}"
                                             for n in trees))
    if a.warm:
        print(f"\n  warm, least CPU ms of {a.warm} runs (median over repeats)")
        for key in least[next(iter(trees))][0]:
            print(f"  {key:24}" + "".join(f"{1000 * statistics.median(x[key] for x in least[n]):28.0f}"
                                           for n in trees))
    return 0


if __name__ == "__main__":
    sys.exit(main())
