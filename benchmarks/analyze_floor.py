"""The memory analyze cannot go under: its inputs read, before any pass runs, with and without pandas.

    .venv/bin/python benchmarks/analyze_floor.py [--mb 84] [--repeat 3]

Ingests benchmarks/pipeline.py's generated trace of --mb MB once, then, each in a fresh process,
reads the run's raw tables as analyze does (tracekit.app.analyze.read_raw: other_events in part, on
one thread) and prints the peak RSS (ru_maxrss) with three imports: tracekit.app.analyze (pandas with
it), then the frames made as analyze makes them; and numpy + pyarrow's Parquet reader alone (no
pandas). Beside them, the analyze stage itself. Medians of --repeat runs. The goal of 0.25 of HTA's
leanest load cannot hold where the first floor is over it.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from pipeline import STAGES, child, generated  # noqa: E402

_TAIL = """
import resource
read()
print(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, 0)
"""
WITH_PANDAS = """
import sys
from pathlib import Path
from tracekit.app.analyze import RAW, read_raw
from tracekit.analysis.steps import as_df
from tracekit.store import heap
from tracekit.store.rundir import RunDir
def read():
    tables = read_raw(RunDir.open(Path(sys.argv[2])))
    heap.trim()
    if sys.argv[3] == "frames":
        for name in RAW:
            if name != "gpu_activity":
                tables[name] = as_df(tables[name])
        heap.trim()
"""
WITHOUT_PANDAS = """
import sys, ctypes, os
from pathlib import Path
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")  # the pool tracekit chooses
import numpy, pyarrow.parquet as pq
PROJECTED = {"other_events": ["rank", "ts_ns", "dur_ns", "cat"]}
def read():
    tables = {}
    for f in sorted((Path(sys.argv[2]) / "tables").glob("*.parquet")):
        if f.stem in ("gpu_activity", "cpu_ops", "runtime", "annotations", "counters", "other_events", "ncu_counters"):
            tables[f.stem] = pq.ParquetFile(f).read(columns=PROJECTED.get(f.stem), use_threads=False)
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    assert "pandas" not in sys.modules
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=84.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    trace = generated(args.mb)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        child(STAGES["ingest"], str(trace), str(run))
        rows = {"read, pandas imported": (WITH_PANDAS + _TAIL, "tables"),
                "read and frames, pandas imported": (WITH_PANDAS + _TAIL, "frames"),
                "read, numpy + pyarrow only": (WITHOUT_PANDAS + _TAIL, "-"),
                "analyze (the stage)": ("import sys" + STAGES["analyze"] + "\nimport resource\nstage()\n"
                                        "print(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, 0)\n", "-")}
        print(f"{trace.name}: peak RSS MB, medians of {args.repeat}")
        for label, (code, mode) in rows.items():
            mbs = []
            for _ in range(args.repeat):
                out = subprocess.run([sys.executable, "-c", code, str(trace), str(run), mode],
                                     capture_output=True, text=True, check=True)
                mbs.append(int(out.stdout.split()[-2]) / 1024)
            print(f"  {label:36} {statistics.median(mbs):6.0f}  ({', '.join(f'{m:.0f}' for m in mbs)})")


if __name__ == "__main__":
    main()
