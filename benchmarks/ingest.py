"""Ingest speed and memory: tracekit vs HTA's TraceAnalysis load, on the same files.

HTA and ijson are the `bench` extra: `.venv/bin/pip install -e '.[bench]'` (without HTA, --no-hta).

    .venv/bin/python benchmarks/ingest.py [--trace FILE ...] [--synthetic-mb 80] [--big-gb 2] [--repeat 3] [--no-hta]

Every measurement runs in a fresh subprocess. Inside it the tool's modules are
imported first; the *load time* is measured around the load call only
(tracekit: ``ingest([file], out)`` with the cache off, which writes the Parquet
tables and run.json; HTA: ``TraceAnalysis(trace_dir=...)``), so interpreter
start and imports are excluded for both alike. HTA runs with two of its parser
backends: JSON (its default and its fastest here) and IJSON_BATCH_AND_COMPRESS
(its recommended low-memory backend; needs ijson). Ratios are against HTA at
its best: the faster backend's time, the leaner backend's peak RSS. The
child's peak RSS (ru_maxrss) and the whole process's wall time (start,
imports, load, exit) are reported too. ``gzip -dc FILE > /dev/null`` is timed
on the same file. With --repeat N each figure is the median of N runs.

Synthetic traces (a corpus trace's events repeated with shifted timestamps)
are written under the temp directory and deleted after.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

# The corpus: $TRACEKIT_CORPUS (as the tests read it), else shared/corpus/hta beside the checkout.
CORPUS = Path(os.environ.get("TRACEKIT_CORPUS") or Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "hta")
SRC = "ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"

# Each child prints "<load seconds> <peak RSS KiB> <RSS KiB after imports>" as its last line.
_TK = """
import sys, time, resource
import tracekit.ingest, tracekit.ingest.cache, tracekit.store.rundir  # what the ingest path imports, no more
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
tracekit.ingest.ingest([sys.argv[1]], sys.argv[2], force=True, use_cache=False, jobs=1)
t = time.perf_counter() - t0
print(t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, base)
"""
_HTA = """
import sys, time, resource, warnings, logging
warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
from hta.common.trace_parser import set_default_trace_parsing_backend
from hta.configs.parser_config import ParserBackend
set_default_trace_parsing_backend(ParserBackend[sys.argv[2]])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
t = time.perf_counter() - t0
print(t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, base)
"""
HTA_BACKENDS = ("JSON", "IJSON_BATCH_AND_COMPRESS")
# HTA's JSON backend peaks at about 10x the JSON size (docs/measurements/2026-12-01-pipeline.md); do not start
# it where that cannot fit.
HTA_RSS_FACTOR = 10.5


def _child(code: str, *args: str) -> tuple[float, float, float, float]:
    """(load seconds inside the child, peak RSS MB, RSS MB after imports, whole-process wall seconds)."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    load, rss, base = out.stdout.strip().splitlines()[-1].split()
    return float(load), int(rss) / 1024, int(base) / 1024, wall


def gzip_seconds(path: Path) -> float:
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as null:
        subprocess.run(["gzip", "-dc" if path.suffix == ".gz" else "-c", str(path)], check=True, stdout=null)
    return time.perf_counter() - t0


def json_mb(path: Path) -> float:
    if path.suffix != ".gz":
        return path.stat().st_size / 1e6
    n = 0
    with gzip.open(path) as fh:
        while block := fh.read(16 << 20):
            n += len(block)
    return n / 1e6


def synthesize(src: Path, dst: Path, target_bytes: int) -> Path:
    """Repeat src's events with shifted timestamps until about target_bytes of JSON."""
    with gzip.open(src) as fh:
        doc = json.load(fh)
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), int | float)]
    span = (max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed)) + 1
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    one = len(orjson.dumps(events))
    reps = max(1, round(target_bytes / one))
    with gzip.open(dst, "wb", compresslevel=1) as out:
        out.write(b'{"schemaVersion": 1, "traceEvents": [\n')
        for r in range(reps):
            shift = r * span
            shifted = [{**e, "ts": e["ts"] + shift} if isinstance(e.get("ts"), int | float) else e for e in events]
            body = orjson.dumps(shifted, option=orjson.OPT_APPEND_NEWLINE)[1:-2]
            out.write(body if r == 0 else b",\n" + body)
        out.write(b"\n],\n" + orjson.dumps(meta)[1:])
    return dst


def mem_total_mb() -> float:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("inf")


def bench(path: Path, hta: bool, repeat: int) -> dict[str, float | str]:
    mb = json_mb(path)
    keys = [f"{tool}_{k}" for tool in ("tk", *HTA_BACKENDS) for k in ("s", "mb", "base", "wall")]
    runs: dict[str, list[float]] = {k: [] for k in ("gzip_s", *keys)}
    hta_note = ""
    # Skipped past 1 GB: ~10x the JSON would take most of this shared machine's memory.
    if hta and (mb > 1000 or mb * HTA_RSS_FACTOR > 0.8 * mem_total_mb()):
        hta = False
        hta_note = f"HTA not run: would need ~{HTA_RSS_FACTOR}x = {mb * HTA_RSS_FACTOR / 1e3:.0f} GB"
    for _ in range(repeat):
        runs["gzip_s"].append(gzip_seconds(path))
        with tempfile.TemporaryDirectory() as tmp:
            got = {"tk": _child(_TK, str(path), str(Path(tmp) / "run"))}
            if hta:
                d = Path(tmp) / "hta"
                d.mkdir()
                os.symlink(path.resolve(), d / path.name)
                for b in HTA_BACKENDS:
                    got[b] = _child(_HTA, str(d), b)
            for tool, vals in got.items():
                for k, v in zip(("s", "mb", "base", "wall"), vals, strict=True):
                    runs[f"{tool}_{k}"].append(v)
    res: dict[str, float | str] = {"mb": mb, "note": hta_note}
    for k, v in runs.items():
        if v:
            res[k] = statistics.median(v)
    return res


def report(name: str, r: dict[str, float | str]) -> None:
    f = {k: v for k, v in r.items() if isinstance(v, float)}
    mb, gz, tk = f["mb"], f["gzip_s"], f["tk_s"]
    print(f"{name}: {mb:.0f} MB JSON", flush=True)
    print(f"  gzip -dc          {gz:6.2f} s  ({mb / gz:.0f} MB/s)")
    print(f"  tracekit ingest   {tk:6.2f} s  ({mb / tk:.0f} MB/s)  peak RSS {f['tk_mb']:.0f} MB "
          f"({f['tk_base']:.0f} after imports)  process {f['tk_wall']:.2f} s")
    ran = [b for b in HTA_BACKENDS if f"{b}_s" in f]
    for b in ran:
        print(f"  HTA {b:25} {f[f'{b}_s']:6.2f} s  ({mb / f[f'{b}_s']:.0f} MB/s)  peak RSS {f[f'{b}_mb']:.0f} MB "
              f"({f[f'{b}_base']:.0f} after imports)  process {f[f'{b}_wall']:.2f} s")
    if ran:
        fast = min(ran, key=lambda b: f[f"{b}_s"])
        lean = min(ran, key=lambda b: f[f"{b}_mb"])
        tr, rr = tk / f[f"{fast}_s"], f["tk_mb"] / f[f"{lean}_mb"]
        above = (f["tk_mb"] - f["tk_base"]) / max(f[f"{lean}_mb"] - f[f"{lean}_base"], 1)
        print(f"  time tk/HTA {fast} {tr:.3f} (target <= 0.100: {'met' if tr <= 0.1 else 'NOT met'}); "
              f"RSS tk/HTA {lean} {rr:.2f} (target <= 0.25: {'met' if rr <= 0.25 else 'NOT met'}); "
              f"RSS above imports {above:.2f}")
    elif r.get("note"):
        print(f"  {r['note']}")
    thr = (mb / tk) / (mb / gz)
    print(f"  throughput tk/gzip {thr:.2f} (target >= 0.33: {'met' if thr >= 1 / 3 else 'NOT met'})")
    if mb > 1000:
        print(f"  peak RSS {f['tk_mb'] / 1024:.2f} GB (target < 4 GB: {'met' if f['tk_mb'] < 4096 else 'NOT met'})")
    print(flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", action="append", default=[], help="a trace to measure (e.g. the real H200 80 MB one)")
    ap.add_argument("--synthetic-mb", type=float, default=80.0, help="size of the synthetic generation-like trace (0: skip)")
    ap.add_argument("--big-gb", type=float, default=0.0, help="also a trace of this many GB (made by repeating one)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement; medians are reported")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--no-corpus", action="store_true", help="skip the largest corpus trace")
    a = ap.parse_args()
    hta = not a.no_hta
    try:
        import hta as _  # noqa: F401
    except ImportError:
        hta = False
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}, median of {a.repeat}\n", flush=True)
    files = [Path(t) for t in a.trace]
    corpus = sorted(CORPUS.glob("*.json.gz"), key=lambda p: p.stat().st_size)
    if corpus and not a.no_corpus:
        files.insert(0, corpus[-1])
    for f in files:
        report(f.name, bench(f, hta, a.repeat))
    src = CORPUS / SRC
    tmpdir = Path(tempfile.gettempdir())
    for size, label in ((a.synthetic_mb * 1e6, f"synthetic {a.synthetic_mb:.0f} MB"), (a.big_gb * 1e9, f"synthetic {a.big_gb:.1f} GB")):
        if not size or not src.exists():
            continue
        dst = tmpdir / f"tracekit_bench_{int(size)}.json.gz"
        try:
            # In a child process: Linux carries a parent's resident size into the peak RSS
            # (ru_maxrss) of the children it starts, so a parent holding the events while it
            # wrote them made every later child's peak look ~50 MB larger.
            subprocess.run([sys.executable, __file__, "--synthesize", str(src), str(dst), str(int(size))], check=True)
            report(label, bench(dst, hta, a.repeat))
        finally:
            dst.unlink(missing_ok=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--synthesize"]:
        synthesize(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
        sys.exit(0)
    sys.exit(main())
