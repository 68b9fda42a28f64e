"""Analyze a large run window by window, in memory set by the window, not the trace.

Steps are local in time, so a run is cut into consecutive time windows at instants that no event
spans (``cut_times``): no CPU op, runtime call, kernel (counted from its launching runtime call to its
end) or annotation shorter than a window crosses a cut, so no step and no step's kernels are split.
Annotations longer than a window (requests, a whole-run range) and graph-capture ops (another clock)
go to every window they concern. Each window's raw tables are read in one pass over the files
(tracekit.store.windows.TimeCursor) and the default passes run on them as on a whole run; then:

- per-activity and per-step tables (kernel_bound, kernel_steps, steps, step_bound, step_requests) are
  the windows' rows, in order; kernel_bound and kernel_steps are written as each window ends;
- phases and gpu_timeline: sums of the windows' rows per (request, phase) and per device; the ratios
  (achieved rates, % of ceiling, per token) recomputed from the sums; the time between windows, which
  holds no event, is added to the ``outside`` row's time and host idle and to each device's idle;
- requests: rebuilt over the whole run's steps (tracekit.analysis.requests.build), with the windows'
  per-request sums (step time, bound split, FLOPs, bytes, energy) added up;
- the check verdict: per check, the worst finding of any window.

The result handed back holds every table but the per-activity ones, of which it holds one column
each (kernel_bound.over_peak, kernel_steps.step_id): the run's files have them whole.

Exact, as the whole-run analysis: every per-activity and per-step table, and every count and
nanosecond sum of phases and gpu_timeline. Equal up to float summation order: FLOPs, bytes and the
rates made from them. Not the same where a statistic spans windows: a phase's ceiling dtype (that of
its window with the most FLOPs), GPM means (time-weighted over windows), energy from counters
interpolated across a cut, the check verdict (each check's worst window: a ratio such as the profiler's
overhead can cross its threshold in one window and not over the run) and warnings that count
(each window's, deduplicated). ``should_window`` keeps runs below ``WINDOW_EVENTS`` events (and recorded
runs, CPU runs and multi-rank parts) on the whole-run path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.analysis import advice as _advice
from tracekit.analysis import health as _health
from tracekit.analysis import intervals
from tracekit.analysis import requests as _requests
from tracekit.analysis.frames import output_table
from tracekit.analysis.inputs import AnalysisInput, AnalysisOutput
from tracekit.analysis.phases import PHASES
from tracekit.analysis.pipeline import run_passes, trace_span
from tracekit.app.ceiling import decide
from tracekit.model import progress
from tracekit.store import heap
from tracekit.store import windows as _win
from tracekit.store.rundir import STATUS_COMPLETE, RunDir

WINDOW_EVENTS = 250_000  # raw events per window; runs with fewer are analysed whole
BIG = ("gpu_activity", "cpu_ops", "runtime")
PER_ROW = ("kernel_bound", "kernel_steps")  # written as each window ends
PER_STEP = ("steps", "step_bound", "step_requests")
SUMS = ("steps", "steps_captured", "time_ns", "gpu_busy_ns", "compute_bound_ns", "memory_bound_ns",
        "latency_bound_ns", "idle_ns", "idle_host_ns", "idle_wait_ns", "idle_before_window_ns", "other_ns",
        "comm_ns", "memcpy_ns", "flops", "bytes", "energy_j", "kernels_modelled", "kernels_class_only",
        "kernels_unmodelled", "kernels_measured")
REQUEST_SUMS = ("steps", "step_time_ns", "gpu_time_ns", "compute_bound_ns", "memory_bound_ns", "latency_bound_ns",
                "other_ns", "idle_ns", "flops", "bytes", "energy_j")
ENGINE_SOURCES = {"vllm", "sglang", "atom"}  # engine step annotations: local, numbered in time order
TIMELINE_SUMS = ("busy_ns", "compute_ns", "memcpy_ns", "comm_ns", "activities", "outside_steps")


class NotLocal(Exception):
    """The run's steps are not local to a window (found from model ops or graph launches, whose ids
    and KV lengths run across the whole run): it is analysed whole."""


def local_offset(steps: pd.DataFrame, before: int) -> int:
    """The step id offset of a window whose steps are ``steps`` (``before`` steps in earlier windows):
    0 for tracekit's steps (ids from their annotations), ``before`` for engine steps (numbered in time
    order); NotLocal for any other source."""
    srcs = set(steps["source"].astype(str)) if len(steps) else set()
    if srcs <= {"tracekit"}:
        return 0
    if srcs <= ENGINE_SOURCES:
        return before
    raise NotLocal(f"steps from {sorted(srcs)}")


def _offset(df: Any, by: int) -> Any:
    if df is None or not by or "step_id" not in getattr(df, "columns", ()):
        return df
    df = df.copy()
    df["step_id"] = df["step_id"] + by
    return df


def raw_events(run: RunDir) -> int:
    return sum(_win.rows(run, t) for t in BIG)


def should_window(run: RunDir, window_events: int | None = None) -> bool:
    """Whether ``run`` is analysed window by window: more raw events than one window holds, its big
    tables time-sorted (as ingest writes them), GPU activity present, no recorder's steps."""
    limit = window_events or WINDOW_EVENTS
    if raw_events(run) <= limit or not _win.rows(run, "gpu_activity"):
        return False
    if run.has_table("recorded_steps"):
        return False  # a recording's steps (and its step_requests, which recordings write beside them)
    if "analysis" not in run.read_manifest() and any(run.has_table(t) for t in ("steps", "step_requests")):
        return False  # a recorded run's own tables, not yet copied aside: the whole-run path does that
    return all(_win.is_time_sorted(run, t) for t in BIG)


# --- where to cut -------------------------------------------------------------------


def _spans(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Intervals [ts, end) sorted by start, strictly overlapping ones merged (touching ones kept apart)."""
    if not len(ts):
        return np.empty((0, 2), dtype=np.int64)
    order = np.argsort(ts, kind="stable")
    s, e = ts[order], np.maximum(end[order], ts[order])
    run_end = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] >= run_end[:-1]]
    idx = np.flatnonzero(new)
    return np.stack([s[idx], run_end[np.r_[idx[1:] - 1, len(s) - 1]]], axis=1)


def _ts_end(b: pa.RecordBatch | pa.Table) -> tuple[np.ndarray, np.ndarray]:
    ts = pc.fill_null(b.column("ts_ns"), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    dur = (pc.fill_null(b.column("dur_ns"), 0).to_numpy(zero_copy_only=False).astype(np.int64)
           if "dur_ns" in b.column_names else np.zeros(len(ts), dtype=np.int64))
    valid = pc.is_valid(b.column("ts_ns")).to_numpy(zero_copy_only=False)
    return ts[valid], (ts + np.maximum(dur, 0))[valid]


def _holds_others(ts: np.ndarray, end: np.ndarray, which: np.ndarray) -> np.ndarray:
    """For the intervals ``which`` selects: whether each holds two disjoint intervals of the set (a
    request's or a run's range holds several steps; a step annotation at most another form of itself)."""
    out = np.zeros(len(ts), dtype=bool)
    for i in np.flatnonzero(which).tolist():
        inside = (ts >= ts[i]) & (end <= end[i])
        inside[i] = False
        out[i] = bool(inside.any()) and int(end[inside].min()) <= int(ts[inside].max())
    return out


def _request_warning(text: str) -> bool:
    """A warning of tracekit.analysis.requests.build's (about one window's part of the requests)."""
    return text.startswith("request ") or text.endswith("fall outside every request window")


def _check_local(steps: pd.DataFrame, lo: int | None, hi: int | None) -> None:
    """NotLocal where a window's step reaches past the window."""
    if not len(steps):
        return
    w = intervals.step_windows(steps)
    if (lo is not None and (w["start_ns"] < lo).any()) or (hi is not None and (w["end_ns"] > hi).any()):
        raise NotLocal("a step crosses a window edge")


@dataclass(frozen=True)
class Cuts:
    lo: int  # first event
    hi: int  # last event end
    cuts: tuple[int, ...]  # instants no event spans, increasing, inside (lo, hi)
    long_ns: int  # annotations and ops longer than this go to every window they overlap


def cut_times(run: RunDir, window_events: int) -> Cuts:
    """Where to cut ``run`` into windows of about ``window_events`` raw events (see the module doc).
    Reads ts/dur (and the launches' correlation) batch by batch; holds one interval per busy block."""
    n = raw_events(run)
    lo, hi = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    for t in (*BIG, "annotations"):
        for b in _win.chunks(run, t, ["ts_ns", "dur_ns", "captured"]):
            if "captured" in b.schema.names:
                b = b.filter(pc.invert(pc.fill_null(b.column("captured"), False)))
            ts, end = _ts_end(b)
            if len(ts):
                lo, hi = min(lo, int(ts.min())), max(hi, int(end.max()))
    if lo > hi:
        return Cuts(0, 0, (), 0)
    k = max(1, -(-n // window_events))
    long_ns = max(1, (hi - lo) // k)
    # the launch of each kernel: its runtime call's start, by correlation
    rt = pa.concat_tables([pa.Table.from_batches([b]) for b in _win.chunks(run, "runtime", ["correlation", "ts_ns"])]) \
        if _win.rows(run, "runtime") else None
    if rt is not None and rt.num_rows:
        rt = rt.filter(pc.and_(pc.is_valid(rt.column("correlation")), pc.is_valid(rt.column("ts_ns"))))
        corr = rt.column("correlation").to_numpy(zero_copy_only=False).astype(np.int64)
        order = np.argsort(corr, kind="stable")
        corr, launch = corr[order], rt.column("ts_ns").to_numpy(zero_copy_only=False).astype(np.int64)[order]
    else:
        corr = launch = np.empty(0, dtype=np.int64)
    del rt
    blocks: list[np.ndarray] = []
    hist = np.zeros(4096, dtype=np.int64)
    width = max(1, -(-(hi - lo + 1) // len(hist)))
    for t in (*BIG, "annotations"):
        for b in _win.chunks(run, t, ["ts_ns", "dur_ns", "captured", "correlation"]):
            if "captured" in b.schema.names:
                b = b.filter(pc.invert(pc.fill_null(b.column("captured"), False)))
            ts, end = _ts_end(b)
            if t in BIG:
                np.add.at(hist, np.clip((ts - lo) // width, 0, len(hist) - 1), 1)
            if t == "gpu_activity" and len(corr) and "correlation" in b.schema.names:
                valid = pc.is_valid(b.column("ts_ns")).to_numpy(zero_copy_only=False)
                c = pc.fill_null(b.column("correlation"), -1).to_numpy(zero_copy_only=False).astype(np.int64)[valid]
                at = np.clip(np.searchsorted(corr, c), 0, len(corr) - 1)
                hit = corr[at] == c
                ts = np.where(hit, np.minimum(ts, launch[at]), ts)
            short = end - ts <= long_ns
            if t == "annotations":  # a long annotation blocks a cut unless it holds others (a request, a run)
                short |= ~_holds_others(ts, end, ~short)
            blocks.append(_spans(ts[short], end[short]))
    busy = _spans(*np.concatenate(blocks).T) if blocks else np.empty((0, 2), dtype=np.int64)
    del blocks
    candidates = busy[1:, 0]  # each block's start: no interval spans it
    # Where they can be, cuts are at annotation starts (a step's): what follows a step's end (its
    # token's copy to the host) stays in the step's window.
    ann = run.read_columns("annotations", ["ts_ns", "dur_ns"])
    starts = np.unique(_ts_end(ann)[0]) if ann.num_rows else np.empty(0, dtype=np.int64)
    at_ann = candidates[np.isin(candidates, starts)]
    if len(at_ann):
        candidates = at_ann
    cdf = np.cumsum(hist)
    cuts: list[int] = []
    for j in range(1, k):
        b = int(np.searchsorted(cdf, j * n / k))
        at = int(np.searchsorted(candidates, lo + b * width))
        if at < len(candidates):
            c = int(candidates[at])
            if lo < c < hi and (not cuts or c > cuts[-1]):
                cuts.append(c)
    return Cuts(lo, hi, tuple(cuts), long_ns)


# --- the windows --------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    lo: int | None  # None: from the start
    hi: int | None  # None: to the end
    tables: dict[str, Any]
    gpu_rows: np.ndarray  # gpu_activity's table positions of the window's rows


def spanning(t: pa.Table, long_ns: int, annotations: bool) -> np.ndarray:
    """Rows that go to every window they overlap: longer than ``long_ns`` and, for annotations, holding
    another annotation (a request, a run; a long step annotation holds none and is cut around)."""
    ts, end = _ts_end(t) if t.num_rows else (np.empty(0, dtype=np.int64),) * 2
    if len(ts) != t.num_rows:  # null starts: never spanning
        return np.zeros(t.num_rows, dtype=bool)
    long = end - ts > long_ns
    return long & _holds_others(ts, end, long) if annotations else long


def windows(run: RunDir, cuts: Cuts, other_columns: tuple[str, ...]) -> Iterator[Window]:
    """Each window's raw tables (tracekit.app.analyze.RAW; other_events' ``other_columns``), read in one
    pass over the big tables."""
    cursors = {t: _win.TimeCursor(run, t, drop="captured" if t == "cpu_ops" else None) for t in BIG}
    captured = _win.empty_like(run, "cpu_ops")
    if "captured" in captured.column_names:  # graph-capture ops: another clock, every window's
        parts = [b.filter(pc.fill_null(b.column("captured"), False)) for b in _win.chunks(
            run, "cpu_ops", captured.column_names)]
        captured = pa.Table.from_batches(parts, schema=captured.schema) if parts else captured
    small = {t: run.read_table(t) for t in ("annotations", "counters", "ncu_counters")}
    other = run.read_columns("other_events", other_columns)
    # each indexed by time once: a window's rows are found without a pass over the table
    slices = {"annotations": _win.TimeSlices(small["annotations"], spanning(small["annotations"], cuts.long_ns, True)),
              "counters": _win.TimeSlices(small["counters"], np.zeros(small["counters"].num_rows, dtype=bool)),
              "other_events": _win.TimeSlices(other, spanning(other, cuts.long_ns, False))}
    del other
    bounds = [None, *cuts.cuts, None]
    for i in range(len(bounds) - 1):
        lo, hi = bounds[i], bounds[i + 1]
        tables: dict[str, Any] = {}
        gpu_rows = np.empty(0, dtype=np.int64)
        for t, cur in cursors.items():
            rows, pos = cur.take(hi)
            if t == "cpu_ops" and captured.num_rows:
                rows = pa.concat_tables([rows, captured.cast(rows.schema)])
            if t == "gpu_activity":
                gpu_rows = pos
            tables[t] = rows
        for t in small:
            tables[t] = slices[t].take(lo, hi) if t in slices else small[t]
        tables["other_events"] = slices["other_events"].take(lo, hi)
        yield Window(lo, hi, tables, gpu_rows)


# --- combining the windows' tables --------------------------------------------------


def _num(s: pd.Series) -> pd.Series:
    return pd.to_numeric(s, errors="coerce").astype(float)


def outside_ns(steps: pd.DataFrame | None, span: tuple[int, int]) -> int:
    """The run's time outside every captured step's window (the phases pass's ``outside`` time)."""
    if steps is None or not len(steps):
        return span[1] - span[0]
    cap = steps[steps["captured"].astype(bool)] if "captured" in steps else steps
    inside = intervals.window_union(intervals.step_windows(cap)) if len(cap) else intervals.EMPTY
    return max(span[1] - span[0] - intervals.length(intervals.clip(inside, *span)), 0)


def _order(df: pd.DataFrame) -> pd.DataFrame:
    """Rows as the phases pass orders them: per request (by id), then the run's; phases in PHASES order, outside last."""
    rid = _num(df["request_id"])
    rank = {p: i for i, p in enumerate(PHASES)}
    key = pd.DataFrame({"run": rid.isna(), "rid": rid.fillna(0),
                        "phase": [rank.get(str(p), len(rank)) for p in df["phase"]]})
    return df.loc[key.sort_values(["run", "rid", "phase"], kind="stable").index].reset_index(drop=True)


def combine_phases(parts: list[pd.DataFrame], out_ns: int, n_dev: int) -> pd.DataFrame:
    """The windows' phases rows summed per (request_id, phase) (see the module doc); ``out_ns``: the
    outside row's time (outside_ns)."""
    df = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else parts[0]
    if not len(df):
        return df
    key = pd.Series(list(zip(_num(df["request_id"]).fillna(-1).tolist(), df["phase"].astype(str).tolist(),
                             strict=True)), index=df.index)
    rows = []
    for _, g in df.groupby(key, sort=False):
        first: dict[str, Any] = {str(k): v for k, v in g.iloc[0].to_dict().items()}
        row = dict(first)
        for c in SUMS:
            if c in g:
                vals = _num(g[c])
                row[c] = vals.sum() if vals.notna().any() else first[c]
        if "idle_profiler_ns" in g:
            vals = _num(g["idle_profiler_ns"])
            row["idle_profiler_ns"] = vals.sum() if vals.notna().all() else None
        if "flops" in g and _num(g["flops"]).notna().any():
            best = g.iloc[int(np.argmax(_num(g["flops"]).fillna(-1).to_numpy()))]
            for c in ("ceiling", "ceiling_dtype"):
                if c in g:
                    row[c] = best[c]
            _rates(row, best)
        if "energy_j_per_token" in g:
            tok = (_num(g["energy_j"]) / _num(g["energy_j_per_token"])).sum()
            row["energy_j_per_token"] = row["energy_j"] / tok if tok and row.get("energy_j") == row.get("energy_j") \
                else first["energy_j_per_token"]
        for c in ("gpm_dram_bw_util_pct", "gpm_dram_tbps"):
            if c in g and _num(g[c]).notna().any():
                w, v = _num(g["time_ns"]), _num(g[c])
                ok = v.notna()
                row[c] = float((v[ok] * w[ok]).sum() / w[ok].sum()) if w[ok].sum() else float(v[ok].mean())
        if str(row["phase"]) == "outside":  # each window saw its own span: the run's is known only here
            row["time_ns"] = out_ns
            if n_dev and _fin(row.get("gpu_busy_ns")):
                row["idle_ns"] = max(out_ns * n_dev - row["gpu_busy_ns"], 0)
                if "idle_host_ns" in row:
                    known = sum(row[c] for c in ("idle_wait_ns", "idle_before_window_ns", "idle_profiler_ns")
                                if _fin(row.get(c)))
                    row["idle_host_ns"] = max(row["idle_ns"] - known, 0)
        rows.append(row)
    out = _order(pd.DataFrame(rows, columns=df.columns))
    for c in out.columns:
        if c in df and df[c].dtype != object:
            with contextlib.suppress(TypeError, ValueError):
                out[c] = out[c].astype(df[c].dtype)
    if "advice" in out:
        out["advice"] = [_advice.advice({str(k): v for k, v in r.items()}) if str(r.get("phase")) != "outside" else None
                         for r in out.to_dict("records")]
    return out


def _fin(v: Any) -> bool:
    return v is not None and v is not pd.NA and v == v


def _rates(row: dict[str, Any], best: pd.Series) -> None:
    """achieved_* and pct_peak_* of ``row`` from its sums, against the peaks ``best``'s values imply."""
    busy: Any = row.get("gpu_busy_ns")
    wall: Any = row.get("time_ns")
    flops: Any = row.get("flops")
    nbytes: Any = row.get("bytes")
    if _fin(busy) and busy > 0:
        if "achieved_tflops" in row and _fin(flops):
            peak_f = (100.0 * best["achieved_tflops"] / best["pct_peak_flops"]
                      if _fin(best.get("pct_peak_flops")) and best["pct_peak_flops"] else None)
            row["achieved_tflops"] = flops / busy / 1e3
            if peak_f:
                row["pct_peak_flops"] = 100.0 * row["achieved_tflops"] / peak_f
        if "achieved_tbps" in row and _fin(nbytes):
            peak_b = (100.0 * best["achieved_tbps"] / best["pct_peak_bandwidth"]
                      if _fin(best.get("pct_peak_bandwidth")) and best["pct_peak_bandwidth"] else None)
            row["achieved_tbps"] = nbytes / busy / 1e3
            if peak_b:
                row["pct_peak_bandwidth"] = 100.0 * row["achieved_tbps"] / peak_b
    if _fin(wall) and wall > 0:
        if "achieved_tflops_wall" in row and _fin(flops):
            row["achieved_tflops_wall"] = flops / wall / 1e3
        if "achieved_tbps_wall" in row and _fin(nbytes):
            row["achieved_tbps_wall"] = nbytes / wall / 1e3


def combine_timeline(parts: list[pd.DataFrame], span: tuple[int, int]) -> pd.DataFrame:
    """Per device: the windows' sums, span and idle over the whole run."""
    df = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else parts[0]
    if not len(df):
        return df
    out = df.groupby("device", dropna=False, sort=True)[list(TIMELINE_SUMS)].sum().reset_index()
    out["span_ns"] = span[1] - span[0]
    out["idle_ns"] = (out["span_ns"] - out["busy_ns"]).clip(lower=0)
    return out[list(df.columns)].astype({c: df[c].dtype for c in df.columns if c in out})


def combine_requests(parts: list[pd.DataFrame], built: pd.DataFrame) -> pd.DataFrame:
    """``built`` (requests.build over the whole run's steps) with the windows' per-request sums."""
    df = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else parts[0]
    if not len(df) or not len(built):
        return built if len(built) else df
    rid = _num(df["request_id"])
    extra = [c for c in df.columns if c not in built.columns]
    firsts = df.groupby(rid, sort=True)[extra].first() if extra else None
    out = built.copy()
    key = _num(out["request_id"])
    if firsts is not None:
        for c in extra:
            out[c] = key.map(firsts[c]).to_numpy()
    for c in REQUEST_SUMS:
        if c in df:
            sums = _num(df[c]).groupby(rid).sum(min_count=1)
            out[c] = key.map(sums).to_numpy()
    if "mean_step_share" in df and "steps" in df:
        w = _num(df["steps"])
        tot = (_num(df["mean_step_share"]) * w).groupby(rid).sum(min_count=1) / w.groupby(rid).sum()
        out["mean_step_share"] = key.map(tot).to_numpy()
    return out[[c for c in df.columns if c in out.columns]]


_RANK = {"ok": 0, "caveat": 1, "wrong": 2}


def combine_checks(verdicts: list[Any]) -> Any:
    """Per check code, the worst finding of any window (the first window's where they tie)."""
    best: dict[str, Any] = {}
    for v in verdicts:
        if v is None:
            continue
        for f in v.findings:
            if f.code not in best or _RANK.get(f.severity, 0) > _RANK.get(best[f.code].severity, 0):
                best[f.code] = f
    return _health.Verdict(tuple(best.values())) if best else None


# --- the driver ---------------------------------------------------------------------


def analyse_windowed(run: RunDir, analyze: ModuleType, warmup_requests: int | None = None,
                     ceiling_override: str | None = None, window_events: int | None = None) -> AnalysisOutput:
    """``tracekit.app.analyze.analyse_run``'s contract, window by window (see the module doc).
    ``analyze``: tracekit.app.analyze, which calls this (its ceiling, rank, frame and output helpers;
    handed in, not imported, so that the two modules do not import each other)."""
    with run.rewrite() as work:
        return _analyse(work, analyze, warmup_requests, ceiling_override, window_events or WINDOW_EVENTS)


def _analyse(run: RunDir, _analyze: ModuleType, warmup_requests: int | None, ceiling_override: str | None,
             window_events: int) -> AnalysisOutput:
    run.check_ingested()
    manifest = run.read_manifest()
    ceilings = decide(manifest, ceiling_override)
    cuts = cut_times(run, window_events)
    rank = _analyze.run_rank({t: run.read_columns(t, ["rank"]).slice(0, 1) for t in BIG})
    _analyze.mark_running(run, "analysis", {"windows": len(cuts.cuts) + 1})
    kept: dict[str, list[Any]] = {k: [] for k in (*PER_STEP, "phases", "gpu_timeline", "requests")}
    warnings: list[str] = []
    checks: list[Any] = []
    workload: Any = None
    warmup: Any = None
    spans: list[tuple[int, int]] = []
    n_steps = 0
    n_dev: set[Any] = set()
    writers = {name: _win.ChunkWriter(run, name) for name in PER_ROW}
    total = len(cuts.cuts) + 1
    annotations = run.read_table("annotations")
    try:
        for i, w in enumerate(windows(run, cuts, _analyze.RAW_COLUMNS["other_events"])):
            progress.report("analyzing: windows", i, total)
            inp = AnalysisInput(tables=w.tables, manifest=manifest, ceilings=ceilings, warmup_first=warmup_requests)
            _analyze.check_span(inp.tables)
            span = trace_span(inp.tables)
            if span is not None:
                spans.append(span)
            out = run_passes(inp)
            gpu = inp.table("gpu_activity")
            del inp
            res = dict(out.tables)
            _check_local(res["steps"], w.lo, w.hi)
            off = local_offset(res["steps"], n_steps)
            n_steps += len(res["steps"])
            for name in (*PER_STEP, "kernel_bound", "kernel_steps"):
                res[name] = _offset(res.get(name), off)
            ks = res["kernel_steps"]
            if len(ks):
                ks = ks.copy()
                ks["row"] = w.gpu_rows[ks["row"].to_numpy(dtype=np.int64)]
                n_dev.update(ks["device"].dropna().unique().tolist())
            for name, df in (("kernel_bound", res.get("kernel_bound")), ("kernel_steps", ks)):
                if df is not None:
                    writers[name].write(output_table(name, df, rank, gpu))
            for name in kept:
                part = res.get(name)
                if part is not None:  # the phases pass's gpu_timeline is an Arrow table
                    kept[name].append(part.to_pandas() if isinstance(part, pa.Table) else part)
            # the requests pass's warnings are of the window's part of a request: the run's come from
            # the requests rebuilt over every step (_finish)
            warnings += [x for x in out.warnings if x not in warnings and not _request_warning(x)]
            checks.append(out.check)
            workload = workload or out.workload
            if out.warmup and (out.warmup.get("requests") or warmup is None):
                warmup = out.warmup
            del res, gpu, ks, out
            heap.trim()
        rows = _finish(run, writers, kept, spans, len(n_dev), annotations, manifest, workload, rank,
                       output_table)
    except BaseException:
        for wr in writers.values():
            wr.__exit__(RuntimeError, RuntimeError("analysis failed"), None)
        raise
    warnings += [x for x in rows["warnings"] if x not in warnings]
    result = AnalysisOutput(tables={k: v for k, v in rows["frames"].items() if v is not None},
                            warnings=tuple(warnings), workload=workload, warmup=warmup,
                            check=combine_checks(checks), ceiling=ceilings.ceiling, manifest=manifest)
    info = {**_analyze.analysis_info(result), "kernels_over_peak": rows.get("kernels_over_peak", 0),
            "windows": len(cuts.cuts) + 1}
    for x in warnings:
        run.add_warning(f"analyze: {x}")
    run.update_manifest(analysis={**info, "status": STATUS_COMPLETE,
                                  "rows": {k: rows["rows"][k] for k in _analyze.OUTPUTS if k in rows["rows"]}})
    return result


def _finish(run: RunDir, writers: dict[str, Any], kept: dict[str, list[Any]], spans: list[tuple[int, int]],
            n_dev: int, annotations: pa.Table, manifest: Mapping[str, Any], workload: Any, rank: int,
            output_table: Any) -> dict[str, Any]:
    counts: dict[str, int] = {}
    over = 0
    for name, wr in writers.items():
        wr.__exit__(None, None, None)
        counts[name] = wr.rows
    kb = run.read_columns("kernel_bound", ["over_peak"])
    if "over_peak" in kb.column_names:
        over = int(pc.sum(pc.fill_null(kb.column("over_peak"), False)).as_py() or 0)
    frames: dict[str, pd.DataFrame] = {
        # the per-activity tables are on disk; the result holds one column of each (a summary's)
        "kernel_bound": kb.to_pandas(),
        "kernel_steps": run.read_columns("kernel_steps", ["step_id"]).to_pandas(),
    }
    for name in PER_STEP:
        parts = [p for p in kept[name] if p is not None]
        frames[name] = pd.concat(parts, ignore_index=True) if parts else None  # type: ignore[assignment]
    span = (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else (0, 0)
    out_ns = outside_ns(frames["steps"], span)
    frames["phases"] = combine_phases(kept["phases"], out_ns, n_dev) if kept["phases"] else None  # type: ignore[assignment]
    frames["gpu_timeline"] = combine_timeline(kept["gpu_timeline"], span) if kept["gpu_timeline"] else None  # type: ignore[assignment]
    steps = frames["steps"]
    built = None
    built_warnings: list[str] = []
    if steps is not None and len(steps):
        empty = pd.DataFrame(columns=["ts_ns", "dur_ns", "name"])
        built, _, _, built_warnings = _requests.build(steps, pd.DataFrame(), annotations, empty, dict(manifest),
                                                      workload=workload)
    frames["requests"] = (combine_requests(kept["requests"], built) if built is not None and kept["requests"]
                          else (kept["requests"][0] if kept["requests"] else None))  # type: ignore[assignment]
    for name in ("steps", "step_bound", "step_requests", "phases", "gpu_timeline", "requests"):
        df = frames.get(name)
        if df is None:
            continue
        table = output_table(name, df, rank, None)
        run.write_table(name, table)
        counts[name] = table.num_rows
    return {"frames": frames, "rows": counts, "kernels_over_peak": over, "warnings": built_warnings}
