"""What a projection needs from a run, reduced to one representative step per phase (pure).

``profile(kernels, steps, runtime, cpu_ops, manifest, requests)`` takes the bound pass's per-kernel
table (kernel_bound: class, bound, FLOPs, bytes, dtype, issue time), the analysed steps, the runtime
calls, the CPU ops and run.json, and returns a ``Profile``: for prefill and decode the captured step
whose period (its start to the next step's start: what a token costs) is the phase's median, with

- every GPU activity the host issued in that period: issue offset from the period's start, measured
  duration, class, bound, FLOPs, bytes, dtype, the GEMM's row count (M, from the launching op's input
  dims; null where unknown), whether a CUDA graph launched it and the gap before it inside that graph;
- the host's blocking calls in the period (synchronisations, DtoH copies into pageable memory) as
  (start, end) offsets: where the host waits for the GPU;
- the step's shape (batch, query length, KV length, tokens) and its CPU op and launch counts;

and the run's workload, GPU, dtype, model config and timers (profiled: the trace's TTFT / TPOT;
unprofiled: run.json's host timers of the pass without the profiler, where it has one). A Profile
round-trips through ``to_dict`` / ``from_dict`` (plain JSON), so projections re-run without the run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis import idle

PHASES = ("prefill", "decode")
KERNEL_COLUMNS = ("off_ns", "dur_ns", "kclass", "bound", "flops", "bytes", "dtype", "op_name", "rows", "graph",
                  "gap_ns")
# Ops whose kernels multiply an activation (rows = tokens or sequences) by a weight.
LINEAR_OPS = ("aten::mm", "aten::addmm", "aten::linear", "aten::matmul", "aten::_weight_int4pack_mm",
              "aten::_scaled_mm", "aten::_int_mm", "aten::_grouped_mm")


@dataclass(frozen=True)
class PhaseStep:
    """One representative step of a phase: its period, kernels, host waits and shape."""

    phase: str
    batch: int
    q_len: int
    kv_len: int
    tokens: int
    period_ns: float
    kernels: pd.DataFrame  # KERNEL_COLUMNS, in issue order
    syncs: tuple[tuple[float, float], ...] = ()
    cpu_ops: int = 0
    launches: int = 0
    graph_launches: int = 0
    steps: int = 1  # captured steps of this phase it stands for

    @property
    def gpu_busy_ns(self) -> float:
        return float(self.kernels["dur_ns"].sum())

    def to_dict(self) -> dict[str, Any]:
        k = self.kernels
        cols = {c: [_plain(v) for v in k[c].tolist()] for c in KERNEL_COLUMNS}
        return {"phase": self.phase, "batch": self.batch, "q_len": self.q_len, "kv_len": self.kv_len,
                "tokens": self.tokens, "period_ns": self.period_ns, "syncs": [list(s) for s in self.syncs],
                "cpu_ops": self.cpu_ops, "launches": self.launches, "graph_launches": self.graph_launches,
                "steps": self.steps, "kernels": cols}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PhaseStep:
        k = pd.DataFrame({c: d["kernels"][c] for c in KERNEL_COLUMNS})
        return cls(phase=str(d["phase"]), batch=int(d["batch"]), q_len=int(d["q_len"]), kv_len=int(d["kv_len"]),
                   tokens=int(d["tokens"]), period_ns=float(d["period_ns"]), kernels=_typed(k),
                   syncs=tuple((float(a), float(b)) for a, b in d.get("syncs", ())),
                   cpu_ops=int(d.get("cpu_ops", 0)), launches=int(d.get("launches", 0)),
                   graph_launches=int(d.get("graph_launches", 0)), steps=int(d.get("steps", 1)))


@dataclass(frozen=True)
class Profile:
    """A run reduced to what projections read (see the module doc)."""

    run: str
    gpu: str | None
    dtype: str | None
    mode: str | None  # eager | compiled | None (unknown)
    quant: str
    batch: int | None
    input_tokens: int | None
    output_tokens: int | None
    phases: Mapping[str, PhaseStep]
    profiled: Mapping[str, float] = field(default_factory=dict)  # ttft_ns / tpot_ns from the trace
    unprofiled: Mapping[str, float] = field(default_factory=dict)  # ttft_ns / tpot_ns, host timers
    launch_ns: float = 2000.0  # issue-to-start latency of a kernel on an idle GPU (median)
    model: Mapping[str, Any] = field(default_factory=dict)  # model config
    has_shapes: bool = True  # the trace recorded op input shapes (FLOPs / bytes modelled)
    cache_len: int | None = None  # a compiled run's static KV cache: slots per sequence (None: unknown)

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "gpu": self.gpu, "dtype": self.dtype, "mode": self.mode, "quant": self.quant,
                "batch": self.batch, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "phases": {p: s.to_dict() for p, s in self.phases.items()}, "profiled": dict(self.profiled),
                "unprofiled": dict(self.unprofiled), "launch_ns": self.launch_ns, "model": dict(self.model),
                "has_shapes": self.has_shapes, "cache_len": self.cache_len}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Profile:
        return cls(run=str(d["run"]), gpu=d.get("gpu"), dtype=d.get("dtype"), mode=d.get("mode"),
                   quant=str(d.get("quant") or "none"), batch=d.get("batch"), input_tokens=d.get("input_tokens"),
                   output_tokens=d.get("output_tokens"),
                   phases={p: PhaseStep.from_dict(s) for p, s in d.get("phases", {}).items()},
                   profiled=dict(d.get("profiled") or {}), unprofiled=dict(d.get("unprofiled") or {}),
                   launch_ns=float(d.get("launch_ns", 2000.0)), model=dict(d.get("model") or {}),
                   has_shapes=bool(d.get("has_shapes", True)), cache_len=_positive(d.get("cache_len")))


def _plain(v: Any) -> Any:
    if isinstance(v, float | np.floating):
        return None if not math.isfinite(float(v)) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return None if v is pd.NA else v


def _typed(k: pd.DataFrame) -> pd.DataFrame:
    out = k.copy()
    for c in ("off_ns", "dur_ns", "flops", "bytes", "rows", "gap_ns"):
        out[c] = pd.to_numeric(out[c], errors="coerce").astype("float64")
    for c in ("kclass", "bound", "dtype", "op_name"):
        out[c] = out[c].astype(object).where(out[c].notna(), None)
    out["graph"] = out["graph"].fillna(False).astype(bool)
    return out.reset_index(drop=True)


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def timers(manifest: Mapping[str, Any]) -> dict[str, float]:
    """TTFT / TPOT (ns) of the run's pass without the profiler: a recorded run's ``timings.unprofiled``
    aggregate, or a sweep point's ``timings`` medians; {} where there is none."""
    t = manifest.get("timings")
    if not isinstance(t, Mapping):
        return {}
    src = t.get("unprofiled")
    agg = src.get("aggregate") if isinstance(src, Mapping) else (t if "no profiler" in str(t.get("source", "")) else None)
    if not isinstance(agg, Mapping):
        return {}
    return {k: v for k in ("ttft_ns", "tpot_ns") if (v := _num(agg.get(k))) is not None and v > 0}


def _rows_of(cpu_ops: pd.DataFrame | None, op_ids: pd.Series) -> np.ndarray:
    """Per kernel: the row count (product of the first input's dims but the last) of its launching op."""
    out = np.full(len(op_ids), np.nan)
    if cpu_ops is None or len(cpu_ops) == 0 or "input_dims" not in cpu_ops or "op_id" not in cpu_ops:
        return out
    dims = cpu_ops.drop_duplicates("op_id").set_index("op_id")["input_dims"]
    looked = dims.reindex(pd.to_numeric(op_ids, errors="coerce").to_numpy())
    for i, text in enumerate(looked.tolist()):
        out[i] = _rows(text)
    return out


def _rows(text: Any) -> float:
    if not isinstance(text, str) or not text.startswith("[["):
        return math.nan
    first = text[2:].split("]", 1)[0]
    try:
        d = [int(x) for x in first.split(",") if x.strip()]
    except ValueError:
        return math.nan
    return float(np.prod(d[:-1])) if len(d) >= 2 else math.nan


def _periods(steps: pd.DataFrame) -> pd.Series:
    """Each step's period: its start to the next step's start (same request), else its own end."""
    s = steps.sort_values("cpu_start_ns")
    nxt = s["cpu_start_ns"].shift(-1)
    same = s["request_id"].shift(-1).eq(s["request_id"]) if "request_id" in s else pd.Series(True, index=s.index)
    end = nxt.where(same & nxt.notna() & (nxt >= s["cpu_end_ns"].fillna(nxt)), s["cpu_end_ns"])
    end = end.where(end.notna() & (end > s["cpu_start_ns"]), s["cpu_end_ns"])
    return (end - s["cpu_start_ns"]).reindex(steps.index)


def _pageable_copies(kernels: pd.DataFrame, runtime: pd.DataFrame | None) -> list[tuple[float, float]]:
    """Runtime calls of DtoH copies into pageable memory: the host returns only when the copy is done."""
    if runtime is None or len(runtime) == 0 or "correlation" not in kernels:
        return []
    names = kernels["name"].astype(str)
    corr = kernels.loc[names.str.contains("DtoH", regex=False) & names.str.contains("Pageable", regex=False),
                       "correlation"].dropna()
    rt = runtime[runtime["correlation"].isin(set(corr.tolist()))]
    return [(float(a), float(a) + float(b or 0)) for a, b in zip(rt["ts_ns"], rt["dur_ns"], strict=True)]


def launch_latency(kernels: pd.DataFrame) -> float:
    """Median issue-to-start latency of kernels that found the GPU idle (not graph-launched)."""
    k = kernels[kernels["issued_ns"].notna()].sort_values("ts_ns")
    if len(k) < 3:
        return 2000.0
    ts = k["ts_ns"].to_numpy(dtype=np.int64)
    end = ts + k["dur_ns"].to_numpy(dtype=np.int64)
    prev_end = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(end)[:-1]])
    lat = ts - k["issued_ns"].to_numpy(dtype=np.int64)
    ok = (ts > prev_end + 1000) & (lat > 0) & (lat < 1_000_000)
    if "launch_name" in k:
        ok &= ~k["launch_name"].astype(str).str.contains("Graph", regex=False).to_numpy()
    return float(np.median(lat[ok])) if ok.sum() >= 3 else 2000.0


def phase_step(phase: str, steps: pd.DataFrame, kernels: pd.DataFrame, syncs: np.ndarray,
               cpu_ops: pd.DataFrame | None) -> PhaseStep | None:
    """The captured step of ``phase`` with the median period, reduced (see the module doc); None: no such step."""
    periods = _periods(steps)
    cap = steps["captured"].fillna(True).astype(bool) if "captured" in steps else pd.Series(True, index=steps.index)
    mine = steps[(steps["kind"].astype(str) == phase) & cap & periods.notna()]
    if mine.empty:
        return None
    p = periods[mine.index]
    # decode: the first steps pay one-off costs (a new cache layout, allocator growth): skip the first
    # when there are three or more
    if phase == "decode" and len(mine) >= 3:
        p = p.drop(mine.sort_values("cpu_start_ns").index[0])
    order = p.sort_values()
    pick = order.index[(len(order) - 1) // 2]
    row = steps.loc[pick]
    start, period = int(row["cpu_start_ns"]), float(periods[pick])
    end = start + period
    iss = pd.to_numeric(kernels["issued_ns"], errors="coerce")
    k = kernels[(iss >= start) & (iss < end)].sort_values("ts_ns")
    graph = k["launch_name"].astype(str).str.contains("Graph", regex=False) if "launch_name" in k else \
        pd.Series(False, index=k.index)
    ts = k["ts_ns"].to_numpy(dtype=np.int64)
    ends = ts + k["dur_ns"].to_numpy(dtype=np.int64)
    prev_end = np.concatenate([[ts[0] if len(ts) else 0], ends[:-1]])
    prev_graph = np.concatenate([[False], graph.to_numpy()[:-1]])
    gap = np.where(graph.to_numpy() & prev_graph, np.clip(ts - prev_end, 0, None), 0.0)
    out = pd.DataFrame({
        "off_ns": (pd.to_numeric(k["issued_ns"]) - start).to_numpy(dtype=float),
        "dur_ns": k["dur_ns"].to_numpy(dtype=float),
        "kclass": k["kclass"].to_numpy(object) if "kclass" in k else None,
        "bound": k["bound"].to_numpy(object) if "bound" in k else None,
        "flops": _col(k, "flops"),
        "bytes": _col(k, "bytes"),
        "dtype": k["dtype"].to_numpy(object) if "dtype" in k else None,
        "op_name": k["op_name"].to_numpy(object) if "op_name" in k else None,
        "rows": _rows_of(cpu_ops, k["op_id"]) if "op_id" in k else np.nan,
        "graph": graph.to_numpy(bool),
        "gap_ns": gap,
    })
    # a memcpy/memset's bytes are the trace's, its FLOPs none: not a modelled kernel for re-costing
    in_period = syncs[(syncs[:, 0] >= start) & (syncs[:, 0] < end)] if len(syncs) else syncs
    n_ops = 0
    if cpu_ops is not None and len(cpu_ops) and "ts_ns" in cpu_ops:
        ts_ops = pd.to_numeric(cpu_ops["ts_ns"], errors="coerce")
        n_ops = int(((ts_ops >= start) & (ts_ops < end)).sum())
    launches = int((~graph).sum()) + int(graph.sum() > 0)
    return PhaseStep(
        phase=phase, batch=_int(row.get("batch"), 1), q_len=_int(row.get("q_len"), 1),
        kv_len=_int(row.get("kv_len"), 1), tokens=_int(row.get("tokens"), _int(row.get("batch"), 1)),
        period_ns=period, kernels=_typed(out),
        syncs=tuple((float(a - start), float(min(b, end) - start)) for a, b in in_period),
        cpu_ops=n_ops, launches=launches, graph_launches=_int(row.get("graph_launches"), 0), steps=len(mine))


STALL_SHARE = 0.5  # a host gap over this share of the step's period ...
STALL_MEDIANS = 100.0  # ... and this many times the step's median gap between launches is a one-off stall


def without_stall(step: PhaseStep) -> tuple[PhaseStep, float]:
    """``step`` without its one-off host stall, and the stall's length (0: none): the longest gap
    between two launches (or before the first / after the last) that the host did not spend waiting at
    a sync, where it is over STALL_SHARE of the period and STALL_MEDIANS median gaps (a first call's
    autotuning, compilation or allocation). Later launches and syncs move earlier by the excess."""
    off = np.sort(step.kernels["off_ns"].to_numpy(dtype=float))
    if len(off) < 3:
        return step, 0.0
    edges = np.concatenate([[0.0], off, [step.period_ns]])
    gaps = np.diff(edges)
    i = int(gaps.argmax())
    a, b = float(edges[i]), float(edges[i + 1])
    excess = gaps[i] - float(np.median(gaps))
    waits = any(sa < b and se > a for sa, se in step.syncs)
    if waits or gaps[i] < STALL_SHARE * step.period_ns or gaps[i] < STALL_MEDIANS * max(float(np.median(gaps)), 1.0):
        return step, 0.0
    k = step.kernels.copy()
    k["off_ns"] = np.where(k["off_ns"].to_numpy(dtype=float) >= b, k["off_ns"].to_numpy(dtype=float) - excess,
                           k["off_ns"].to_numpy(dtype=float))
    syncs = tuple((x - excess, y - excess) if x >= b else (x, y) for x, y in step.syncs)
    return replace(step, kernels=k, syncs=syncs, period_ns=step.period_ns - excess), float(excess)


def _col(k: pd.DataFrame, name: str) -> np.ndarray:
    if name not in k:
        return np.full(len(k), np.nan)
    return np.asarray(pd.to_numeric(k[name], errors="coerce"), dtype=float)


def _int(v: Any, default: int) -> int:
    f = _num(v)
    return int(f) if f is not None else default


def profile(kernels: pd.DataFrame, steps: pd.DataFrame, runtime: pd.DataFrame | None,
            cpu_ops: pd.DataFrame | None, manifest: Mapping[str, Any], requests: pd.DataFrame | None = None,
            run: str = "") -> Profile:
    """The run reduced for projections (see the module doc). ``kernels`` is kernel_bound's table."""
    syncs = idle.sync_intervals(runtime)
    extra = _pageable_copies(kernels, runtime) if "name" in kernels else []
    if extra:
        both = np.concatenate([syncs.reshape(-1, 2), np.array(extra, dtype=np.int64).reshape(-1, 2)])
        syncs = both[np.argsort(both[:, 0], kind="stable")]
    phases = {}
    for ph in PHASES:
        s = phase_step(ph, steps, kernels, syncs, cpu_ops)
        if s is not None:
            phases[ph] = s
    wl = manifest.get("workload") or {}
    point = manifest.get("point") or {}
    env = manifest.get("environment") or {}
    prof: dict[str, float] = {}
    if requests is not None and len(requests):
        for c in ("ttft_ns", "tpot_ns"):
            v = pd.to_numeric(requests[c], errors="coerce").dropna() if c in requests else pd.Series(dtype=float)
            if len(v):
                prof[c] = float(v.median())
    for ph, key in (("prefill", "ttft_ns"), ("decode", "tpot_ns")):
        if key not in prof and ph in phases:
            prof[key] = phases[ph].period_ns
    shapes = bool(cpu_ops is not None and "input_dims" in cpu_ops and cpu_ops["input_dims"].notna().any())
    quant = point.get("quant") or wl.get("quant") or (manifest.get("quant") or {}).get("mode") or "none"
    pre, dec = phases.get("prefill"), phases.get("decode")
    # a foreign trace: the workload its steps show (output tokens: one per decode step, plus prefill's)
    first = pre or dec
    batch = _opt_int(point.get("batch", wl.get("batch"))) or (first.batch if first is not None else None)
    n_in = _opt_int(point.get("input_tokens", wl.get("input_tokens"))) or (pre.q_len if pre else None)
    n_out = _opt_int(point.get("output_tokens", wl.get("output_tokens"))) or (dec.steps + 1 if dec else None)
    return Profile(
        run=run, gpu=env.get("gpu") or (manifest.get("nvml") or {}).get("device_name"),
        dtype=wl.get("dtype"), mode=point.get("mode") or wl.get("mode"), quant=str(quant),
        batch=batch, input_tokens=n_in, output_tokens=n_out,
        phases=phases, profiled=prof, unprofiled=timers(manifest), launch_ns=launch_latency(kernels),
        model=dict((manifest.get("model") or {}).get("config") or {}), has_shapes=shapes,
        cache_len=_positive((manifest.get("compiled") or {}).get("max_cache_len")))


def _opt_int(v: Any) -> int | None:
    f = _num(v)
    return int(f) if f is not None else None


def _positive(v: Any) -> int | None:
    """A count that must be at least 1 (a cache's slots); None for anything else."""
    n = _opt_int(v)
    return n if n is not None and n >= 1 else None
