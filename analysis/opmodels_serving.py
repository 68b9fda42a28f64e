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

from tracekit.analysis.optensor import ATTENTION, COPY, ELEMENTWISE, REDUCTION, OpCost, Tensor, dtype_key, get

_COUNTER = re.compile(r"^(sglang_profiler::\w+?|sage_fwd|sage_quant_kernel)_\d+$")


def canonical_name(name: str) -> str:
    """'sglang_profiler::attention_paged_attention_ragged_100' -> 'sglang_profiler::attention_paged_attention_ragged';
    Inductor's launches of user Triton kernels 'sage_fwd_1' -> 'sage_fwd' (the counter is the launch's)."""
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


def sage_attention(ts: list[Tensor | None]) -> OpCost | None:
    """aiter's SageAttention forward (Triton ``sage_fwd``; q int8 [B, H, Lq, D], k int8 [B, H, Lk, D], v fp8
    [B, H, Lk, Dv], their scales, ..., out [B, H, Lq, Dv]): every (query, key) pair, QK^T and PV
    (flops = 2·B·H·Lq·Lk·(D + Dv); the op carries no causal flag: non-causal, what diffusion models run);
    bytes = every tensor argument once (q, k, v and scales read, out written)."""
    q, k, v = get(ts, 0), get(ts, 1), get(ts, 2)
    if q is None or k is None or v is None or len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4:
        return None
    b, h, lq, d = q.shape
    lk, dv = k.shape[2], v.shape[3]
    nbytes = sum(t.nbytes for t in ts if t is not None)
    return OpCost(2.0 * b * h * lq * lk * (d + dv), float(nbytes), ATTENTION, "int8", True)


def buffers_once(op_class: str) -> Callable[[list[Tensor | None]], OpCost | None]:
    """A kernel op whose tensor arguments are its inputs and outputs, each touched once (sage_quant_kernel:
    q, k, v read, their int8 / fp8 copies and scales written): bytes = their sum, flops = the first's numel."""

    def model(ts: list[Tensor | None]) -> OpCost | None:
        tensors = [t for t in ts if t is not None]
        if not tensors:
            return None
        return OpCost(float(tensors[0].numel), float(sum(t.nbytes for t in tensors)), op_class,
                      dtype_key(tensors[0]), False)

    return model


MODELS: dict[str, Callable[..., OpCost | None]] = {
    "sage_fwd": sage_attention,
    "sage_quant_kernel": buffers_once(ELEMENTWISE),
    "_C_cache_ops::reshape_and_cache": kv_cache_write,
    "_C_cache_ops::reshape_and_cache_flash": kv_cache_write,
    "sglang::store_cache": kv_cache_write,
    "sgl_kernel::store_kv_cache": kv_cache_write,
    "aiter::rmsnorm2d_fwd_with_add": rmsnorm_with_add,
    "aiter::add_rmsnorm": rmsnorm_with_add,
    "aiter::rmsnorm2d_fwd_with_add_ck": rmsnorm_with_add,
}
