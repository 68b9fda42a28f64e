#!/usr/bin/env python3
"""Validate record --serve (eager, engine CUDA graphs), record --assistant and the per-request cost split on a GPU.

Usage (tracekit installed, e.g. with pip --target; the H200 stack: torch 2.11, transformers 5.17):

    python3 scripts/gpu/serve.py OUT_DIR          # tinyllama-1.1b fp16 on cuda, ~120 s on an H200
    python3 scripts/gpu/serve.py OUT_DIR --cpu    # the same stages, tiny preset on the CPU (a dry run)

Stages, each through the CLI's own code path (tracekit.cli.main, in this process), each allowed to
fail without stopping the others:
  serve_eager   `record --serve`: 16 requests of four shapes (chat-, RAG-, creative- and agent-like
                lengths) at 16 requests/s (Poisson, seeded) through Transformers' continuous batching;
                then `analyze`. Prints steps by kind, the largest batch, and per request TTFT / TPOT
                from the engine's timestamps beside TTFT / e2e read from the trace's step windows.
  serve_graphs  the same requests (8 of them) with `--cuda-graphs`: the engine's CUDA graphs,
                captured in its warm-up (skipped when the budget is spent).
  assisted      `record --assistant layers:11` on one 128-in / 24-out request (the target's first 11
                of 22 layers, shared weights: random weights still agree now and then): acceptance,
                draft / verify / host time, speed-up against the same prompt without the assistant.
  cost          for every analysed run: the requests' shares of each step sum to it (integer ns
                per bound class, step time and GPU time exactly; FLOPs, bytes, energy to 1e-9), and
                each request's GPU time, FLOPs, bytes and energy (NVML) beside its latency.
Writes OUT_DIR/serve.json and OUT_DIR/runs/<stage>/ (run.json, tables; traces deleted unless
--keep-traces). The summary table is printed last.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from pathlib import Path
from typing import Any

BUDGET_S = 120.0
# (prompt, output) tokens: chat-like, RAG-like (a 1205-token prompt: chunked at 512 tokens per step,
# beside the decodes), creative-like, one step of an agent loop; four of each. Answers are short so the
# recorded pass stays near 70 engine steps (a traced eager TinyLlama step is ~7k events).
GPU_LENGTHS = [(128, 32), (1205, 16), (25, 48), (384, 24)] * 4
RATE = 16.0  # requests per second: the 16 arrive over about a second
CPU_LENGTHS = [(12, 6), (70, 4), (5, 8), (30, 5)] * 2


def run_cli(argv: list[str], log: Path | None = None) -> int:
    """tracekit's CLI in this process; what it prints goes to ``log``."""
    import contextlib

    from tracekit.cli import main

    if log is None:
        return main(argv)
    with open(log, "a") as fh, contextlib.redirect_stdout(fh):
        return main(argv)


def steps_by_kind(run: Path) -> dict[str, Any]:
    import pandas as pd

    steps = pd.read_parquet(run / "tables" / "steps.parquet")
    out: dict[str, Any] = {str(k): int(v) for k, v in steps["kind"].astype(str).value_counts().items()}
    out["max_batch"] = int(steps["batch"].max()) if len(steps) else 0
    out["captured"] = int(steps["captured"].sum()) if "captured" in steps else None
    if "gpu_busy_ns" in steps and steps["gpu_busy_ns"].notna().any():
        t = (steps["cpu_end_ns"] - steps["cpu_start_ns"]).astype(float)
        out["gpu_busy_share_median"] = float((steps["gpu_busy_ns"].astype(float) / t).median())
    return out


def per_request(run: Path) -> list[dict[str, Any]]:
    import pandas as pd

    req = pd.read_parquet(run / "tables" / "requests.parquet")
    cols = ["request_id", "name", "input_tokens", "output_tokens", "queue_ns", "ttft_ns", "trace_ttft_ns", "tpot_ns",
            "e2e_ns", "trace_e2e_ns", "steps", "mean_step_share", "step_time_ns", "gpu_time_ns", "flops", "bytes",
            "energy_j", "assistant", "proposed_tokens", "accepted_tokens", "acceptance_rate", "speedup"]
    out = []
    for r in req[[c for c in cols if c in req]].to_dict("records"):
        out.append({k: (None if v is None or (isinstance(v, float) and math.isnan(v)) else
                        (v.item() if hasattr(v, "item") else v)) for k, v in r.items()})
    return out


def cost_invariant(run: Path) -> dict[str, Any]:
    """Max |sum of the requests' shares - the step's value| per column, over every step."""
    import pandas as pd

    t = run / "tables"
    sr = pd.read_parquet(t / "step_requests.parquet")
    res: dict[str, Any] = {"rows": len(sr), "steps": int(sr["step_id"].nunique())}
    steps = pd.read_parquet(t / "steps.parquet").set_index("step_id")
    sb = pd.read_parquet(t / "step_bound.parquet").set_index("step_id") if (t / "step_bound.parquet").is_file() \
        else None
    sums = sr.groupby("step_id").sum(numeric_only=True)
    # Integer arithmetic: epoch-scale ns do not fit a float64 to the nanosecond.
    end = steps["cpu_end_ns"].astype("Int64")
    if "gpu_end_ns" in steps:
        end = end.where(steps["gpu_end_ns"].isna() | (end >= steps["gpu_end_ns"]), steps["gpu_end_ns"]).astype("Int64")
    window = end - steps["cpu_start_ns"].astype("Int64")
    if sb is not None and "time_ns" in sb:
        window = sb["time_ns"].astype("Int64").reindex(window.index).fillna(window)
    res["step_time_ns_max_abs_diff"] = int((sums["step_time_ns"].astype("Int64") - window.reindex(sums.index)).abs().max())
    if sb is not None:
        for c in ("compute_bound_ns", "memory_bound_ns", "latency_bound_ns", "other_ns", "comm_ns", "memcpy_ns",
                  "idle_ns", "flops", "bytes"):
            if c not in sb or c not in sums or not sums[c].notna().any():
                continue
            want = sb[c].reindex(sums.index)
            if c.endswith("_ns"):
                res[f"{c}_max_abs_diff"] = int((sums[c].round().astype("Int64") - want.astype("Int64")).abs().max())
            else:
                d = (sums[c].astype(float) - want.astype(float)).abs() / want.astype(float).clip(lower=1)
                res[f"{c}_max_rel_diff"] = float(d.max())
        if "gpu_busy_ns" in sb:
            res["gpu_time_ns_max_abs_diff"] = int((sums["gpu_time_ns"].round().astype("Int64")
                                                   - sb["gpu_busy_ns"].reindex(sums.index).astype("Int64")).abs().max())
    ints = [v for k, v in res.items() if k.endswith("_ns_max_abs_diff")]
    fl = [v for k, v in res.items() if k.endswith("_max_rel_diff")]
    res["holds"] = bool(ints) and all(v == 0 for v in ints if v == v) and all(v < 1e-9 for v in fl if v == v)
    return res


def serve_stage(name: str, out: Path, device: str, model: str, lengths: list[tuple[int, int]], rate: float,
                extra: list[str]) -> dict[str, Any]:
    f = out / f"{name}_lengths.txt"
    f.write_text("\n".join(f"{a} {b}" for a, b in lengths) + "\n")
    run = out / "runs" / name
    argv = ["record", "--serve", "--model", model, "--device", device, "--lengths", str(f), "--rate", str(rate),
            "--seed", "1", "--warmup", "2", "--out", str(run), "--force", "-q", *extra]
    t0 = time.perf_counter()
    rc = run_cli(argv)
    res: dict[str, Any] = {"argv": argv, "rc": rc, "record_s": round(time.perf_counter() - t0, 1)}
    m = json.loads((run / "run.json").read_text())
    res["status"] = m.get("status")
    res["attention"] = (m.get("serve") or {}).get("attention")
    res["transformers"] = (m.get("environment") or {}).get("transformers")
    res["load_unprofiled"] = (m.get("timings", {}).get("unprofiled") or {}).get("load")
    res["trace_check"] = (m.get("timings", {}).get("profiled") or {}).get("trace_check")
    t1 = time.perf_counter()
    res["analyze_rc"] = run_cli(["analyze", str(run)], out / f"{name}_analyze.log")
    res["analyze_s"] = round(time.perf_counter() - t1, 1)
    res["steps"] = steps_by_kind(run)
    res["requests"] = per_request(run)
    res["cost"] = cost_invariant(run)
    res["warnings"] = json.loads((run / "run.json").read_text()).get("warnings", [])[:8]
    return res


def assisted_stage(out: Path, device: str, model: str, cpu: bool) -> dict[str, Any]:
    run = out / "runs" / "assisted"
    argv = ["record", "--assistant", "layers:3" if cpu else "layers:11", "--assistant-tokens", "4", "--model", model,
            "--device", device, "--input-tokens", "12" if cpu else "128", "--output-tokens", "12" if cpu else "24",
            "--requests", "2" if cpu else "1", "--warmup", "1", "--out", str(run), "--force", "-q"]
    t0 = time.perf_counter()
    rc = run_cli(argv)
    res: dict[str, Any] = {"argv": argv, "rc": rc, "record_s": round(time.perf_counter() - t0, 1)}
    m = json.loads((run / "run.json").read_text())
    res["status"] = m.get("status")
    t = m.get("timings", {})
    res["unprofiled"] = (t.get("unprofiled") or {}).get("assisted")
    res["profiled"] = (t.get("profiled") or {}).get("assisted")
    res["analyze_rc"] = run_cli(["analyze", str(run)], out / "assisted_analyze.log")
    res["steps"] = steps_by_kind(run)
    res["requests"] = per_request(run)
    res["cost"] = cost_invariant(run)
    import pandas as pd

    sr = pd.read_parquet(run / "tables" / "step_requests.parquet")
    v = sr[sr["phase"].astype(str) == "verify"]
    res["verify_q_is_proposed_plus_1"] = bool((v["q_len"] == v["proposed_tokens"] + 1).all()) if len(v) else None
    ph = pd.read_parquet(run / "tables" / "phases.parquet")
    whole = ph[ph["request_id"].isna()]
    res["phases"] = {str(r["phase"]): {"time_ms": r["time_ns"] / 1e6,
                                       "gpu_busy_ms": None if pd.isna(r["gpu_busy_ns"]) else r["gpu_busy_ns"] / 1e6}
                     for r in whole.to_dict("records")}
    return res


def ms(v: Any) -> str:
    return "-" if v is None else f"{v / 1e6:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--cpu", action="store_true", help="tiny preset on the CPU (dry run of every stage)")
    ap.add_argument("--keep-traces", action="store_true")
    ap.add_argument("--stages", default="serve_eager,assisted,serve_graphs",
                    help="comma-separated stages to run, in this order (default: all three)")
    a = ap.parse_args()
    out: Path = a.out
    out.mkdir(parents=True, exist_ok=True)
    device, model = ("cpu", "tiny") if a.cpu else ("cuda", "tinyllama-1.1b")
    lengths = CPU_LENGTHS if a.cpu else GPU_LENGTHS
    t_start = time.perf_counter()
    results: dict[str, Any] = {"device": device, "model": model, "budget_s": BUDGET_S}
    try:
        import torch
        import transformers

        results["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                               "cuda": torch.version.cuda,
                               "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    except Exception as exc:  # no torch: every stage fails below with its reason
        results["versions"] = {"error": repr(exc)}
    stages = [
        ("serve_eager", lambda: serve_stage("serve_eager", out, device, model, lengths, RATE,
                                            ["--max-batch-tokens", "64" if a.cpu else "512"])),
        ("assisted", lambda: assisted_stage(out, device, model, a.cpu)),
        ("serve_graphs", lambda: serve_stage("serve_graphs", out, device, model, lengths[: len(lengths) // 2], RATE,
                                             ["--max-batch-tokens", "64" if a.cpu else "256", "--cuda-graphs"])),
    ]
    wanted = a.stages.split(",")
    stages = sorted((s for s in stages if s[0] in wanted), key=lambda s: wanted.index(s[0]))
    for name, fn in stages:
        elapsed = time.perf_counter() - t_start
        if name == "serve_graphs" and elapsed > 0.7 * BUDGET_S and not a.cpu:
            results[name] = {"skipped": f"budget: {elapsed:.0f} s of {BUDGET_S:.0f} s spent"}
            continue
        t0 = time.perf_counter()
        try:
            results[name] = fn()
        except Exception as exc:
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
        results[name]["stage_s"] = round(time.perf_counter() - t0, 1)
        (out / "serve.json").write_text(json.dumps(results, indent=1, default=str))
    if not a.keep_traces:
        for p in (out / "runs").glob("*/trace.json.gz"):
            p.unlink()
    results["total_s"] = round(time.perf_counter() - t_start, 1)
    (out / "serve.json").write_text(json.dumps(results, indent=1, default=str))

    # --- the summary, last -----------------------------------------------------------
    print(f"\nscripts/gpu/serve.py on {device} ({results['versions']}), {results['total_s']} s")
    for name in ("serve_eager", "serve_graphs"):
        r = results.get(name, {})
        if "requests" not in r:
            print(f"{name}: {r.get('skipped') or r.get('error')}")
            continue
        load = r.get("load_unprofiled") or {}
        print(f"{name}: rc {r['rc']}/{r['analyze_rc']}, {r['status']}, attention {r['attention']}, steps {r['steps']}; "
              f"{load.get('output_tok_s', 0):.0f} out tok/s, TTFT p50/p99 {ms(load.get('ttft_ns_p50'))}/"
              f"{ms(load.get('ttft_ns_p99'))} ms, TPOT p50/p99 {ms(load.get('tpot_ns_p50'))}/"
              f"{ms(load.get('tpot_ns_p99'))} ms (no profiler)")
        print("  request            in  out  queue  TTFT engine/trace  TPOT  e2e engine/trace  GPU ms  share  GFLOP  J")
        for q in r["requests"]:
            gflop = q.get("flops") / 1e9 if q.get("flops") is not None else None
            print(f"  {q['name']:<16} {q['input_tokens']:>4} {q['output_tokens']:>4} {ms(q.get('queue_ns')):>6} "
                  f"{ms(q.get('ttft_ns')):>7}/{ms(q.get('trace_ttft_ns')):<7} {ms(q.get('tpot_ns')):>6} "
                  f"{ms(q.get('e2e_ns')):>7}/{ms(q.get('trace_e2e_ns')):<7} {ms(q.get('gpu_time_ns')):>7} "
                  f"{(q.get('mean_step_share') or 0):>5.2f} {'-' if gflop is None else f'{gflop:.1f}':>6} "
                  f"{'-' if q.get('energy_j') is None else format(q['energy_j'], '.2f')}")
        print(f"  engine vs trace: {r.get('trace_check')}")
        print(f"  cost split invariant: {r['cost']}")
    r = results.get("assisted", {})
    if "requests" in r:
        s = r.get("unprofiled") or {}
        print(f"assisted: rc {r['rc']}/{r['analyze_rc']}, {r['status']}, steps {r['steps']}, verify q = proposed+1: "
              f"{r['verify_q_is_proposed_plus_1']}; acceptance {s.get('acceptance_rate')}, tokens/round "
              f"{s.get('tokens_per_round')}, speed-up {s.get('speedup_mean')} (no profiler)")
        print(f"  phases: {r['phases']}")
        for q in r["requests"]:
            print(f"  {q['name']:<16} e2e {ms(q.get('e2e_ns'))} ms, acceptance {q.get('acceptance_rate')}, "
                  f"speed-up {q.get('speedup')}, GPU {ms(q.get('gpu_time_ns'))} ms, J {q.get('energy_j')}")
        print(f"  cost split invariant: {r['cost']}")
    else:
        print(f"assisted: {r.get('error')}")
    ran = [n for n in wanted if "cost" in results.get(n, {}) or "error" in results.get(n, {})]
    ok = bool(ran) and all(results[n].get("cost", {}).get("holds") for n in ran)
    print(f"SUMMARY serve_eager={results.get('serve_eager', {}).get('status')} "
          f"serve_graphs={results.get('serve_graphs', {}).get('status', results.get('serve_graphs', {}).get('skipped'))} "
          f"assisted={results.get('assisted', {}).get('status')} cost_invariant={'holds' if ok else 'FAILS'} "
          f"total={results['total_s']}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
