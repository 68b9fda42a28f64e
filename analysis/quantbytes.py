"""Decode's bytes per token at a quantized width: weights + KV, from the model config.

``decode_bytes(config, dtype, quant, kv_len, batch)`` is the model-level check of
tracekit.analysis.modelcheck with every linear weight (attention q/k/v/o, the MLP, the LM head:
what torchao's ``quantize_`` replaces by default) at ``tracekit.model.quant.weight_bytes`` of the
mode, and the embedding table, norms and KV cache at the model's dtype (weight-only and dynamic
quantization leave the cache alone). Batch b reads the weights once and b x kv_len positions of KV.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tracekit.analysis import modelcheck
from tracekit.model import quant as qm


@dataclass(frozen=True)
class DecodeBytes:
    weights_bytes: float  # weights one decode step reads
    kv_bytes: float  # KV cache read (kv_len positions per sequence) and the new position written
    linear_params: int  # parameters of the quantized linears

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.kv_bytes


def linear_shapes(shape: modelcheck.ModelShape) -> list[tuple[int, int, int]]:
    """(out, in, count) of every linear weight of a decoder: per layer q, k, v, o, the MLP; the LM head."""
    h, q, kv = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    mlp = [(shape.intermediate, h, 2), (h, shape.intermediate, 1)] if shape.gated_mlp else [
        (shape.intermediate, h, 1), (h, shape.intermediate, 1)]
    per_layer = [(q, h, 1), (kv, h, 2), (h, q, 1), *[(n, k, c * shape.experts) for n, k, c in mlp]]
    out = [(n, k, c * shape.layers) for n, k, c in per_layer]
    out.append((shape.vocab, h, 1))  # the LM head (tied or not, it is read as a linear)
    return out


def decode_bytes(config: Mapping[str, Any], dtype: str, quant: str, kv_len: int, batch: int = 1,
                 group_size: int = 128) -> DecodeBytes:
    """Bytes one decode step of ``batch`` sequences at ``kv_len`` reads (and writes for the new K/V)."""
    shape = modelcheck.shape_from_config(config, {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[dtype])
    eb = shape.dtype_bytes
    lin = linear_shapes(shape)
    lin_params = sum(n * k * c for n, k, c in lin)
    lin_bytes = sum(c * qm.weight_bytes(quant, n, k, dtype_bytes=eb, group_size=group_size) for n, k, c in lin)
    # What is not a linear: norms (read whole) and batch rows of the input embedding table.
    dense = modelcheck.ModelShape(**{**shape.__dict__, "tied": True})  # params without a separate lm_head
    norms = dense.params - dense.embedding_params - lin_params + shape.vocab * shape.hidden
    other = norms * eb + batch * shape.hidden * eb
    kv = batch * (kv_len + 1) * shape.kv_bytes_per_token
    return DecodeBytes(float(lin_bytes + other), float(kv), int(lin_params))
