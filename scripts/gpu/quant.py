#!/usr/bin/env python3
"""Validate --quant and --memory on a GPU: decode bytes per token, TPOT and the bound split per quantization.

Usage (on the GPU machine, tracekit and torchao installed):

    python3 scripts/gpu/quant.py OUT_DIR [--modes eager,compiled] [--ncu] [--quants ...] [--batches ...] [--budget-s 230]
    python3 scripts/gpu/quant.py OUT_DIR --cpu        # dry run: tiny preset on CPU, seconds

For each quantization (none = fp16, int8, int8-dyn, int4, fp8) and batch 1 and 16 it runs, in this
process (the CLI's own code path), `tracekit record --model tinyllama-1.1b --quant Q --memory
--input-tokens 128 --output-tokens 16 --trace-steps 0:6 --warmup 1 --no-nvml` (with --modes compiled,
the same with --compile), then `tracekit analyze`, and reads back:

  * TPOT without the profiler (run.json timings.unprofiled);
  * modelled bytes per decode step: the per-kernel op models summed over the captured decode steps
    (phases table), beside the config's model of weights + KV at the quantized width
    (tracekit.analysis.quantbytes);
  * the decode bound split (compute / memory / latency / idle shares of decode time);
  * the step_memory table's peak split (weights + KV + transient) and KV bytes per token: the
    formula against the cache tensors' and the allocator's growth per token.

A quantization the stack cannot run is a row with its one-line reason (e.g. torchao missing, fp8 on a
GPU before sm_89). With --ncu (after the table, within the budget) it measures decode step 1 of each
eager run of --ncu-batches (default 1) with Nsight Compute (`tracekit counters`, one-pass metrics,
--clock-control none) and compares the GEMM kernels' modelled bytes with dram__bytes_read.sum +
dram__bytes_write.sum.
Writes OUT_DIR/quant.json and OUT_DIR/runs/<id>/; prints the summary table last.
About 100-150 s on an H200 for the default 10 eager cells; a compiled cell adds its compilation (~25 s)
and an --ncu cell a second run of the workload under Nsight Compute (~45 s): give them calls of their own
(the --budget-s guard skips what no longer fits, marked in the table).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

QUANTS = ("none", "int8", "int8-dyn", "int4", "fp8")
BATCHES = (1, 16)
INPUT_TOKENS, OUTPUT_TOKENS = 128, 16


def release() -> None:
    """Free the previous cell's model (and compiled graphs holding it) so the next cell's allocator
    numbers hold only its own weights, KV and working set."""
    import contextlib
    import gc

    import torch

    with contextlib.suppress(Exception):  # no dynamo in this torch: nothing compiled to drop
        torch._dynamo.reset()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def record(out: Path, model: str, quant: str, batch: int, compiled: bool, cpu: bool) -> tuple[Path, str | None]:
    """One `tracekit record` in this process; (run dir, None) or (run dir, the one-line error)."""
    release()
    from tracekit.commands.record import command
    from tracekit.errors import TracekitError

    args = ["--model", model, "--quant", quant, "--memory", "--batch", str(batch),
            "--input-tokens", str(INPUT_TOKENS if not cpu else 16), "--output-tokens", str(OUTPUT_TOKENS if not cpu else 6),
            "--trace-steps", "0:6", "--warmup", "1", "--no-nvml", "-q", "--force", "--out", str(out)]
    if cpu:
        args += ["--device", "cpu"]
    if compiled:
        args.append("--compile")
    try:
        command.main(args, standalone_mode=False)
    except TracekitError as exc:
        return out, exc.message
    except Exception as exc:  # keep going: the other cells still say something
        return out, f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"
    return out, None


def read_cell(run: Path, quant: str, batch: int) -> dict[str, Any]:
    import pandas as pd

    import tracekit
    from tracekit.analysis import memory as am
    from tracekit.analysis import quantbytes

    manifest = json.loads((run / "run.json").read_text())
    r = tracekit.open(run)
    r.analyze()
    ph = r.phases
    dec = ph[ph["request_id"].isna() & (ph["phase"] == "decode")]
    cell: dict[str, Any] = {"quant": quant, "batch": batch, "mode": manifest["workload"].get("mode")}
    un = ((manifest.get("timings") or {}).get("unprofiled") or {}).get("aggregate") or {}
    cell["tpot_ms"] = un["tpot_ns"] / 1e6 if un.get("tpot_ns") else None
    if len(dec):
        d = dec.iloc[0]
        t = float(d["time_ns"]) or 1.0
        cell["split"] = {k: float(d[f"{k}_ns"]) / t for k in ("compute_bound", "memory_bound", "latency_bound", "idle")
                         if pd.notna(d.get(f"{k}_ns"))}
        cap = int(d["steps_captured"]) if pd.notna(d.get("steps_captured")) else 0
        cell["decode_steps_captured"] = cap
        cell["modelled_bytes_per_step"] = float(d["bytes"]) / cap if cap and pd.notna(d["bytes"]) else None
    cfg = (manifest.get("model") or {}).get("config") or {}
    dtype = "bf16" if quant == "int4" else manifest["workload"].get("dtype", "fp16")
    kv_len = int(manifest["workload"].get("input_tokens", INPUT_TOKENS)) + 3  # the middle of decode steps 1..5
    if cfg:
        model = quantbytes.decode_bytes(cfg, dtype, quant, kv_len=kv_len, batch=batch)
        cell["config_bytes_per_step"] = model.total_bytes
        cell["config_weights_bytes"] = model.weights_bytes
    mem = pd.read_parquet(run / "tables" / "step_memory.parquet")
    info = manifest.get("memory") or {}
    cell["kv_formula_bytes_per_token"] = info.get("kv_bytes_per_token_formula")
    cell["kv_measured_bytes_per_token"] = am.measured_kv_per_token(mem)
    cell["weights_bytes"] = info.get("weights_bytes")
    cell["peaks"] = am.peaks(mem).to_dict("records")
    cell["quant_info"] = (manifest.get("model") or {}).get("quant")
    return cell


def ncu_cell(run: Path, budget_s: float) -> dict[str, Any]:
    """Decode step 1 under Nsight Compute: GEMM kernels' modelled bytes vs DRAM bytes."""
    import pandas as pd

    import tracekit
    from tracekit.collectors.ncu import CountersError, CountersOptions, collect
    from tracekit.collectors.profiler import parse_trace_steps

    try:
        res = collect(run, CountersOptions(steps=parse_trace_steps("1:2"), timeout_s=max(budget_s, 30)))
    except CountersError as exc:
        return {"error": exc.message}
    r = tracekit.open(run)
    k = r.kernels
    gemm_ops = {"aten::mm", "aten::addmm", "aten::linear", "aten::matmul", "aten::bmm", "aten::_int_mm",
                "aten::_scaled_mm", "aten::_weight_int4pack_mm", "aten::_weight_int8pack_mm"}
    k = k[(k["step_id"] == 1) & ((k["kclass"] == "gemm") | k["op_name"].isin(gemm_ops))]
    nc = pd.read_parquet(run / "tables" / "ncu_counters.parquet")
    nc = nc[(nc["step_id"] == 1) & nc["name"].isin(set(k["name"]))]
    modelled, dram = float(k["bytes"].sum()), float(nc["dram_bytes"].sum())
    # The whole step (every kernel: what decode moves per token) and each GEMM op with the kernel launched
    # just before it (a weight-only int8 GEMM multiplies the copy its conversion kernel just wrote), from
    # kernel_bound with the counters joined in (dram_bytes per kernel).
    allk = r.kernels
    step = allk[(allk["step_id"] == 1) & allk["dram_bytes"].notna()].sort_values("ts_ns").reset_index(drop=True)
    by_op = {}
    if len(step):
        is_gemm = (step["kclass"] == "gemm") | step["op_name"].isin(gemm_ops)
        for name, g in step[is_gemm].groupby(step.loc[is_gemm, "op_name"].fillna("(name only)")):
            prev = step.loc[[i - 1 for i in g.index if i > 0]]
            by_op[str(name)] = {"kernels": len(g), "modelled_bytes": float(g["bytes"].sum()),
                                "dram_bytes": float(g["dram_bytes"].sum()),
                                "with_previous_modelled_bytes": float(g["bytes"].sum() + prev["bytes"].sum()),
                                "with_previous_dram_bytes": float(g["dram_bytes"].sum() + prev["dram_bytes"].sum()),
                                "previous_kernels": sorted(set(prev["name"].astype(str).str[:60]))[:4]}
        cols = [c for c in ("name", "op_name", "kclass", "dur_ns", "bytes", "dram_bytes", "dram_pct", "bound")
                if c in step]
        step[cols].to_csv(run.parent.parent / f"ncu_step1_{run.name}.csv", index=False)
    return {"kernels": res.kernels, "matched": res.matched, "gemm_kernels": len(k), "modelled_bytes": modelled,
            "dram_bytes": dram, "ratio": modelled / dram if dram else None, "elapsed_s": res.elapsed_s,
            "step_modelled_bytes": float(step["bytes"].sum()) if len(step) else None,
            "step_dram_bytes": float(step["dram_bytes"].sum()) if len(step) else None, "gemm_by_op": by_op}


def _fmt(v: Any, scale: float = 1.0, nd: int = 1) -> str:
    return "-" if v is None else f"{v / scale:,.{nd}f}"


def table(cells: list[dict[str, Any]]) -> str:
    head = ("quant", "mode", "batch", "TPOT ms", "model MB/step", "config MB/step", "compute", "memory", "latency",
            "idle", "weights MB", "peak MB (kind: W+KV+T)", "KV B/tok formula/cache/alloc", "note")
    rows = [head]
    for c in cells:
        if c.get("error"):
            rows.append((c["quant"], c.get("mode") or "-", str(c["batch"]), *["-"] * 10, c["error"][:120]))
            continue
        s = c.get("split") or {}
        pk = next((p for p in c.get("peaks") or [] if p["kind"] == "decode"), None) or next(iter(c.get("peaks") or []), None)
        peak = "-" if pk is None else (f"{pk['peak_allocated_bytes'] / 1e6:,.0f} ({pk['kind']}: "
                                       f"{pk['weights_bytes'] / 1e6:,.0f}+{pk['kv_cache_bytes'] / 1e6:,.1f}+"
                                       f"{pk['peak_transient_bytes'] / 1e6:,.1f})")
        kvm = c.get("kv_measured_bytes_per_token") or {}
        kv = f"{_fmt(c.get('kv_formula_bytes_per_token'), nd=0)}/{_fmt(kvm.get('cache_tensors'), nd=0)}/" \
             f"{_fmt(kvm.get('allocator'), nd=0)}"
        rows.append((c["quant"], c.get("mode") or "-", str(c["batch"]), _fmt(c.get("tpot_ms"), nd=2),
                     _fmt(c.get("modelled_bytes_per_step"), 1e6), _fmt(c.get("config_bytes_per_step"), 1e6),
                     *[_fmt(s.get(k), 0.01, 0) + "%" if s.get(k) is not None else "-"
                       for k in ("compute_bound", "memory_bound", "latency_bound", "idle")],
                     _fmt(c.get("weights_bytes"), 1e6), peak, kv, ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--cpu", action="store_true", help="dry run: tiny preset on CPU")
    ap.add_argument("--modes", default="eager", help="eager, compiled (static cache + CUDA graphs) or both")
    ap.add_argument("--ncu", action="store_true", help="then Nsight Compute on decode step 1 of the eager runs of --ncu-batches")
    ap.add_argument("--ncu-batches", default="1", help="the batch sizes measured under --ncu (default 1)")
    ap.add_argument("--quants", default=",".join(QUANTS))
    ap.add_argument("--batches", default=None, help="default 1,16 (--cpu: 1,2)")
    ap.add_argument("--budget-s", type=float, default=230.0)
    a = ap.parse_args()
    t0 = time.monotonic()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    model = "tiny" if a.cpu else "tinyllama-1.1b"
    quants = [q for q in a.quants.split(",") if q]
    batches = [int(b) for b in (a.batches or ("1,2" if a.cpu else ",".join(map(str, BATCHES)))).split(",") if b]
    modes = [{"eager": False, "compiled": True}[m] for m in a.modes.split(",") if m]
    cells: list[dict[str, Any]] = []
    for compiled in modes:
        for quant in quants:
            for batch in batches:
                left = a.budget_s - (time.monotonic() - t0)
                if left < 15:
                    cells.append({"quant": quant, "batch": batch, "mode": "compiled" if compiled else "eager",
                                  "error": "skipped: out of the time budget"})
                    continue
                rid = f"{quant}-b{batch}-{'compiled' if compiled else 'eager'}"
                run, err = record(out / "runs" / rid, model, quant, batch, compiled, a.cpu)
                if err is not None:
                    cells.append({"quant": quant, "batch": batch, "mode": "compiled" if compiled else "eager",
                                  "error": err})
                    print(f"{rid}: {err}", file=sys.stderr)
                    continue
                try:
                    cell = read_cell(run, quant, batch)
                except Exception as exc:
                    traceback.print_exc()
                    cell = {"quant": quant, "batch": batch, "error": f"analysis: {type(exc).__name__}: {exc}"}
                cell["run"] = str(run)
                cells.append(cell)
                print(f"{rid}: done at {time.monotonic() - t0:.0f} s", file=sys.stderr)
                # after every cell: a process stopped by an outer time limit keeps the cells it finished
                (out / "quant.json").write_text(json.dumps({"model": model, "cells": cells, "partial": True},
                                                           indent=2, default=str))
    ncu: dict[str, Any] = {}
    if a.ncu and not a.cpu:
        ncu_batches = {int(b) for b in a.ncu_batches.split(",") if b}
        for c in cells:
            left = a.budget_s - (time.monotonic() - t0)
            if c.get("error") or c["batch"] not in ncu_batches or c.get("mode") != "eager":
                continue
            if left < 60:
                ncu[f"{c['quant']} b{c['batch']}"] = {"error": "skipped: out of the time budget"}
                continue
            ncu[f"{c['quant']} b{c['batch']}"] = ncu_cell(Path(c["run"]), left - 10)
    result = {"model": model, "input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS, "cells": cells,
              "ncu": ncu, "elapsed_s": round(time.monotonic() - t0, 1)}
    (out / "quant.json").write_text(json.dumps(result, indent=2, default=str))
    if ncu:
        print("\nNsight Compute, decode step 1, GEMM kernels (modelled bytes / DRAM bytes):")
        for q, n in ncu.items():
            print(f"  {q:<12} " + (n["error"] if "error" in n else
                  f"{n['gemm_kernels']} GEMMs, modelled {n['modelled_bytes'] / 1e6:,.1f} MB, DRAM "
                  f"{n['dram_bytes'] / 1e6:,.1f} MB, ratio {_fmt(n['ratio'], nd=3)}; whole step modelled "
                  f"{_fmt(n.get('step_modelled_bytes'), 1e6)} MB, DRAM {_fmt(n.get('step_dram_bytes'), 1e6)} MB"))
            for op, b in ({} if "error" in n else n.get("gemm_by_op") or {}).items():
                print(f"    {op:<28} x{b['kernels']}: modelled {b['modelled_bytes'] / 1e6:,.1f} MB, DRAM "
                      f"{b['dram_bytes'] / 1e6:,.1f} MB; with the kernel before each: modelled "
                      f"{b['with_previous_modelled_bytes'] / 1e6:,.1f} MB, DRAM {b['with_previous_dram_bytes'] / 1e6:,.1f}"
                      f" MB ({', '.join(b['previous_kernels'])})")
    print(f"\nquant.py: {len(cells)} cells in {result['elapsed_s']} s ({model}); {out / 'quant.json'}")
    print(table(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
