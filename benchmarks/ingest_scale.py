"""Ingest of 64 trace files into one dataset: one process, the local process pool, and Ray.

    python benchmarks/ingest_scale.py [--corpus ../shared/corpus] [--files 64] [--jobs N]

Copies real corpus traces (round-robin over the CUDA ones) into a temp
directory as <name>_rank-<k>.json.gz, ingests them three times with
tracekit.ingest.ray_engine (engine serial, process, ray on a local runtime with N
CPUs), checks that the three datasets hold the same rows, and prints the
wall times and speed-ups measured in this one run. Ray's start-up is
included in its time: it is what a user waits for.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tracekit.ingest.ray_engine import ingest_dataset
from tracekit.store import dataset

DEFAULT_CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus"
SOURCES = (
    "hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta/trace_filter__sampled_rank-0.json.gz",
    "hta/trace_filter__sampled_rank-1.json.gz",
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    srcs = [args.corpus / s for s in SOURCES if (args.corpus / s).is_file()]
    if not srcs:
        print(f"no corpus traces under {args.corpus}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="tk-ingest-scale-"))
    try:
        tdir = work / "traces"
        tdir.mkdir()
        size = 0
        for i in range(args.files):
            src = srcs[i % len(srcs)]
            dst = tdir / f"job{i // 8}_rank-{i % 8}.json.gz"
            shutil.copyfile(src, dst)
            size += dst.stat().st_size
        print(f"{args.files} traces, {size / 1e6:.1f} MB gzip, {args.jobs} workers, {os.cpu_count()} CPUs")
        times: dict[str, float] = {}
        rows: dict[str, int] = {}
        for engine in ("serial", "process", "ray"):
            out = work / f"ds_{engine}"
            t0 = time.perf_counter()
            s = ingest_dataset([tdir], out, engine=engine, jobs=args.jobs, num_cpus=args.jobs)
            times[engine] = time.perf_counter() - t0
            if not s.ok:
                print(f"{engine}: {len(s.failed)} files failed: {s.failed[0]}", file=sys.stderr)
                return 1
            rows[engine] = sum(dataset.read_dataset(out, t).num_rows for t in ("gpu_activity", "cpu_ops", "runtime"))
            print(f"{engine:8s} {times[engine]:7.2f} s  ({s.events:,} events, {rows[engine]:,} rows)")
        if len(set(rows.values())) != 1:
            print(f"datasets differ: {rows}", file=sys.stderr)
            return 1
        base = times["serial"]
        print(
            f"speed-up vs one process: process pool x{base / times['process']:.2f}, "
            f"ray x{base / times['ray']:.2f} (ray incl. start-up)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
