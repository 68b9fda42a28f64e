"""Where HBM goes: the weights / KV cache / transient split, KV bytes per token, and capacity.

Pure functions over numbers and the ``step_memory`` table (no torch):

* ``kv_bytes_per_token``: the formula, 2 (K and V) x layers x KV heads x head dim x bytes per
  element (TinyLlama-1.1B fp16: 2 x 22 x 4 x 64 x 2 = 22,528 B).
* ``split``: transient = allocated - weights - kv_cache, so the three parts add up to allocated
  exactly (a negative transient means the weights or KV were over-counted, and is kept, not hidden).
* ``measured_kv_per_token``: the same quantity from the table, two ways: the cache tensors' growth
  and the allocator's growth between consecutive decode steps, per sequence.
* ``capacity``: how many tokens of KV fit in the HBM left after weights and the working set, and
  so how many concurrent requests of each shape.
* ``peaks``: the highest allocated bytes per phase and the step where it happens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from tracekit.analysis import modelcheck

# Request shapes (prompt, answer) a capacity line counts: record's published shapes.
CAPACITY_SHAPES: dict[str, tuple[int, int]] = {"chat": (128, 128), "rag": (1205, 60), "creative": (25, 500)}
TORCH_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8": "float8_e4m3fn"}


def kv_bytes_per_token(config: Mapping[str, Any], dtype: str) -> int:
    """2 x layers x KV heads x head dim x bytes per element of ``dtype`` (fp32, fp16, bf16, fp8)."""
    return modelcheck.kv_bytes_per_token(config, TORCH_DTYPE[dtype])


def split(allocated: int | None, weights: int | None, kv_cache: int | None) -> int | None:
    """Transient bytes: allocated - weights - kv_cache (None when any part is unknown)."""
    if allocated is None or weights is None or kv_cache is None:
        return None
    return int(allocated) - int(weights) - int(kv_cache)


def measured_kv_per_token(memory: pd.DataFrame) -> dict[str, float | None]:
    """Median KV bytes per cached token per sequence from consecutive decode steps of one request.

    ``cache_tensors``: growth of kv_cache_bytes (only where kv_source is cache-tensors);
    ``allocator``: growth of allocated_bytes. Each is Δbytes / (Δkv_len x batch) over pairs of
    consecutive decode steps of the same request whose kv_len grew; None without such pairs.
    """
    out: dict[str, float | None] = {"cache_tensors": None, "allocator": None}
    if memory is None or len(memory) == 0:
        return out
    d = memory[memory["kind"].astype(str) == "decode"].sort_values(["request_id", "step_id"])
    for key, col in (("cache_tensors", "kv_cache_bytes"), ("allocator", "allocated_bytes")):
        src = d if key == "allocator" else d[d["kv_source"].astype(str) == "cache-tensors"]
        src = src[src[col].notna()]
        if len(src) < 2:
            continue
        g = src.groupby("request_id", sort=False)
        dtok = g["kv_len"].diff() * src["batch"]
        dbytes = g[col].diff()
        ok = dtok > 0
        if ok.any():
            out[key] = float((dbytes[ok].astype(float) / dtok[ok].astype(float)).median())
    return out


@dataclass(frozen=True)
class Capacity:
    """KV tokens that fit, and concurrent requests of each shape (``requests``: name -> count)."""

    total_bytes: int
    weights_bytes: int
    working_bytes: int  # the largest transient seen (a step's working set beyond weights and KV)
    kv_bytes_per_token: int
    kv_tokens: int
    requests: dict[str, int]


def capacity(total_bytes: int, weights_bytes: int, working_bytes: int, kv_per_token: int,
             shapes: Mapping[str, tuple[int, int]] = CAPACITY_SHAPES) -> Capacity:
    """Tokens of KV in (total - weights - working) and whole requests of each shape (prompt + answer
    tokens each, KV held for the whole request). Negative room gives 0 tokens."""
    room = max(int(total_bytes) - int(weights_bytes) - max(int(working_bytes), 0), 0)
    tokens = room // kv_per_token if kv_per_token > 0 else 0
    reqs = {name: tokens // (i + o) for name, (i, o) in shapes.items()}
    return Capacity(int(total_bytes), int(weights_bytes), int(working_bytes), int(kv_per_token), int(tokens), reqs)


def peaks(memory: pd.DataFrame) -> pd.DataFrame:
    """Per phase kind: the highest peak_allocated_bytes, the step where it happens, and that step's
    weights / kv_cache / transient split. Columns: kind, step_id, kv_len, peak_allocated_bytes,
    weights_bytes, kv_cache_bytes, peak_transient_bytes. Empty when no step has a peak."""
    cols = ["kind", "step_id", "kv_len", "peak_allocated_bytes", "weights_bytes", "kv_cache_bytes",
            "peak_transient_bytes"]
    if memory is None or len(memory) == 0 or memory["peak_allocated_bytes"].isna().all():
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    m = memory[memory["peak_allocated_bytes"].notna()].copy()
    m["kind"] = m["kind"].astype(str)
    idx = m.groupby("kind", sort=True)["peak_allocated_bytes"].idxmax()
    return m.loc[idx, cols].reset_index(drop=True)
