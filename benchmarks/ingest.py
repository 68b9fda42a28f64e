"""Ingest speed and memory: tracekit vs HTA's TraceAnalysis load, on the same files.

    .venv/bin/python benchmarks/ingest.py [--trace FILE ...] [--synthetic-mb 80] [--big-gb 2] [--no-hta]

Each measurement runs in its own subprocess; wall time is measured around it
and peak RSS is the child's ru_maxrss. Also times `gzip -dc FILE > /dev/null`.
Synthetic traces (made by repeating a corpus trace's events with shifted
timestamps) are written under /tmp, never into the repository.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "hta"

_TK = "import sys; from tracekit.ingest import ingest; ingest([sys.argv[1]], sys.argv[2], force=True, use_cache=False, jobs=1)"
_HTA = (
    "import sys; from hta.trace_analysis import TraceAnalysis; "
    "TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)"
)




def _rss_child(code: str, *args: str) -> tuple[float, float]:
    # A fresh interpreter per measurement, reporting its own peak RSS.
    wrapper = f"{code}\nimport resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", wrapper, *args], check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    return wall, int(out.stdout.strip().splitlines()[-1]) / 1024


def gzip_seconds(path: Path) -> float:
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as null:
        subprocess.run(["gzip", "-dc", str(path)], check=True, stdout=null)
    return time.perf_counter() - t0


def synthesize(src: Path, dst: Path, target_bytes: int) -> Path:
    """Repeat src's events with shifted timestamps until about target_bytes of JSON."""
    with gzip.open(src) as fh:
        doc = json.load(fh)
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), int | float)]
    span = (max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed)) + 1
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    one = sum(len(json.dumps(e)) + 2 for e in events)
    reps = max(1, target_bytes // one)
    with gzip.open(dst, "wt", compresslevel=1) as out:
        out.write('{"schemaVersion": 1, "traceEvents": [\n')
        first = True
        for r in range(reps):
            shift = r * span
            for e in events:
                if "ts" in e and isinstance(e["ts"], int | float):
                    e = {**e, "ts": e["ts"] + shift}
                out.write(("" if first else ",\n") + json.dumps(e))
                first = False
        out.write("\n],\n" + json.dumps(meta)[1:])
    return dst


def bench(path: Path, hta: bool) -> dict[str, float]:
    if path.suffix == ".gz":
        with gzip.open(path) as fh:
            mb = fh.seek(0, 2) / 1e6
    else:
        mb = path.stat().st_size / 1e6
    res: dict[str, float] = {"mb": mb, "gzip_s": gzip_seconds(path)}
    with tempfile.TemporaryDirectory() as tmp:
        res["tk_s"], res["tk_mb"] = _rss_child(_TK, str(path), str(Path(tmp) / "run"))
        if hta:
            d = Path(tmp) / "hta"
            d.mkdir()
            os.symlink(path.resolve(), d / path.name)
            res["hta_s"], res["hta_mb"] = _rss_child(_HTA, str(d))
    return res


def report(name: str, r: dict[str, float]) -> None:
    line = (f"{name}: {r['mb']:.0f} MB JSON | gzip -dc {r['gzip_s']:.2f}s | tracekit {r['tk_s']:.2f}s "
            f"({r['mb'] / r['tk_s']:.0f} MB/s, {r['tk_mb']:.0f} MB RSS) | tracekit/gzip time {r['tk_s'] / r['gzip_s']:.1f}x")
    if "hta_s" in r:
        line += (f" | HTA {r['hta_s']:.2f}s {r['hta_mb']:.0f} MB RSS | time ratio tk/HTA {r['tk_s'] / r['hta_s']:.2f}"
                 f" | RSS ratio tk/HTA {r['tk_mb'] / r['hta_mb']:.2f}")
    print(line, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", action="append", default=[], help="a trace to measure (e.g. the real H200 80 MB one)")
    ap.add_argument("--synthetic-mb", type=float, default=80.0, help="size of the synthetic generation-like trace (0: skip)")
    ap.add_argument("--big-gb", type=float, default=0.0, help="also a trace of this many GB (HTA skipped: too slow)")
    ap.add_argument("--no-hta", action="store_true")
    a = ap.parse_args()
    hta = not a.no_hta and shutil.which("gzip") is not None
    try:
        import hta as _  # noqa: F401
    except ImportError:
        hta = False
    files = [Path(t) for t in a.trace]
    corpus = sorted(CORPUS.glob("*.json.gz"), key=lambda p: p.stat().st_size)
    if corpus:
        files.insert(0, corpus[-1])
    for f in files:
        report(f.name, bench(f, hta))
    src = CORPUS / "ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    if a.synthetic_mb and src.exists():
        dst = synthesize(src, Path(tempfile.gettempdir()) / "tracekit_synthetic.json.gz", int(a.synthetic_mb * 1e6))
        report(f"synthetic {a.synthetic_mb:.0f} MB", bench(dst, hta))
    if a.big_gb and src.exists():
        dst = synthesize(src, Path(tempfile.gettempdir()) / "tracekit_big.json.gz", int(a.big_gb * 1e9))
        report(f"synthetic {a.big_gb:.1f} GB", bench(dst, hta=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
