#!/usr/bin/env python3
"""Validate `tracekit record` on a GPU: its TTFT/TPOT against an independent measurement.

Usage (on the GPU machine, from the repository root):

    python3 scripts/device/validate_record.py OUT_DIR

For shapes smoke and chat with the tinyllama-1.1b preset in fp16 it
  1. runs `tracekit record` in this process (the CLI's own code path),
  2. measures TTFT/TPOT independently in the same process, on a model built the
     same way: (a) synchronised wall-clock timers around plain `model.generate`
     calls (TTFT = generate with 1 new token; e2e = generate with N new tokens);
     (b) CUDA events around a hand-written prefill + decode loop (the model's
     forward passes only, no generate overhead: a lower bound),
  3. writes OUT_DIR/validate_record.json (both measurements, the ratios, pass/fail
     at the 5% target) and OUT_DIR/runs/<shape>/ with run.json, tables/ and a
     trace trimmed to a few steps (<= 2 MB, for tests/fixtures/).
Runs in about 1-3 minutes on an H200. Full run directories stay in a temp dir.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # runnable without installing tracekit
    sys.path.insert(0, str(REPO))

SHAPES = {"smoke": 3, "chat": 1}  # shape -> recorded requests (a chat trace is hundreds of MB)
INDEPENDENT_REPS = 3
TARGET_PCT = 5.0
FIXTURE_LIMIT = 2 * 1024 * 1024


def _import_tracekit() -> Any:
    try:
        import tracekit.collectors
    except ImportError:
        # Not installed: map the package-dir layout by hand (collectors/ -> tracekit.collectors).
        import importlib.util

        import tracekit

        for sub in ("collectors", "analysis"):
            spec = importlib.util.spec_from_file_location(
                f"tracekit.{sub}", REPO / sub / "__init__.py", submodule_search_locations=[str(REPO / sub)]
            )
            assert spec is not None and spec.loader is not None
            mod = importlib.util.module_from_spec(spec)
            sys.modules[f"tracekit.{sub}"] = mod
            spec.loader.exec_module(mod)
            setattr(tracekit, sub, mod)
    import tracekit

    return tracekit


def independent(cfg: Any, model: Any, prompts: list[Any]) -> dict[str, Any]:
    import torch
    from tracekit.collectors import workload as wl

    def timed_generate(prompt: Any, n: int) -> float:
        kw = wl.generate_kwargs(cfg, prompt)
        kw["min_new_tokens"] = kw["max_new_tokens"] = n
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        model.generate(**kw)
        torch.cuda.synchronize()
        return float(time.perf_counter_ns() - t0)

    n = cfg.output_tokens
    ttft, e2e = [], []
    for p in prompts:
        ttft.append(timed_generate(p, 1))
        e2e.append(timed_generate(p, n))
    tpot = [(e - t) / (n - 1) for e, t in zip(e2e, ttft, strict=True)]

    # (b) CUDA events around the forward passes alone.
    fwd_prefill, fwd_decode = [], []
    with torch.no_grad():
        for p in prompts:
            start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            start.record()
            out = model(input_ids=p, use_cache=True)
            tok = out.logits[:, -1:].argmax(-1)
            mid.record()
            past = out.past_key_values
            for _ in range(n - 1):
                out = model(input_ids=tok, past_key_values=past, use_cache=True)
                past = out.past_key_values
                tok = out.logits[:, -1:].argmax(-1)
            end.record()
            torch.cuda.synchronize()
            fwd_prefill.append(start.elapsed_time(mid) * 1e6)
            fwd_decode.append(mid.elapsed_time(end) * 1e6 / max(1, n - 1))
    return {
        "method_a": "synchronised perf_counter around model.generate (1 token for TTFT, N for e2e)",
        "ttft_ns": statistics.median(ttft),
        "tpot_ns": statistics.median(tpot),
        "e2e_ns": statistics.median(e2e),
        "ttft_ns_all": ttft,
        "tpot_ns_all": tpot,
        "method_b": "CUDA events around a hand-written prefill + decode forward loop (no generate overhead)",
        "forward_prefill_ns": statistics.median(fwd_prefill),
        "forward_decode_ns_per_token": statistics.median(fwd_decode),
    }


def trim_run(src: Path, dst: Path, with_trace: bool) -> dict[str, Any]:
    from tracekit import chrome_trace

    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src / "run.json", dst / "run.json")
    shutil.copytree(src / "tables", dst / "tables", dirs_exist_ok=True)
    info: dict[str, Any] = {"full_trace_bytes": (src / "trace.json.gz").stat().st_size}
    if not with_trace:  # parsing a chat trace whole costs GBs and seconds: fixtures come from smoke
        return info
    data = chrome_trace.load(src / "trace.json.gz")
    for last in (2, 1, 0):  # steps 0..last of the first request: prefill + a few decodes
        small = chrome_trace.trim(data, 0, last)
        chrome_trace.write(dst / "trace.json.gz", small)
        size = (dst / "trace.json.gz").stat().st_size
        if size <= FIXTURE_LIMIT:
            info.update(
                trimmed_steps=f"0..{last}", trimmed_bytes=size, trimmed_events=len(small["traceEvents"])
            )
            break
    return info


def main(out_dir: str) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _import_tracekit()
    import torch
    from tracekit.collectors import presets
    from tracekit.collectors import workload as wl

    from tracekit.cli import main as cli_main
    from tracekit.rundir import RunDir

    if not torch.cuda.is_available():
        print("validate_record: no CUDA device; nothing to validate")
        return 1
    work = Path(tempfile.mkdtemp(prefix="tracekit-validate-"))
    report: dict[str, Any] = {"target_pct": TARGET_PCT, "gpu": torch.cuda.get_device_name(0), "shapes": {}}
    summary = []
    for shape, n_req in SHAPES.items():
        run_path = work / shape
        t0 = time.perf_counter()
        argv = ["record", "--model", "tinyllama-1.1b", "--dtype", "fp16", "--shape", shape]
        argv += ["--requests", str(n_req), "--out", str(run_path), "--force", "-q"]
        rc = cli_main(argv)
        wall = time.perf_counter() - t0
        entry: dict[str, Any] = {"command": "tracekit " + " ".join(argv), "rc": rc, "wall_s": round(wall, 1)}
        if rc != 0:
            report["shapes"][shape] = entry
            summary.append(f"{shape}: tracekit record failed rc={rc}")
            continue
        m = RunDir.open(run_path).read_manifest()
        unprof = m["timings"]["unprofiled"]["aggregate"]
        prof = m["timings"]["profiled"]["aggregate"]
        entry.update(
            tracekit_unprofiled=unprof,
            tracekit_profiled=prof,
            profiler_overhead=m["timings"].get("profiler_overhead"),
            nvml=m.get("nvml"),
            clock=m.get("clock"),
            warnings=m.get("warnings"),
        )
        # Independent measurement: the same model build, same prompts (same seed).
        sp = presets.SHAPES[shape]
        cfg = wl.WorkloadConfig(
            model=presets.resolve_model("tinyllama-1.1b"),
            device="cuda",
            dtype="fp16",
            shape=shape,
            input_tokens=sp.input_tokens,
            output_tokens=sp.output_tokens,
        )
        model, _ = wl.build_model(cfg)
        prompts = wl.make_prompts(cfg, int(model.config.vocab_size), INDEPENDENT_REPS)
        model.generate(**wl.generate_kwargs(cfg, prompts[0]))  # warm-up
        ind = independent(cfg, model, prompts)
        del model
        torch.cuda.empty_cache()
        entry["independent"] = ind
        ratios = {}
        for key in ("ttft_ns", "tpot_ns"):
            ratios[key] = 100.0 * (unprof[key] - ind[key]) / ind[key]
        entry["diff_pct_unprofiled_vs_independent"] = ratios
        entry["within_target"] = all(abs(v) <= TARGET_PCT for v in ratios.values())
        entry["fixture"] = trim_run(run_path, out / "runs" / shape, with_trace=shape == "smoke")
        report["shapes"][shape] = entry
        summary.append(
            f"{shape}: TTFT {unprof['ttft_ns'] / 1e6:.2f} ms (indep {ind['ttft_ns'] / 1e6:.2f}, {ratios['ttft_ns']:+.1f}%), "
            f"TPOT {unprof['tpot_ns'] / 1e6:.2f} ms (indep {ind['tpot_ns'] / 1e6:.2f}, {ratios['tpot_ns']:+.1f}%), "
            f"prefill share {100 * unprof['prefill_share']:.1f}%, overhead {entry['profiler_overhead']}, "
            f"fwd-only decode {ind['forward_decode_ns_per_token'] / 1e6:.2f} ms/token, "
            f"NVML samples {(m.get('nvml') or {}).get('samples')}, wall {wall:.0f}s, "
            f"{'PASS' if entry['within_target'] else 'FAIL'}"
        )
    with open(out / "validate_record.json", "w") as fh:
        json.dump(report, fh, indent=2, default=str)
    shutil.rmtree(work, ignore_errors=True)
    print("\n".join(summary))
    print(f"wrote {out / 'validate_record.json'}")
    return 0 if all(e.get("within_target") for e in report["shapes"].values()) else 2


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
