"""The model-level check: what a decode step must move and compute, from the model config alone.

From a Hugging Face config dict (run.json ``model.config``):

- parameters: embeddings + per layer (attention q/k/v/o, MLP, norms) + lm_head
  (unless tied). Gated MLPs (Llama, Mistral, Qwen: gate, up, down) have 3
  matrices, others 2. MoE configs count every expert and the router (not per-token).
  ``attention_bias``: q, k, v and o projections each have a bias.
- KV bytes per token = 2 (K and V) × layers × KV heads × head_dim × dtype size.
  GQA/MQA: KV heads = ``num_key_value_heads`` (1 for MQA). MLA (DeepSeek V2/V3,
  ``kv_lora_rank`` in the config) caches one compressed latent per token and
  layer: layers × (kv_lora_rank + qk_rope_head_dim) × dtype size.
- bytes per decode step (batch b, kv_len L): every weight read once, except the
  input embedding table, of which only b rows are read; plus the KV cache read
  (b × L × KV bytes/token) and the new token's K and V written.
- FLOPs per token ≈ 2 × (parameters − embedding table) + attention 4 × layers ×
  heads × head_dim × kv_len (QKᵀ and PV, 2 FLOPs per multiply-add).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

DTYPE_SIZE = {
    "float16": 2, "bfloat16": 2, "float32": 4, "float": 4, "half": 2, "float64": 8,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1,
}
_GATED = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "olmo", "deepseek",
          "internlm", "yi", "cohere", "granite", "smollm")


@dataclass(frozen=True)
class ModelShape:
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    gated_mlp: bool
    dtype_bytes: int
    experts: int = 1
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    attention_bias: bool = False

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def layer_params(self) -> int:
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        attn = h * q + 2 * h * kv + q * h + ((q + 2 * kv + h) if self.attention_bias else 0)  # q, k, v, o biases
        mlp = (3 if self.gated_mlp else 2) * h * self.intermediate * self.experts
        mlp += h * self.experts if self.experts > 1 else 0  # the router: one logit per expert
        return attn + mlp + 2 * h  # two norms

    @property
    def params(self) -> int:
        lm_head = 0 if self.tied else self.vocab * self.hidden
        return self.embedding_params + self.layers * self.layer_params + self.hidden + lm_head

    @property
    def kv_bytes_per_token(self) -> int:
        if self.kv_lora_rank:
            return self.layers * (self.kv_lora_rank + (self.qk_rope_head_dim or 0)) * self.dtype_bytes
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    def weight_bytes_per_step(self, batch: int = 1) -> int:
        """Weights read by one decode step: all but the input embedding table, of which `batch` rows."""
        # A tied lm_head reads the (shared) table in full, so nothing is saved then.
        table = 0 if self.tied else self.embedding_params
        return (self.params - table) * self.dtype_bytes + (0 if self.tied else batch * self.hidden * self.dtype_bytes)

    def decode_step_bytes(self, kv_len: int, batch: int = 1) -> int:
        """weights + KV cache read (kv_len positions, the new one included) + the new K/V written."""
        return self.weight_bytes_per_step(batch) + batch * (kv_len + 1) * self.kv_bytes_per_token

    def flops_per_token(self, kv_len: int) -> float:
        dense = 2.0 * (self.params - (0 if self.tied else self.embedding_params))
        return dense + 4.0 * self.layers * self.heads * self.head_dim * kv_len


def shape_from_config(config: Mapping[str, Any], dtype: str | None = None) -> ModelShape:
    """A ModelShape from an HF config dict; ``dtype`` overrides the config's torch_dtype/dtype."""
    c = dict(config)
    if "text_config" in c and "hidden_size" not in c:
        c = dict(c["text_config"])
    try:
        hidden = int(c["hidden_size"])
        heads = int(c["num_attention_heads"])
        layers = int(c["num_hidden_layers"])
        vocab = int(c["vocab_size"])
    except KeyError as exc:
        raise ValueError(f"model config lacks {exc.args[0]!r}") from None
    kv_heads = int(c.get("num_key_value_heads") or heads)
    head_dim = int(c.get("head_dim") or hidden // heads)
    dt = str(dtype or c.get("torch_dtype") or c.get("dtype") or "float16").replace("torch.", "")
    model_type = str(c.get("model_type", "")).lower()
    gated = any(model_type.startswith(g) for g in _GATED) or str(c.get("hidden_act", "")) in ("silu", "swiglu")
    return ModelShape(
        layers=layers,
        hidden=hidden,
        intermediate=int(c.get("intermediate_size") or 4 * hidden),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=vocab,
        tied=bool(c.get("tie_word_embeddings", False)),
        gated_mlp=gated,
        dtype_bytes=DTYPE_SIZE.get(dt, 2),
        experts=int(c.get("num_local_experts") or c.get("n_routed_experts") or 1),
        kv_lora_rank=int(c["kv_lora_rank"]) if c.get("kv_lora_rank") else None,
        qk_rope_head_dim=int(c["qk_rope_head_dim"]) if c.get("qk_rope_head_dim") else None,
        attention_bias=bool(c.get("attention_bias", False)),
    )


def kv_bytes_per_token(config: Mapping[str, Any], dtype: str | None = None) -> int:
    return shape_from_config(config, dtype).kv_bytes_per_token


def decode_check(shape: ModelShape, step_bound: pd.DataFrame) -> pd.DataFrame:
    """Per decode step: the model's bytes and FLOPs vs what the per-kernel models sum to.

    ``step_bound``: bound.attribute_steps' output (kind, batch, kv_len, flops, bytes).
    kv_len is the KV positions attended after the step (past + 1).
    """
    d = step_bound[step_bound["kind"].astype(str) == "decode"].copy()
    if not len(d):
        return d.assign(model_bytes=pd.Series(dtype=float), model_flops=pd.Series(dtype=float))
    batch = pd.to_numeric(d["batch"], errors="coerce").fillna(1).astype(int) if "batch" in d else 1
    kv = pd.to_numeric(d["kv_len"], errors="coerce") if "kv_len" in d else pd.Series(np.nan, index=d.index)
    past = (kv - 1).clip(lower=0)
    d["model_bytes"] = [
        float(shape.decode_step_bytes(int(p), int(b))) if pd.notna(p) else np.nan
        for p, b in zip(past, np.broadcast_to(batch, len(d)), strict=True)
    ]
    d["model_flops"] = [
        float(shape.flops_per_token(int(k)) * int(b)) if pd.notna(k) else np.nan
        for k, b in zip(kv, np.broadcast_to(batch, len(d)), strict=True)
    ]
    d["bytes_ratio"] = d["bytes"] / d["model_bytes"]
    d["flops_ratio"] = d["flops"] / d["model_flops"]
    return d


def kv_growth_check(
    shape: ModelShape, steps: pd.DataFrame, memory: pd.DataFrame
) -> dict[str, float]:
    """Allocator growth per generated token during decode vs the formula.

    For each decode step, the allocator's total_allocated_bytes just before the
    step starts; a least-squares slope against the number of tokens generated so
    far (× batch) gives bytes per token. Transient buffers (torch.cat's copy of the
    cache in a DynamicCache) come and go inside a step and do not bias the slope.
    """
    out = {"formula_bytes_per_token": float(shape.kv_bytes_per_token), "measured_bytes_per_token": float("nan"),
           "ratio": float("nan"), "samples": 0.0}
    if memory is None or len(memory) == 0 or steps is None or len(steps) == 0:
        return out
    d = steps[steps["kind"].astype(str) == "decode"].sort_values("cpu_start_ns")
    m = memory.dropna(subset=["ts_ns", "total_allocated_bytes"]).sort_values("ts_ns")
    if "device_type" in m and (m["device_type"] == 1).any():
        m = m[m["device_type"] == 1]  # CUDA, not CPU allocations
    if len(d) < 3 or not len(m):
        return out
    ts = m["ts_ns"].to_numpy(dtype=np.int64)
    idx = np.searchsorted(ts, d["cpu_start_ns"].to_numpy(dtype=np.int64), side="right") - 1
    ok = idx >= 0
    alloc = m["total_allocated_bytes"].to_numpy(dtype=float)[idx[ok]]
    batch = pd.to_numeric(d["batch"], errors="coerce").fillna(1).to_numpy()[ok] if "batch" in d else 1
    tokens = np.arange(len(d))[ok] * batch
    if len(alloc) < 3 or np.ptp(tokens) == 0:
        return out
    slope = float(np.polyfit(tokens, alloc, 1)[0])
    out.update(measured_bytes_per_token=slope, ratio=slope / shape.kv_bytes_per_token, samples=float(len(alloc)))
    return out


def gpm_bytes_per_s(mean_dram_util_pct: float, peak_bytes_per_s: float) -> float:
    """GPM DRAM bandwidth utilisation (%) averaged over the phase windows × the peak bandwidth."""
    return mean_dram_util_pct / 100.0 * peak_bytes_per_s
