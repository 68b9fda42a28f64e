"""Serving engines' KV-cache writes and fused norms (vLLM, SGLang, aiter custom ops), by registered name.

- KV-cache writes (vLLM reshape_and_cache(_flash), SGLang store_cache): the new tokens' K and V read
  once and written once into the cache at the cache's width (an fp8 cache is written at 1 B), plus
  the slot indices; the rest of the cache is untouched, so its size never counts.
- aiter's fused add + RMSNorm: TraceLens's RMSNorm model (rows·(2C + 2) + 2·numel FLOPs) plus the
  residual add (1 FLOP per element), reading input and residual and writing output and residual.

SGLang's shape profiler wraps each op it times in ``sglang_profiler::<name>_<n>``; ``canonical_name``
drops the counter so the wrapper and the op share one model.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tracekit.analysis.optensor import COPY, REDUCTION, OpCost, Tensor, dtype_key, get

_COUNTER = re.compile(r"^(sglang_profiler::\w+?)_\d+$")


def canonical_name(name: str) -> str:
    """'sglang_profiler::attention_paged_attention_ragged_100' -> 'sglang_profiler::attention_paged_attention_ragged'."""
    m = _COUNTER.match(name)
    return m.group(1) if m else name


def kv_cache_write(ts: list[Tensor | None]) -> OpCost | None:
    """reshape_and_cache(_flash)(key [T, Hkv, D], value [T, Hkv, D], key_cache, value_cache, slot_mapping [T], ...)
    and store_cache(k [T, Hkv·D], v, k_cache, v_cache, loc [T], ...): K and V read, as many elements
    written at the caches' width, the slots read."""
    k, v, kc, vc, slots = get(ts, 0), get(ts, 1), get(ts, 2), get(ts, 3), get(ts, 4)
    if k is None or v is None:
        return None
    written = k.numel * (kc.itemsize if kc is not None else k.itemsize) + v.numel * (
        vc.itemsize if vc is not None else v.itemsize)
    return OpCost(0.0, float(k.nbytes + v.nbytes + written + (slots.nbytes if slots is not None else 0)), COPY,
                  dtype_key(k), False)


def rmsnorm_with_add(ts: list[Tensor | None]) -> OpCost | None:
    """aiter::rmsnorm2d_fwd_with_add(_ck) / aiter::add_rmsnorm(out [R, C], input [R, C], residual_in [R, C], residual_out [R, C],
    weight [C], eps, ...): residual_out = input + residual_in, out = RMSNorm(residual_out) · weight.
    flops = R·(2C + 2) + 2·R·C + R·C; bytes = input, residual_in and weight read, out and residual_out written."""
    out, x, r_in, r_out, w = get(ts, 0), get(ts, 1), get(ts, 2), get(ts, 3), get(ts, 4)
    if out is None or x is None or r_in is None or w is None or not x.shape:
        return None
    c = w.numel
    rows = x.numel // c if c else 0
    flops = rows * (2 * c + 2) + 2 * x.numel + x.numel
    nbytes = x.nbytes + r_in.nbytes + w.nbytes + out.nbytes + (r_out.nbytes if r_out is not None else r_in.nbytes)
    return OpCost(float(flops), float(nbytes), REDUCTION, dtype_key(x), False)


MODELS: dict[str, Callable[..., OpCost | None]] = {
    "_C_cache_ops::reshape_and_cache": kv_cache_write,
    "_C_cache_ops::reshape_and_cache_flash": kv_cache_write,
    "sglang::store_cache": kv_cache_write,
    "sgl_kernel::store_kv_cache": kv_cache_write,
    "aiter::rmsnorm2d_fwd_with_add": rmsnorm_with_add,
    "aiter::add_rmsnorm": rmsnorm_with_add,
    "aiter::rmsnorm2d_fwd_with_add_ck": rmsnorm_with_add,
}
