"""The faithful vLLM / SGLang traces of tests/engine_traces.py through `tracekit analyze`.

Usage: python benchmarks/engine_traces.py OUT_DIR

Prints, per trace: the steps found and their kinds, the share of GEMM kernel time with FLOPs, and the
share of decode kernel time classified `other`. Any checkout runs it (it prints what that checkout finds):
docs/measurements/ compares two.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def build(root: Path) -> dict[str, Path]:
    from engine_traces import sglang_capture_file, sglang_trace, vllm_capture_file, vllm_trace

    cases: dict[str, Path] = {}
    r = root / "vllm_mi300x"
    for size, mode in ((32, "FULL"), (136, "PIECEWISE"), (8, "FULL")):
        vllm_capture_file(r / "capture_traces", size, mode, hip=True)
    cases["vllm MI300X (HIP graphs, FULL + piecewise)"] = vllm_trace(r / "w.pt.trace.json.gz", [
        ("execute_context_0(0)_generation_27(27)", 27, 0), ("execute_context_1(100)_generation_31(31)", 131, 1),
        ("execute_context_0(0)_generation_30(30)", 30, 0)], hip=True)
    r = root / "vllm_h100"
    for size, mode in ((32, "FULL"), (136, "PIECEWISE")):
        vllm_capture_file(r / "capture_traces", size, mode, hip=False)
    cases["vllm H100 (CUDA graphs, detailed)"] = vllm_trace(r / "w.pt.trace.json.gz", [
        ("execute_27_context_0(sq0sk0sqsq0sqsk0)_generation_27(sq27sk13500sqsq27sqsk13500)", 27, 0),
        ("execute_131_context_1(sq100sk100sqsq10000sqsk10000)_generation_31(sq31sk15531sqsq31sqsk15531)", 131, 1)],
        hip=False)
    r = root / "sglang"
    for bs in (16, 32):
        sglang_capture_file(r / "capture_traces", bs, hip=True)
    cases["sglang MI300X (decode graphs)"] = sglang_trace(r / "sglang-TP-0.trace.json.gz", [
        ("step[EXTEND bs=2 toks=30]", 2), ("step[DECODE bs=30]", 30), ("step[DECODE bs=30]", 30),
        ("step[DECODE bs=12]", 12)], hip=True)
    return cases


def report(trace: Path) -> dict[str, object]:
    from tracekit.cli import main

    out = trace.parent / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        main(["analyze", str(trace), "--out", str(out), "--force"])
    t = out / "tables"
    st = pd.read_parquet(t / "steps.parquet")
    row: dict[str, object] = {"steps": len(st), "kinds": ",".join(st.sort_values("cpu_start_ns")["kind"].astype(str))}
    if not (t / "kernel_bound.parquet").exists():
        row["kernel_bound"] = "none (no ceiling)"
        return row
    kb = pd.read_parquet(t / "kernel_bound.parquet")
    k = kb[kb["kind"].astype(str) == "kernel"]
    g = k[k["kclass"] == "gemm"]
    row["gemm_time_with_flops_pct"] = round(100 * g.loc[g["flops"] > 0, "dur_ns"].sum() / g["dur_ns"].sum(), 1)
    d = k[k["phase"].astype(str) == "decode"] if "phase" in k else k.iloc[0:0]
    row["decode_other_pct"] = round(100 * d.loc[d["bound"] == "other", "dur_ns"].sum() / d["dur_ns"].sum(), 1) \
        if len(d) else None
    row["flops_total"] = float(k["flops"].sum())
    return row


if __name__ == "__main__":
    root = Path(sys.argv[1])
    shutil.rmtree(root, ignore_errors=True)
    for name, trace in build(root).items():
        print(name, json.dumps(report(trace)))
