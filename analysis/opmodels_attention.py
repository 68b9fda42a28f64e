"""Attention over a paged KV cache or packed (varlen) sequences, costed per engine step.

The serving engines' attention ops (``SERVING_ATTENTION``) carry the new tokens' shapes only; how far each
query attends is the step's (steps.seq_stats). ``serving_attention_ops`` gives each (attention op, step) a
stand-in op (``STEP_ATTENTION``) whose shapes carry the heads and the step's sums, and op_costs models it
with ``serving_attention`` (TraceLens's InferenceAttention). docs/roofline.md, "Serving kernels".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tracekit.analysis.opmodels_serving import canonical_name
from tracekit.analysis.optensor import ATTENTION, DTYPE_BYTES, DTYPE_KEY, OpCost, get, parse, tensors

# Attention over a paged KV cache or packed (varlen) sequences: the shapes hold the new tokens only;
# how many KV positions each query attends is the step's (steps.seq_stats), so these ops are costed
# per step (serving_attention_ops), never from their shapes alone. Each takes q [T, Hq, D] first and
# the new k, v (or the latent cache entry, for MLA) after it.
SERVING_ATTENTION = (
    "vllm::unified_attention_with_output", "vllm::unified_attention", "vllm::unified_mla_attention_with_output",
    "vllm::unified_mla_attention", "aiter::mha_varlen_fwd", "aiter::fmha_v3_varlen_fwd", "aiter::mha_batch_prefill",
    "aiter::pa_decode_gluon", "flash_attn::_flash_attn_varlen_forward", "_vllm_fa2_C::varlen_fwd",
    "_vllm_fa3_C::fwd", "sglang_profiler::attention_paged_attention_ragged",
)
# where q, k, v sit among an op's inputs, where not first: SGLang's aiter paged attention
# (out, workspace, q, k_cache, v_cache, ...)
_QKV_AT = {"sglang_profiler::attention_paged_attention_ragged": (2, 3, 4)}
# a KV cache stored in fp8 shows in its kernels' names (vLLM's Fp8KVCacheDataType template argument,
# TRT-LLM-gen's fmha...KvE4m3 / QkvE4m3): the cache is read at 1 B whatever the new K/V's dtype
_FP8_KV = re.compile(r"Fp8KVCacheDataType\)[12]|(Qkv|Kv)E4m3|_kv_?fp8|fp8_kv_|E4m3Kv")
STEP_ATTENTION = "tracekit::step_attention"  # the per-step stand-in serving_attention_ops makes


@dataclass(frozen=True)
class AttentionHeads:
    """What a serving attention op's shapes say: query and KV heads, head dims, dtypes, MLA or not."""

    q_heads: int
    kv_heads: int
    d_qk: int
    d_v: int
    q_dtype: str
    kv_dtype: str
    latent: bool = False  # MLA: one latent cache entry (d_qk wide) per token, shared by every head


def attention_heads(name: str, input_dims: Any, input_types: Any) -> AttentionHeads | None:
    """The heads of a serving attention op (SERVING_ATTENTION) from its input shapes, or None."""
    name = canonical_name(name)
    if name not in SERVING_ATTENTION:
        return None
    ts = tensors(parse(input_dims), parse(input_types))
    qi, ki, vi = _QKV_AT.get(name, (0, 1, 2))
    q, k, v = get(ts, qi), get(ts, ki), get(ts, vi)
    if q is None or len(q.shape) != 3 or k is None:
        return None
    hq, dqk = q.shape[1], q.shape[2]
    if len(k.shape) == 2 or "mla" in name:  # MLA: k is the latent [T, kv_lora_rank]
        dv = k.shape[-1]
        return AttentionHeads(hq, 1, dqk, dv, q.dtype, k.dtype, latent=True)
    if len(k.shape) == 3:
        hkv = k.shape[1]
    elif len(k.shape) == 4:  # a paged cache [blocks, block_size, Hkv, D]
        hkv = k.shape[2]
    else:
        return None
    dv = v.shape[-1] if v is not None and v.shape else dqk
    return AttentionHeads(hq, hkv, dqk, dv, q.dtype, k.dtype)


def serving_attention(heads: AttentionHeads, context: dict[str, int] | None, generation: dict[str, int] | None
                      ) -> OpCost | None:
    """FLOPs and bytes of one attention layer over a step's sequences (TraceLens's InferenceAttention).

    ``context`` / ``generation``: the phase sums of steps.seq_stats (sq Σ query tokens, sk Σ KV length
    after the step, sqsq Σ query², sqsk Σ query·KV). Context (prompt chunks, causal): each query attends
    sk - sq + its own position, sq*sk - sq²/2 pairs per sequence; generation: sq*sk pairs.
    flops = Hq(2·c_sqsk - c_sqsq)(d_qk + d_v) + 2·Hq·g_sqsk(d_qk + d_v);
    bytes = Σsq (Hq·d_qk + Hq·d_v + Hkv·d_qk + Hkv·d_v) bpe_q + Σ(sk - sq) Hkv (d_qk + d_v) bpe_kv
    (MLA: one latent entry of d_qk per new and cached token). None where a phase lacks a sum.
    """
    need = ("sq", "sk", "sqsq", "sqsk")
    phases = [p for p in (context, generation) if p and p.get("requests")]
    if not phases or any(any(p.get(x) is None for x in need) for p in phases):
        return None
    c = context if context and context.get("requests") else dict.fromkeys(need, 0)
    g = generation if generation and generation.get("requests") else dict.fromkeys(need, 0)
    hq, hkv, dqk, dv = heads.q_heads, heads.kv_heads, heads.d_qk, heads.d_v
    flops = hq * (2 * c["sqsk"] - c["sqsq"]) * (dqk + dv) + hq * 2 * g["sqsk"] * (dqk + dv)
    bq = DTYPE_BYTES.get(heads.q_dtype, 2)
    bkv = DTYPE_BYTES.get(heads.kv_dtype, bq)
    sq = c["sq"] + g["sq"]
    cached = (c["sk"] - c["sq"]) + (g["sk"] - g["sq"])
    if heads.latent:
        nbytes = sq * (hq * dqk + hq * dv + dqk) * bq + cached * dqk * bkv
    else:
        nbytes = sq * (hq * dqk + hq * dv + hkv * dqk + hkv * dv) * bq + cached * hkv * (dqk + dv) * bkv
    return OpCost(float(flops), float(nbytes), ATTENTION, DTYPE_KEY.get(heads.q_dtype, "fp16"), True)


def step_attention_cost(dims: list[Any], types: list[Any]) -> OpCost | None:
    """The stand-in op: dims [[Hq, Hkv, d_qk, d_v, latent], [c_sq, c_sk, c_sqsq, c_sqsk, c_n],
    [g_sq, g_sk, g_sqsq, g_sqsk, g_n]], types [q dtype, kv dtype]."""
    try:
        (hq, hkv, dqk, dv, latent), cs, gs = dims
        heads = AttentionHeads(int(hq), int(hkv), int(dqk), int(dv), str(types[0]), str(types[1]), bool(latent))
    except (TypeError, ValueError, IndexError):
        return None
    keys = ("sq", "sk", "sqsq", "sqsk", "requests")
    return serving_attention(heads, dict(zip(keys, cs, strict=True)) if cs else None,
                             dict(zip(keys, gs, strict=True)) if gs else None)


def step_stats(steps: Any) -> dict[int, dict[str, Any]]:
    """step_id -> its seq_stats. A step whose stats lack the KV sums (SGLang's ``step[DECODE bs=N]``)
    takes those of the step right before it when that one is of the same kind and batch, has them, and
    ends where it starts: an engine annotation around the step, cut at the step's start."""
    import pandas as pd

    out: dict[int, dict[str, Any]] = {}
    rows = steps.sort_values("cpu_start_ns") if "cpu_start_ns" in steps else steps
    prev: tuple[Any, ...] | None = None
    for r in rows.itertuples(index=False):
        v = getattr(r, "seq_stats", None)
        st = json.loads(v) if isinstance(v, str) and v else None
        full = st is not None and all("sk" in ph for ph in st.values() if isinstance(ph, dict) and ph.get("requests"))
        sid = int(r.step_id)
        here = (getattr(r, "kind", None), getattr(r, "batch", None))
        if st is not None and full:
            out[sid] = st
        elif prev is not None and prev[1] == here and prev[3] == getattr(r, "cpu_start_ns", None) \
                and not pd.isna(prev[3]):
            out[sid] = prev[2]
        if st is not None and full:
            prev = (sid, here, st, getattr(r, "cpu_end_ns", None))
        else:
            prev = None
    return out


def _attention_under(owner: Any, ops: Any, gpu: Any, cpu_ops: Any, heads: set[int], depth: int = 8) -> Any:
    """``owner`` plus the attention-class kernels (by name) launched by an op under a serving attention op
    (a backend's own op, e.g. FlashInfer's, called inside vLLM's unified attention): their nearest such
    ancestor within ``depth`` levels. Other kernels under it (the KV-cache write) keep their op."""
    import numpy as np
    import pandas as pd

    from tracekit.analysis.kernels import ATTENTION as K_ATTENTION
    from tracekit.analysis.kernels import kernel_classes

    if "parent_id" not in cpu_ops:
        return owner
    todo = (owner.isna() & ops.notna()).to_numpy().copy()
    if not todo.any():
        return owner
    todo &= (kernel_classes(gpu["name"]).to_numpy() == K_ATTENTION)
    if not todo.any():
        return owner
    par = pd.Series(pd.to_numeric(cpu_ops["parent_id"], errors="coerce").to_numpy(),
                    index=pd.to_numeric(cpu_ops["op_id"], errors="coerce").to_numpy())
    par = par[~par.index.duplicated()]
    cur = ops.to_numpy(dtype="float64", na_value=np.nan)[todo]
    found = np.full(len(cur), np.nan)
    keys = np.array(sorted(heads), dtype="float64")
    for _ in range(depth):
        cur = par.reindex(cur).to_numpy(dtype="float64")
        hit = np.isnan(found) & np.isin(cur, keys)
        found[hit] = cur[hit]
        if np.isnan(cur).all():
            break
    out = owner.copy()
    out.iloc[np.flatnonzero(todo)] = found
    return out


def serving_attention_ops(gpu: Any, cpu_ops: Any, steps: Any, kernel_steps: Any = None) -> tuple[Any, Any]:
    """(gpu_activity, cpu_ops) where the kernels each serving attention op (SERVING_ATTENTION) launches
    itself, in each step that states its sequences (steps.seq_stats), launch a stand-in op
    (``tracekit::step_attention``) whose shapes carry the heads and the step's sums, so that op_costs
    models it. Inputs untouched; unchanged copies where nothing applies.
    """
    import pandas as pd

    if gpu is None or cpu_ops is None or steps is None or len(gpu) == 0 or len(cpu_ops) == 0 or len(steps) == 0:
        return gpu, cpu_ops
    if "seq_stats" not in steps or "op_id" not in gpu or steps["seq_stats"].isna().all():
        return gpu, cpu_ops
    names = cpu_ops["name"].astype(str)
    attn = cpu_ops[names.map(canonical_name).isin(SERVING_ATTENTION)]
    if attn.empty:
        return gpu, cpu_ops
    heads = {}
    for oid, n, d, t in zip(attn["op_id"], attn["name"].astype(str), attn["input_dims"], attn["input_types"],
                            strict=True):
        h = attention_heads(n, d, t)
        if h is not None:
            heads[int(oid)] = h
    if not heads:
        return gpu, cpu_ops
    # Only the kernels the attention op launches itself: the KV-cache write it calls
    # (reshape_and_cache) is an op of its own, and a copy, not attention.
    ops = pd.to_numeric(gpu["op_id"], errors="coerce")
    owner = ops.where(ops.isin(list(heads)))
    owner = _attention_under(owner, ops, gpu, cpu_ops, set(heads))
    if owner.notna().sum() == 0:
        return gpu, cpu_ops
    if kernel_steps is not None and len(kernel_steps) and "row" in kernel_steps:
        sid = pd.Series(kernel_steps["step_id"].to_numpy(), index=kernel_steps["row"].to_numpy())
        step_of = pd.to_numeric(pd.Series(range(len(gpu))).map(sid), errors="coerce").to_numpy()
    else:
        return gpu, cpu_ops
    stats = step_stats(steps)
    kn = gpu["name"].astype(str).to_numpy()
    fp8_kv = {int(o) for o, n in zip(owner.to_numpy(), kn, strict=True) if o == o and _FP8_KV.search(n)}
    gpu = gpu.copy()
    new_ops: list[dict[str, Any]] = []
    made: dict[tuple[int, int], int] = {}
    next_id = int(pd.to_numeric(cpu_ops["op_id"], errors="coerce").max()) + 1
    op_col = ops.to_numpy(dtype="float64", na_value=float("nan")).copy()
    keys = ("sq", "sk", "sqsq", "sqsk", "requests")
    for row, (o, s) in enumerate(zip(owner.to_numpy(), step_of, strict=True)):
        if pd.isna(o) or pd.isna(s) or int(s) not in stats:
            continue
        key = (int(o), int(s))
        if key not in made:
            h = heads[int(o)]
            st = stats[int(s)]
            dims = [[h.q_heads, h.kv_heads, h.d_qk, h.d_v, int(h.latent)],
                    [st["context"].get(k) for k in keys] if "context" in st else [],
                    [st["generation"].get(k) for k in keys] if "generation" in st else []]
            made[key] = next_id
            kv_dtype = "c10::Float8_e4m3fn" if int(o) in fp8_kv else h.kv_dtype
            new_ops.append({"op_id": next_id, "name": STEP_ATTENTION, "input_dims": json.dumps(dims),
                            "input_types": json.dumps([h.q_dtype, kv_dtype]), "parent_id": None,
                            "ts_ns": None, "dur_ns": 0})
            next_id += 1
        op_col[row] = made[key]
    if not new_ops:
        return gpu, cpu_ops
    gpu["op_id"] = pd.array([None if x != x else int(x) for x in op_col], dtype="Int64")
    extra = pd.DataFrame(new_ops)
    cpu = pd.concat([cpu_ops, extra.astype({"op_id": "int64"})], ignore_index=True)
    return gpu, cpu
