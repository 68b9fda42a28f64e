"""The cost of one request inside a batch: each step's cost split across the requests it served.

A step is one forward pass; under batching it serves several requests, each with its own
query tokens (``q_len``) and KV positions after the step (``kv_len``). The input is, per
step, that list of (request_id, q_len, kv_len) (``step_requests``: written by ``record
--serve`` / ``--assistant``, parsed from tracekit's batch step annotations, or one row per
sequence of a one-request step; an engine's per-sequence step metadata plugs in the same
way) and the step's cost: its wall time split by bound class and its GPU busy time (the
bound pass's ``step_bound``, else the step window), FLOPs and bytes (``step_bound``) and
energy (NVML counters over the step window).

The rule (docs/metrics.md, "Cost of a request inside a batch"): each resource is split by
what consumes it.

- FLOPs and compute-bound time by each request's FLOPs: 2 x parameters per query token
  (the linear layers) plus 4 x layers x heads x head_dim per (query, key) pair it attends
  (causal: a chunk of q tokens after p cached ones attends q*p + q*(q+1)/2 pairs);
- bytes and memory-bound time by each request's bytes: the weights, read once per step,
  shared by its query tokens, plus its own KV cache read (kv_len x KV bytes per token);
- everything else (latency-bound, unmodelled, communication, memcpy, and idle: the host
  issuing the step) by query tokens: the step exists to process them;
- energy by the request's share of the step's wall time (the GPU draws power all step).

Without a model config (a foreign trace) every resource is split by query tokens and a
warning says so. Invariant (tested): the shares of a step sum to it, exactly for the
integer ns columns (largest-remainder rounding), to float rounding for FLOPs, bytes, J.
Pure: DataFrames in, new DataFrames out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis.energy import window_energy_j
from tracekit.analysis.frames import as_df
from tracekit.analysis.intervals import step_windows
from tracekit.analysis.steps import host_annotations
from tracekit.model.stepnames import parse_step

# Time classes of the bound pass (analysis/bound.py TIME_COLUMNS) and how each is split.
BY_FLOPS = ("compute_bound_ns",)
BY_BYTES = ("memory_bound_ns",)
BY_TOKENS = ("latency_bound_ns", "other_ns", "comm_ns", "memcpy_ns", "idle_ns")
TIME_CLASSES = (*BY_FLOPS, *BY_BYTES, *BY_TOKENS)
BUSY_CLASSES = tuple(c for c in TIME_CLASSES if c != "idle_ns")
SEQ_COLUMNS = ["step_id", "request_id", "phase", "q_len", "kv_len", "round", "proposed_tokens", "accepted_tokens"]
COST_COLUMNS = ["share", "step_time_ns", "gpu_time_ns", *TIME_CLASSES, "flops", "bytes", "energy_j"]
REQUEST_COST_COLUMNS = ["steps", "step_time_ns", "gpu_time_ns", "compute_bound_ns", "memory_bound_ns",
                        "latency_bound_ns", "other_ns", "idle_ns", "flops", "bytes", "energy_j", "mean_step_share"]
ELEMENT_BYTES = {"fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class CostModel:
    """What a query token and a KV position cost, from the model config (dense decoder)."""

    weight_bytes: float  # every parameter once, read once per step
    kv_bytes_per_token: float  # K and V of one position, all layers
    linear_flops_per_token: float  # 2 x parameters
    attn_flops_per_pair: float  # QK^T and PV: 4 x layers x heads x head_dim per (query, key) pair

    @classmethod
    def from_config(cls, config: Mapping[str, Any], parameters: float | None, dtype: str | None) -> CostModel | None:
        try:
            layers = int(config["num_hidden_layers"])
            hidden = int(config["hidden_size"])
            heads = int(config["num_attention_heads"])
        except (KeyError, TypeError, ValueError):
            return None
        head_dim = int(config.get("head_dim") or hidden // heads)
        kv_heads = int(config.get("num_key_value_heads") or heads)
        elem = ELEMENT_BYTES.get(str(dtype), 2)
        if not parameters:
            inter = int(config.get("intermediate_size") or 4 * hidden)
            vocab = int(config.get("vocab_size") or 0)
            per_layer = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + 3 * hidden * inter
            parameters = layers * per_layer + 2 * vocab * hidden
        return cls(
            weight_bytes=float(parameters) * elem,
            kv_bytes_per_token=float(2 * layers * kv_heads * head_dim * elem),
            linear_flops_per_token=2.0 * float(parameters),
            attn_flops_per_pair=4.0 * layers * heads * head_dim,
        )

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any] | None) -> CostModel | None:
        """From run.json: ``model.config`` and ``model.parameters`` (the recorder writes them), the workload dtype."""
        m = manifest or {}
        model = m.get("model")
        config = model.get("config") if isinstance(model, Mapping) else None
        if not isinstance(model, Mapping) or not isinstance(config, Mapping):
            return None
        work = m.get("workload")
        dtype = work.get("dtype") if isinstance(work, Mapping) else None
        return cls.from_config(config, model.get("parameters"), dtype)


@dataclass(frozen=True)
class Weights:
    """Each sequence's fraction of a step's tokens, FLOPs and bytes (each sums to 1)."""

    tokens: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray


def _norm(x: np.ndarray) -> np.ndarray:
    s = float(x.sum())
    return x / s if s > 0 else np.full(len(x), 1.0 / len(x)) if len(x) else x


def weights(q_len: Sequence[int] | np.ndarray, kv_len: Sequence[int] | np.ndarray, model: CostModel | None) -> Weights:
    """The rule of the module doc, for one step's sequences."""
    q = np.asarray(q_len, dtype=float)
    kv = np.maximum(np.asarray(kv_len, dtype=float), q)
    tokens = _norm(q)
    if model is None:
        return Weights(tokens, tokens, tokens)
    past = kv - q
    pairs = q * past + q * (q + 1) / 2
    flops = model.linear_flops_per_token * q + model.attn_flops_per_pair * pairs
    nbytes = model.weight_bytes * tokens + model.kv_bytes_per_token * kv
    return Weights(tokens, _norm(flops), _norm(nbytes))


def split_int(total: int, w: np.ndarray) -> np.ndarray:
    """Integer parts of ``total`` in proportion to ``w`` that sum to it exactly (largest remainder)."""
    if len(w) == 0:
        return np.zeros(0, dtype=np.int64)
    raw = float(total) * _norm(np.asarray(w, dtype=float))
    base = np.floor(raw).astype(np.int64)
    rest = int(total) - int(base.sum())  # 0 <= rest < len(w) for total >= 0
    if rest > 0:
        order = np.argsort(-(raw - base), kind="stable")
        base[order[:rest]] += 1
    return base


def split_float(total: float, w: np.ndarray) -> np.ndarray:
    """Float parts of ``total`` in proportion to ``w``; the last takes the remainder, so they sum to it."""
    if len(w) == 0:
        return np.zeros(0)
    parts = float(total) * _norm(np.asarray(w, dtype=float))
    parts[-1] = float(total) - float(parts[:-1].sum())
    return parts


def split_step(cost: Mapping[str, Any], q_len: Sequence[int] | np.ndarray, kv_len: Sequence[int] | np.ndarray,
               model: CostModel | None) -> dict[str, np.ndarray]:
    """One step's cost split across its sequences: {column: one value per sequence}.

    ``cost`` holds the step's ``time_ns`` (wall time of its window) and, where measured, the
    TIME_CLASSES, ``flops``, ``bytes`` and ``energy_j`` (missing or null: null parts). The time
    classes sum to time_ns x devices; ``step_time_ns`` splits time_ns by each sequence's share of
    the classes (by tokens when there are none) and ``share`` is that fraction.
    """
    w = weights(q_len, kv_len, model)
    n = len(w.tokens)
    out: dict[str, np.ndarray] = {}
    by = {**dict.fromkeys(BY_FLOPS, w.flops), **dict.fromkeys(BY_BYTES, w.bytes), **dict.fromkeys(BY_TOKENS, w.tokens)}
    have_classes = False
    for col in TIME_CLASSES:
        v = _num(cost.get(col))
        if v is None:
            out[col] = np.full(n, np.nan)
            continue
        have_classes = True
        out[col] = split_int(int(v), by[col])
    if have_classes:
        cls = np.zeros(n)
        for col in TIME_CLASSES:
            if not np.isnan(out[col]).any():
                cls += out[col]
        out["gpu_time_ns"] = sum((out[c] for c in BUSY_CLASSES if not np.isnan(out[c]).any()), np.zeros(n, np.int64))
        share = _norm(cls) if cls.sum() > 0 else w.tokens
    else:
        out["gpu_time_ns"] = np.full(n, np.nan)
        share = w.tokens
    t = _num(cost.get("time_ns"))
    out["step_time_ns"] = split_int(int(t), share) if t is not None else np.full(n, np.nan)
    out["share"] = share
    for col, wt in (("flops", w.flops), ("bytes", w.bytes), ("energy_j", share)):
        v = _num(cost.get(col))
        out[col] = split_float(v, wt) if v is not None else np.full(n, np.nan)
    return out


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if np.isnan(f) else f


# --- the per-sequence metadata ------------------------------------------------------


def from_annotations(annotations: Any, cpu_ops: Any = None) -> pd.DataFrame:
    """step_requests rows from tracekit's batch step annotations in a trace (``seqs=``)."""
    ann = host_annotations(annotations, cpu_ops, live=False)
    rows = []
    for name in ann["name"]:
        lab = parse_step(name)
        if lab is None or not lab.seqs:
            continue
        for s in lab.seqs:
            rows.append({"step_id": lab.step_id, "request_id": s.request_id, "phase": s.phase,
                         "q_len": s.q_len, "kv_len": s.kv_len})
    return pd.DataFrame(rows, columns=SEQ_COLUMNS)


def from_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per step of one request (the generate workload, --batch N: the batch's sequences are one
    request, so the row carries the batch's tokens: q_len x batch; kv_len x batch)."""
    if steps.empty:
        return pd.DataFrame(columns=SEQ_COLUMNS)
    s = steps[steps["request_id"].notna()] if "request_id" in steps else steps.iloc[0:0]
    b = pd.to_numeric(s["batch"], errors="coerce").fillna(1).astype("int64")
    q = pd.to_numeric(s["q_len"], errors="coerce").fillna(1).astype("int64")
    kv = pd.to_numeric(s["kv_len"], errors="coerce")
    kv = kv.fillna(q).astype("int64")
    return pd.DataFrame({
        "step_id": s["step_id"].astype("int64").to_numpy(), "request_id": s["request_id"].astype("int64").to_numpy(),
        "phase": s["kind"].astype(str).to_numpy(), "q_len": (q * b).to_numpy(), "kv_len": (kv * b).to_numpy(),
        "round": None, "proposed_tokens": None, "accepted_tokens": None,
    }, columns=SEQ_COLUMNS)


def sequences(steps: pd.DataFrame, step_requests: Any = None, annotations: Any = None,
              cpu_ops: Any = None) -> tuple[pd.DataFrame, str]:
    """The (step, request) rows to split over, and where they came from.

    In order of trust: a step_requests table (the recorder's, or an engine's per-sequence step
    metadata); tracekit's batch annotations in the trace; the steps table itself (one request per
    step). Steps the first source does not cover fall to the next.
    """
    parts: list[pd.DataFrame] = []
    covered: set[int] = set()
    source = []
    all_steps = set(pd.to_numeric(steps["step_id"], errors="coerce").dropna().astype("int64")) \
        if "step_id" in steps else set()
    makers = (("step_requests", lambda: as_df(step_requests)),
              ("annotations", lambda: from_annotations(annotations, cpu_ops) if annotations is not None
               else pd.DataFrame()),
              ("steps", lambda: from_steps(steps)))
    for name, make in makers:
        if all_steps and all_steps <= covered:
            break  # every step has its requests: the later sources are not read
        df = make()
        if df is None or df.empty or "step_id" not in df:
            continue
        df = df[~df["step_id"].astype("int64").isin(covered)]
        if df.empty:
            continue
        parts.append(df.reindex(columns=SEQ_COLUMNS))
        covered |= set(df["step_id"].astype("int64"))
        source.append(name)
    if not parts:
        return pd.DataFrame(columns=SEQ_COLUMNS), "none"
    out = pd.concat(parts, ignore_index=True)
    return out, "+".join(source)


# --- the pass --------------------------------------------------------------------------


def step_costs(steps: pd.DataFrame, step_bound: pd.DataFrame | None, counters: pd.DataFrame | None,
               device: int | None = None) -> pd.DataFrame:
    """Per step: time_ns (its window), the bound pass's time classes, FLOPs and bytes where it ran,
    energy_j where counters cover the window."""
    w = step_windows(steps)
    out = pd.DataFrame({"step_id": w["step_id"].astype("int64").to_numpy(), "time_ns": w["time_ns"].to_numpy()})
    if step_bound is not None and len(step_bound) and "step_id" in step_bound:
        sb = step_bound.assign(step_id=pd.to_numeric(step_bound["step_id"], errors="coerce")).dropna(subset=["step_id"])
        sb = sb.drop_duplicates("step_id").set_index(sb["step_id"].drop_duplicates().astype("int64"))
        cols = [c for c in (*TIME_CLASSES, "flops", "bytes", "time_ns") if c in sb]
        # each step's row of sb, one reindex for every column (Series.map's values, column by column)
        picked = sb[cols].reindex(out["step_id"].to_numpy()).reset_index(drop=True)
        for c in cols:
            if c != "time_ns":
                out[c] = picked[c]
        if "time_ns" in sb:  # the bound pass's window: the one its classes sum to
            out["time_ns"] = picked["time_ns"].fillna(out["time_ns"])
    if counters is not None and len(counters):
        win = w[["start_ns", "end_ns"]].to_numpy(dtype=np.int64)
        out["energy_j"] = window_energy_j(counters, win, device)
    return out


def split(steps: pd.DataFrame, seqs: pd.DataFrame, costs: pd.DataFrame, model: CostModel | None) -> pd.DataFrame:
    """step_requests: ``seqs`` plus each row's part of its step's cost (COST_COLUMNS)."""
    cols = [*SEQ_COLUMNS, *COST_COLUMNS]
    if seqs.empty or costs.empty:
        return pd.DataFrame(columns=cols)
    of_step = step_records(costs)
    rows: list[np.ndarray] = []  # each step's rows of seqs, in step order
    res: dict[str, list[np.ndarray]] = {col: [] for col in COST_COLUMNS}
    q_all, kv_all = _int_column(seqs["q_len"]), _int_column(seqs["kv_len"])
    for sid, idx in seqs.groupby(seqs["step_id"].astype("int64"), sort=True).indices.items():
        c = of_step(sid)
        if c is None:
            continue
        one = split_step(c, q_all(idx), kv_all(idx), model)
        rows.append(np.asarray(idx))
        for col in COST_COLUMNS:
            res[col].append(one[col])
    if not rows:
        return pd.DataFrame(columns=cols)
    # One frame for every step's rows: what concatenating a frame per step would give.
    out = seqs.iloc[np.concatenate(rows)].reindex(columns=SEQ_COLUMNS).reset_index(drop=True)
    out = pd.concat([out, pd.DataFrame({col: np.concatenate(v) for col, v in res.items()})], axis=1)
    for name in ("step_id", "request_id", "q_len", "kv_len", "round", "proposed_tokens", "accepted_tokens",
                 "step_time_ns", "gpu_time_ns", *TIME_CLASSES):
        out[name] = pd.to_numeric(out[name], errors="coerce").round().astype("Int64")
    return out[cols]


def step_records(costs: pd.DataFrame) -> Callable[[Any], dict[str, Any] | None]:
    """A step's row of ``costs`` as {column: value} (None where it has none), as split_step reads it:
    values are read through float(), so a row's own values serve as well as a row upcast to one dtype.
    Unique step ids are looked up in a dict of records; repeated ones row by row, as the frame gives them."""
    ids = costs["step_id"].to_numpy()
    if pd.Index(ids).is_unique:
        cols = [str(c) for c in costs.columns if c != "step_id"]
        values = [costs[c].tolist() for c in cols]
        table = {int(sid): dict(zip(cols, row, strict=True)) for sid, *row in zip(ids.tolist(), *values, strict=True)}
        return table.get
    by_step = costs.set_index("step_id")

    def row(sid: Any) -> dict[str, Any] | None:
        if sid not in by_step.index:
            return None
        return {str(k): v for k, v in by_step.loc[sid].items()}  # type: ignore[call-overload]

    return row


def _int_column(values: pd.Series) -> Callable[[Any], np.ndarray]:
    """The int64 values at positions ``idx`` of a column: from one conversion of the whole column, or
    (a null somewhere) converted per call, so that only the rows asked for must be integers."""
    try:
        whole = values.astype("int64").to_numpy()
    except (TypeError, ValueError):
        return lambda idx: values.iloc[idx].astype("int64").to_numpy()
    return lambda idx: whole[idx]


def per_request(step_requests: pd.DataFrame) -> pd.DataFrame:
    """Per request: the sums of its parts (REQUEST_COST_COLUMNS); null where one of its steps lacks the column."""
    if step_requests.empty:
        return pd.DataFrame(columns=["request_id", *REQUEST_COST_COLUMNS])
    rid = step_requests["request_id"].astype("int64")
    g = step_requests.groupby(rid)
    out = pd.DataFrame({"steps": g["step_id"].nunique()})
    cols = [c for c in REQUEST_COST_COLUMNS if c not in ("steps", "mean_step_share")]
    vals = pd.DataFrame({c: pd.to_numeric(step_requests[c], errors="coerce").astype(float) for c in cols})
    # Every column summed in one groupby (per column, the same sums as one groupby each). A sum over
    # only some of a request's steps (the others outside a --trace-steps capture window) would read as
    # its whole cost: null unless every step has the value.
    sums, whole = vals.groupby(rid).sum(), vals.notna().groupby(rid).all()
    for c in cols:
        out[c] = sums[c].where(whole[c])
    out["mean_step_share"] = g["share"].mean()
    out = out.reset_index().rename(columns={"index": "request_id"})
    for c in ("step_time_ns", "gpu_time_ns", "compute_bound_ns", "memory_bound_ns", "latency_bound_ns", "other_ns",
              "idle_ns"):
        out[c] = out[c].round().astype("Int64")
    return out


def cost_pass(steps: Any, requests: Any, step_requests: Any, annotations: Any, cpu_ops: Any, step_bound: Any,
              counters: Any, gpu_activity: Any, *, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The cost pass, after bound and energy: {"step_requests": each step's parts per request,
    "requests": with their sums, "warnings"} ({} where no step serves a request). ``step_requests``:
    the run's own (record --serve / --assistant), else None."""
    steps = as_df(steps)
    requests = as_df(requests)
    if steps.empty:
        return {}
    warnings: list[str] = []
    seqs, _ = sequences(steps, step_requests, annotations, cpu_ops)
    if seqs.empty:
        return {}
    model = CostModel.from_manifest(dict(manifest))
    if model is None and bool((seqs.groupby("step_id").size() > 1).any()):
        # Only where a step is shared: a one-request step is all its request's whatever the rule.
        warnings.append("cost: no model config in run.json: each shared step's cost is split by query tokens only")
    sb = step_bound
    counters = as_df(counters) if counters is not None else None
    gpu = as_df(gpu_activity) if gpu_activity is not None else pd.DataFrame()
    devs = gpu["device"].dropna() if "device" in gpu else pd.Series(dtype=float)
    dev = int(devs.mode().iloc[0]) if len(devs) else None
    costs = step_costs(steps, as_df(sb) if sb is not None else None, counters, dev)
    parts = split(steps, seqs, costs, model)
    known = set(pd.to_numeric(requests["request_id"], errors="coerce").dropna().astype("int64")) \
        if "request_id" in requests else set()
    stray = sorted(set(parts["request_id"].dropna().astype("int64")) - known) if len(parts) else []
    if stray and known:
        warnings.append(f"cost: steps serve requests {stray[:5]} that are not in the requests table")
    sums = per_request(parts)
    if not requests.empty:
        req = requests.drop(columns=[c for c in REQUEST_COST_COLUMNS if c in requests])
        key = pd.to_numeric(req["request_id"], errors="coerce").astype("Int64")
        merged = req.assign(_k=key).merge(sums.rename(columns={"request_id": "_k"}).astype({"_k": "Int64"}),
                                          on="_k", how="left").drop(columns="_k")
        requests = merged
    return {"step_requests": parts, "requests": requests, "warnings": warnings}
