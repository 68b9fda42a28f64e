"""scripts/gpu/quant.py's --cpu dry run: record, analyse and tabulate, with a row for what cannot run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

pytest.importorskip("torchao")


@pytest.mark.slow
def test_dry_run_tabulates_fp16_and_names_why_int4_cannot_run(tmp_path: Path) -> None:
    out = tmp_path / "q"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu" / "quant.py"), str(out), "--cpu",
                           "--quants", "none,int4", "--batches", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads((out / "quant.json").read_text())
    ok, bad = res["cells"]
    assert ok["quant"] == "none" and ok["tpot_ms"] > 0
    cfg = json.loads((Path(ok["run"]) / "run.json").read_text())["model"]["config"]
    per_token = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * (cfg["hidden_size"] // cfg["num_attention_heads"]) * 4
    assert ok["kv_formula_bytes_per_token"] == per_token == ok["kv_measured_bytes_per_token"]["cache_tensors"]
    assert ok["config_bytes_per_step"] > ok["config_weights_bytes"] > 0
    assert bad["quant"] == "int4" and bad["error"].startswith("--quant int4: torchao ")
    lines = proc.stdout.strip().splitlines()
    assert lines[-3].startswith("quant ") and lines[-1].startswith("int4 ") and "does not run on cpu" in lines[-1]
