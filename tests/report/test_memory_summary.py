"""The memory lines of record's summary and of tracekit report, from run.json and step_memory."""

from __future__ import annotations

import pandas as pd

from tracekit.report.memory_summary import memory_text

GIB = 1 << 30


def _table() -> pd.DataFrame:
    w, per = 2_200_000_000, 22_528
    rows = []
    for i, kv_len in enumerate((128, 129, 130)):
        kv = kv_len * per
        alloc = w + kv + 1_000_000
        peak = alloc + (6_000_000 if i == 0 else 500_000)
        rows.append(dict(step_id=i, request_id=0, kind="prefill" if i == 0 else "decode", batch=1, kv_len=kv_len,
                         allocated_bytes=alloc, peak_allocated_bytes=peak, weights_bytes=w, kv_cache_bytes=kv,
                         peak_transient_bytes=peak - w - kv, kv_source="cache-tensors"))
    return pd.DataFrame(rows)


def test_gpu_run_gets_kv_per_token_peaks_and_capacity() -> None:
    manifest = {"memory": {"weights_bytes": 2_200_000_000, "kv_bytes_per_token_formula": 22_528,
                           "source": "cuda caching allocator", "total_bytes": 140 * GIB}}
    lines = [x.strip() for x in memory_text(manifest, _table())]
    assert lines[1] == "KV per token    formula 22,528 B, cache tensors 22,528 B, allocator growth 22,528 B"
    assert any(x.startswith("peak prefill") and "at step 0 (kv 128)" in x for x in lines)
    tokens = (140 * GIB - 2_200_000_000 - (1_000_000 + 6_000_000)) // 22_528
    cap = next(x for x in lines if x.startswith("capacity"))
    assert f"{tokens:,} tokens of KV" in cap
    assert f"chat {tokens // 256:,}, rag {tokens // 1265:,}, creative {tokens // 525:,}" in cap


def test_no_memory_section_no_lines_and_cpu_says_why() -> None:
    assert memory_text({}, None) == []
    cpu = {"memory": {"weights_bytes": 7_000_000, "kv_bytes_per_token_formula": 2_048, "source": "tensors only",
                      "reason": "device is cpu: no caching allocator statistics"}}
    lines = [x.strip() for x in memory_text(cpu, pd.DataFrame())]
    assert lines[-1] == "capacity        n/a (device is cpu: no caching allocator statistics)"
