"""Records the bound-class fixture (tests/fixtures/gpu/bound_h200*) on a GPU and checks it offline with the bound pass.

On the GPU machine (torch + transformers; tracekit need not be installed):

    python3 scripts/gpu/bound_fixture.py OUTDIR            # ~1-2 min on an H200

  1. calibrate: copy bandwidth and bf16/fp16/fp32/tf32 matmul rate (collectors/calibrate.py,
     loaded from this checkout) -> OUTDIR/ceiling.json (skip with --no-calibrate)
  2. a random-weight LlamaForCausalLM of TinyLlama-1.1B's shape in fp16, plain
     model.generate (eager, DynamicCache, sdpa) of a ~1,000-token prompt and
     DECODE new tokens at batch 1, under torch.profiler(record_shapes=True). Each
     forward pass is wrapped (forward hooks) in tracekit's own step annotation
     (tracekit/model/stepnames.py format) so the phase split is exact.
     -> OUTDIR/bound_trace.json.gz
  3. without the profiler: CUDA-event time of a prefill forward and of each decode
     step of a generate, host time per step, and torch.cuda.memory_allocated()
     before each decode step (KV cache growth) -> OUTDIR/bound_timings.json
     (with the model config and the GPU's name)

Then, here (tracekit installed):

    python scripts/gpu/bound_fixture.py --analyze OUTDIR

ingests the trace, runs the default passes (bound included) with the measured
ceiling if present, and prints its checks: prefill GEMMs compute-bound,
decode GEMVs memory-bound, decode idle share, per-kernel bytes of a decode step vs
weights + KV, the time identity, KV bytes per token vs the allocator.
"""

from __future__ import annotations

import gzip
import importlib.util
import itertools
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PROMPT, DECODE = 1000, 24
CONFIG = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
              num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048)


def calibrate(out: Path) -> None:
    try:  # the installed package (on the device: /tmp/site); the checkout's folders do not map onto it
        from tracekit.collectors import calibrate as mod
        from tracekit.model import ceilings
    except ImportError:
        sys.path.insert(0, str(ROOT))  # tracekit/ (errors, ceilings) from this checkout
        spec = importlib.util.spec_from_file_location("tk_calibrate", ROOT / "collectors" / "calibrate.py")
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        # dataclasses looks its module up in sys.modules: unregistered, @dataclass fails with
        # "'NoneType' object has no attribute '__dict__'"
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        from tracekit.model import ceilings

    t0 = time.perf_counter()
    m = mod.measure()
    c = ceilings.measured_ceiling(m["gpu"], m)
    (out / "ceiling.json").write_text(json.dumps(c.to_dict(), indent=2, default=str))
    print(f"calibrate ({time.perf_counter() - t0:.1f} s): copy {m['copy_bytes_per_s'] / 1e12:.2f} TB/s; "
          + ", ".join(f"{k} {v / 1e12:.0f} TFLOP/s" for k, v in m["matmul_flops_per_s"].items()))


class StepAnnotator:
    """Forward hooks that wrap each forward pass in a tracekit.step record_function; CUDA events and host times."""

    def __init__(self, torch: Any, prompt: int, events: bool = False) -> None:
        self.torch, self.prompt, self.events = torch, prompt, events
        self.step = 0
        self.kv = 0
        self.ctx: Any = None
        self.rows: list[dict[str, Any]] = []

    def pre(self, module: Any, args: Any, kwargs: Any) -> None:
        ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else args[0]
        q = int(ids.shape[1])
        self.kv += q
        kind = "prefill" if q > 1 else "decode"
        name = f"tracekit.step id={self.step} request=0 kind={kind} batch={int(ids.shape[0])} q_len={q} kv_len={self.kv}"
        self.ctx = self.torch.profiler.record_function(name)
        self.ctx.__enter__()
        row: dict[str, Any] = {"step": self.step, "kind": kind, "q_len": q, "kv_len": self.kv,
                               "host_start_s": time.perf_counter(),
                               "mem_allocated_bytes": int(self.torch.cuda.memory_allocated())}
        if self.events:
            row["_ev0"] = self.torch.cuda.Event(enable_timing=True)
            row["_ev0"].record()
        self.rows.append(row)

    def post(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        row = self.rows[-1]
        if self.events:
            row["_ev1"] = self.torch.cuda.Event(enable_timing=True)
            row["_ev1"].record()
        row["host_end_s"] = time.perf_counter()
        self.ctx.__exit__(None, None, None)
        self.step += 1

    def install(self, model: Any) -> list[Any]:
        return [model.register_forward_pre_hook(self.pre, with_kwargs=True),
                model.register_forward_hook(self.post, with_kwargs=True)]

    def finish(self) -> list[dict[str, Any]]:
        self.torch.cuda.synchronize()
        out = []
        for r in self.rows:
            r = dict(r)
            if "_ev0" in r:
                r["cuda_event_ms"] = float(r.pop("_ev0").elapsed_time(r.pop("_ev1")))
            out.append(r)
        return out


def record(out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**CONFIG)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.float16).eval()
    ids = torch.randint(100, 30000, (1, PROMPT), device="cuda")
    gen = dict(max_new_tokens=DECODE + 1, min_new_tokens=DECODE + 1, do_sample=False)

    with torch.no_grad():
        model.generate(ids[:, :64], max_new_tokens=4, do_sample=False)  # warm-up: kernels, cuBLAS handles
        torch.cuda.synchronize()

        # (3) without the profiler: a prefill forward timed alone, then a generate with per-step events
        pre_ms = []
        for _ in range(5):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            model(input_ids=ids, use_cache=True)
            e1.record()
            torch.cuda.synchronize()
            pre_ms.append(float(e0.elapsed_time(e1)))
        ann = StepAnnotator(torch, PROMPT, events=True)
        hooks = ann.install(model)
        t0 = time.perf_counter()
        model.generate(ids, **gen)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        for h in hooks:
            h.remove()
        steps = ann.finish()

        # (2) the profiled run
        ann = StepAnnotator(torch, PROMPT)
        hooks = ann.install(model)
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
            with torch.profiler.record_function(f"tracekit.request id=0 name=bound-check batch=1 "
                                                f"input_tokens={PROMPT} output_tokens={DECODE + 1}"):
                model.generate(ids, **gen)
            torch.cuda.synchronize()
        for h in hooks:
            h.remove()
    raw = out / "bound_trace.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(out / "bound_trace.json.gz", "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()

    dec = [s for s in steps if s["kind"] == "decode"]
    dec_ms = [s["cuda_event_ms"] for s in dec]
    host_ms = [1e3 * (b["host_start_s"] - a["host_start_s"]) for a, b in itertools.pairwise(dec)]
    result = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "model_config": {**cfg.to_dict(), "torch_dtype": "float16"},
        "prompt_tokens": PROMPT,
        "decode_steps": len(dec),
        "prefill_forward_cuda_event_ms": pre_ms,
        "generate_wall_s": wall,
        "steps": [{k: v for k, v in s.items()} for s in steps],
        "decode_step_cuda_event_ms_median": statistics.median(dec_ms) if dec_ms else None,
        "decode_step_host_ms_median": statistics.median(host_ms) if host_ms else None,
    }
    (out / "bound_timings.json").write_text(json.dumps(result, indent=2))
    size = (out / "bound_trace.json.gz").stat().st_size
    print(f"prefill {PROMPT} tok: {statistics.median(pre_ms):.2f} ms (CUDA events, median of 5); "
          f"decode step: {result['decode_step_cuda_event_ms_median']:.2f} ms events, "
          f"{result['decode_step_host_ms_median']:.2f} ms host; trace {size / 1e6:.1f} MB")


# --- offline check (tracekit installed) ----------------------------------------------


def analyze(out: Path) -> int:
    import pandas as pd

    from tracekit.analysis.inputs import AnalysisInput
    from tracekit.analysis.modelcheck import decode_check, shape_from_config
    from tracekit.analysis.pipeline import run_passes
    from tracekit.ingest import read_trace_tables
    from tracekit.store import calibration

    timings = json.loads((out / "bound_timings.json").read_text())
    tables: dict[str, Any] = dict(read_trace_tables(out / "bound_trace.json.gz"))
    tables["manifest"] = {"environment": {"gpu": timings["gpu"]}, "model": {"config": timings["model_config"]}}
    cpath = out / "ceiling.json"
    ceiling = calibration.load(cpath) if cpath.is_file() and "--datasheet" not in sys.argv else calibration.resolve(
        timings["gpu"], prefer_measured=False)
    tables["ceiling"] = ceiling
    t0 = time.perf_counter()
    res = run_passes(AnalysisInput.of(tables))
    print(f"passes: {time.perf_counter() - t0:.1f} s; ceiling: {ceiling.describe()}")
    if "kernel_bound" not in res:
        print("no GPU activity or no steps in the trace; warnings:", res["warnings"])
        return 1
    ph: pd.DataFrame = res["phases"]
    k: pd.DataFrame = res["kernel_bound"]
    sb: pd.DataFrame = res["step_bound"]
    cols = ["phase", "steps", "time_ns", "compute_bound_ns", "memory_bound_ns", "other_ns", "comm_ns", "memcpy_ns",
            "idle_ns", "flops", "bytes", "achieved_tflops", "achieved_tbps", "pct_peak_flops", "pct_peak_bandwidth"]
    run = ph[ph["request_id"].isna() & ph["phase"].isin(["prefill", "decode"])]
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(run[cols].to_string(index=False))
    ok = True
    for r in run.itertuples():
        s = r.compute_bound_ns + r.memory_bound_ns + r.other_ns + r.comm_ns + r.memcpy_ns + r.idle_ns
        print(f"identity {r.phase}: classes sum {s} == time_ns {r.time_ns}: {s == r.time_ns}")
        ok &= s == r.time_ns
    gemm = k[(k["kclass"] == "gemm") & (k["model"] == "shape")]
    for phase, want in (("prefill", "compute"), ("decode", "memory")):
        g = gemm[gemm["phase"] == phase]
        share = float((g["bound"] == want).mean()) if len(g) else float("nan")
        tshare = float(g.loc[g["bound"] == want, "dur_ns"].sum() / g["dur_ns"].sum()) if len(g) else float("nan")
        print(f"{phase} GEMM kernels {want}-bound: {share:.0%} of {len(g)} (by time {tshare:.0%})")
        ok &= tshare > 0.9
    dec = run[run["phase"] == "decode"].iloc[0]
    print(f"decode: idle (host-bound) {dec.idle_ns / dec.time_ns:.1%} of {dec.time_ns / 1e6:.1f} ms over "
          f"{dec.steps} steps; GPU busy {dec.gpu_busy_ns / dec.time_ns:.1%}")
    shape = shape_from_config(timings["model_config"], "float16")
    chk = decode_check(shape, sb)
    if len(chk):
        print(f"decode bytes per step: kernels {chk['bytes'].median() / 1e9:.3f} GB vs model "
              f"{chk['model_bytes'].median() / 1e9:.3f} GB (ratio median {chk['bytes_ratio'].median():.3f}, "
              f"min {chk['bytes_ratio'].min():.3f}, max {chk['bytes_ratio'].max():.3f}); FLOPs ratio "
              f"{chk['flops_ratio'].median():.3f}")
        ok &= abs(chk["bytes_ratio"].median() - 1) < 0.10
    mem = [s for s in timings["steps"] if s["kind"] == "decode"]
    if len(mem) > 2:
        import numpy as np

        slope = np.polyfit(np.arange(len(mem)), [s["mem_allocated_bytes"] for s in mem], 1)[0]
        print(f"KV bytes/token: formula {shape.kv_bytes_per_token}, allocator growth {slope:.0f} per decode step")
    print(f"kernels: {len(k)}; shape-modelled {int((k['model'] == 'shape').sum())}, class-only "
          f"{int((k['model'] == 'kernel_class').sum())}, other {int((k['bound'] == 'other').sum())}")
    print("top unmodelled kernel names:", k[k["bound"] == "other"]["name"].astype(str).str[:60].value_counts().head(5).to_dict())
    print("CHECKS", "PASS" if ok else "FAIL")
    return 0 if ok else 1


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if not args:
        print(__doc__)
        return 2
    out = Path(args[0])
    if "--analyze" in sys.argv:
        return analyze(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if "--no-calibrate" not in sys.argv:
        try:
            calibrate(out)
        except Exception as exc:  # the trace matters more: record it anyway
            print(f"calibrate failed: {type(exc).__name__}: {exc}")
    record(out)
    print(f"done in {time.perf_counter() - t0:.0f} s; files: {sorted(os.listdir(out))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
