"""2-rank tensor-parallel recording on two GPUs, analysed as `tracekit analyze` does it.

    python3 scripts/gpu/tp_record.py OUT_DIR [--only tinyllama|llama8b] [--tokens IN OUT]
                                                [--requests N] [--budget-s S] [--cpu]

Uses the INSTALLED tracekit (on the device: /tmp/site on PYTHONPATH); it never
puts the checkout on sys.path, which would shadow the mapped packages
tracekit.collectors / tracekit.analysis. Needs torch, transformers, pandas,
pyarrow, click, nvidia-ml-py, and accelerate for Transformers' tp_plan="auto"
(without it, or if that path fails, the model's published TP plan is applied
with torch's DTensor instead; results.json says which ran). No network, no
weights: random weights from published configs, in bf16.

Shapes: TinyLlama-1.1B (22 layers, hidden 2048, 32 heads, 4 KV heads; prompt
512, 32 new tokens, 2 requests, tp impl auto) first, then Llama-3.1-8B (32
layers, hidden 4096, 8 KV heads, vocab 128256; 1 request, torch DTensor TP:
saving and reloading a 16 GB checkpoint for tp_plan="auto" would not fit the
budget) only if the time budget (default 225 s) leaves room. Every rank has a
timeout (the launcher kills the ranks; the process group has the same timeout).

For each shape, in a scratch directory: ``tracekit.collectors.tp.launch``
records both ranks, then ``tracekit.app.analyze.analyse_multirank`` analyses
each rank as a single run and then across ranks. Written to OUT_DIR:

    results.json                         every figure, per shape
    <shape>/run.json, <shape>/tables/    the TP run's small tables (steps, requests, phases,
                                         rank_steps, rank_skew, comm_steps, comm_phases, comm_collectives)
    <shape>/ranks/<k>/run.json, tables/  rank k's small tables
    <shape>/ranks/<k>/trace.json.gz      rank k's trace trimmed to steps 0..n (<= 2 MB; TinyLlama only)
    <shape>/rank<k>.log                  each rank's output

--cpu: a sanity run on this machine (gloo, the tiny preset, 16 in / 4 out, 1 request).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SHAPES: dict[str, dict[str, Any]] = {
    "tinyllama": {
        "model_type": "llama", "vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632,
        "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
        "max_position_embeddings": 2048, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
    },
    "llama8b": {
        "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 131072, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    },
}  # fmt: skip
IMPL = {"tinyllama": "auto", "llama8b": "torch", "tiny-cpu": "auto"}
SMALL_TABLES = ("steps", "requests", "phases", "gpu_timeline", "rank_steps", "rank_skew", "comm_steps",
                "comm_phases", "comm_collectives", "counters")  # fmt: skip
TRACE_LIMIT = 2_000_000


def _records(df: Any, limit: int = 200) -> list[dict[str, Any]]:
    return json.loads(df.head(limit).to_json(orient="records"))


def _launch(
    tp: Any, name: str, run_dir: Path, args: argparse.Namespace, timeout_s: float
) -> tuple[Any, list[str]]:
    """Record; with impl auto, fall back to torch's DTensor TP if Transformers' path fails."""
    errors: list[str] = []
    impls = [IMPL[name]] + (["torch"] if IMPL[name] == "auto" else [])
    t_end = time.monotonic() + timeout_s
    for impl in impls:
        left = t_end - time.monotonic()
        if left < 30:
            errors.append(f"impl {impl}: skipped, {left:.0f} s left")
            break
        opts = tp.TPOptions(
            out=run_dir, world_size=2, model=name if not args.cpu else "tiny",
            model_config=None if args.cpu else SHAPES[name], shape="smoke",
            input_tokens=args.tokens[0], output_tokens=args.tokens[1],
            dtype="auto" if args.cpu else "bf16", device="cpu" if args.cpu else "cuda",
            requests=args.requests if name != "llama8b" else 1, warmup=1, impl=impl, force=True, timeout_s=left,
        )  # fmt: skip
        try:
            return tp.launch(opts), errors
        except Exception as exc:  # keep going: the fallback or the other shape may still work
            errors.append(f"impl {impl}: {type(exc).__name__}: {exc}")
            for k in (0, 1):  # keep the failing ranks' logs
                log = run_dir / f"rank{k}.log"
                if log.is_file():
                    shutil.copyfile(log, run_dir.parent / f"{name}.{impl}.rank{k}.log")
    return None, errors


def _copy_small(run: Path, dst: Path, trim_traces: bool) -> dict[str, Any]:
    from tracekit.trace import chrome as chrome_trace

    info: dict[str, Any] = {}
    for src, out in [(run, dst)] + [(run / "ranks" / str(k), dst / "ranks" / str(k)) for k in (0, 1)]:
        (out / "tables").mkdir(parents=True, exist_ok=True)
        if (src / "run.json").is_file():
            shutil.copy2(src / "run.json", out / "run.json")
        for t in SMALL_TABLES:
            if (src / "tables" / f"{t}.parquet").is_file():
                shutil.copy2(src / "tables" / f"{t}.parquet", out / "tables" / f"{t}.parquet")
    for k in (0, 1):
        if (run / f"rank{k}.log").is_file():
            shutil.copy2(run / f"rank{k}.log", dst / f"rank{k}.log")
        trace = run / "ranks" / str(k) / "trace.json.gz"
        if not trace.is_file():
            continue
        info[f"rank{k}_trace_bytes"] = trace.stat().st_size
        if not trim_traces:
            continue
        try:
            data = chrome_trace.load(trace)
            for last in (2, 1, 0):  # prefill + a few decodes of the first request
                small = chrome_trace.trim(data, 0, last)
                target = dst / "ranks" / str(k) / "trace.json.gz"
                chrome_trace.write(target, small)
                if target.stat().st_size <= TRACE_LIMIT:
                    info[f"rank{k}_trimmed"] = {"steps": f"0..{last}", "bytes": target.stat().st_size}
                    break
                target.unlink()
            del data
        except Exception as exc:  # a fixture is a bonus; the figures matter more
            info[f"rank{k}_trim_error"] = f"{type(exc).__name__}: {exc}"
    return info


def run_shape(
    name: str, out: Path, scratch: Path, args: argparse.Namespace, timeout_s: float
) -> dict[str, Any]:
    from tracekit.app.analyze import analyse_multirank
    from tracekit.collectors import tp

    result: dict[str, Any] = {"shape": name, "config": SHAPES.get(name, "tiny preset")}
    t0 = time.perf_counter()
    run, errors = _launch(tp, name, scratch / name, args, timeout_s)
    if errors:
        result["launch_errors"] = errors
    if run is None:
        result["error"] = errors[-1] if errors else "not run"
        return result
    result["record_s"] = round(time.perf_counter() - t0, 1)
    result["tp"] = run.read_manifest().get("tp")
    t1 = time.perf_counter()
    try:
        res = analyse_multirank(run)
    except Exception as exc:
        result["error"] = f"analysis: {type(exc).__name__}: {exc}"
        result.update(_copy_small(run.path, out / name, trim_traces=False))
        return result
    result["analyse_s"] = round(time.perf_counter() - t1, 1)
    for key, tname in (
        ("skew", "rank_skew"),
        ("comm_phases", "comm_phases"),
        ("collectives", "comm_collectives"),
    ):
        result[key] = _records(res.tables[tname])
    result["aligned_steps"] = _records(res.tables["rank_steps"], 80)
    result["phases"] = _records(run.read_df("phases"))
    result["requests"] = _records(run.read_df("requests"))
    cs = res.tables["comm_steps"]
    for kind in ("prefill", "decode"):
        sub = cs[cs["kind"] == kind]
        if not sub.empty:
            result[f"{kind}_step_median_ns"] = {
                c: float(sub[c].astype("float64").median())
                for c in ("window_ns", "comm_ns", "exposed_comm_ns", "compute_ns", "nccl_kernels")
            }
    for k in (0, 1):
        m = json.loads((run.path / "ranks" / str(k) / "run.json").read_text())
        result[f"rank{k}_timings"] = m.get("timings")
        result[f"rank{k}_model"] = {
            kk: m.get("model", {}).get(kk) for kk in ("parameters", "tp_modules", "tp_build_s")
        }
    result.update(_copy_small(run.path, out / name, trim_traces=name in ("tinyllama", "tiny-cpu")))
    shutil.rmtree(run.path, ignore_errors=True)  # full traces: GBs of scratch
    result["total_s"] = round(time.perf_counter() - t0, 1)
    return result


def _summary(results: dict[str, Any]) -> None:
    for r in results["shapes"]:
        if "error" in r:
            print(f"{r['shape']}: FAILED {r['error']}")
            continue
        tpi = r.get("tp") or {}
        print(f"{r['shape']}: recorded {r['record_s']} s, analysed {r['analyse_s']} s, impl {tpi.get('impl')}"
              + (f" (fell back: {r['launch_errors'][0][:160]})" if r.get("launch_errors") else ""))  # fmt: skip
        for row in r["comm_phases"]:
            share = row.get("exposed_share")
            print(
                f"  rank {row['rank']} {row['phase']:8s} steps {row['steps']:3d}  time {row['time_ns'] / 1e6:8.2f} ms  "
                f"nccl {row['comm_ns'] / 1e6:7.2f} ms  exposed {row['exposed_comm_ns'] / 1e6:7.2f} ms"
                + (f" ({100 * share:.1f}%)" if share is not None else "")
            )
        for row in r["skew"]:
            print(f"  skew {row['phase']:8s} p50 {row['skew_p50_ns'] / 1e3:.1f} us  max {row['skew_max_ns'] / 1e3:.1f} us  "
                  f"stragglers {row['straggler_counts']}")  # fmt: skip
        for k in (0, 1):
            if f"rank{k}_trimmed" in r:
                print(f"  rank {k} trimmed trace: {r[f'rank{k}_trimmed']}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", choices=sorted(SHAPES))
    ap.add_argument("--tokens", type=int, nargs=2, default=None, metavar=("IN", "OUT"))
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument(
        "--budget-s", type=float, default=225.0, help="Whole-script budget; later shapes are skipped."
    )
    ap.add_argument("--cpu", action="store_true", help="Sanity run on CPU (gloo, tiny preset).")
    args = ap.parse_args()
    deadline = time.monotonic() + args.budget_s
    args.tokens = tuple(args.tokens or ((16, 4) if args.cpu else (512, 32)))
    args.requests = args.requests or (1 if args.cpu else 2)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        import tracekit.analysis.ranks
        import tracekit.collectors.tp  # noqa: F401
    except ImportError as exc:
        print(f"tracekit is not installed ({exc}); install it (pip install --target /tmp/site .) first",
              file=sys.stderr)  # fmt: skip
        return 2
    import torch

    if not args.cpu and torch.cuda.device_count() < 2:
        print(
            f"needs 2 GPUs, found {torch.cuda.device_count()} (use --cpu for a sanity run)", file=sys.stderr
        )
        return 2
    env: dict[str, Any] = {"torch": torch.__version__, "cpu": args.cpu}
    if not args.cpu:
        env["gpus"] = [torch.cuda.get_device_name(i) for i in range(2)]
    for mod in ("transformers", "accelerate"):
        try:
            env[mod] = __import__(mod).__version__
        except ImportError:
            env[mod] = None
    results: dict[str, Any] = {"environment": env, "tokens": list(args.tokens), "shapes": []}
    names = ["tiny-cpu"] if args.cpu else ([args.only] if args.only else list(SHAPES))
    scratch = Path(tempfile.mkdtemp(prefix="tk-tp-"))
    try:
        for name in names:
            left = deadline - time.monotonic()
            if left < 60:
                results["shapes"].append(
                    {"shape": name, "error": f"skipped: {left:.0f} s of the budget left"}
                )
                continue
            # Leave time after the recording for the analysis (ingest of two traces).
            r = run_shape(name, args.out, scratch, args, timeout_s=left - (25 if name == "llama8b" else 40))
            results["shapes"].append(r)
            (args.out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    _summary(results)
    print(f"results: {args.out / 'results.json'}")
    return 0 if all("error" not in r for r in results["shapes"]) else 1


if __name__ == "__main__":
    sys.exit(main())
