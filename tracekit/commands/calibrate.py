"""`tracekit calibrate`: measure this GPU's copy bandwidth and matmul rate; save them as its ceiling."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.model import ceilings
from tracekit.report.text import say
from tracekit.store import calibration


@click.command("calibrate")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to save the measured ceiling (default: the per-user cache, used by analyze/report).")
@click.option("--device", type=int, default=0, show_default=True, help="CUDA device index.")
@click.option("--quick", is_flag=True, help="Smaller sizes and fewer repeats (a few seconds; less accurate).")
def command(out: Path | None, device: int, quick: bool) -> int:
    """Measure this GPU's copy bandwidth and matmul rate."""
    from tracekit.collectors.calibrate import CalibrateConfig, measure

    cfg = CalibrateConfig(device=device, copy_mib=256, matmul_n=4096, repeats=5) if quick else CalibrateConfig(device=device)
    m = measure(cfg)
    ceiling = ceilings.measured_ceiling(m["gpu"], m)
    path = calibration.save_measured(ceiling, out)
    say(f"GPU: {m['gpu']} (torch {m['torch']}, CUDA {m['cuda']})")
    say(f"copy (read + write): {m['copy_bytes_per_s'] / 1e12:.2f} TB/s")
    ds = ceilings.datasheet(m["gpu"])
    for k, v in m["matmul_flops_per_s"].items():
        ref = ds.flops(k) if ds else None
        pct = f" ({100 * v / ref:.0f}% of datasheet {ref / 1e12:.0f})" if ref else ""
        say(f"matmul {k} n={m['matmul_n']}: {v / 1e12:.1f} TFLOP/s{pct}")
    if ds:
        say(f"datasheet bandwidth {ds.peak_bytes_per_s / 1e12:.2f} TB/s: measured is "
                   f"{100 * m['copy_bytes_per_s'] / ds.peak_bytes_per_s:.0f}%")
    say(f"saved: {path}")
    return 0
