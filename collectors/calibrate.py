"""Measure this GPU's ceilings: device-to-device copy bandwidth and dense matmul rate per dtype.

CUDA events around each repeat, after warm-up; the median of the repeats is
kept (robust to one slow launch). Copy bandwidth counts bytes read + written
(2 × size), as DRAM sees them. Sizes are large enough to leave every cache
(≥ 256 MiB per buffer) and small enough for a 16 GB GPU; whole run < 20 s.
"""

from __future__ import annotations

import datetime as _dt
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracekit.errors import TracekitError

_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "tf32": "float32"}


@dataclass(frozen=True)
class CalibrateConfig:
    copy_mib: int = 1024  # per buffer; halved until it fits
    matmul_n: int = 8192
    warmup: int = 3
    repeats: int = 10
    dtypes: tuple[str, ...] = ("bf16", "fp16", "fp32", "tf32")
    device: int = 0


def time_ms(torch: Any, fn: Callable[[], Any], warmup: int, repeats: int) -> list[float]:
    """``fn``'s GPU time per call, ms, by CUDA events: ``repeats`` calls after ``warmup`` unmeasured ones."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(float(start.elapsed_time(end)))
    return times


def measure(config: CalibrateConfig | None = None) -> dict[str, Any]:
    """Run the measurements; returns a dict for tracekit.model.ceilings.measured_ceiling."""
    cfg = config or CalibrateConfig()
    try:
        import torch
    except ImportError:
        raise TracekitError("calibrate needs torch: pip install 'tracekit-llm[record]'") from None
    if not torch.cuda.is_available():
        raise TracekitError("calibrate needs an NVIDIA GPU, and torch sees none on this machine")
    dev = torch.device("cuda", cfg.device)
    name = torch.cuda.get_device_name(dev)
    free, _ = torch.cuda.mem_get_info(dev)
    nbytes = cfg.copy_mib * 2**20
    while 2 * nbytes > free * 0.6 and nbytes > 2**26:
        nbytes //= 2
    bufs: list[Any] = [torch.empty(nbytes // 4, dtype=torch.float32, device=dev).fill_(1.0)]
    bufs.append(torch.empty_like(bufs[0]))

    def copy() -> Any:
        return bufs[1].copy_(bufs[0])

    copy_ms = time_ms(torch, copy, cfg.warmup, cfg.repeats)
    copy_bps = 2 * nbytes / (statistics.median(copy_ms) / 1e3)
    bufs.clear()  # free before the matmuls need the memory

    flops: dict[str, float] = {}
    times: dict[str, list[float]] = {}
    n = cfg.matmul_n
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for key in cfg.dtypes:
            torch.backends.cuda.matmul.allow_tf32 = key == "tf32"
            dt = getattr(torch, _DTYPES[key])
            a: Any = torch.randn(n, n, device=dev, dtype=dt)
            b: Any = torch.randn(n, n, device=dev, dtype=dt)
            c: Any = torch.empty(n, n, device=dev, dtype=dt)
            reps = cfg.repeats if key not in ("fp32",) else max(3, cfg.repeats // 2)  # fp32 is ~15× slower

            def mm(a: Any = a, b: Any = b, c: Any = c) -> Any:
                return torch.mm(a, b, out=c)

            ms = time_ms(torch, mm, cfg.warmup, reps)
            flops[key] = 2.0 * n**3 / (statistics.median(ms) / 1e3)
            times[key] = ms
            a = b = c = None
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    torch.cuda.synchronize()
    return {
        "gpu": name,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "copy_bytes_per_s": copy_bps,
        "copy_buffer_bytes": nbytes,
        "copy_ms": copy_ms,
        "matmul_flops_per_s": flops,
        "matmul_n": n,
        "matmul_ms": times,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "method": f"median of {cfg.repeats} CUDA-event-timed repeats after {cfg.warmup} warm-up; "
        "copy counts read + write; matmul 2·n³ FLOPs",
    }
