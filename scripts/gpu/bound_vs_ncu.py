"""Validates the latency class against Nsight Compute on the H200: runs benchmarks/bound_vs_ncu.py (OUTDIR [--cpu])."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.argv[0] = str(Path(__file__).resolve().parents[2] / "benchmarks" / "bound_vs_ncu.py")
    runpy.run_path(sys.argv[0], run_name="__main__")
