"""A fleet of traces analysed into one dataset, one task per run: wall time, per-task peak RSS, the query.

    [TRACEKIT_CORPUS=DIR] .venv/bin/python benchmarks/fleet.py [--runs 200] [--engine ray|process|serial] [--jobs 2]
        [--task-memory 1GB] [--address ADDRESS] [--work /tmp/tracekit-fleet-bench]

Builds a directory of --runs traces under --work (never under the corpus): copies of the corpus'
traces (../shared/corpus: engines/ with their capture_traces/ beside, hta/), of the repository's
recorded fixture traces (tests/fixtures, tests/data) and of its 2-rank tensor-parallel run, each copy
in a folder of its own so that it is a run of its own id, plus one truncated trace that must fail. Then
``tracekit analyze DIR --out DATASET --engine E`` in a fresh process (the CLI, timed), and one SQL query
over the dataset: TPOT p99 per run and GPU. Prints the wall time, the runs analysed and failed, each
task's peak RSS (fleet_runs.peak_rss_bytes: the worker's resident high-water mark, reset at the task's
start) as max / p50, the sum of the tasks' times and the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The corpus beside the repository (../shared/corpus), or $TRACEKIT_CORPUS.
CORPUS = Path(os.environ.get("TRACEKIT_CORPUS") or REPO.parent / "shared" / "corpus")

QUERY = """
select r.run_id, r.rank, f.gpu, count(*) as requests,
       quantile_cont(r.tpot_ns, 0.99) / 1e6 as tpot_p99_ms
from requests r join fleet_runs f using (run_id, rank)
where r.tpot_ns is not null
group by all order by tpot_p99_ms desc
"""


def sources() -> list[tuple[str, Path, list[Path]]]:
    """(name, trace or run directory, capture files beside it) for every distinct input."""
    out: list[tuple[str, Path, list[Path]]] = []
    for d in sorted((CORPUS / "engines").glob("*")) if (CORPUS / "engines").is_dir() else []:
        traces = [p for p in d.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz"))]
        caps = sorted((d / "capture_traces").glob("*")) if (d / "capture_traces").is_dir() else []
        out += [(d.name, t, caps) for t in traces]
    hta = CORPUS / "hta" if (CORPUS / "hta").is_dir() else REPO / "tests" / "data" / "hta"
    out += [(p.name.split(".")[0], p, []) for p in sorted(hta.glob("*.json.gz"))]
    fixtures = REPO / "tests" / "fixtures"
    for sub in ("cpu", "gpu", "gpu/foreign", "foreign", "ncu"):
        out += [(f"{sub.replace('/', '_')}_{p.name.split('.')[0]}", p, [])
                for p in sorted((fixtures / sub).glob("*.json.gz"))]
    out.append(("tp_h200", fixtures / "tp_h200", []))  # a run directory of two ranks
    return out


def copy_distinct(src: Path, dest: Path, i: int) -> None:
    """A copy of the trace ``src`` whose bytes differ from every other copy's (ingest refuses a file given
    twice): gzip's header stamped with ``i``, or a plain JSON file's trailing blanks."""
    data = src.read_bytes()
    if src.name.endswith(".gz") and src == dest:
        dest.unlink()
    if src.name.endswith(".gz"):
        dest.write_bytes(gzip.compress(gzip.decompress(data), compresslevel=6, mtime=i + 1))
    else:
        dest.write_bytes(data + b" " * (i + 1))


def build(work: Path, runs: int) -> Path:
    fleet = work / "traces"
    if fleet.exists():
        shutil.rmtree(fleet)
    fleet.mkdir(parents=True)
    src = sources()
    for i in range(runs - 1):
        name, path, caps = src[i % len(src)]
        d = fleet / f"{i:04d}_{name}"
        if path.is_dir():
            shutil.copytree(path, d, ignore=shutil.ignore_patterns("*.tracekit", "tables"))
            for t in d.rglob("*.json.gz"):
                copy_distinct(t, t, i)
            continue
        d.mkdir()
        copy_distinct(path, d / path.name, i)
        if caps:
            (d / "capture_traces").mkdir()
            for c in caps:
                shutil.copyfile(c, d / "capture_traces" / c.name)
    bad = fleet / f"{runs - 1:04d}_truncated"
    bad.mkdir()
    data = gzip.decompress((REPO / "tests" / "fixtures" / "cpu" / "batch2.json.gz").read_bytes())
    (bad / "truncated.json").write_bytes(data[: len(data) // 2])
    return fleet


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--engine", default="ray", choices=["ray", "process", "serial"])
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--task-memory", default=None)
    ap.add_argument("--address", default=None, help="with --engine ray: the cluster to join (passed to analyze)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/tracekit-fleet-bench"))
    args = ap.parse_args()
    fleet = build(args.work, args.runs)
    files = [p for p in fleet.rglob("*") if p.is_file()]
    mb = sum(p.stat().st_size for p in files) / 1e6
    print(f"fleet: {args.runs} runs, {len(files)} files, {mb:.1f} MB under {fleet}")
    ds = args.work / f"dataset_{args.engine}"
    shutil.rmtree(ds, ignore_errors=True)
    cmd = [sys.executable, "-m", "tracekit", "analyze", str(fleet), "--out", str(ds), "--engine", args.engine]
    cmd += ["--jobs", str(args.jobs)] if args.jobs else []
    cmd += ["--task-memory", args.task_memory] if args.task_memory else []
    cmd += ["--address", args.address] if args.address else []
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    wall = time.perf_counter() - t0
    load1 = os.getloadavg()
    # ru_maxrss of the reaped children: the largest of analyze's processes at their exit (a pool worker's
    # high-water mark is reset at each task's start, so this is not the whole run's peak)
    reaped_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(" ".join(cmd[1:]))
    print(proc.stdout.strip())
    err = proc.stderr.strip().splitlines()
    print("\n".join(([f"... ({len(err) - 8} lines)"] if len(err) > 8 else []) + err[-8:]))
    print(f"exit {proc.returncode}; wall {wall:.1f} s; largest RSS of analyze's reaped processes {reaped_mb:.0f} MiB; "
          f"load average {load0[0]:.2f} before, {load1[0]:.2f} after")

    sys.path.insert(0, str(REPO))
    from tracekit.app.query import run_query

    t0 = time.perf_counter()
    f = run_query("select status, count(distinct run_id) runs, sum(analysis_s) s, "
                  "max(peak_rss_bytes) / 2^20 peak_max, median(peak_rss_bytes) / 2^20 peak_p50 "
                  "from fleet_runs group by status", ds).to_pylist()
    for row in f:
        print(f"{row['status']}: {row['runs']} runs, tasks' time {row['s']:.1f} s, per-task peak RSS "
              f"max {row['peak_max']:.0f} MiB, p50 {row['peak_p50']:.0f} MiB")
    q = run_query(QUERY, ds)
    qs = time.perf_counter() - t0
    print(f"query (TPOT p99 per run and GPU): {q.num_rows} rows in {qs:.2f} s; first 5:")
    for row in q.to_pylist()[:5]:
        print("  " + json.dumps(row, default=str))
    print("tables:", ", ".join(sorted(p.name for p in ds.iterdir() if p.is_dir() and not p.name.startswith("_"))))


if __name__ == "__main__":
    main()
