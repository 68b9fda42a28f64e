"""Validate the NVML/GPM sampler against known loads on a GPU (written for the H200).

    python3 scripts/gpu/gpm.py OUT_DIR [--device 0] [--scale 1.0]

Runs tracekit's NvmlSampler (a child process: 100 Hz basic NVML; 10 Hz GPM, energy and PCIe) while
the GPU does, in turn:

  idle          nothing (2 s)
  copy          a 2 GiB device-to-device copy loop: DRAM bandwidth utilisation must read high
  bf16_matmul   8192^3 bf16 matmuls: tensor utilisation must read high
  tf32_matmul   8192^3 fp32 matmuls with TF32 allowed (tensor cores)
  fp32_matmul   8192^3 fp32 matmuls with TF32 off (plain FP32 pipes: fp32_util)
  fp16_axpy     an fp16 elementwise loop (non-tensor FP16 math, memory-bound)

Each load is timed with CUDA events, which give achieved TB/s or TFLOP/s
independently of NVML. Writes OUT_DIR/gpm_validate.json (per-phase mean of
every metric, the independent numbers, the sampler's status, the cost of each
NVML call) and OUT_DIR/counters.parquet (every sample), and prints a table.
About 40 s on an H200, most of it the loads and CUDA start-up. Needs torch with CUDA and nvidia-ml-py.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

# Datasheet peaks (H200 SXM, dense), for the "% of peak" column only.
PEAK = {"hbm_tbps": 4.8, "bf16_tflops": 989.0, "tf32_tflops": 494.0, "fp32_tflops": 67.0}


def import_sampler() -> Any:
    """NvmlSampler from an installed tracekit, or straight from this checkout."""
    try:
        from tracekit.collectors.nvml import NvmlSampler
    except ImportError:
        sys.path.insert(0, str(REPO))
        import tracekit

        # pyproject maps collectors/ to tracekit.collectors; without an install, do the same by hand.
        tracekit.__path__.append(str(REPO))
        from tracekit.collectors.nvml import NvmlSampler
    return NvmlSampler


def time_nvml_calls(device_index: int) -> dict[str, Any]:
    """Cost of each NVML call from Python (pynvml), in µs: what one sampler tick is made of."""
    import pynvml

    from tracekit.collectors.gpm import GpmReader
    from tracekit.collectors.nvml import FAST_READERS, SLOW_READERS

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        out: dict[str, Any] = {}
        for reader, n in [(r, 2000) for r in FAST_READERS] + [(r, 5) for r in SLOW_READERS]:
            try:
                reader.read(pynvml, h)
                t0 = time.perf_counter_ns()
                for _ in range(n):
                    reader.read(pynvml, h)
                out[reader.key] = round((time.perf_counter_ns() - t0) / n / 1e3, 2)
            except Exception as exc:
                out[reader.key] = f"failed: {exc}"
        gpm = GpmReader(pynvml, h)
        if gpm.open():
            gpm.read()
            times = []
            for _ in range(5):
                time.sleep(0.1)
                t0 = time.perf_counter_ns()
                gpm.read()
                times.append(time.perf_counter_ns() - t0)
            gpm.close()
            out["gpm_read"] = round(statistics.median(times) / 1e3, 2)
        return out
    finally:
        pynvml.nvmlShutdown()


def run_load(torch: Any, body: Callable[[], object], seconds: float) -> tuple[int, float, int, int]:
    """Run body() repeatedly for about `seconds`; returns (iterations, CUDA-event seconds, t0_ns, t1_ns)."""
    body()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        body()
    end.record()
    end.synchronize()
    per_iter = start.elapsed_time(end) / 1e3 / 3
    iters = max(3, int(seconds / per_iter))
    torch.cuda.synchronize()
    t0 = time.time_ns()
    start.record()
    for _ in range(iters):
        body()
    end.record()
    end.synchronize()
    t1 = time.time_ns()
    return iters, start.elapsed_time(end) / 1e3, t0, t1


def phase_means(rows: list[dict[str, Any]], t0: int, t1: int, gpm_interval_ns: int) -> dict[str, Any]:
    """Mean of each metric over the samples that describe only this phase.

    NVML utilisation averages over its own trailing window (up to ~1/6 s), so
    basic metrics skip the first 200 ms. GPM values are stamped at the start of
    the 100 ms interval they cover: keep those whose whole interval lies inside.
    """
    settle = 200_000_000
    by: dict[str, list[float]] = {}
    units: dict[str, str] = {}
    for r in rows:
        ts = r["ts_ns"]
        if r["source"] == "gpm":
            inside = t0 <= ts and ts + gpm_interval_ns <= t1
        else:
            inside = t0 + settle <= ts <= t1
        if inside:
            by.setdefault(r["metric"], []).append(r["value"])
            units[r["metric"]] = r["unit"]
    out: dict[str, Any] = {}
    for m, vals in sorted(by.items()):
        out[m] = {
            "mean": statistics.fmean(vals),
            "min": min(vals),
            "max": max(vals),
            "n": len(vals),
            "unit": units[m],
        }
    # Energy: the counter's difference over the phase, next to mean power × time.
    energy = sorted(
        (r["ts_ns"], r["value"]) for r in rows if r["metric"] == "energy" and t0 <= r["ts_ns"] <= t1
    )
    if len(energy) >= 2:
        out["energy_delta"] = {
            "mean": energy[-1][1] - energy[0][1],
            "n": len(energy),
            "unit": "J",
            "seconds": (energy[-1][0] - energy[0][0]) / 1e9,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every phase's duration")
    args = ap.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)

    import torch

    if not torch.cuda.is_available():
        print("gpm_validate: no CUDA device", file=sys.stderr)
        return 1
    NvmlSampler = import_sampler()
    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    s = args.scale

    from tracekit.collectors.nvml import nvml_index_for_torch_device

    call_us = time_nvml_calls(nvml_index_for_torch_device(args.device))

    gib = 2**30
    src = torch.empty(2 * gib, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    n = 8192
    a16 = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b16 = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    c16 = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    a32 = torch.randn(n, n, device=dev, dtype=torch.float32)
    b32 = torch.randn(n, n, device=dev, dtype=torch.float32)
    c32 = torch.empty(n, n, device=dev, dtype=torch.float32)
    x = torch.randn(256 * 2**20, device=dev, dtype=torch.float16)  # 512 MiB
    y = torch.randn_like(x)
    torch.cuda.synchronize()

    def set_tf32(on: bool) -> None:
        torch.backends.cuda.matmul.allow_tf32 = on

    # name, body, seconds, (work per iteration, what it is)
    loads: list[tuple[str, Callable[[], object] | None, float, float, str]] = [
        ("idle", None, 2.0, 0.0, ""),
        ("copy", lambda: dst.copy_(src), 3.0, 2.0 * src.numel(), "bytes"),  # read + write
        ("bf16_matmul", lambda: torch.matmul(a16, b16, out=c16), 3.0, 2.0 * n**3, "flops"),
        ("tf32_matmul", lambda: torch.matmul(a32, b32, out=c32), 2.0, 2.0 * n**3, "flops"),
        ("fp32_matmul", lambda: torch.matmul(a32, b32, out=c32), 3.0, 2.0 * n**3, "flops"),
        ("fp16_axpy", lambda: y.add_(x, alpha=0.5), 2.0, 3.0 * x.numel() * 2, "bytes"),  # read x, y; write y
    ]
    phases: dict[str, dict[str, Any]] = {}
    # --device is torch's index; the sampler maps it to NVML's through CUDA_VISIBLE_DEVICES.
    sampler = NvmlSampler.for_torch_device(args.device, interval_s=0.01, gpm_interval_s=0.1)
    sampler.start()
    try:
        time.sleep(0.3)
        for name, body, seconds, work, kind in loads:
            set_tf32(name == "tf32_matmul")
            if body is None:
                t0 = time.time_ns()
                time.sleep(seconds * s)
                t1 = time.time_ns()
                phases[name] = {"t0_ns": t0, "t1_ns": t1, "seconds": (t1 - t0) / 1e9, "independent": {}}
            else:
                iters, secs, t0, t1 = run_load(torch, body, seconds * s)
                ind: dict[str, Any] = {"iterations": iters, "cuda_event_s": secs}
                if kind == "bytes":
                    ind["achieved_tbps"] = work * iters / secs / 1e12
                    ind["pct_of_peak"] = 100 * ind["achieved_tbps"] / PEAK["hbm_tbps"]
                else:
                    ind["achieved_tflops"] = work * iters / secs / 1e12
                    peak = PEAK[
                        {"bf16_matmul": "bf16_tflops", "tf32_matmul": "tf32_tflops"}.get(name, "fp32_tflops")
                    ]
                    ind["pct_of_peak"] = 100 * ind["achieved_tflops"] / peak
                phases[name] = {"t0_ns": t0, "t1_ns": t1, "seconds": (t1 - t0) / 1e9, "independent": ind}
            time.sleep(0.3)  # let the counters' windows drain between loads
    finally:
        set_tf32(False)
        sampler.stop()

    table = sampler.counters()
    rows = table.to_pylist()
    for ph in phases.values():
        ph["metrics"] = phase_means(rows, ph["t0_ns"], ph["t1_ns"], int(0.1e9))
    import pyarrow.parquet as pq

    pq.write_table(table, args.out_dir / "counters.parquet")
    result = {
        "device": torch.cuda.get_device_name(dev),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "datasheet_peaks": PEAK,
        "nvml_call_us": call_us,
        "status": sampler.status(),
        "phases": phases,
    }
    (args.out_dir / "gpm_validate.json").write_text(json.dumps(result, indent=1, default=str))

    metrics = sorted({m for ph in phases.values() for m in ph["metrics"]})
    names = list(phases)
    print(f"{'metric':22s}" + "".join(f"{p:>13s}" for p in names))
    for m in metrics:
        unit = next(ph["metrics"][m]["unit"] for ph in phases.values() if m in ph["metrics"])
        cells = "".join(
            f"{phases[p]['metrics'][m]['mean']:13.4g}" if m in phases[p]["metrics"] else f"{'-':>13s}"
            for p in names
        )
        print(f"{m + ' (' + unit + ')':22s}{cells}")
    for key in ("achieved_tbps", "achieved_tflops", "pct_of_peak"):
        cells = "".join(
            f"{phases[p]['independent'][key]:13.4g}" if key in phases[p]["independent"] else f"{'-':>13s}"
            for p in names
        )
        print(f"{'cuda events: ' + key:22s}{cells}")
    st = result["status"]
    print(
        f"sampler ({st.get('mode')}, pid {st.get('pid')}): {st.get('device_name')} driver {st.get('driver_version')}; gpm_supported={st['gpm_supported']} "
        f"({st.get('gpm_reason')}); ticks={st['ticks']} rate={st.get('rate_hz')} Hz "
        f"tick mean/p99={st.get('tick_us_mean')}/{st.get('tick_us_p99')} µs "
        f"(cpu {st.get('tick_cpu_us_mean')} µs); slow tick {st.get('slow_tick_us_mean')} µs; failed={st['metrics_failed']} "
        f"gpm_failed={st['gpm_metrics_failed']}"
    )
    print(f"nvml call µs: {call_us}")
    print(f"wrote {args.out_dir / 'gpm_validate.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
