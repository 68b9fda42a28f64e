#!/usr/bin/env python3
"""Are tracekit's what-if projections right? Each checked against a run of the projected configuration.

    python3 benchmarks/whatif.py extract SWEEP_DIR... --out benchmarks/whatif/data/NAME.json.gz
    python3 benchmarks/whatif.py extract RUN_DIR... --out ... [--as-point]   # a recorded run (tracekit record)
    python3 benchmarks/whatif.py check [DATA...] [--md FILE]                 # offline: the committed data

extract: every complete point of a sweep directory (tracekit sweep; traces may be deleted, the raw
tables are read) reduced to what projections read (tracekit.analysis.whatif_profile.Profile) plus the
point's identity and its unprofiled host timers (the truth), written as gzip JSON (small: commit it).

check: pairs (source point, target point) of one model where the target differs by a change the
projection models, each projected from the source alone (tracekit.analysis.whatif.project, without
the profiler) and compared with the target's unprofiled TTFT and TPOT:

  graphs   eager -> compiled (same GPU, shape, batch)            Change(graphs=True)
  batch    batch b -> b' > b (same mode, 128/32)                 Change(batch=b')
  prompt   prompt 128 -> 1,024 (same mode, 16 answer tokens)     Change(input_tokens=1024)
  quant    fp16 -> int8 / int4 / fp8 (same mode, batch)          Change(quant=q)
  gpu      one GPU -> the other (same point)                     Change(gpu=name)
  profiler a point's profiled trace -> its own unprofiled pass   Change(no_profiler, use_run_timers=False)

The constants a projection needs (graph host time, the profiler's cost per op) are measured on the
other models' points (tracekit.analysis.whatif_calib), never on the target or its model where another
model has them; with one model only, on its other points. Prints every pair, then per metric the
median and worst absolute error against the goal (median <= 10%, worst <= 25%).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tracekit.analysis.whatif import Change, WhatifError, project  # noqa: E402
from tracekit.analysis.whatif_calib import calibrate  # noqa: E402
from tracekit.analysis.whatif_constants import DEFAULT, Constants  # noqa: E402
from tracekit.analysis.whatif_profile import KERNEL_COLUMNS, Profile  # noqa: E402

DATA = HERE / "whatif" / "data"
CROSS = "recorded->sweep"  # a tracekit record run against another session's sweep: not in the goal
TRACED = "traced"  # two traces of one process without unprofiled timers: projected as traced
# Target-only points checked by default: the H200 seed sweep's medians (docs/sweep-h200)
TARGETS = [f"{HERE.parent / 'docs' / 'sweep-h200' / 'summary.parquet'}:tinyllama-1.1b:NVIDIA H200"]


@dataclass(frozen=True)
class Point:
    id: str
    model: str
    gpu: str
    mode: str
    group: str
    batch: int
    input_tokens: int
    output_tokens: int
    quant: str
    truth: dict[str, float]  # ttft_ns / tpot_ns without the profiler
    profile: Profile
    source: str  # the data file
    same_process: bool = False  # its traced timers compare with those of the file's other points
    cache_len: int | None = None  # compiled: the static cache's slots per sequence


def sweep_cache_len(points: Iterable[Mapping[Any, Any]]) -> int | None:
    """The static cache a sweep's compiled points ran with: tracekit sweep sizes it once for its longest
    compiled point (prompt + answer; tracekit.collectors.sweep_runner.load)."""
    lens = [int(p["input_tokens"]) + int(p["output_tokens"]) for p in points
            if str(p["mode"]) == "compiled" and str(p["group"]) not in ("record", "load")]
    return max(max(lens), 64) if lens else None


# --- extract ---------------------------------------------------------------------------------------


def _compact(d: dict[str, Any]) -> dict[str, Any]:
    """A profile dict with its kernels' numbers rounded (ns to 1, work to 4 significant digits)."""
    for ph in d["phases"].values():
        k = ph["kernels"]
        for c in ("off_ns", "dur_ns", "gap_ns"):
            k[c] = [None if v is None else round(v) for v in k[c]]
        for c in ("flops", "bytes", "rows"):
            k[c] = [None if v is None else float(f"{v:.4g}") for v in k[c]]
    return d


def extract(paths: list[Path], out: Path, model: str | None = None, same_process: bool = False) -> None:
    from tracekit.app.whatif_load import load_profile

    points = []
    for path in paths:
        dirs = sorted((path / "points").iterdir()) if (path / "points").is_dir() else [path]
        for d in dirs:
            man_path = d / "run.json"
            if not man_path.is_file():
                continue
            man = json.loads(man_path.read_text())
            if man.get("status") not in ("complete", None):
                print(f"skip {d.name}: {man.get('status')}", file=sys.stderr)
                continue
            try:
                prof = load_profile(d)
            except Exception as exc:  # a point without kernels: said, not fatal
                print(f"skip {d.name}: {exc}", file=sys.stderr)
                continue
            pt = man.get("point") or {}
            wl = man.get("workload") or {}
            dec = prof.phases.get("decode")
            mode = pt.get("mode") or wl.get("mode") or ("compiled" if dec is not None and dec.graph_launches else "eager")
            points.append({
                "id": pt.get("id") or d.name,
                "model": model or (man.get("model") or {}).get("preset") or wl.get("model"),
                "gpu": prof.gpu, "mode": mode, "group": pt.get("group") or "record",
                "batch": prof.batch, "input_tokens": prof.input_tokens, "output_tokens": prof.output_tokens,
                "quant": prof.quant, "truth": dict(prof.unprofiled), "profile": _compact(prof.to_dict()),
                "env": man.get("environment") or {}, "same_process": same_process,
            })
            print(f"{d.name}: {prof.gpu} {len(prof.phases)} phases, truth {prof.unprofiled}", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt") as f:
        json.dump({"points": points}, f, separators=(",", ":"))
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB, {len(points)} points)")


# --- check -----------------------------------------------------------------------------------------


def load(files: Iterable[Path]) -> list[Point]:
    out = []
    for f in files:
        with gzip.open(f, "rt") as fh:
            data = json.load(fh)
        slots = sweep_cache_len(data["points"])
        for p in data["points"]:
            prof = Profile.from_dict(p["profile"])
            for ph in prof.phases.values():
                assert tuple(ph.kernels.columns) == KERNEL_COLUMNS
            cache = prof.cache_len or (slots if str(p["mode"]) == "compiled" and p["group"] != "record" else None)
            out.append(Point(id=p["id"], model=Path(str(p["model"])).name, gpu=str(p["gpu"]), mode=str(p["mode"]),
                             group=str(p["group"]), batch=int(p["batch"]), input_tokens=int(p["input_tokens"]),
                             output_tokens=int(p["output_tokens"]), quant=str(p["quant"] or "none"),
                             truth={k: float(v) for k, v in p["truth"].items()},
                             profile=replace(prof, cache_len=cache), source=f.name,
                             same_process=bool(p.get("same_process")), cache_len=cache))
    return out


def summary_targets(path: Path, model: str, gpu: str) -> list[Point]:
    """Target-only points (no profile) from a sweep's summary.parquet: its complete points' medians."""
    import pandas as pd

    df = pd.read_parquet(path)
    out = []
    slots = sweep_cache_len([r for r in df.to_dict("records") if r["status"] == "complete"])
    for r in df.itertuples():
        if r.status != "complete" or str(getattr(r, "agent_mode", "nan")) not in ("nan", "None") or r.calls != 1:
            continue
        out.append(Point(id=f"{path.parent.name}/{r.point_id}", model=model, gpu=gpu, mode=str(r.mode),
                         group=str(r.group), batch=int(r.batch), input_tokens=int(r.input_tokens),
                         output_tokens=int(r.output_tokens), quant=str(getattr(r, "quant", "none") or "none"),
                         truth={"ttft_ns": float(r.ttft_ms) * 1e6, "tpot_ns": float(r.tpot_ms) * 1e6},
                         profile=Profile(run="", gpu=gpu, dtype=None, mode=str(r.mode), quant="none", batch=None,
                                         input_tokens=None, output_tokens=None, phases={}),
                         source=path.name, cache_len=slots if str(r.mode) == "compiled" else None))
    return out


def pairs(points: list[Point]) -> list[tuple[str, Point, Point, Change]]:
    out: list[tuple[str, Point, Point, Change]] = []

    def same(a: Point, b: Point, *keys: str) -> bool:
        return all(getattr(a, k) == getattr(b, k) for k in keys)

    for a in points:
        if not a.profile.phases:
            continue  # a target only
        for b in points:
            if a is b or a.model != b.model:
                continue
            if a.group == "record" and a.truth and b.gpu == a.gpu and not b.profile.phases and b.quant == "none" \
                    and not (a.mode == "compiled" and b.mode == "eager"):
                ch = Change(graphs=a.mode == "eager" and b.mode == "compiled", no_profiler=True,
                            batch=b.batch if b.batch != a.batch else None,
                            input_tokens=b.input_tokens if b.input_tokens != a.input_tokens else None,
                            output_tokens=b.output_tokens if b.output_tokens != a.output_tokens else None)
                out.append((CROSS, a, b, ch))
                continue
            if a.gpu == b.gpu and a.source == b.source:  # one sweep: one session, one host
                if same(a, b, "group", "batch", "input_tokens", "output_tokens", "quant") and \
                        a.mode == "eager" and b.mode == "compiled":
                    out.append(("graphs", a, b, Change(graphs=True, no_profiler=True)))
                if same(a, b, "mode", "quant", "input_tokens", "output_tokens") and a.group == b.group == "batch" \
                        and b.batch > a.batch:
                    out.append(("batch", a, b, Change(batch=b.batch, no_profiler=True)))
                if same(a, b, "mode", "quant", "batch", "output_tokens") and a.group == b.group == "prompt" \
                        and b.input_tokens > a.input_tokens:
                    out.append(("prompt", a, b, Change(input_tokens=b.input_tokens, no_profiler=True)))
                if same(a, b, "mode", "group", "batch", "input_tokens", "output_tokens") and a.quant == "none" \
                        and b.quant != "none":
                    out.append(("quant", a, b, Change(quant=b.quant, no_profiler=True)))
            elif a.gpu != b.gpu and same(a, b, "mode", "group", "batch", "input_tokens", "output_tokens", "quant"):
                out.append(("gpu", a, b, Change(gpu=b.gpu, no_profiler=True)))
        if a.truth:
            out.append(("profiler", a, a, Change(no_profiler=True, use_run_timers=False)))
        for b in points:  # traces without timers: as traced, batch and prompt changed
            if b is not a and not a.truth and not b.truth and b.profile.phases and a.model == b.model \
                    and a.gpu == b.gpu and a.quant == b.quant and (a.mode == b.mode or a.mode == "eager") \
                    and (a.batch, a.input_tokens, a.mode) != (b.batch, b.input_tokens, b.mode):
                out.append((TRACED, a, b, Change(graphs=a.mode != b.mode,
                                                 batch=b.batch if b.batch != a.batch else None,
                                                 input_tokens=b.input_tokens if b.input_tokens != a.input_tokens
                                                 else None)))
    # a compiled target ran over its own static cache: its length is part of the projected configuration
    return [(kind, a, b, replace(ch, cache_len=b.cache_len) if b.mode == "compiled" and b.cache_len else ch)
            for kind, a, b, ch in out]


def constants_for(points: list[Point], a: Point, b: Point) -> Constants:
    """The constants measured without the target, and without its model where another model has them."""
    points = [p for p in points if p.profile.phases]
    others = [p for p in points if p.model != b.model]
    if not any(p.mode == "compiled" for p in others):
        others = [p for p in points if p is not b and p is not a]
    c = calibrate([p.profile for p in others if p.quant == "none"], DEFAULT)
    return c


@dataclass(frozen=True)
class Row:
    kind: str
    change: str
    source: str
    target: str
    gpu: str
    model: str
    metric: str
    measured: float
    projected: float
    band: tuple[float, float]

    @property
    def error(self) -> float:
        return (self.projected - self.measured) / self.measured


def check(points: list[Point]) -> list[Row]:
    from tracekit.model.ceilings import datasheet

    rows = []
    for kind, a, b, change in pairs(points):
        consts = constants_for(points, a, b)
        try:
            pr = project(a.profile, change, datasheet, consts)
        except WhatifError as exc:
            print(f"no projection {a.id} -> {b.id} ({change.describe()}): {exc}", file=sys.stderr)
            continue
        comparable = a.same_process and b.same_process and a.source == b.source
        truth = (b.profile.profiled if comparable else {}) if kind == TRACED else b.truth
        where = b.id if b is not a else "(own unprofiled pass)"
        gpu = a.gpu if a.gpu == b.gpu else f"{a.gpu} -> {b.gpu}"
        for key, metric in (("ttft_ns", "TTFT"), ("tpot_ns", "TPOT")):
            phase = "prefill" if key == "ttft_ns" else "decode"
            ph = pr.phases.get(phase)
            if ph is None:
                continue
            if key in truth:
                rows.append(Row(kind, change.describe(), a.id, where, gpu, a.model, metric, truth[key],
                                ph.projected.latency_ns, ph.band))
            # the kernels alone: projected GPU time of the step against the target's traced step
            step = b.profile.phases.get(phase)
            if step is not None and b is not a:
                got = sum(ph.projected.gpu_ns.values())
                rows.append(Row(kind, change.describe(), a.id, where, gpu, a.model, f"GPU/{phase} step",
                                step.gpu_busy_ns, got, (got, got)))
    return rows


def summary(rows: list[Row]) -> list[str]:
    lines = []
    side = [(m, k) for m in ("TPOT", "TTFT") for k in (CROSS, TRACED)]
    side += [(m, "") for m in ("GPU/prefill step", "GPU/decode step")]
    for metric, cross in [("TPOT", ""), ("TTFT", ""), *side]:
        errs = [abs(r.error) for r in rows if r.metric == metric and (not cross or r.kind == cross)
                and (cross or metric.startswith("GPU") or r.kind not in (CROSS, TRACED))]
        if not errs:
            continue
        if cross or metric.startswith("GPU"):
            lines.append(f"{metric}{', ' + cross if cross else ''} (not in the goal): {len(errs)} pairs, median "
                         f"|error| {100 * statistics.median(errs):.1f}%, worst {100 * max(errs):.1f}%")
            continue
        med, worst = statistics.median(errs), max(errs)
        ok = "meets" if med <= 0.10 and worst <= 0.25 else "misses"
        inband = sum(1 for r in rows if r.metric == metric and r.kind not in (CROSS, TRACED)
                     and r.band[0] <= r.measured <= r.band[1])
        lines.append(f"{metric}: {len(errs)} pairs, median |error| {100 * med:.1f}%, worst {100 * worst:.1f}% "
                     f"({ok} the goal: median <= 10%, worst <= 25%); measured inside the band: {inband}/{len(errs)}")
        for kind in sorted({r.kind for r in rows} - {CROSS, TRACED}):
            e = [abs(r.error) for r in rows if r.metric == metric and r.kind == kind]
            if e:
                lines.append(f"  {kind}: {len(e)} pairs, median {100 * statistics.median(e):.1f}%, "
                             f"worst {100 * max(e):.1f}%")
    return lines


def table(rows: list[Row]) -> list[str]:
    out = ["| pair | change | GPU | model | source | target | metric | measured ms | projected ms | band ms | error |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted(rows, key=lambda r: (r.kind, r.gpu, r.model, r.source, r.target, r.metric)):
        out.append(f"| {r.kind} | {r.change} | {r.gpu} | {r.model} | {r.source} | {r.target} | {r.metric} | "
                   f"{r.measured / 1e6:,.2f} | {r.projected / 1e6:,.2f} | {r.band[0] / 1e6:,.2f}-{r.band[1] / 1e6:,.2f} "
                   f"| {100 * r.error:+.1f}% |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("extract")
    ex.add_argument("paths", nargs="+", type=Path)
    ex.add_argument("--out", type=Path, required=True)
    ex.add_argument("--model", default=None, help="the model's name where run.json does not give it (a foreign trace)")
    ex.add_argument("--same-process", action="store_true",
                    help="the traces come from one process with one profiler setting: their traced TTFT / TPOT compare")
    ch = sub.add_parser("check")
    ch.add_argument("data", nargs="*", type=Path)
    ch.add_argument("--md", type=Path, default=None, help="also write the table and summary as Markdown")
    ch.add_argument("--kinds", default=None, help="comma-separated pair kinds to check (default: all)")
    ch.add_argument("--targets", action="append", default=[], metavar="SUMMARY:MODEL:GPU",
                    help="a sweep's summary.parquet as targets only (e.g. docs/sweep-h200/summary.parquet:"
                         "tinyllama-1.1b:NVIDIA H200)")
    args = ap.parse_args(argv)
    if args.cmd == "extract":
        extract(args.paths, args.out, args.model, args.same_process)
        return 0
    files = args.data or sorted(DATA.glob("*.json.gz"))
    points = load(files)
    for spec in args.targets or (TARGETS if not args.data else []):
        path, model, gpu = spec.split(":", 2)
        points += summary_targets(Path(path), model, gpu)
    rows = check(points)
    if args.kinds:
        keep = set(args.kinds.split(","))
        rows = [r for r in rows if r.kind in keep]
    lines = [*table(rows), "", *summary(rows)]
    print("\n".join(lines))
    if args.md:
        args.md.write_text("\n".join(lines) + "\n")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
