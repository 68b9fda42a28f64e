#!/usr/bin/env python3
"""Does tracekit's model-only bound class agree with Nsight Compute's? Share of kernel time, per cell.

    python3 benchmarks/bound_vs_ncu.py OUTDIR          # GPU (H200, ncu): ~4 min
    python3 benchmarks/bound_vs_ncu.py OUTDIR --cpu    # dry run: CPU, no ncu, synthetic kernels and counters

Cells: model shape (Qwen2.5-0.5B, Llama-3.2-1B, Llama-3.1-8B layer sizes, 2 layers, random bf16
weights) x batch (1, 8, 64) x phase (one prefill of a 128-token prompt, one decode step) x mode
(eager: dynamic cache; compiled: static cache + torch.compile, CUDA graphs, as `record --compile`).

Method (docs/roofline.md, "Checking the latency class against Nsight Compute"):

1. trace stage, one process per mode, no ncu: each cell's generate call under torch.profiler
   (record_shapes) with tracekit's step annotations; compiled mode compiles without CUDA graphs
   here (the same inductor kernels, each launched on its own, so each has its shapes), since
   torch.profiler and ncu cannot share a process.
2. ncu stage, one process per mode: the same sequence of generate calls under ncu; only the cells'
   steps are profiled (cudaProfilerStart/Stop around each, NVTX range `tracekit.step id=N`), with
   tracekit counters' command: the one-pass metric set, kernel replay, `--graph-profiling node`,
   `--cache-control none`, `--import-sass no`, `--clock-control none`.
3. analysis, here: each trace through tracekit's default passes (the ceiling analyze would use for the
   GPU: a cached calibration, else its achievable rates, else its datasheet; `--ceiling KIND` picks one) for
   the model-only class; the counters CSV read and joined per step exactly as `tracekit counters`
   does (a step whose kernel sequence differs is aligned by name instead, and the aligned share is
   reported); the ncu class is Nsight Compute's SOL rule on the counters.

For each cell: the share of joined kernel time where the two classes agree, the kernels where they
differ (largest first), and the agreement at other model thresholds. Prints the summary table last;
writes OUTDIR/results.json, the traces, plans, logs and the CSVs, and OUTDIR/fixture/ (the smallest
cell's trimmed trace and counters, small enough to commit as a test fixture).

--cpu: the same code on a tiny Llama on the CPU (torch.profiler sees no kernels there): one
synthetic kernel per modelled launcher op, durations from an H200-like roofline with a launch
floor, and counters from the same timing model written in Nsight Compute's CSV layout
(tracekit.ingest.ncu.to_csv) instead of an ncu process. Everything else runs as on the GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SHAPES = ("qwen2.5-0.5b", "llama-3.2-1b", "llama-3.1-8b")
BATCHES = (1, 8, 64)
MODES = ("eager", "compiled")
THRESHOLDS = (0.4, 0.5, 0.6, 0.7)
PER_KERNEL_S = 0.025  # one-pass kernel replay on an H200
START_S = 25.0  # a Python process importing torch + transformers and building the models, roughly


# --- the children: the workload, traced or under ncu ------------------------------------------


class Marks:
    """Tracker callbacks of the ncu stage: profiler start/stop and an NVTX range around each target step."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.targets: set[int] = set()

    def start(self, step_id: int) -> None:
        if step_id in self.targets:
            self.torch.cuda.synchronize()
            self.torch.cuda.cudart().cudaProfilerStart()
            self.torch.cuda.nvtx.range_push(f"tracekit.step id={step_id}")

    def end(self, step_id: int) -> None:
        if step_id in self.targets:
            self.torch.cuda.nvtx.range_pop()
            self.torch.cuda.synchronize()
            self.torch.cuda.cudart().cudaProfilerStop()


def shape_label(shape: str) -> str:
    """A cell's shape as named in file names and tables: a preset, or a config directory's name."""
    return Path(shape).name if "/" in shape else shape


def build_model(preset: str, layers: int, dtype: Any, device: str) -> Any:
    """``preset``: a model preset, or a directory holding only a config.json (random weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from tracekit.collectors.presets import MODEL_PRESETS, resolve_model

    p = MODEL_PRESETS.get(preset) or resolve_model(preset).preset
    if p is None:
        raise SystemExit(f"{preset}: holds weights; cells are built with random weights from a preset or a "
                         "directory with only a config.json")
    config = AutoConfig.for_model(p.model_type, **{**p.config, "num_hidden_layers": layers})
    torch.manual_seed(0)
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        except TypeError:
            model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype)
    return model.eval()


def generate(model: Any, ids: Any, n: int) -> None:
    """Greedy decoding of exactly n tokens (eos cannot stop it early)."""
    import torch

    model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), min_new_tokens=n, max_new_tokens=n,
                   do_sample=False, num_beams=1, pad_token_id=0)


def child(stage: str, mode: str, out: Path, a: argparse.Namespace) -> int:
    """One process: every shape and batch of one mode, traced (stage "trace") or under ncu ("ncu")."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from tracekit.collectors import compiled
    from tracekit.collectors.hooks import GenerationTracker, patch_generate

    cuda = not a.cpu
    device = "cuda" if cuda else "cpu"
    dtype = torch.bfloat16 if cuda else torch.float32
    marks = Marks(torch) if stage == "ncu" else None
    tracker = GenerationTracker(annotate=stage == "trace", on_step_start=marks.start if marks else None,
                                on_step_end=marks.end if marks else None)
    plan: dict[str, Any] = {"stage": stage, "mode": mode, "gpu": torch.cuda.get_device_name(0) if cuda else "cpu",
                            "cells": [], "torch": torch.__version__}
    t0 = time.perf_counter()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.no_grad(), patch_generate(tracker):
        for shape in a.shapes:
            model = build_model(shape, a.layers, dtype, device)
            if mode == "compiled":
                # CUDA graphs under ncu (what users run); the trace stage launches the same inductor
                # kernels one by one, so that each carries its shapes
                compiled.enable(model, max_cache_len=a.prompt + 8,
                                compile_mode="reduce-overhead" if stage == "ncu" else "default")
                cc = getattr(model.generation_config, "compile_config", None)
                if a.compile_dynamic and cc is not None:
                    cc.dynamic = True  # one compilation per shape for every batch (fewer, dynamic-shape kernels)
            vocab = int(model.config.vocab_size)
            for b in a.batches:
                gen = torch.Generator().manual_seed(b)
                ids = torch.randint(10, vocab, (b, a.prompt), generator=gen).to(device)

                generate(model, ids, 3)  # warm-up: cuBLAS handles; compiled: compilation, CUDA-graph warm-up and capture
                first = len(tracker.steps)
                cells = {first: "prefill", first + 2: "decode"}
                trace = out / f"{mode}_{shape_label(shape)}_b{b}.json"
                if stage == "trace":
                    with profile(activities=acts, record_shapes=True) as prof:
                        generate(model, ids, 3)
                    prof.export_chrome_trace(str(trace))
                else:
                    assert marks is not None
                    marks.targets = set(cells)
                    generate(model, ids, 3)
                    marks.targets = set()
                steps = tracker.steps[first:first + 3]
                plan["cells"].append({"shape": shape_label(shape), "batch": b, "trace": trace.name, "steps": {
                    str(s.step_id): {"kind": s.kind, "cell": cells.get(s.step_id), "q_len": s.q_len,
                                     "kv_len": s.kv_len} for s in steps}})
                print(f"[{stage} {mode}] {shape_label(shape)} batch {b}: steps {sorted(cells)} ({time.perf_counter() - t0:.0f} s)",
                      flush=True)
                # written after every cell: a stage stopped by its time limit keeps the cells it finished
                plan["elapsed_s"] = round(time.perf_counter() - t0, 1)
                (out / f"plan_{stage}_{mode}.json").write_text(json.dumps(plan, indent=1))
            del model
            if cuda:
                torch.cuda.empty_cache()
    plan["elapsed_s"] = round(time.perf_counter() - t0, 1)
    (out / f"plan_{stage}_{mode}.json").write_text(json.dumps(plan, indent=1))
    return 0


# --- the parent: run the stages, then compare ------------------------------------------------------


def run_stage(cmd: list[str], log: Path, timeout_s: float) -> tuple[int, float]:
    t0 = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            rc = proc.wait(timeout=max(timeout_s, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            rc = 124
    return rc, time.perf_counter() - t0


def child_cmd(stage: str, mode: str, out: Path, a: argparse.Namespace) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), str(out), "--child", stage, "--child-mode", mode,
           "--shapes", ",".join(a.shapes), "--batches", ",".join(map(str, a.batches)), "--layers", str(a.layers),
           "--prompt", str(a.prompt)]
    return cmd + (["--cpu"] if a.cpu else []) + (["--compile-dynamic"] if a.compile_dynamic else [])


def analyse_trace(path: Path, gpu: str, synthetic: bool, kind: str | None = None) -> tuple[Any, Any]:
    """(kernel_bound, steps) of one cell's trace through tracekit's default passes, against the GPU's
    ceiling as analyze resolves it (``kind``: measured, achievable or datasheet only)."""
    import pandas as pd

    from tracekit.analysis.inputs import AnalysisInput
    from tracekit.analysis.pipeline import run_passes
    from tracekit.errors import UsageError
    from tracekit.ingest import read_trace_tables
    from tracekit.model.ceilings import datasheet
    from tracekit.store.calibration import resolve

    tables: dict[str, Any] = {k: v.to_pandas() for k, v in read_trace_tables(path).items()}
    if synthetic:
        tables["gpu_activity"] = synthetic_kernels(tables["cpu_ops"])
    tables["manifest"] = {"environment": {"gpu": gpu}}
    tables["ceiling"] = datasheet(gpu)
    with contextlib.suppress(UsageError):  # no ceiling of that kind: the pass classes what it can without one
        tables["ceiling"] = resolve(gpu, kind=kind)
    res = run_passes(AnalysisInput.of(tables))
    kb = res.get("kernel_bound")
    return (kb if kb is not None else pd.DataFrame()), res["steps"]


# --- the dry run's stand-ins for the GPU: kernels and counters from one timing model -----------------

H200_BW, H200_TENSOR, H200_FP32 = 4.8e12, 989.5e12, 67e12


def synthetic_kernels(cpu_ops: Any) -> Any:
    """One kernel per modelled launcher op (no modelled descendant), timed by an H200-like roofline."""
    import numpy as np
    import pandas as pd

    from tracekit.analysis.opmodels import op_costs

    costs = op_costs(cpu_ops)
    if costs is None or not len(costs):
        return pd.DataFrame(columns=["ts_ns", "dur_ns", "name", "kind", "device", "stream", "op_id"])
    parent = dict(zip(cpu_ops["op_id"], cpu_ops["parent_id"], strict=True))
    modelled = set(costs["op_id"])
    covered: set[int] = set()
    for o in modelled:
        p = parent.get(o)
        while p is not None and not pd.isna(p):
            covered.add(int(p))
            p = parent.get(int(p))
    c = costs[~costs["op_id"].isin(covered)].drop_duplicates("op_id").set_index("op_id")
    ops = cpu_ops.set_index("op_id").loc[c.index]
    rng = np.random.default_rng(0)
    peak_f = np.where(c["tensor_core"].to_numpy(dtype=bool), H200_TENSOR, H200_FP32)
    # a kernel runs at 30-95% of its roof (no launch floor: the tiny model's kernels would all sit on it)
    eff = rng.uniform(0.3, 0.95, len(c))
    dur = np.maximum(1, np.maximum(c["flops"] / peak_f, c["bytes"] / H200_BW) / eff * 1e9).astype("int64")
    return pd.DataFrame({
        "ts_ns": ops["ts_ns"].to_numpy() + 1_000, "dur_ns": dur, "name": [f"synthetic_{n}" for n in c["op_name"]],
        "kind": "kernel", "device": 0, "stream": 7, "op_id": c.index.to_numpy(),
        "correlation": np.arange(len(c)),
    }).sort_values("ts_ns", kind="stable").reset_index(drop=True)


def synthetic_counters(kb: Any, steps: list[int]) -> Any:
    """What Nsight Compute would say about the synthetic kernels: the same work over the same time."""
    import numpy as np
    import pandas as pd

    from tracekit.analysis.counters import launch_order

    k = launch_order(kb)
    k = k[k["step_id"].isin(steps)]
    rng = np.random.default_rng(1)
    dur = k["dur_ns"].to_numpy(dtype=float)
    tensor = k["kclass"].isin(["gemm", "attention"]).to_numpy()
    return pd.DataFrame({
        "name": k["name"].to_numpy(), "step_id": k["step_id"].astype(int).to_numpy(), "stream": 7,
        "ncu_dur_ns": dur * 1.05, "dram_bytes": k["bytes"].to_numpy(),
        "dram_pct": 100 * k["bytes"].to_numpy() / (dur * 1e-9) / H200_BW * rng.uniform(0.85, 1.1, len(k)),
        "tensor_pct": np.where(tensor, 100 * k["flops"].to_numpy() / (dur * 1e-9) / H200_TENSOR, 0.0),
    })


# --- comparing ------------------------------------------------------------------------------------


def model_class_at(kb: Any, threshold: float) -> Any:
    """The model-only class of each kernel at another latency threshold (from its achieved % of peak)."""
    import numpy as np

    b = kb["model_bound"].copy()
    shape = (kb["model"] == "shape") & kb["roof"].notna()
    pct = np.fmax(kb["flops_pct_of_peak"].to_numpy(dtype=float), kb["bw_pct_of_peak"].to_numpy(dtype=float))
    b[shape] = np.where(pct[shape.to_numpy()] < 100 * threshold, "latency", kb.loc[shape, "roof"])
    return b


def align(trace_k: Any, counters: Any) -> Any:
    """Pair a refused step's kernels by name (difflib), for a share of its time; the strict join refused it."""
    import pandas as pd

    from tracekit.analysis.counters import COUNTER_COLUMNS, base_name

    a = [base_name(n) for n in trace_k["name"]]
    b = [base_name(n) for n in counters["name"]]
    out = trace_k.copy()
    for c in COUNTER_COLUMNS:
        out[c] = float("nan")
    sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for blk in sm.get_matching_blocks():
        for i in range(blk.size):
            for c in COUNTER_COLUMNS:
                if c in counters:
                    out.at[trace_k.index[blk.a + i], c] = pd.to_numeric(counters[c], errors="coerce").iloc[blk.b + i]
    return out


def compare_cell(kb: Any, counters: Any, sid: int) -> dict[str, Any]:
    import numpy as np

    from tracekit.analysis import counters as C
    from tracekit.analysis.counters import base_name, launch_order

    trace_k = launch_order(kb)
    trace_k = trace_k[trace_k["step_id"] == sid]
    cnt = counters[counters["step_id"] == sid]
    joined, rep = C.join(trace_k, cnt)
    how = "joined"
    if rep.kernels_matched == 0 and len(cnt) and len(trace_k):
        joined, how = align(trace_k, cnt.sort_values("ordinal")), "aligned by name: " + "; ".join(
            r for _, r in rep.refused)
    k = joined[joined["dram_pct"].notna() | joined["tensor_pct"].notna()].copy()
    k = k[~k["model_bound"].isin(["comm", "memcpy"])]
    row: dict[str, Any] = {"kernels_trace": len(trace_k), "kernels_ncu": len(cnt), "kernels_compared": len(k),
                           "how": how}
    total_trace = float(trace_k["dur_ns"].sum()) if len(trace_k) else 0.0
    if not len(k):
        return {**row, "agree": None, "compared_time_share": 0.0}
    k["ncu_class"] = C.counter_classes(k)
    dur = k["dur_ns"].to_numpy(dtype=float)
    same = (k["model_bound"] == k["ncu_class"]).to_numpy()
    row["agree"] = float(dur[same].sum() / dur.sum()) if dur.sum() else None
    row["compared_time_share"] = float(dur.sum() / total_trace) if total_trace else None
    row["agree_at"] = {f"{t:.1f}": float(dur[(model_class_at(k, t) == k["ncu_class"]).to_numpy()].sum() / dur.sum())
                       for t in THRESHOLDS}
    row["time_by_class"] = {"model": k.groupby("model_bound")["dur_ns"].sum().astype(float).to_dict(),
                            "ncu": k.groupby("ncu_class")["dur_ns"].sum().astype(float).to_dict()}
    diff = k[~same].copy()
    diff["base"] = [base_name(n)[:60] for n in diff["name"]]
    top = diff.groupby(["base", "model_bound", "ncu_class"], dropna=False).agg(
        n=("dur_ns", "size"), us=("dur_ns", lambda x: float(x.sum()) / 1e3),
        model_bw_pct=("bw_pct_of_peak", "median"), model_flops_pct=("flops_pct_of_peak", "median"),
        dram_pct=("dram_pct", "median"), tensor_pct=("tensor_pct", "median")).reset_index()
    top = top.sort_values("us", ascending=False).head(8)
    row["differ"] = [{k2: (None if isinstance(v, float) and np.isnan(v) else v) for k2, v in r.items()}
                     for r in top.to_dict("records")]
    return row


def analyse(out: Path, a: argparse.Namespace, modes: list[str]) -> list[dict[str, Any]]:
    import pandas as pd

    from tracekit.ingest import ncu

    rows: list[dict[str, Any]] = []
    for mode in modes:
        plan_path = out / f"plan_trace_{mode}.json"
        if not plan_path.is_file():
            rows.append({"mode": mode, "error": "trace stage did not finish"})
            continue
        plan = json.loads(plan_path.read_text())
        ncu_plan = out / f"plan_ncu_{mode}.json"
        if ncu_plan.is_file():  # both stages ran the same generate calls: the same step ids per cell
            theirs = [sorted(c["steps"]) for c in json.loads(ncu_plan.read_text())["cells"]]
            if theirs != [sorted(c["steps"]) for c in plan["cells"]]:
                print(f"warning: {mode}: the ncu stage's step ids differ from the trace stage's", flush=True)
        csv = out / f"counters_{mode}.csv"
        counters = ncu.read_csv(csv).to_pandas() if csv.is_file() else None
        synth: list[Any] = []
        for cell in plan["cells"]:
            trace = out / cell["trace"]
            if not trace.is_file() and trace.with_suffix(".json.gz").is_file():
                trace = trace.with_suffix(".json.gz")
            kb, _ = analyse_trace(trace, plan["gpu"] if not a.cpu else "NVIDIA H200", a.cpu, a.ceiling)
            if kb.empty:
                rows.append({"mode": mode, "shape": cell["shape"], "batch": cell["batch"], "error": "no kernels"})
                continue
            kb = kb.assign(model_bound=kb["bound"])
            targets = {int(s): v["cell"] for s, v in cell["steps"].items() if v["cell"]}
            if a.cpu:
                synth.append(synthetic_counters(kb, list(targets)))
                counters = pd.concat(synth, ignore_index=True)
                (out / f"counters_{mode}.csv").write_text(ncu.to_csv(counters))
                counters = ncu.read_csv(out / f"counters_{mode}.csv").to_pandas()  # the reader, as on the GPU
            for sid, phase in sorted(targets.items()):
                base = {"mode": mode, "shape": cell["shape"], "batch": cell["batch"], "phase": phase, "step_id": sid}
                if counters is None:
                    rows.append({**base, "error": "no counters (ncu stage did not finish)"})
                    continue
                rows.append({**base, **compare_cell(kb, counters, sid)})
    return rows


def write_fixture(out: Path, rows: list[dict[str, Any]]) -> None:
    """The smallest joined cell's trace (gzip) and its counters rows: a committable join fixture."""
    import pandas as pd

    from tracekit.ingest import ncu

    ok = [r for r in rows if r.get("how") == "joined" and r.get("kernels_compared")]
    if not ok:
        return
    r = min(ok, key=lambda x: x["kernels_trace"])
    plan = json.loads((out / f"plan_trace_{r['mode']}.json").read_text())
    cell = next(c for c in plan["cells"] if c["shape"] == r["shape"] and c["batch"] == r["batch"])
    dest = out / "fixture"
    dest.mkdir(exist_ok=True)
    with open(out / cell["trace"], "rb") as src, gzip.open(dest / f"{Path(cell['trace']).stem}.json.gz", "wb") as g:
        shutil.copyfileobj(src, g)
    counters = ncu.read_csv(out / f"counters_{r['mode']}.csv").to_pandas()
    steps = [int(s) for s, v in cell["steps"].items() if v["cell"]]
    part = counters[counters["step_id"].isin(steps)]
    (dest / f"{Path(cell['trace']).stem}.counters.csv").write_text(ncu.to_csv(pd.DataFrame(part)))


def summary(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'mode':9} {'shape':14} {'batch':>5} {'phase':8} {'kernels':>8} {'agree':>6}  "
             f"{'@0.4':>5} {'@0.5':>5} {'@0.7':>5}  largest difference (model -> ncu)"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r.get('mode', ''):9} {r.get('shape', ''):14} {r.get('batch', ''):>5} "
                         f"{r.get('phase', ''):8} {r['error']}")
            continue
        agree = "—" if r["agree"] is None else f"{100 * r['agree']:.0f}%"
        at = r.get("agree_at", {})
        d = (r.get("differ") or [{}])[0]
        worst = f"{d.get('base')} {d.get('model_bound')}->{d.get('ncu_class')} {d.get('us', 0):.1f} us" if d else ""
        lines.append(f"{r['mode']:9} {r['shape']:14} {r['batch']:>5} {r['phase']:8} "
                     f"{r['kernels_compared']:>4}/{r['kernels_trace']:<3} {agree:>6}  "
                     + " ".join(f"{100 * at[k]:>4.0f}%" if k in at else "    —" for k in ("0.4", "0.5", "0.7"))
                     + f"  {worst}" + ("" if r["how"] == "joined" else "  [aligned]"))
    ok = [r["agree"] for r in rows if r.get("agree") is not None]
    if ok:
        lines.append(f"cells: {len(ok)}; agreement >= 90% in {sum(x >= 0.9 for x in ok)}; lowest {100 * min(ok):.0f}%")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--cpu", action="store_true", help="dry run: tiny model on the CPU, no ncu")
    ap.add_argument("--shapes", default=None)
    ap.add_argument("--batches", default=None)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=None)
    ap.add_argument("--budget-s", type=float, default=240.0,
                    help="each stage gets what is left of this (seconds); a stage cut short is reported, not fatal")
    ap.add_argument("--compile-dynamic", action="store_true",
                    help="compiled mode with a dynamic batch dimension: one compilation per shape instead of one "
                         "per (shape, batch); fewer seconds, dynamic-shape kernels")
    ap.add_argument("--ncu", default=None, help="the ncu executable (default: tracekit's search)")
    ap.add_argument("--keep-traces", action="store_true", help="keep every cell's trace (default: only the fixture's)")
    ap.add_argument("--analyse-only", action="store_true",
                    help="no stages: compare again from OUT's kept traces (--keep-traces; .json or .json.gz), plans "
                         "and counters with the installed tracekit")
    ap.add_argument("--ceiling", default=None, choices=["measured", "achievable", "datasheet"],
                    help="classify against this kind of ceiling of the GPU (default: the one analyze uses)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-mode", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.shapes = (a.shapes.split(",") if a.shapes else (["tiny"] if a.cpu else list(SHAPES)))
    a.batches = [int(x) for x in a.batches.split(",")] if a.batches else ([1, 2] if a.cpu else list(BATCHES))
    a.prompt = a.prompt or (16 if a.cpu else 128)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.child:
        return child(a.child, a.child_mode, a.out, a)
    if a.analyse_only:
        rows = analyse(a.out, a, a.modes.split(","))
        print_differences(rows, 4)
        print(summary(rows))
        return 0
    return parent(a)


def parent(a: argparse.Namespace) -> int:
    from tracekit.collectors.ncu import export_command, failure, find_ncu, ncu_command
    from tracekit.ingest.ncu import METRICS_ONE_PASS

    t0 = time.perf_counter()
    out: Path = a.out
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    modes = a.modes.split(",")
    exe = None if a.cpu else find_ncu(a.ncu)
    stages: list[dict[str, Any]] = []
    if not a.cpu and exe is None:
        print("no ncu found (PATH, $CUDA_HOME/bin, /opt/nvidia/nsight-compute): only the trace stage runs")
    for mode in modes:
        left = a.budget_s - (time.perf_counter() - t0)
        rc, secs = run_stage(child_cmd("trace", mode, out, a), logs / f"trace_{mode}.log", left)
        stages.append({"stage": "trace", "mode": mode, "rc": rc, "s": round(secs, 1)})
        print(f"trace {mode}: rc {rc}, {secs:.0f} s", flush=True)
        if rc != 0 or a.cpu or exe is None:
            continue
        plan = json.loads((out / f"plan_trace_{mode}.json").read_text())
        kernels = sum(count_cell_kernels(out / c["trace"], c) for c in plan["cells"])
        left = a.budget_s - (time.perf_counter() - t0)
        est = START_S + kernels * PER_KERNEL_S
        print(f"ncu {mode}: {kernels} kernels in the cells' steps, ~{est:.0f} s estimated, {left:.0f} s left", flush=True)
        base, log = out / f"counters_{mode}", logs / f"ncu_{mode}.log"
        cmd = ncu_command(exe, base, log, METRICS_ONE_PASS, child_cmd("ncu", mode, out, a))
        rc, secs = run_stage(cmd, logs / f"ncu_{mode}.stdout", max(left, 30))
        text = (log.read_text(errors="replace") if log.is_file() else "") + (logs / f"ncu_{mode}.stdout").read_text(
            errors="replace")
        why = failure(rc, text) if rc != 124 else f"timed out after {secs:.0f} s"
        stages.append({"stage": "ncu", "mode": mode, "rc": rc, "s": round(secs, 1), "kernels": kernels,
                       "per_kernel_s": round(secs / kernels, 4) if kernels else None, "failure": why})
        print(f"ncu {mode}: rc {rc}, {secs:.0f} s" + (f": {why}" if why else ""), flush=True)
        rep = base.with_suffix(".ncu-rep")
        if rep.is_file():
            with (out / f"counters_{mode}.csv").open("w") as fh:
                subprocess.run(export_command(exe, rep, METRICS_ONE_PASS), stdout=fh, stderr=subprocess.DEVNULL,
                               timeout=300, check=False)
    rows = analyse(out, a, modes)
    write_fixture(out, rows)
    if not a.keep_traces:  # tens of MB at batch 64; results.json and the fixture hold what matters
        for p in out.glob("*_b*.json"):
            p.unlink()
        for p in out.glob("counters_*.ncu-rep"):
            p.unlink()
    result = {"stages": stages, "cells": rows, "elapsed_s": round(time.perf_counter() - t0, 1),
              "dry_run": a.cpu, "thresholds": THRESHOLDS}
    (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    print_differences(rows, 3)
    print(f"total {result['elapsed_s']:.0f} s; stages: " + ", ".join(f"{s['stage']} {s['mode']} {s['s']:.0f} s"
                                                                    for s in stages))
    print(summary(rows))
    return 0


def print_differences(rows: list[dict[str, Any]], most: int) -> None:
    """The ``most`` largest differing kernel groups of each cell, with both sides' % of peak."""
    for r in rows:
        for d in (r.get("differ") or [])[:most]:
            print(f"  differs {r['mode']} {r['shape']} b{r['batch']} {r['phase']}: {d['base']} x{d['n']} "
                  f"{d['us']:.1f} us: model {d['model_bound']} (bw {_pct(d['model_bw_pct'])}, "
                  f"flops {_pct(d['model_flops_pct'])} of peak), ncu {d['ncu_class']} "
                  f"(dram {_pct(d['dram_pct'])}, tensor {_pct(d['tensor_pct'])})")


def _pct(v: Any) -> str:
    return "—" if v is None else f"{float(v):.0f}%"


def count_cell_kernels(trace: Path, cell: dict[str, Any]) -> int:
    """Kernels of the cell's profiled steps in its trace (the ncu stage's work), from the annotations."""
    import pandas as pd

    from tracekit.ingest import read_trace_tables

    t = read_trace_tables(trace)
    gpu = t["gpu_activity"].to_pandas()
    ann = t["annotations"].to_pandas()
    n = 0
    for sid, v in cell["steps"].items():
        if not v["cell"]:
            continue
        a = ann[ann["name"].astype(str).str.startswith(f"tracekit.step id={sid} ")]
        if len(a):
            s, e = int(a["ts_ns"].iloc[0]), int(a["ts_ns"].iloc[0] + a["dur_ns"].iloc[0])
            n += int(((gpu["kind"] == "kernel") & gpu["ts_ns"].between(s, e + 50_000_000)).sum()) if len(gpu) else 0
    return n if n else int(pd.Series([0]).sum())


if __name__ == "__main__":
    sys.exit(main())
