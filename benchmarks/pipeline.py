"""The whole path on one trace, each stage a fresh process, beside HTA's load and gunzip, in one run.

HTA and ijson are the `bench` extra: `.venv/bin/pip install -e '.[bench]'`.

    .venv/bin/python benchmarks/pipeline.py [--trace FILE] [--mb 84] [--repeat 3] [--no-hta]
        [--stages "export proto,report"] [--scale 10,84,300,1000,2000] [--big-gb 2]

Stages, each in its own child process: tracekit ingest (trace -> run directory, the cache off),
analyze (the run directory's passes, tables written), export --format proto and --format json, report
(terminal text and the HTML written); HTA's ``TraceAnalysis`` load with its JSON backend (its fastest
here) and with IJSON_BATCH_AND_COMPRESS (its low-memory backend; needs ijson); ``gzip -dc`` of the
file. tracekit's modules are byte-compiled first, as an install has them. Each child imports what its
stage imports, then times the stage call alone (imports excluded, for tracekit and HTA alike) and reports its peak RSS (ru_maxrss: imports included) and its RSS after
imports; the whole process's wall time is printed too. Medians of --repeat runs, the stages of one
repeat run back to back. Ratios are against HTA at its best: the faster backend's time, the leaner
backend's peak RSS. --stages runs only the named stages (ingest always runs first: the others read
its run directory; analyze runs before export and report when they are named).

The trace: --trace FILE, else a generation trace of --mb MB built from the committed H200 recording
(benchmarks/gentrace.py: its decode steps repeated). --scale runs ingest + analyze + export (proto)
on traces of those sizes (MB) and prints time and memory per event; --big-gb checks the 2 GB goal
(ingest + analyze + export under 60 s and 4 GB). Generated traces are kept under
$TMPDIR/tracekit_pipeline/ for the next run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ingest import HTA_RSS_FACTOR, mem_total_mb  # noqa: E402  (benchmarks/ingest.py: one estimate of HTA's memory)

CACHE = Path(tempfile.gettempdir()) / "tracekit_pipeline"

# Each child: argv[1:] are its arguments; it prints "<stage s> <peak RSS KiB> <RSS after imports KiB>" last.
_HEAD = """
import sys, time, resource
def _rss():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024
"""
_TAIL = """
base = _rss()
t0 = time.perf_counter()
stage()
t = time.perf_counter() - t0
print(t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, base)
"""
STAGES = {
    "ingest": """
import tracekit.ingest, tracekit.ingest.cache, tracekit.store.rundir
def stage():
    tracekit.ingest.ingest([sys.argv[1]], sys.argv[2], force=True, use_cache=False, jobs=1)
""",
    "analyze": """
from pathlib import Path
from tracekit.app.analyze import analyse_run
from tracekit.store.rundir import RunDir
def stage():
    analyse_run(RunDir.open(Path(sys.argv[2])))
""",
    "export proto": """
from pathlib import Path
from tracekit.app.export import export_run, load_tables
from tracekit.store.rundir import RunDir
import tracekit.trace.perfetto
def stage():
    run = RunDir.open(Path(sys.argv[2]))
    export_run(run, "proto", Path(sys.argv[2]) / "bench.pftrace", None, load_tables(run))
""",
    "export json": """
from pathlib import Path
from tracekit.app.export import export_run, load_tables
from tracekit.store.rundir import RunDir
def stage():
    run = RunDir.open(Path(sys.argv[2]))
    export_run(run, "json", Path(sys.argv[2]) / "bench.json.gz", None, load_tables(run))
""",
    "report": """
import io, warnings
from pathlib import Path
from tracekit.report.html import build_html
from tracekit.report.terminal import render_terminal
from tracekit.report.view import load_view
from tracekit.store.rundir import RunDir
def stage():
    views = [load_view(RunDir.open(Path(sys.argv[2])))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        render_terminal(views, io.StringIO())
        (Path(sys.argv[2]) / "bench.html").write_text(build_html(views, title="bench"))
""",
}
# record's work after the workload (collectors/recording.py Recording._write): find tracekit's
# annotations in the raw Kineto JSON (a byte search for their names), the clock sync, and write the
# merged trace.json.gz.
RECORD_POST = """
from pathlib import Path
from tracekit.ingest.own import own_annotations
from tracekit.trace import chrome
def stage():
    raw = Path(sys.argv[1])
    chrome.clock_offset(chrome.clock_syncs(own_annotations(raw)))
    chrome.merge(raw, Path(sys.argv[2]) / "merged.json.gz", [])
"""
HTA = """
import warnings, logging
warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
from hta.common.trace_parser import set_default_trace_parsing_backend
from hta.configs.parser_config import ParserBackend
set_default_trace_parsing_backend(ParserBackend[sys.argv[3]])
def stage():
    TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
"""
HTA_BACKENDS = ("JSON", "IJSON_BATCH_AND_COMPRESS")


def compile_sources() -> None:
    """Byte-compile tracekit's modules, as installing it does, so that no stage compiles them: a
    checkout imported under PYTHONDONTWRITEBYTECODE=1 compiles every module it imports in every
    process (HTA, installed, has its bytecode), and a lazily imported one inside the stage."""
    import compileall

    root = HERE.parent
    for d in ("tracekit", "analysis", "collectors"):  # tracekit/analysis and /collectors are links to these
        compileall.compile_dir(root / d, quiet=1)


def child(code: str, *args: str) -> dict[str, float]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _HEAD + code + _TAIL, *args], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode:
        raise RuntimeError(f"child failed ({' '.join(args)}):\n{out.stderr[-3000:]}")
    s, peak, base = out.stdout.strip().splitlines()[-1].split()
    return {"s": float(s), "mb": int(peak) / 1024, "base": int(base) / 1024, "wall": wall}


def gunzip(path: Path) -> float:
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as null:
        subprocess.run(["gzip", "-dc", str(path)], check=True, stdout=null)
    return time.perf_counter() - t0


def generated(mb: float) -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"generation_{mb:g}mb.json.gz"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        # In a child: a parent holding the events would carry its resident size into the children's ru_maxrss.
        subprocess.run([sys.executable, str(HERE / "gentrace.py"), str(tmp), str(mb)], check=True)
        tmp.rename(path)
    return path


def json_mb_events(path: Path) -> tuple[float, int]:
    """(MB of JSON, events) as tracekit's ingest counted them, read back from a run directory."""
    import json

    with tempfile.TemporaryDirectory() as tmp:
        child(STAGES["ingest"], str(path), str(Path(tmp) / "run"))
        m = json.loads((Path(tmp) / "run" / "run.json").read_text())
    info = m.get("ingest", {})
    mb = sum(f.get("bytes", 0) for f in info.get("files", [])) / 1e6
    return mb, int(info.get("counts", {}).get("events_read", 0))


def run_once(path: Path, hta: bool, tmp: Path, stages: set[str] | None = None) -> dict[str, dict[str, float]]:
    res: dict[str, dict[str, float]] = {"gunzip": {"s": gunzip(path)}}
    run = tmp / "run"
    for name, code in STAGES.items():
        needed = name == "ingest" or (name == "analyze" and bool(stages and stages & {"export proto", "export json",
                                                                                       "report"}))
        if stages is None or name in stages or needed:
            res[name] = child(code, str(path), str(run))
    if stages is None or "record post-processing" in stages:
        raw = tmp / "kineto.raw.json"  # as the profiler writes it: uncompressed
        with open(raw, "wb") as fh:
            subprocess.run(["gzip", "-dc", str(path)], check=True, stdout=fh)
        res["record post-processing"] = child(RECORD_POST, str(raw), str(tmp))
        raw.unlink()
    if hta:
        d = tmp / "hta"
        d.mkdir()
        os.symlink(path.resolve(), d / path.name)
        for b in HTA_BACKENDS:
            res[f"HTA {b}"] = child(HTA, str(d), "", b)
    return res


def medians(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name in runs[0]:
        out[name] = {k: statistics.median(r[name][k] for r in runs) for k in runs[0][name]}
    return out


def verdict(ratio: float, target: float) -> str:
    return f"{ratio:.3f} (<= {target:g}: {'met' if ratio <= target else 'NOT met'})"


def report(path: Path, med: dict[str, dict[str, float]], mb: float, events: int, repeat: int) -> None:
    print(f"{path.name}: {mb:.0f} MB of JSON, {events:,} events; medians of {repeat}\n")
    print(f"  {'stage':28} {'stage s':>8} {'process s':>9} {'peak RSS MB':>11} {'after imports':>13}")
    for name, r in med.items():
        if name == "gunzip":
            print(f"  {'gzip -dc':28} {r['s']:8.2f}")
            continue
        print(f"  {name:28} {r['s']:8.2f} {r['wall']:9.2f} {r['mb']:11.0f} {r['base']:13.0f}")
    hta = [med[k] for k in med if k.startswith("HTA ")]
    if not hta:
        return
    best_s = min(h["s"] for h in hta)
    lean_mb = min(h["mb"] for h in hta)
    lean_above = min(h["mb"] - h["base"] for h in hta)
    fastest = min((k for k in med if k.startswith("HTA ")), key=lambda k: med[k]["s"])
    leanest = min((k for k in med if k.startswith("HTA ")), key=lambda k: med[k]["mb"])
    print(f"\n  HTA at its best: {best_s:.2f} s ({fastest}), peak RSS {lean_mb:.0f} MB ({leanest}); "
          f"gzip -dc {med['gunzip']['s']:.2f} s")
    if "analyze" in med:
        ia = med["ingest"]["s"] + med["analyze"]["s"]
        print(f"  ingest + analyze   {ia:6.2f} s  time / HTA {verdict(ia / best_s, 0.2)}")
    for name in ("export proto", "export json"):
        if name in med:
            print(f"  {name:18} {med[name]['s']:6.2f} s  time / HTA {verdict(med[name]['s'] / best_s, 0.2)}")
    if "report" in med:
        print(f"  {'report':18} {med['report']['s']:6.2f} s  time / HTA {verdict(med['report']['s'] / best_s, 0.1)}")
    if "record post-processing" in med:
        post = med["record post-processing"]["s"]
        print(f"  record post-processing {post:.2f} s / ingest of the same trace {med['ingest']['s']:.2f} s = "
              f"{verdict(post / med['ingest']['s'], 1.0)}")
    for name in (n for n in STAGES if n in med):
        r = med[name]
        print(f"  peak RSS {name:13} {r['mb']:5.0f} MB  / HTA {verdict(r['mb'] / lean_mb, 0.25)}; above imports "
              f"{r['mb'] - r['base']:4.0f} MB / HTA's {lean_above:.0f} MB = {(r['mb'] - r['base']) / lean_above:.3f}")
    print()


def scale(sizes: list[float], repeat: int) -> list[dict[str, float]]:
    """Per size: events, and per stage (ingest, analyze, export proto) seconds, ns per event, peak RSS."""
    rows = []
    for mb in sizes:
        path = generated(mb)
        runs = []
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as tmp:
                run = Path(tmp) / "run"
                runs.append({k: child(STAGES[k], str(path), str(run)) for k in ("ingest", "analyze", "export proto")})
        med = medians(runs)
        json_mb, events = json_mb_events(path)
        row = {"mb": json_mb, "events": events}
        for k, r in med.items():
            row[f"{k} s"] = r["s"]
            row[f"{k} rss"] = r["mb"]
        rows.append(row)
        print_scale(rows)
    return rows


def print_scale(rows: list[dict[str, float]]) -> None:
    print(f"\n  {'JSON MB':>8} {'events':>11} | {'ingest s':>8} {'ns/ev':>6} {'MB':>6} | {'analyze s':>9} {'ns/ev':>6} "
          f"{'MB':>6} | {'export s':>8} {'ns/ev':>6} {'MB':>6} | {'total s':>7} {'ns/ev':>6}")
    for r in rows:
        ev = r["events"]
        cells = []
        for k in ("ingest", "analyze", "export proto"):
            cells.append(f"{r[f'{k} s']:8.2f} {1e9 * r[f'{k} s'] / ev:6.0f} {r[f'{k} rss']:6.0f}")
        tot = sum(r[f"{k} s"] for k in ("ingest", "analyze", "export proto"))
        print(f"  {r['mb']:8.0f} {ev:11,} | " + " | ".join(cells) + f" | {tot:7.2f} {1e9 * tot / ev:6.0f}")
    sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=None, help="a trace to measure (default: a generated one)")
    ap.add_argument("--mb", type=float, default=84.0, help="size of the generated trace (MB of JSON)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; medians are printed")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--no-main", action="store_true", help="skip the stage table (only --scale / --big-gb)")
    ap.add_argument("--stages", default="", help="comma-separated stages to run (default all): "
                    + ", ".join([*STAGES, "record post-processing"]))
    ap.add_argument("--scale", default="", help="comma-separated sizes in MB for the per-event curve")
    ap.add_argument("--scale-repeat", type=int, default=1)
    ap.add_argument("--big-gb", type=float, default=0.0, help="check the 2 GB goal on a trace this big")
    a = ap.parse_args()
    hta = not a.no_hta
    stages = {x.strip() for x in a.stages.split(",") if x.strip()} or None
    unknown = (stages or set()) - {*STAGES, "record post-processing"}
    if unknown:
        ap.error(f"--stages: unknown {', '.join(sorted(unknown))}")
    try:
        import hta as _
    except ImportError:
        hta = False
    compile_sources()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}; tracekit byte-compiled first\n", flush=True)
    if not a.no_main:
        path = a.trace or generated(a.mb)
        mb, events = json_mb_events(path)
        if hta and mb * HTA_RSS_FACTOR > 0.8 * mem_total_mb():
            print(f"  HTA not run: ~{HTA_RSS_FACTOR}x the JSON would not fit")
            hta = False
        runs = []
        for _ in range(a.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(run_once(path, hta, Path(tmp), stages))
        report(path, medians(runs), mb, events, a.repeat)
    if a.scale:
        print("time and peak RSS per stage by trace size (generated traces, one request of many decode steps):")
        scale([float(x) for x in a.scale.split(",")], a.scale_repeat)
    if a.big_gb:
        path = generated(a.big_gb * 1000)
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "run"
            r = {k: child(STAGES[k], str(path), str(run)) for k in ("ingest", "analyze", "export proto")}
        tot = sum(x["s"] for x in r.values())
        wall = sum(x["wall"] for x in r.values())
        peak = max(x["mb"] for x in r.values())
        print(f"\n{path.name}: ingest {r['ingest']['s']:.1f} s, analyze {r['analyze']['s']:.1f} s, export "
              f"{r['export proto']['s']:.1f} s: {tot:.1f} s ({wall:.1f} s as processes; < 60 s: "
              f"{'met' if wall < 60 else 'NOT met'}); peak RSS {peak / 1024:.2f} GB (< 4 GB: "
              f"{'met' if peak < 4096 else 'NOT met'}) " + ", ".join(f"{k} {x['mb']:.0f} MB" for k, x in r.items()))
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0




if __name__ == "__main__":
    sys.exit(main())
