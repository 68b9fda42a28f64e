#!/usr/bin/env python3
"""What a torchao-quantized linear costs per call, GPU and host, at many row counts (CUDA events).

Usage (on the GPU machine, torchao installed):

    python3 scripts/gpu/quant_gemm.py OUT_DIR [--shapes 4096x4096,11008x4096,4096x11008] [--rows 1,8,...]
    python3 scripts/gpu/quant_gemm.py OUT_DIR --cpu      # dry run: fp16 only, tiny shapes

For each weight shape (N x K; chosen to be none of the what-if check's models) and each mode of
tracekit.model.quant (none = bf16, int8, int4, fp8; quantized with the same torchao configs as
``tracekit record --quant``), one ``nn.Linear`` without bias:

  * GPU time per call at each row count M: CUDA events around 50 calls after 10 warm-up calls, the
    median of 5 such runs; the rate 2 M N K / time. The calls are queued behind a GPU sleep long
    enough for the host to issue them all, so that the events time the kernels back to back and not
    the host's dispatch (torchao's calls cost more host time than a small-M kernel takes);
  * host time per call: wall time of 200 calls at the first row count (M = 1) issued back to back (no
    sync inside), where the GPU work per call is shorter than the host's (the GPU time is printed beside).

Writes OUT_DIR/quant_gemm.json; prints one table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def build(n: int, k: int, mode: str, device: str, dtype: Any) -> Any:
    import torch

    from tracekit.model import quant as qm

    torch.manual_seed(0)
    lin = torch.nn.Linear(k, n, bias=False, device=device, dtype=dtype)
    if mode != "none":
        import torchao.quantization as tq

        spec = qm.MODES[mode]
        tq.quantize_(lin, getattr(tq, spec.config)(**dict(spec.kwargs)))
    return lin


def gpu_us(lin: Any, x: Any, host_us_per_call: float, reps: int = 50, runs: int = 5) -> float:
    """Median GPU time per call (us): each run's calls queued behind a sleep kernel that outlasts the
    host issuing them (twice ``host_us_per_call`` x reps, at least 2 ms), the events around the calls."""
    import torch

    cycles = int(max(2 * host_us_per_call * reps, 2000.0) * 1e-6 * _clock_hz(torch))
    with torch.no_grad():
        for _ in range(10):
            lin(x)
        times = []
        for _ in range(runs):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            torch.cuda._sleep(cycles)
            a.record()
            for _ in range(reps):
                lin(x)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e3 / reps)
    return statistics.median(times)


def _clock_hz(torch: Any) -> float:
    """The GPU's SM clock (Hz) for sizing the sleep: NVML's maximum, else 2 GHz (a longer sleep only costs time)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return float(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)) * 1e6
    except Exception:
        return 2e9


def host_us(lin: Any, x: Any, calls: int = 200) -> float:
    import torch

    with torch.no_grad():
        for _ in range(10):
            lin(x)
        torch.cuda.synchronize()
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(calls):
                lin(x)
            runs.append((time.perf_counter() - t0) * 1e6 / calls)
            torch.cuda.synchronize()
    return statistics.median(runs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--shapes", default="4096x4096,11008x4096,4096x11008")
    ap.add_argument("--rows", default="1,8,32,128,512,1024,2048,4096")
    ap.add_argument("--modes", default="none,int8,int4,fp8")
    ap.add_argument("--cpu", action="store_true")
    a = ap.parse_args(argv)
    import torch

    a.out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if a.cpu else "cuda"
    dtype = torch.float32 if a.cpu else torch.bfloat16
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    rows = [int(r) for r in a.rows.split(",")]
    modes = ["none"] if a.cpu else a.modes.split(",")
    if a.cpu:
        shapes, rows = [(64, 64)], [1, 8]
    out: dict[str, Any] = {"gpu": "cpu" if a.cpu else torch.cuda.get_device_name(0), "torch": torch.__version__,
                           "cases": []}
    try:
        import torchao

        out["torchao"] = torchao.__version__
    except ImportError:
        out["torchao"] = None
    print(f"{'mode':6} {'N x K':>12} {'M':>6} {'GPU us':>10} {'TFLOP/s':>8} {'host us':>8}")
    for n, k in shapes:
        for mode in modes:
            try:
                lin = build(n, k, mode, device, dtype)
            except Exception as exc:  # a mode this stack cannot run: one line, go on
                print(f"{mode:6} {n}x{k}: {type(exc).__name__}: {str(exc)[:200]}")
                out["cases"].append({"mode": mode, "n": n, "k": k, "error": f"{type(exc).__name__}: {exc}"[:300]})
                continue
            host = None
            for m in rows:
                x = torch.randn(m, k, device=device, dtype=dtype)
                try:
                    if a.cpu:
                        t0 = time.perf_counter()
                        for _ in range(20):
                            lin(x)
                        t = (time.perf_counter() - t0) * 1e6 / 20
                    else:
                        if host is None:  # at the first row count (M = 1): it sizes every sleep
                            host = host_us(lin, x)
                        t = gpu_us(lin, x, host)
                except Exception as exc:
                    print(f"{mode:6} {n}x{k} M={m}: {type(exc).__name__}: {str(exc)[:200]}")
                    out["cases"].append({"mode": mode, "n": n, "k": k, "m": m, "error": str(exc)[:300]})
                    continue
                tf = 2.0 * m * n * k / (t * 1e-6) / 1e12
                out["cases"].append({"mode": mode, "n": n, "k": k, "m": m, "gpu_us": round(t, 3),
                                     "tflops": round(tf, 2), "host_us": round(host, 2) if m == rows[0] and host else None})
                print(f"{mode:6} {f'{n}x{k}':>12} {m:6d} {t:10.2f} {tf:8.1f} "
                      f"{(f'{host:8.1f}' if m == rows[0] and host else ''):>8}", flush=True)
            del lin
            if not a.cpu:
                torch.cuda.empty_cache()
    (a.out / "quant_gemm.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
