"""`tracekit record --memory` and `--quant` on the CPU, tiny preset: the step_memory table, the
memory counter tracks, the summary lines, and the one-line errors where the stack cannot quantize."""

from __future__ import annotations

import gzip
import json
import sys

import pandas as pd
import pyarrow as pa
import pytest
from helpers import need_module

from tracekit.cli import main
from tracekit.store.rundir import STATUS_COMPLETE, RunDir

need_module("torch")
need_module("transformers")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def memory_run(tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    out = tmp_path_factory.mktemp("mem") / "run"
    rc = main(["record", "--memory", "--shape", "smoke", "--output-tokens", "5", "--warmup", "0", "-q",
               "--out", str(out)])
    assert rc == 0
    return RunDir.open(out)


def test_step_memory_has_a_row_per_step_with_cache_tensor_kv(memory_run: RunDir) -> None:
    m = memory_run.read_manifest()
    assert m["status"] == STATUS_COMPLETE
    steps = pd.read_parquet(memory_run.path / "tables" / "steps.parquet")
    mem = pd.read_parquet(memory_run.path / "tables" / "step_memory.parquet")
    assert list(mem["step_id"]) == list(steps["step_id"])
    cfg = m["model"]["config"]
    per_token = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * (cfg["hidden_size"] // cfg["num_attention_heads"]) * 4
    assert m["memory"]["kv_bytes_per_token_formula"] == per_token
    # the cache's own tensors, read after each step: exactly kv_len tokens of the formula
    assert (mem["kv_source"] == "cache-tensors").all()
    assert list(mem["kv_cache_bytes"]) == [kv * per_token for kv in mem["kv_len"]]
    # weights measured once from the tensors: fp32 parameters of the tiny model plus its buffers
    # (RoPE's inv_freq: head_dim / 2 fp32 values, at most one copy per layer and one for the model)
    assert (mem["weights_bytes"] == m["memory"]["weights_bytes"]).all()
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    extra = m["memory"]["weights_bytes"] - m["model"]["parameters"] * 4
    assert 0 < extra <= (cfg["num_hidden_layers"] + 1) * head_dim // 2 * 4 and extra % (head_dim // 2 * 4) == 0
    # CPU: no caching allocator; nulls and the reason, never invented numbers
    assert mem["allocated_bytes"].isna().all() and mem["transient_bytes"].isna().all()
    assert "cpu" in m["memory"]["reason"]


def test_memory_counter_tracks_and_profiler_memory_events_in_the_trace(memory_run: RunDir) -> None:
    with gzip.open(memory_run.path / "trace.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    counters = [e for e in events if e.get("ph") == "C" and str(e.get("name", "")).startswith("memory.")]
    names = {e["name"] for e in counters}
    assert {"memory.weights (bytes)", "memory.kv_cache (bytes)"} <= names
    steps = pd.read_parquet(memory_run.path / "tables" / "steps.parquet")
    assert len([e for e in counters if e["name"] == "memory.kv_cache (bytes)"]) == len(steps)
    assert any(e.get("name") == "[memory]" for e in events)  # profile_memory's allocator events


def test_summary_has_kv_per_token_and_says_why_no_capacity(memory_run: RunDir) -> None:
    from tracekit.report.record_summary import render

    text = render(memory_run.read_manifest(), memory_run.path)
    per_token = memory_run.read_manifest()["memory"]["kv_bytes_per_token_formula"]
    assert f"KV per token    formula {per_token:,} B, cache tensors {per_token:,} B" in text
    assert "capacity        n/a (device is cpu" in text


def test_probe_table_splits_allocated_exactly() -> None:
    """weights + kv_cache + transient == allocated, row by row, with allocator numbers given."""
    import torch

    from tracekit.collectors.memory import MemoryProbe
    from tracekit.model import schema

    model = torch.nn.Linear(8, 4)
    probe = MemoryProbe(model, kv_bytes_per_token=100, hook_cache=False)
    assert probe.weights_bytes == (8 * 4 + 4) * 4
    probe.rows = {0: {"kv_cache_bytes": 3000, "allocated_bytes": 9000, "peak_allocated_bytes": 12000},
                  1: {"kv_cache_bytes": None, "allocated_bytes": 9500, "peak_allocated_bytes": 9600}}
    steps = schema.from_columns("steps", {"step_id": [0, 1], "request_id": [0, 0], "kind": ["prefill", "decode"],
                                          "batch": [2, 2], "kv_len": [15, 16], "cpu_end_ns": [5, 9]})
    t = probe.table(steps).to_pandas()
    assert list(t["kv_source"]) == ["cache-tensors", "formula"]
    assert list(t["kv_cache_bytes"]) == [3000, 16 * 2 * 100]
    assert (t["weights_bytes"] + t["kv_cache_bytes"] + t["transient_bytes"] == t["allocated_bytes"]).all()
    assert list(t["peak_transient_bytes"]) == [12000 - 144 - 3000, 9600 - 144 - 3200]
    assert probe.table(schema.empty("steps")).num_rows == 0
    assert schema.empty("step_memory").schema.equals(probe.table(schema.empty("steps")).schema)
    assert isinstance(t, pd.DataFrame) and pa is not None


def test_quant_int8_records_and_halves_the_linear_weights(tmp_path) -> None:
    pytest.importorskip("torchao")
    out = tmp_path / "q"
    rc = main(["record", "--quant", "int8", "--shape", "smoke", "--output-tokens", "3", "--warmup", "0", "-q",
               "--no-nvml", "--out", str(out)])
    assert rc == 0
    m = RunDir.open(out).read_manifest()
    q = m["model"]["quant"]
    assert m["workload"]["quant"] == "int8" and q["config"] == "Int8WeightOnlyConfig"
    # fp32 linears (4 B) become int8 (1 B) + an fp32 scale per row; the embedding stays fp32
    assert q["weights_bytes"] < q["weights_bytes_before"] / 2


def test_quant_a_device_cannot_run_is_one_line_and_no_run(tmp_path, capsys) -> None:
    pytest.importorskip("torchao")
    out = tmp_path / "q4"
    rc = main(["record", "--quant", "int4", "--device", "cpu", "--out", str(out), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert err[-1].startswith("tracekit: error: --quant int4: torchao ") and "does not run on cpu" in err[-1]
    assert not out.exists()


def test_quant_without_torchao_names_what_is_missing(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torchao", None)  # import torchao raises ImportError
    rc = main(["record", "--quant", "int8", "--device", "cpu", "--out", str(tmp_path / "x"), "-q"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert rc == 1 and "--quant int8: torchao is not installed here" in err


def test_memory_with_serve_is_a_usage_error(capsys) -> None:
    assert main(["record", "--memory", "--serve"]) == 2
    assert "--memory does not combine with --serve" in capsys.readouterr().err


def test_quant_with_serve(tmp_path) -> None:
    pytest.importorskip("torchao")
    out = tmp_path / "sq"
    rc = main(["record", "--serve", "--quant", "int8-dyn", "--requests", "2", "--shape", "smoke", "-q",
               "--out", str(out)])
    assert rc == 0
    m = RunDir.open(out).read_manifest()
    assert m["status"] == STATUS_COMPLETE and m["workload"]["quant"] == "int8-dyn"
    assert m["model"]["quant"]["config"] == "Int8DynamicActivationInt8WeightConfig"


def test_memory_with_compile_takes_kv_from_the_formula(tmp_path) -> None:
    out = tmp_path / "cm"
    rc = main(["record", "--memory", "--compile", "--shape", "smoke", "--output-tokens", "3", "--warmup", "0",
               "-q", "--out", str(out)])
    assert rc == 0
    run = RunDir.open(out)
    mem = pd.read_parquet(out / "tables" / "step_memory.parquet")
    per = run.read_manifest()["memory"]["kv_bytes_per_token_formula"]
    assert run.read_manifest()["memory"]["kv_source"] == "formula" and (mem["kv_source"] == "formula").all()
    assert list(mem["kv_cache_bytes"]) == [kv * per for kv in mem["kv_len"]] and len(mem) == 3
