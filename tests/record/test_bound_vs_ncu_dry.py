"""benchmarks/bound_vs_ncu.py's --cpu dry run: every stage but the ncu process, end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO


@pytest.mark.slow
def test_dry_run_compares_every_cell(tmp_path: Path) -> None:
    out = tmp_path / "bvn"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bound_vs_ncu.py"), str(out), "--cpu",
                           "--modes", "eager", "--batches", "1", "--keep-traces"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads((out / "results.json").read_text())
    cells = res["cells"]
    assert {(c["phase"], c["batch"]) for c in cells} == {("prefill", 1), ("decode", 1)}
    for c in cells:
        # every kernel of the cell's step joined its counters, read back from Nsight Compute's CSV layout
        assert c["how"] == "joined" and c["kernels_compared"] == c["kernels_trace"] > 20
        assert 0 <= c["agree"] <= 1 and set(c["agree_at"]) == {"0.4", "0.5", "0.6", "0.7"}
        assert c["agree_at"]["0.6"] == pytest.approx(c["agree"])
    assert proc.stdout.strip().splitlines()[-1].startswith("cells: 2;")
    assert (out / "fixture").is_dir() and any((out / "fixture").glob("*.counters.csv"))
    # the kept trace (here gzipped) and counters compared again offline give the same table
    trace = out / "eager_tiny_b1.json"
    subprocess.run(["gzip", str(trace)], check=True)
    again = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bound_vs_ncu.py"), str(out), "--cpu",
                            "--modes", "eager", "--batches", "1", "--analyse-only"], capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    table = [ln for ln in proc.stdout.splitlines() if ln.startswith(("eager ", "cells:"))]
    assert len(table) == 3 and [ln for ln in again.stdout.splitlines() if ln.startswith(("eager ", "cells:"))] == table
