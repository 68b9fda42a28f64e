"""Each kernel's time at new shapes, on another GPU, with quantized weights, fused by a compiler (pure).

Work at new shapes (``rescale``), per kernel, from its measured FLOPs F and bytes B:

- a linear GEMM (its op multiplies rows of activations by a weight; rows M from the op's input dims,
  else the step's tokens): rows scale with the step's tokens (or with the batch where M was the
  batch: an LM head on the last position); F scales with M; of B the weight part W = F / (2 M) x
  element bytes stays and the rest scales with M;
- attention (and the batched matmuls of eager attention): F with batch x query x KV length, B with
  batch x (query + KV length);
- a decode step's concatenations (a dynamic KV cache grows by torch.cat): batch x KV length;
- everything else (elementwise, norms, copies, reductions, embedding): the step's tokens;
- inside an eager MoE layer's expert loop (a column ``route``, tracekit.analysis.whatif_moe), rows
  per call scale with the tokens times ``route``.

Time (``retime``), from the roofline time t = max(F / peak FLOP/s of its dtype, B / peak bytes/s):
compute- and memory-bound kernels scale with t (new work on the new GPU over old work on the old);
a latency-bound kernel's measured time d is a floor plus its work at ``ROOF_FRACTION`` of the peaks:
d' = d + (t' - t) / ROOF_FRACTION, never under ``LATENCY_FLOOR_NS`` (or d where d is less); kernels
with no model keep their measured time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analysis.whatif_profile import LINEAR_OPS
from tracekit.model.ceilings import Ceiling

# The fraction of a datasheet peak that a kernel with plenty of work reaches (GEMMs and copies on
# Hopper: ~0.7-0.85); a latency-bound kernel's new time is at least its new roof time over this.
ROOF_FRACTION = 0.75
# The shortest a kernel runs on a recent GPU (launch to end of an empty kernel, ~2 us on Hopper).
LATENCY_FLOOR_NS = 2000.0
DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
FUSIBLE = ("elementwise", "reduction", "copy")


@dataclass(frozen=True)
class Shape:
    """A step's shape: sequences, query tokens per sequence, KV length after it, tokens in it."""

    batch: int
    q_len: int
    kv_len: int
    tokens: int


def element_bytes(dtype: object) -> float:
    return float(DTYPE_BYTES.get(str(dtype), 2))


def per_dtype(dtypes: pd.Series, f: Callable[[str], float]) -> np.ndarray:
    """``f`` of each kernel's dtype (as text), evaluated once per distinct dtype."""
    codes, names = pd.factorize(dtypes, use_na_sentinel=False)
    return np.array([f(str(n)) for n in names], dtype=float)[codes]


def text(k: pd.DataFrame, column: str) -> np.ndarray:
    """A kernel column as a NumPy array of text (null: "None" / "nan"), for fast comparisons."""
    return np.asarray(k[column].to_numpy(object).astype(str))


def linear_mask(k: pd.DataFrame) -> np.ndarray:
    """Kernels of linear layers: GEMMs of a linear op, or GEMMs with no op (a graph replay's)."""
    gemm = text(k, "kclass") == "gemm"
    return np.asarray(gemm & (np.isin(text(k, "op_name"), LINEAR_OPS) | k["op_name"].isna().to_numpy()))


def _is_attention(k: pd.DataFrame) -> np.ndarray:
    return np.asarray((text(k, "kclass") == "attention") | np.isin(text(k, "op_name"), ("aten::bmm", "aten::baddbmm")))


def weight_bytes(k: pd.DataFrame, old: Shape) -> np.ndarray:
    """Per kernel: the bytes of its weight (linear GEMMs; 0 elsewhere), W = F / (2 M) x element bytes."""
    rows = k["rows"].fillna(float(old.tokens)).clip(lower=1).to_numpy(dtype=float)
    eb = per_dtype(k["dtype"], element_bytes)
    w = k["flops"].to_numpy(dtype=float) / (2 * rows) * eb
    w = np.where(linear_mask(k) & np.isfinite(w), np.minimum(w, k["bytes"].fillna(0).to_numpy(dtype=float)), 0.0)
    return np.asarray(w)


def rescale(k: pd.DataFrame, old: Shape, new: Shape, phase: str) -> pd.DataFrame:
    """``k`` with flops / bytes at the new shape (see the module doc); a column ``work`` the scale used."""
    out = k.copy()
    f = k["flops"].to_numpy(dtype=float)
    b = k["bytes"].to_numpy(dtype=float)
    tok = new.tokens / max(old.tokens, 1)
    seq = new.batch / max(old.batch, 1)
    rows = k["rows"].fillna(float(old.tokens)).to_numpy(dtype=float)
    lin = linear_mask(k)
    att = _is_attention(k) & ~lin
    cat = (text(k, "op_name") == "aten::cat") & (phase == "decode") & ~lin & ~att
    # an expert loop's kernels: their rows per call differ from the token scale (whatif_moe.reroute)
    route = k["route"].to_numpy(dtype=float) if "route" in k else np.ones(len(k))
    r_lin = np.where(np.isclose(rows, old.batch) & (old.batch != old.tokens), seq, tok) * route
    w = weight_bytes(k, old)
    att_f = (new.batch * new.q_len * new.kv_len) / max(old.batch * old.q_len * old.kv_len, 1)
    att_b = (new.batch * (new.q_len + new.kv_len)) / max(old.batch * (old.q_len + old.kv_len), 1)
    kv = (new.batch * new.kv_len) / max(old.batch * old.kv_len, 1)
    scale_f = np.select([lin, att, cat], [r_lin, att_f, kv], tok * route)
    new_b = np.select([lin, att, cat], [w + (b - w) * r_lin, b * att_b, b * kv], b * tok * route)
    out["flops"] = f * scale_f
    out["bytes"] = new_b
    out["rows"] = np.where(lin, rows * r_lin, k["rows"].to_numpy(dtype=float))
    return out


def unmodelled(k: pd.DataFrame, old: Shape, new: Shape, graphed: bool) -> np.ndarray:
    """New durations of kernels without FLOPs or bytes: attention's work part (over the floor) scales
    with batch x KV length (batch alone under CUDA graphs: a static cache's length does not change);
    the others keep their time."""
    d = k["dur_ns"].to_numpy(dtype=float)
    none = ~(np.isfinite(k["flops"].to_numpy(dtype=float)) & (k["flops"].fillna(0).to_numpy(dtype=float) > 0)) & \
        ~(np.isfinite(k["bytes"].to_numpy(dtype=float)) & (k["bytes"].fillna(0).to_numpy(dtype=float) > 0))
    att = none & (text(k, "kclass") == "attention")
    r = new.batch / max(old.batch, 1) * (1.0 if graphed else new.kv_len / max(old.kv_len, 1))
    floor = np.minimum(d, LATENCY_FLOOR_NS)
    return np.where(att, floor + (d - floor) * r, d)


def roof_ns(flops: np.ndarray, nbytes: np.ndarray, dtypes: pd.Series, ceiling: Ceiling) -> np.ndarray:
    """max(F / peak of the dtype, B / peak bandwidth), ns; NaN where neither is known."""
    peak = per_dtype(dtypes, lambda d: ceiling.flops(d) or ceiling.flops("fp16") or np.nan)
    tf = np.where(np.isfinite(flops) & (flops > 0), flops / peak * 1e9, 0.0)
    tb = np.where(np.isfinite(nbytes) & (nbytes > 0), nbytes / ceiling.peak_bytes_per_s * 1e9, 0.0)
    t = np.maximum(tf, tb)
    return np.where(np.isfinite(flops) | np.isfinite(nbytes), t, np.nan)


def retime(old_k: pd.DataFrame, new_k: pd.DataFrame, old_ceiling: Ceiling, new_ceiling: Ceiling) -> np.ndarray:
    """New durations (ns) of the kernels of ``old_k`` doing ``new_k``'s work on ``new_ceiling``'s GPU."""
    d = old_k["dur_ns"].to_numpy(dtype=float)
    t0 = roof_ns(old_k["flops"].to_numpy(dtype=float), old_k["bytes"].to_numpy(dtype=float), old_k["dtype"],
                 old_ceiling)
    t1 = roof_ns(new_k["flops"].to_numpy(dtype=float), new_k["bytes"].to_numpy(dtype=float), new_k["dtype"],
                 new_ceiling)
    bound = text(old_k, "bound")
    near = np.isin(bound, ("compute", "memory")) & (t0 > 0) & np.isfinite(t1)
    scaled = np.where(near, d * np.divide(t1, t0, out=np.ones_like(t1), where=t0 > 0), d)
    lat = ~near & np.isfinite(t1) & np.isfinite(t0)
    # latency-bound: its measured time is a floor plus its work at ROOF_FRACTION of the peaks; the work
    # part follows the new work, the floor stays (never under LATENCY_FLOOR_NS or its own time if less)
    grown = np.maximum(d + (np.nan_to_num(t1) - np.nan_to_num(t0)) / ROOF_FRACTION, np.minimum(d, LATENCY_FLOOR_NS))
    return np.where(lat, grown, scaled)


def fuse(k: pd.DataFrame) -> pd.DataFrame:
    """A compiler's fusion: each run of consecutive elementwise / reduction / copy kernels (memcpy and
    memset apart) becomes one kernel lasting the longest of them, issued where the run began."""
    if k.empty:
        return k
    fusible = np.isin(text(k, "kclass"), FUSIBLE) & (text(k, "bound") != "memcpy")
    group = np.cumsum(~fusible | np.concatenate([[True], ~fusible[:-1]]))
    g = k.assign(_g=group)
    agg = g.groupby("_g", sort=True).agg(
        off_ns=("off_ns", "first"), dur_ns=("dur_ns", "max"), kclass=("kclass", "first"), bound=("bound", "first"),
        flops=("flops", "sum"), bytes=("bytes", "sum"), dtype=("dtype", "first"), op_name=("op_name", "first"),
        rows=("rows", "first"), graph=("graph", "first"), gap_ns=("gap_ns", "first"))
    return agg.reset_index(drop=True)

