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
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from pipeline import STAGES, child, generated  # noqa: E402

# Children for pipeline.child: each defines stage(), the read; child reports its peak RSS.
WITH_PANDAS = """
from pathlib import Path
from tracekit.app.analyze import as_frames, read_raw
from tracekit.store import heap
from tracekit.store.rundir import RunDir
def stage():
    tables = read_raw(RunDir.open(Path(sys.argv[2])))
    heap.trim()
    if sys.argv[3] == "frames":
        tables = as_frames(tables)
        heap.trim()
"""
# The same read without importing tracekit.app.analyze (it imports pandas): RAW and RAW_COLUMNS by hand.
WITHOUT_PANDAS = """
import ctypes, os
from pathlib import Path
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")  # the pool tracekit chooses
import numpy, pyarrow.parquet as pq
RAW = ("gpu_activity", "cpu_ops", "runtime", "annotations", "counters", "other_events", "ncu_counters")
PROJECTED = {"other_events": ["rank", "ts_ns", "dur_ns", "cat"]}
def stage():
    tables = {}
    for f in sorted((Path(sys.argv[2]) / "tables").glob("*.parquet")):
        if f.stem in RAW:
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
        rows = {"read, pandas imported": (WITH_PANDAS, "tables"),
                "read and frames, pandas imported": (WITH_PANDAS, "frames"),
                "read, numpy + pyarrow only": (WITHOUT_PANDAS, "-"),
                "analyze (the stage)": (STAGES["analyze"], "-")}
        print(f"{trace.name}: peak RSS MB, medians of {args.repeat}")
        for label, (code, mode) in rows.items():
            mbs = [child(code, str(trace), str(run), mode)["mb"] for _ in range(args.repeat)]
            print(f"  {label:36} {statistics.median(mbs):6.0f}  ({', '.join(f'{m:.0f}' for m in mbs)})")


if __name__ == "__main__":
    main()
