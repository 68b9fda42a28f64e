"""2-rank tensor-parallel recording on two GPUs, then the cross-rank analysis.

    python3 scripts/device/tp_record.py OUT_DIR [--only tinyllama|llama8b] [--tokens IN OUT]

Run from the repository root on a machine with 2 GPUs. Needs torch,
transformers, pandas, pyarrow, click, nvidia-ml-py; no network, no weights
(random weights from published configs). Takes ~2-4 minutes.

For each shape (TinyLlama-1.1B: 22 layers, hidden 2048, 32 heads, 4 KV
heads; Llama-3.1-8B: 32 layers, hidden 4096, intermediate 14336, 32 heads,
8 KV heads, vocab 128256), in bf16: ``collectors.tp.launch`` records 2 ranks
(prompt 512 tokens, 32 new tokens, 2 requests), each rank's trace is read
with ``tracekit.ingest.read_file``, step GPU windows come from the kernels
each step launched, and ``analysis.ranks.analyze_ranks`` gives aligned
steps, skew, NCCL time per phase and exposed NCCL time. Writes to OUT_DIR:

    results.json                      every figure, per shape
    <shape>/run.json, tables/          the merged TP run (small)
    <shape>/rank<k>.trace.json.gz      rank k's trace when under 25 MB (TinyLlama)
    <shape>/rank<k>.log                each rank's stdout/stderr
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SHAPES = {
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


def _ensure_importable() -> None:
    """Make ``tracekit.collectors`` / ``tracekit.analysis`` importable without installing (package-dir shim)."""
    try:
        import tracekit.analysis.ranks
        import tracekit.collectors.tp  # noqa: F401

        return
    except ImportError:
        pass
    shim = Path(tempfile.mkdtemp(prefix="tk-shim-")) / "tracekit"
    shim.mkdir()
    for p in (REPO / "tracekit").iterdir():
        (shim / p.name).symlink_to(p)
    (shim / "collectors").symlink_to(REPO / "collectors")
    (shim / "analysis").symlink_to(REPO / "analysis")
    # Workers are new processes: they find the shim through PYTHONPATH.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(shim.parent), os.environ.get("PYTHONPATH", "")])
    sys.path.insert(0, str(shim.parent))
    for name in [m for m in sys.modules if m == "tracekit" or m.startswith("tracekit.")]:
        del sys.modules[name]


def _frame_records(df, limit: int = 200) -> list[dict]:
    return json.loads(df.head(limit).to_json(orient="records"))


def run_shape(name: str, out: Path, tokens: tuple[int, int], requests: int) -> dict:
    import pandas as pd
    import pyarrow as pa
    from tracekit.analysis import ranks
    from tracekit.collectors import tp

    from tracekit import schema
    from tracekit.ingest import read_file

    run_dir = out / name
    t0 = time.perf_counter()
    result: dict = {"shape": name, "config": SHAPES[name]}
    try:
        run = tp.launch(
            tp.TPOptions(
                out=run_dir, world_size=2, model=name, model_config=SHAPES[name], shape="smoke",
                input_tokens=tokens[0], output_tokens=tokens[1], dtype="bf16", device="cuda",
                requests=requests, warmup=1, force=True, timeout_s=240,
            )
        )  # fmt: skip
    except Exception as exc:  # keep going: the other shape may still work, and logs are in run_dir
        result["error"] = f"{type(exc).__name__}: {exc}"
        return result
    result["record_s"] = round(time.perf_counter() - t0, 1)
    man = run.read_manifest()
    result["tp"] = man.get("tp")
    gpu, rt = [], []
    for k in (0, 1):
        trace = tp.rank_dir(run.path, k) / "trace.json.gz"
        fr = read_file(trace, rank=k)
        gpu.append(fr.tables["gpu_activity"])
        rt.append(fr.tables["runtime"])
        size = trace.stat().st_size
        result[f"rank{k}_trace_bytes"] = size
        rm = json.loads((tp.rank_dir(run.path, k) / "run.json").read_text())
        result[f"rank{k}_timings"] = rm.get("timings", {}).get("profiled", {}).get("aggregate")
        result[f"rank{k}_nvml"] = rm.get("nvml")
        if size < 25e6:
            shutil.copyfile(trace, out / name / f"rank{k}.trace.json.gz")
    gpu_t = pa.concat_tables(gpu, promote_options="permissive")
    rt_t = pa.concat_tables(rt, promote_options="permissive")
    steps = ranks.gpu_windows(run.read_table("steps"), rt_t, gpu_t)
    run.write_table("steps", schema.from_pandas("steps", steps))
    run.write_table("gpu_activity", gpu_t)
    res = ranks.analyze_ranks(steps, gpu_t)
    result["skew"] = _frame_records(res.skew)
    result["comm_phases"] = _frame_records(res.comm_phases)
    result["collectives"] = _frame_records(res.collectives)
    result["aligned_steps"] = _frame_records(res.aligned_steps, 80)
    per_rank_busy = steps.groupby(["rank", "kind"])[["gpu_busy_ns"]].sum().reset_index()
    result["gpu_busy"] = _frame_records(per_rank_busy)
    dec = res.comm_steps[res.comm_steps["kind"] == "decode"]
    if not dec.empty:
        result["decode_step_median"] = {
            c: float(pd.to_numeric(dec[c]).median())
            for c in ("window_ns", "comm_ns", "exposed_comm_ns", "compute_ns")
        }
    # keep the run small for the trip back: traces were copied above only where small
    for k in (0, 1):
        big = tp.rank_dir(run.path, k) / "trace.json.gz"
        if big.stat().st_size >= 25e6:
            big.unlink()
    result["total_s"] = round(time.perf_counter() - t0, 1)
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", choices=sorted(SHAPES))
    ap.add_argument("--tokens", type=int, nargs=2, default=(512, 32), metavar=("IN", "OUT"))
    ap.add_argument("--requests", type=int, default=2)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    _ensure_importable()
    import torch

    if torch.cuda.device_count() < 2:
        print(f"needs 2 GPUs, found {torch.cuda.device_count()}", file=sys.stderr)
        return 2
    env = {"torch": torch.__version__, "gpus": [torch.cuda.get_device_name(i) for i in range(2)]}
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        pass
    results = {"environment": env, "shapes": []}
    for name in [args.only] if args.only else list(SHAPES):
        r = run_shape(name, args.out, tuple(args.tokens), args.requests)
        results["shapes"].append(r)
        (args.out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    for r in results["shapes"]:
        if "error" in r:
            print(f"{r['shape']}: FAILED {r['error']}")
            continue
        print(f"{r['shape']}: recorded in {r['record_s']} s, impl {r['tp'].get('impl')}")
        for row in r["comm_phases"]:
            share = row.get("exposed_share")
            print(
                f"  rank {row['rank']} {row['phase']:8s} steps {row['steps']:3d}  time {row['time_ns'] / 1e6:8.2f} ms  "
                f"nccl {row['comm_ns'] / 1e6:7.2f} ms  exposed {row['exposed_comm_ns'] / 1e6:7.2f} ms"
                + (f" ({100 * share:.1f}% of phase)" if share is not None else "")
            )
        for row in r["skew"]:
            print(f"  skew {row['phase']:8s} p50 {row['skew_p50_ns'] / 1e3:.1f} us  max {row['skew_max_ns'] / 1e3:.1f} us  "
                  f"stragglers {row['straggler_counts']}")  # fmt: skip
    print(f"results: {args.out / 'results.json'}")
    return 0 if all("error" not in r for r in results["shapes"]) else 1


if __name__ == "__main__":
    sys.exit(main())
