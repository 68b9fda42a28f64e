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
with no model keep their measured time. A linear GEMM whose weight the trace ran at two row counts
(prefill and decode) has a measured marginal rate, FLOPs per ns of added rows (``marginal_rates``); where
that is below ``ROOF_FRACTION`` of the peak (a kernel slow by construction, such as a dequantizing int4
GEMM), its latency-bound time grows at least at that rate: d' >= d + (F' - F) / rate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
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


def static_cache_bytes(model: Mapping[str, object], batch: int, slots: int) -> float | None:
    """The keys and values a decode step's attention reads over a static cache at the query heads'
    count (Transformers' SDPA path repeats the KV heads): batch x slots x query heads x head dim x layers
    x 2 (K and V) x 2 B; None where the config lacks the sizes."""
    def num(key: str) -> float | None:
        v = model.get(key)
        return float(v) if isinstance(v, (int, float)) and v > 0 else None

    heads, layers, hidden = num("num_attention_heads"), num("num_hidden_layers"), num("hidden_size")
    if heads is None or layers is None or hidden is None or batch <= 0 or slots <= 0:
        return None
    head_dim = num("head_dim") or hidden / heads
    return float(batch * slots * heads * head_dim * layers * 2 * 2)


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


def peak_flops(dtypes: pd.Series, ceiling: Ceiling) -> np.ndarray:
    """Per kernel, ``ceiling``'s FLOP/s for its dtype (fp16's where the dtype has none; NaN if neither)."""
    return per_dtype(dtypes, lambda d: ceiling.flops(d) or ceiling.flops("fp16") or np.nan)


def roof_ns(flops: np.ndarray, nbytes: np.ndarray, dtypes: pd.Series, ceiling: Ceiling) -> np.ndarray:
    """max(F / peak of the dtype, B / peak bandwidth), ns; NaN where neither is known."""
    peak = peak_flops(dtypes, ceiling)
    tf = np.where(np.isfinite(flops) & (flops > 0), flops / peak * 1e9, 0.0)
    tb = np.where(np.isfinite(nbytes) & (nbytes > 0), nbytes / ceiling.peak_bytes_per_s * 1e9, 0.0)
    t = np.maximum(tf, tb)
    return np.where(np.isfinite(flops) | np.isfinite(nbytes), t, np.nan)


# Weights whose elements differ by less than this (relative) are one family: traces round FLOPs.
FAMILY_TOLERANCE = 0.02


def _families(k: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel: its linear GEMM's op and dtype as text ("" outside linear GEMMs) and its weight
    elements F / (2 M) (NaN outside)."""
    rows = k["rows"].to_numpy(dtype=float)
    w = k["flops"].to_numpy(dtype=float) / (2 * np.where(rows > 0, rows, np.nan))
    ok = linear_mask(k) & np.isfinite(w) & (w > 0)
    kind = np.char.add(np.char.add(text(k, "op_name"), "|"), text(k, "dtype"))
    return np.asarray(np.where(ok, kind, "")), np.where(ok, w, np.nan)


@dataclass(frozen=True)
class Rates:
    """Measured marginal rates (FLOPs per ns of added rows) of linear GEMM families, by op and dtype:
    sorted (weight elements, rate) pairs."""

    by_kind: Mapping[str, tuple[tuple[float, float], ...]]

    def of(self, k: pd.DataFrame) -> np.ndarray:
        """Per kernel of ``k``: its family's rate, NaN where none was measured."""
        kinds, w = _families(k)
        out = np.full(len(k), np.nan)
        for i in np.flatnonzero(kinds != ""):
            for wf, r in self.by_kind.get(str(kinds[i]), ()):
                if abs(w[i] - wf) <= FAMILY_TOLERANCE * wf:
                    out[i] = r
                    break
        return out


def marginal_rates(steps: Iterable[pd.DataFrame]) -> Rates:
    """Per linear GEMM family (one op, dtype and weight size, whatever its rows) run at two or more row
    counts across ``steps``: the FLOPs per ns its kernels added per added row, from the median kernel
    time at the fewest and at the most rows. Families whose time did not grow with the rows are left out."""
    pts: dict[str, list[tuple[float, float, float]]] = {}
    for k in steps:
        kinds, w = _families(k)
        rows, d = k["rows"].to_numpy(dtype=float), k["dur_ns"].to_numpy(dtype=float)
        for i in np.flatnonzero(kinds != ""):
            pts.setdefault(str(kinds[i]), []).append((float(w[i]), float(rows[i]), float(d[i])))
    out: dict[str, tuple[tuple[float, float], ...]] = {}
    for kind, p in pts.items():
        p.sort()
        fams: list[list[tuple[float, float, float]]] = []
        for x in p:
            if fams and x[0] - fams[-1][0][0] <= FAMILY_TOLERANCE * fams[-1][0][0]:
                fams[-1].append(x)
            else:
                fams.append([x])
        found: list[tuple[float, float]] = []
        for f in fams:
            by_rows: dict[float, list[float]] = {}
            for _, n_rows, dur in f:
                by_rows.setdefault(n_rows, []).append(dur)
            if len(by_rows) < 2:
                continue
            lo, hi = min(by_rows), max(by_rows)
            d_lo, d_hi = float(np.median(by_rows[lo])), float(np.median(by_rows[hi]))
            elems = float(np.median([x[0] for x in f]))
            if d_hi > d_lo:
                found.append((elems, 2 * elems * (hi - lo) / (d_hi - d_lo)))
        if found:
            out[kind] = tuple(found)
    return Rates(out)


def retime(old_k: pd.DataFrame, new_k: pd.DataFrame, old_ceiling: Ceiling, new_ceiling: Ceiling,
           rates: Rates | None = None) -> np.ndarray:
    """New durations (ns) of the kernels of ``old_k`` doing ``new_k``'s work on ``new_ceiling``'s GPU;
    ``rates``: measured marginal rates of linear GEMM families (``marginal_rates``), on the old GPU."""
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
    if rates is not None and rates.by_kind:
        # a family measured below ROOF_FRACTION of the peak keeps that rate (scaled to the new GPU's peak)
        f0, f1 = old_k["flops"].to_numpy(dtype=float), new_k["flops"].to_numpy(dtype=float)
        peak0, peak1 = peak_flops(old_k["dtype"], old_ceiling), peak_flops(new_k["dtype"], new_ceiling)
        r = rates.of(old_k) * peak1 / peak0
        slow = lat & np.isfinite(r) & (r * 1e9 < ROOF_FRACTION * peak1) & (f1 > f0)
        grown = np.where(slow, np.maximum(grown, d + np.divide(f1 - f0, r, out=np.zeros_like(r), where=slow)), grown)
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

