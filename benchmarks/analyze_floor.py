"""The memory analyze cannot go under: its inputs read, before any pass runs, with and without pandas.

    .venv/bin/python benchmarks/analyze_floor.py [--mb 84] [--repeat 3]

Ingests benchmarks/pipeline.py's generated trace of --mb MB once, then, each in a fresh process,
reads the run's input as analyze does (tracekit.app.analyze.load_input: other_events in part, on
one thread) and prints the peak RSS (ru_maxrss) with three imports: tracekit.app.analyze and
tracekit.analysis.frames (pandas with it), then also the pandas frames the passes make of the raw tables
(frames.as_df); and numpy + pyarrow's Parquet reader alone (no pandas). Beside them, the analyze stage itself. Medians of --repeat runs. The goal of 0.25 of HTA's
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
from tracekit.analysis.frames import as_df
from tracekit.analysis.inputs import RAW
from tracekit.app.analyze import load_input
from tracekit.store import heap
from tracekit.store.rundir import RunDir
def stage():
    inp = load_input(RunDir.open(Path(sys.argv[2])))
    heap.trim()
    if sys.argv[3] == "frames":
        frames = {name: as_df(inp.table(name)) for name in RAW}
        heap.trim()
"""
# The same read with no tracekit import: RAW and RAW_COLUMNS by hand.
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
