"""The share of kernel time with an op model (FLOPs or bytes) on real traces, through `tracekit analyze`.

Usage: python benchmarks/op_coverage.py OUT_DIR [TRACE ...]

Without traces: the engine corpus (../shared/corpus/engines: SGLang Qwen3-8B decode, vLLM GPT-OSS-20B MoE,
xDiT Flux; their capture traces beside them are merged), the committed MoE recordings
(tests/fixtures/ncu/eager_*.json.gz) and the H100 UNet fixture (tests/fixtures/foreign/). Prints one
Markdown row per trace: kernels, kernel time, the share with a model, and the three largest unmodelled
kernels by time. Any checkout runs it (it prints what that checkout models): docs/measurements/ compares two.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]


def default_traces() -> list[Path]:
    out: list[Path] = []
    for root in (REPO.parent / "shared/corpus/engines", REPO.parent.parent / "shared/corpus/engines"):
        if root.is_dir():
            out += [root / "sglang_decode/sglang_Qwen3-8B_decode.json.gz", root / "vllm_decode_full/graph_execution.json.gz",
                    root / "xdit_flux.1_aiter_sage/profile_trace_rank_0.json.gz"]
            break
    out += sorted((REPO / "tests/fixtures/ncu").glob("eager_*.json.gz"))
    out += sorted((REPO / "tests/fixtures/foreign").glob("*.json.gz"))
    return out


def coverage(trace: Path, out: Path) -> dict[str, object]:
    from tracekit.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        main(["analyze", str(trace), "--out", str(out), "--force", "-q"])
    kb = pd.read_parquet(out / "tables" / "kernel_bound.parquet")
    k = kb[kb["kind"].astype(str) == "kernel"]
    has = (k["flops"].fillna(0) > 0) | (k["bytes"].fillna(0) > 0)
    total = float(k["dur_ns"].sum())
    top = k[~has].groupby(k["name"].astype(str).str.slice(0, 48))["dur_ns"].sum().sort_values(ascending=False)
    return {"kernels": len(k), "kernel_ms": round(total / 1e6, 2),
            "modelled_pct": round(100 * float(k.loc[has, "dur_ns"].sum()) / total, 1) if total else None,
            "unmodelled": "; ".join(f"{n} {100 * v / total:.1f}%" for n, v in top.head(3).items())}


if __name__ == "__main__":
    root = Path(sys.argv[1])
    traces = [Path(p) for p in sys.argv[2:]] or default_traces()
    print("| trace | kernels | kernel ms | with a model | largest unmodelled |")
    print("| --- | ---: | ---: | ---: | --- |")
    for i, t in enumerate(traces):
        r = coverage(t, root / f"{i}_{t.name.split('.')[0]}")
        print(f"| {t.parent.name}/{t.name} | {r['kernels']} | {r['kernel_ms']} | {r['modelled_pct']}% | "
              f"{r['unmodelled'] or '-'} |")
