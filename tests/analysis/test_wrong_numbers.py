"""Numbers that were once wrong without any test noticing: each expected value is worked out by hand."""

from __future__ import annotations

import json

from tracekit.analysis import steps
from tracekit.analysis.opmodels import op_cost


def test_sdpa_bytes_include_the_attention_mask() -> None:
    # q, k, v: [batch 1, heads 32, len 128, dim 64] fp16; an additive fp16 mask [1, 1, 128, 128]
    qkv = [1, 32, 128, 64]
    dims = [qkv, qkv, qkv, [1, 1, 128, 128]]
    types = ["c10::Half"] * 4
    with_mask = op_cost("aten::scaled_dot_product_attention", json.dumps(dims), json.dumps(types))
    no_mask = op_cost("aten::scaled_dot_product_attention", json.dumps(dims[:3]), json.dumps(types[:3]))
    assert with_mask is not None and no_mask is not None
    tensor = 1 * 32 * 128 * 64 * 2  # bytes of q (= k = v = out)
    assert no_mask.bytes == 4 * tensor  # read q, k, v; write out
    assert with_mask.bytes == 4 * tensor + 128 * 128 * 2  # and read the mask once


def _chain(kinds_q: list[tuple[str, int]], attn_kv: list[int | None]) -> list[dict]:
    rows = [{"kind": k, "q_len": q, "kv_len": kv} for (k, q), kv in zip(kinds_q, attn_kv, strict=True)]
    steps._fill_kv(rows)
    return rows


def test_kv_length_grows_from_the_prompt_when_the_cache_is_static() -> None:
    # A static cache reports its full size (4096) to attention every step: the KV length is counted
    # instead: 100 prompt tokens, then one more per decode step.
    rows = _chain([("prefill", 100), ("decode", 1), ("decode", 1)], [4096, 4096, 4096])
    assert [r["kv_len"] for r in rows] == [100, 101, 102]


def test_kv_length_of_a_window_that_starts_mid_decode_with_a_static_cache() -> None:
    # A trace window that opens on decode steps has no prefill to count from: the first step's
    # attention length is the only witness, and each later step adds its query tokens to it.
    rows = _chain([("decode", 1), ("decode", 1), ("decode", 1)], [4096, 4096, 4096])
    assert [r["kv_len"] for r in rows] == [4096, 4097, 4098]


def test_kv_length_follows_attention_when_the_cache_grows() -> None:
    # A dynamic cache: attention's key length grows by each step's query tokens; it is taken as is.
    rows = _chain([("decode", 1), ("decode", 1)], [57, 58])
    assert [r["kv_len"] for r in rows] == [57, 58]
    rows = _chain([("prefill", 56), ("decode", 1)], [56, 57])
    assert [r["kv_len"] for r in rows] == [56, 57]
