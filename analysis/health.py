"""Is a trace fit to analyse? One verdict and a line per check (pure: tables in, a Verdict out).

``check(t)`` reads the tables an analysis holds (the pipeline's dict, or the same tables read back
from a run directory): gpu_activity or kernel_bound, runtime, cpu_ops, steps, step_bound, phases,
other_events, counters, ``manifest`` (run.json) and ``ceiling`` (a Ceiling or its dict; default: the
datasheet entry of the GPU run.json names). Each check gives one Finding: ``ok`` (checked, nothing
wrong), ``caveat`` (the numbers hold, with a limit the line names) or ``wrong`` (the analysis'
numbers would mislead: fix the trace first). The verdict is ``unfit`` when any finding is wrong,
``fit, with caveats`` when any is a caveat, else ``fit``.

Checks, in order: GPU activity present, dropped or unknown events, window cut mid-step, work before
the window, correlation ids that link nothing, clock domains, steps found, op shapes recorded, kernel
time without a model, profiler overhead, ceiling. Rules and thresholds: docs/metrics.md, "Trace check".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis import idle as _idle
from tracekit.analysis.columns import matches
from tracekit.analysis.frames import as_df
from tracekit.analysis.intervals import union
from tracekit.analysis.steps import live_ops

OK, CAVEAT, WRONG = "ok", "caveat", "wrong"
# A share of the analysed time (or of the GPU's busy time) from which a finding makes the analysis
# wrong rather than limited: beyond it a phase's split or a step's latency moves by more than the
# rounding of any number the reports print.
WRONG_SHARE = 0.05
# Kernel time without a cost model beyond this share is a caveat (the bound split leaves it "other").
UNMODELLED_SHARE = 0.10
# A profiled pass slower than the unprofiled one by more than this is a caveat.
PROFILER_SHARE = 0.10
# Kineto's own buffer work (``overhead`` events) inside the steps beyond this share of their time is a caveat.
OVERHEAD_SHARE = 0.01
# A GPU activity that starts this long before the runtime call that launched it began: the GPU's
# and the host's timestamps are on different clocks (an activity cannot start before its launch).
CLOCK_SLACK_NS = 10_000
# Runtime / driver calls that put work on the GPU (a kernel, a graph, a copy, a memset): each should
# link to at least one GPU activity by its correlation id. Not a host function's launch, nor a query.
LAUNCH = re.compile(r"^(?!.*(HostFunc|Attribute|GetInfo)).*"
                    r"(LaunchKernel|LaunchCooperativeKernel|GraphLaunch|ModuleLaunchKernel|cuLaunch|Memcpy|Memset)")
# other_events categories tracekit knows and needs no rows from (flows, Kineto's overhead, metadata).
KNOWN_OTHER = frozenset({"ac2g", "overhead", "trace", "", "none"})


@dataclass(frozen=True)
class Finding:
    code: str  # gpu | events | window_cut | before_window | unlinked | clocks | steps | shapes | unmodelled | profiler | ceiling
    severity: str  # ok | caveat | wrong
    what: str  # what was found, with its numbers
    fix: str = ""  # what to do about it ("" for ok)

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "severity": self.severity, "what": self.what, "fix": self.fix}


@dataclass(frozen=True)
class Verdict:
    findings: tuple[Finding, ...]

    @property
    def wrong(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == WRONG)

    @property
    def caveats(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == CAVEAT)

    @property
    def fit(self) -> bool:
        return not self.wrong

    @property
    def headline(self) -> str:
        """``unfit: ...`` / ``fit, with N caveats: ...`` / ``fit: every check passed``."""
        wrong, cav = self.wrong, self.caveats
        names = ", ".join(LABELS[f.code] for f in cav)
        if wrong:
            text = f"unfit: {', '.join(LABELS[f.code] for f in wrong)}"
            return text + (f" (and {len(cav)} caveat{'s' * (len(cav) != 1)}: {names})" if cav else "")
        if cav:
            return f"fit, with {len(cav)} caveat{'s' * (len(cav) != 1)}: {names}"
        return "fit: every check passed"

    @property
    def exit_code(self) -> int:
        """0: fit (caveats or not); 1: a finding makes the analysis wrong."""
        return 0 if self.fit else 1

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": "fit" if self.fit else "unfit", "headline": self.headline,
                "findings": [f.to_dict() for f in self.findings]}


LABELS = {"gpu": "no GPU activity", "events": "dropped or unknown events", "window_cut": "window cut mid-step",
          "before_window": "work before the window", "unlinked": "correlation ids that link nothing",
          "clocks": "clock domains", "steps": "no steps", "shapes": "shapes not recorded",
          "unmodelled": "kernel time without a model", "profiler": "profiler overhead", "ceiling": "no ceiling"}


def check(tables: Mapping[str, Any], *, manifest: Mapping[str, Any] | None = None, ceiling: Any = None) -> Verdict:
    """Every check over the analysis' tables (see the module doc), with run.json (``manifest``) and the
    ceiling the analysis used (a Ceiling, its dict as run.json keeps it, or None: the GPU has none)."""
    t = {**tables, "manifest": manifest or {}, "ceiling": ceiling}
    gpu = _kernels(t)
    out = [_gpu(gpu, t), _events(t)]
    if len(gpu):
        steps = _steps_frame(t)
        runtime = as_df(t.get("runtime"))
        links = Links.of(gpu, runtime)
        out += [_window_cut(gpu, links, steps), _before_window(t, steps), _unlinked(gpu, links, runtime),
                _clocks(gpu, runtime, t), _steps_found(steps), _shapes(gpu, t), _unmodelled(gpu, t),
                _profiler(t, steps), _ceiling(t)]
    return Verdict(tuple(out))


# --- inputs ----------------------------------------------------------------------


def _kernels(t: Mapping[str, Any]) -> pd.DataFrame:
    """GPU activities with ts/dur/device/correlation (kernel_bound where the bound pass ran: its model,
    bound and issue time too)."""
    kb = t.get("kernel_bound")
    df = as_df(kb) if kb is not None and len(kb) else as_df(t.get("gpu_activity"))
    if df.empty or "ts_ns" not in df:
        return pd.DataFrame(columns=["ts_ns", "dur_ns", "device", "correlation", "kind", "name"])
    return df.dropna(subset=["ts_ns"]).reset_index(drop=True)


def _steps_frame(t: Mapping[str, Any]) -> pd.DataFrame:
    sb = t.get("step_bound")
    df = as_df(sb) if sb is not None and len(sb) else as_df(t.get("steps"))
    if len(df) and "captured" in df:
        df = df[df["captured"].fillna(True).astype(bool)]
    return df.reset_index(drop=True)


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(df[col], errors="coerce") if col in df else pd.Series(np.nan, index=df.index)


def _ends(df: pd.DataFrame) -> np.ndarray:
    return (_num(df, "ts_ns").fillna(0).to_numpy(dtype=np.int64) + _num(df, "dur_ns").fillna(0).to_numpy(dtype=np.int64))


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f} ms"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x >= 0.01 or x == 0 else f"{100 * x:.1f}%"


def _step_time(steps: pd.DataFrame) -> float:
    if "time_ns" in steps:
        return float(_num(steps, "time_ns").fillna(0).sum())
    if not len(steps):
        return 0.0
    s = _num(steps, "cpu_start_ns")
    e = np.fmax(_num(steps, "cpu_end_ns"), _num(steps, "gpu_end_ns"))
    return float((e - s).fillna(0).sum())


# --- the checks ------------------------------------------------------------------


def _gpu(gpu: pd.DataFrame, t: Mapping[str, Any]) -> Finding:
    if len(gpu):
        devices = gpu["device"].nunique() if "device" in gpu else 1
        return Finding("gpu", OK, f"{len(gpu):,} GPU activities on {devices} device{'s' * (devices != 1)}")
    ingest = _mapping(_mapping(_mapping(t.get("manifest")).get("ingest")).get("counts"))
    why = "; ".join(str(w) for w in _mapping(ingest.get("warnings")))
    return Finding("gpu", WRONG, "no GPU activity: there is no GPU time to split" + (f" ({why})" if why else ""),
                   "record with the GPU activities on: torch.profiler(activities=[ProfilerActivity.CPU, "
                   "ProfilerActivity.CUDA]) (tracekit reads CUDA and HIP kernels, copies and memsets)")


def _mapping(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _events(t: Mapping[str, Any]) -> Finding:
    ingest = _mapping(_mapping(t.get("manifest")).get("ingest"))
    counts = _mapping(ingest.get("counts"))
    files = ingest.get("files")
    files = files if isinstance(files, list) else []
    truncated = [str(f.get("truncated")) for f in files if isinstance(f, Mapping) and f.get("truncated")]
    if truncated:
        return Finding("events", WRONG, f"the trace file is cut short ({'; '.join(truncated)}): the events after "
                       "the cut are lost", "copy the trace again from where it was written (it was cut while "
                       "being written or copied)")
    skipped = {str(k): int(v) for k, v in _mapping(counts.get("skipped")).items() if isinstance(v, int) and v}
    read = counts.get("events_read") if isinstance(counts.get("events_read"), int) else 0
    unknown = _unknown_events(t.get("other_events"))
    bits = []
    if skipped:
        bits.append(f"{sum(skipped.values()):,} of {read:,} events skipped at ingest ("
                    + ", ".join(f"{n:,} {k}" for k, n in sorted(skipped.items())) + ")")
    if unknown:
        bits.append(f"{sum(unknown.values()):,} timed events of categories tracekit does not read ("
                    + ", ".join(f"{n:,} {k}" for k, n in sorted(unknown.items(), key=lambda kv: -kv[1])[:4]) + ")")
    if not bits:
        return Finding("events", OK, f"every one of the {read:,} events read went to a table" if read
                       else "no ingest counts in run.json")
    return Finding("events", CAVEAT, "; ".join(bits),
                   "see run.json ingest.counts; events of another device (e.g. MTIA) or a newer profiler "
                   "are kept in other_events, not analysed")


def _unknown_events(other: Any) -> dict[str, int]:
    o = as_df(other)
    if o.empty or "cat" not in o:
        return {}
    timed = o[o["dur_ns"].notna()] if "dur_ns" in o else o  # complete events (flows and metadata have none)
    cats = timed["cat"].fillna("").astype(str)
    low = cats.str.lower()
    cats = cats[~(low.isin(KNOWN_OTHER) | low.str.startswith("tracekit"))]  # tracekit's own tracks too
    return {str(k): int(v) for k, v in cats.value_counts().items()}


def _launches(runtime: pd.DataFrame) -> pd.DataFrame:
    """Launch calls (LAUNCH), less those made while a stream was being captured into a graph (between
    a BeginCapture and its EndCapture on the thread): they record work, the GPU runs none of it."""
    if runtime.empty or "name" not in runtime or "ts_ns" not in runtime:
        return runtime.iloc[0:0]
    out = runtime[matches(runtime["name"], lambda n: bool(LAUNCH.search(n)))]
    names = runtime["name"].astype(str)
    begins = runtime[names.str.contains("BeginCapture", regex=False)]
    if begins.empty or out.empty:
        return out
    ends = runtime[names.str.contains("EndCapture", regex=False)]
    keep = np.ones(len(out), dtype=bool)
    ts = _num(out, "ts_ns").to_numpy(dtype=float)
    tid = out["tid"].to_numpy() if "tid" in out else np.zeros(len(out))
    for b in begins.itertuples(index=False):
        same = ends[(ends["ts_ns"] > b.ts_ns) & ((ends["tid"] == b.tid) if "tid" in ends else True)]
        stop = float(same["ts_ns"].min()) if len(same) else np.inf
        keep &= ~((ts >= b.ts_ns) & (ts < stop) & ((tid == b.tid) if "tid" in out else True))
    return out[keep]


def _corr_set(df: pd.DataFrame) -> set[int]:
    if "correlation" not in df:
        return set()
    return set(_num(df, "correlation").dropna().astype("int64").tolist())


@dataclass(frozen=True)
class Links:
    """Which GPU activities link to a runtime call and which launch calls to GPU activity, by correlation
    id; ``head``: activities launched before the window (unlinked, before the first linked one);
    ``tail``: launch calls the GPU ran after the window closed (unlinked, after the last linked one)."""

    gpu_linked: np.ndarray
    head: np.ndarray
    launches: pd.DataFrame
    launch_linked: np.ndarray
    tail: np.ndarray

    @staticmethod
    def of(gpu: pd.DataFrame, runtime: pd.DataFrame) -> Links:
        rcorr, gcorr = _corr_set(runtime), _corr_set(gpu)
        gts = _num(gpu, "ts_ns").to_numpy(dtype=float)
        gl = _num(gpu, "correlation").isin(rcorr).to_numpy() if rcorr else np.zeros(len(gpu), dtype=bool)
        head = (~gl) & (gts < np.nanmin(gts[gl])) if gl.any() else np.zeros(len(gpu), dtype=bool)
        launches = _launches(runtime)
        ll = _num(launches, "correlation").isin(gcorr).to_numpy() if len(launches) else np.zeros(0, dtype=bool)
        lts = _num(launches, "ts_ns").to_numpy(dtype=float)
        tail = (~ll) & (lts > np.nanmax(lts[ll])) if ll.any() else np.zeros(len(launches), dtype=bool)
        return Links(gl, head, launches, ll, tail)


def _window_cut(gpu: pd.DataFrame, links: Links, steps: pd.DataFrame) -> Finding:
    """The window closed before the GPU ran the last launches, or opened on work launched before it
    (Links' tail and head)."""
    bits, fixes = [], []
    total = _step_time(steps)
    affected = 0.0
    if links.tail.any():
        n = int(links.tail.sum())
        lts = _num(links.launches, "ts_ns").to_numpy(dtype=float)
        cut = _steps_at(steps, lts[links.tail])
        cut_time = _step_time(steps[steps["step_id"].isin(cut)]) if cut else 0.0
        affected += cut_time  # the GPU part of those steps is missing: their numbers are partial
        where = (f": {len(cut)} step{'s' * (len(cut) != 1)} ({_pct(cut_time / total) if total else '-'} of the step "
                 "time) lack their GPU work") if cut else " (outside every step)"
        bits.append(f"the window ends mid-step: the last {n:,} launch call{'s' * (n != 1)} ran on the GPU after the "
                    f"trace stopped{where}")
        fixes.append("stop the profiler after a synchronise (torch.cuda.synchronize() before prof.stop(), or end the "
                     "schedule's active steps one step before the loop's last)")
    if links.head.any():
        n = int(links.head.sum())
        head = gpu[links.head]
        dur = float(_num(head, "dur_ns").fillna(0).sum())
        starts = _num(head, "ts_ns").to_numpy(dtype=float)
        cut = _steps_at(steps, starts)
        inside = _in_steps(steps, starts)
        affected += float(_num(head, "dur_ns").fillna(0).to_numpy()[inside].sum())  # an earlier step's work
        where = (f", inside {len(cut)} step{'s' * (len(cut) != 1)}, whose busy time it inflates") if cut \
            else " (outside every step)"
        bits.append(f"the window opens mid-step: {n:,} GPU activit{'ies' if n != 1 else 'y'} ({_ms(dur)}) launched "
                    f"before it ran at its start{where}")
        fixes.append("start the profiler between steps (schedule(wait=..., warmup=...), prof.step() at each step's "
                     "end, a synchronise before the first active step)")
    if not bits:
        return Finding("window_cut", OK, "the window cuts no step: every launch ran inside it and every GPU "
                       "activity was launched inside it")
    share = affected / total if total else 0.0
    return Finding("window_cut", WRONG if share >= WRONG_SHARE else CAVEAT, "; ".join(bits), "; ".join(fixes))


def _windows(steps: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Each step's window [start, end): step_bound's, else [cpu start, max(cpu end, gpu end))."""
    if "start_ns" in steps and "end_ns" in steps:
        return _num(steps, "start_ns"), _num(steps, "end_ns")
    return _num(steps, "cpu_start_ns"), pd.Series(np.fmax(_num(steps, "cpu_end_ns"), _num(steps, "gpu_end_ns")))


def _in_steps(steps: pd.DataFrame, ts: np.ndarray) -> np.ndarray:
    """Per instant of ``ts``: whether some step's window holds it."""
    if not len(steps) or not len(ts):
        return np.zeros(len(ts), dtype=bool)
    s, e = _windows(steps)
    ok = (s.notna() & e.notna()).to_numpy()
    w = union(s.to_numpy()[ok].astype(np.int64), e.to_numpy()[ok].astype(np.int64))
    if not len(w):
        return np.zeros(len(ts), dtype=bool)
    i = np.searchsorted(w[:, 0], ts, side="right") - 1
    return (i >= 0) & (ts < w[np.clip(i, 0, None), 1])


def _steps_at(steps: pd.DataFrame, ts: np.ndarray) -> set[Any]:
    """The step ids whose window [start, end) holds any of the instants ``ts``."""
    if not len(steps) or "step_id" not in steps or not len(ts):
        return set()
    s, e = _windows(steps)
    out = set()
    for sid, lo, hi in zip(steps["step_id"], s, e, strict=True):
        if pd.notna(lo) and pd.notna(hi) and ((ts >= lo) & (ts < hi)).any():
            out.add(sid)
    return out


def _before_window(t: Mapping[str, Any], steps: pd.DataFrame) -> Finding:
    """The bound pass's idle_before_window_ns over the steps (the whole trace's outside row without steps)."""
    if len(steps) and "idle_before_window_ns" in steps:
        rows = steps
        hit = int((_num(rows, "idle_before_window_ns").fillna(0) > 0).sum())
        scope = f"of the step time ({hit} of {len(steps)} step{'s' * (len(steps) != 1)})"
    else:
        ph = as_df(t.get("phases"))
        rows = ph[ph["phase"].astype(str) == "outside"] if len(ph) and "phase" in ph else ph
        if rows.empty or "idle_before_window_ns" not in rows:
            return Finding("before_window", OK, "no idle split to check (no GPU timeline)")
        scope = "of the trace"
    b = float(_num(rows, "idle_before_window_ns").fillna(0).sum())
    # device time: busy + idle (time_ns × devices)
    tt = float((_num(rows, "gpu_busy_ns").fillna(0) + _num(rows, "idle_ns").fillna(0)).sum())
    share = b / tt if tt else 0.0
    if b <= 0:
        return Finding("before_window", OK, f"no GPU time behind unseen work: every launch that found the GPU idle "
                       f"started within {_idle.UNSEEN_LAG_NS // 1000} us")
    sev = WRONG if share >= WRONG_SHARE else CAVEAT
    return Finding("before_window", sev,
                   f"for {_ms(b)} ({_pct(share)}) {scope} the GPU had the step's work queued and ran nothing the "
                   "trace shows: it ran work launched before the window (or by another process); the step times "
                   "include it (idle_before_window_ns)",
                   "start the window earlier or record a longer one and analyse the steps after the first; removing "
                   "host syncs will not help")


def _unlinked(gpu: pd.DataFrame, links: Links, runtime: pd.DataFrame) -> Finding:
    """Correlation ids that link nothing, less the window's edges (``_window_cut`` reports those)."""
    dur = _num(gpu, "dur_ns").fillna(0).to_numpy(dtype=float)
    busy = float(dur.sum()) or 1.0
    lost = (~links.gpu_linked) & (~links.head)
    orphans = int(((~links.launch_linked) & (~links.tail)).sum())
    n_launch = len(links.launches)
    if not lost.any() and not orphans:
        return Finding("unlinked", OK, f"every GPU activity links to its launch call and every one of the "
                       f"{n_launch:,} launch calls to GPU activity")
    share = float(dur[lost].sum()) / busy
    bits, fixes = [], []
    if lost.any():
        bits.append(f"{int(lost.sum()):,} of {len(gpu):,} GPU activities ({_pct(share)} of the GPU's busy time) link "
                    "to no runtime call: their issue time is unknown (the idle before them counts as the host's) and "
                    "their launching op is found only by time")
        fixes.append("record the CUDA runtime calls (torch.profiler's ProfilerActivity.CUDA records both)")
    if runtime.empty:
        bits.append("the trace has no runtime calls at all")
    if orphans:
        bits.append(f"{orphans:,} of {n_launch:,} launch calls link to no GPU activity (the profiler dropped their GPU "
                    "records, or never records that kind: the GPU time is missing)")
        fixes.append("record a shorter window (the profiler's activity buffers overflow on long ones)")
    return Finding("unlinked", WRONG if share >= WRONG_SHARE else CAVEAT, "; ".join(bits), "; ".join(fixes))


def _clocks(gpu: pd.DataFrame, runtime: pd.DataFrame, t: Mapping[str, Any]) -> Finding:
    bits, sev = [], OK
    if len(runtime) and "correlation" in runtime and "correlation" in gpu:
        rt = runtime.dropna(subset=["correlation", "ts_ns"])
        first = pd.Series(_num(rt, "ts_ns").to_numpy(), index=_num(rt, "correlation").astype("int64").to_numpy())
        first = first[~first.index.duplicated(keep="first")]
        corr = _num(gpu, "correlation")
        ok = corr.notna().to_numpy()
        launch = first.reindex(corr[ok].astype("int64").to_numpy()).to_numpy(dtype=float)
        lead = launch - _num(gpu, "ts_ns").to_numpy(dtype=float)[ok]
        early = lead > CLOCK_SLACK_NS
        n_linked = int((~np.isnan(lead)).sum())
        if early.any():
            share = float(early.sum()) / max(n_linked, 1)
            bits.append(f"{int(early.sum()):,} of {n_linked:,} GPU activities start before the call that launched "
                        f"them (by up to {_ms(float(np.nanmax(lead)))}): the GPU's and the host's clocks disagree")
            sev = WRONG if share >= WRONG_SHARE else CAVEAT
    manifest = _mapping(t.get("manifest"))
    span = _span(gpu)
    counters = as_df(t.get("counters"))
    if len(counters) and span is not None and "ts_ns" in counters:
        cts = _num(counters, "ts_ns").dropna()
        if len(cts) and (cts.max() < span[0] or cts.min() > span[1]):
            bits.append(f"the counter samples ({len(cts):,}) lie outside the trace's GPU span: another clock")
            sev = WRONG if sev == WRONG else CAVEAT
    files = _mapping(manifest.get("ingest")).get("files") or []
    if "rank" in gpu and gpu["rank"].nunique() > 1:  # several ranks' files merged into one run
        ranks = rank_clocks({r: _span(g) or (np.nan, np.nan) for r, g in gpu.groupby("rank")})
        if ranks.severity != OK:
            bits.append(ranks.what)
            sev = WRONG
    if not bits:
        merged = f"; {len(files)} files merged" if len(files) > 1 else ""
        return Finding("clocks", OK, "GPU activities start after their launch calls" +
                       (", counter samples inside the trace" if len(counters) else "") + merged)
    return Finding("clocks", sev, "; ".join(bits),
                   "record every file with one profiler session on one host clock (Kineto's baseTimeNanoseconds), "
                   "or align them before merging")


def rank_clocks(spans: Mapping[Any, tuple[float, float]]) -> Finding:
    """The ranks (files) of one job ran at the same time: where their GPU spans [first start, last end)
    do not all overlap, their clocks differ (or they recorded different windows), and every cross-rank
    number (skew, stragglers, NCCL wait) would be wrong."""
    ok = {r: s for r, s in spans.items() if not (np.isnan(s[0]) or np.isnan(s[1]))}
    if len(ok) < 2:
        return Finding("clocks", OK, "one rank")
    late = max(ok, key=lambda r: ok[r][0])
    early = min(ok, key=lambda r: ok[r][1])
    gap = ok[late][0] - ok[early][1]
    if gap < 0:
        return Finding("clocks", OK, f"the GPU spans of the {len(ok)} ranks overlap")
    return Finding("clocks", WRONG, f"rank {late}'s GPU activity starts {gap / 1e9:,.3f} s after rank {early}'s "
                   "ends: the ranks' clocks differ (or they recorded different windows)",
                   "record every rank in one profiler session (one schedule, started together) on synchronised "
                   "host clocks")


def _span(gpu: pd.DataFrame) -> tuple[float, float] | None:
    ts = _num(gpu, "ts_ns")
    if ts.dropna().empty:
        return None
    return float(ts.min()), float(_ends(gpu).max())


def _steps_found(steps: pd.DataFrame) -> Finding:
    if len(steps):
        src = ", ".join(sorted({str(s) for s in steps["source"].dropna()})) if "source" in steps else "?"
        return Finding("steps", OK, f"{len(steps):,} step{'s' * (len(steps) != 1)} found ({src})")
    return Finding("steps", CAVEAT, "no steps found: the whole trace is one outside row (no per-step or per-phase "
                   "split, no TTFT/TPOT)",
                   "annotate each forward pass (record_function, or an engine's step annotation) or call prof.step() "
                   "once per iteration, or record with `tracekit record`")


def _shapes(gpu: pd.DataFrame, t: Mapping[str, Any]) -> Finding:
    cpu = live_ops(as_df(t.get("cpu_ops")))
    meta = _mapping(_mapping(t.get("manifest")).get("trace_meta"))
    has = len(cpu) > 0 and "input_dims" in cpu and any(_has_dims(v) for v in cpu["input_dims"].to_numpy())
    if not has:
        off = " (record_shapes off in the trace's metadata)" if meta.get("record_shapes") in (0, False) else ""
        return Finding("shapes", CAVEAT, f"no op shapes in the trace{off}: kernels are classed by name only, "
                       "FLOPs and bytes unknown",
                       "record with record_shapes=True, or run `tracekit counters` to measure the kernels")
    if "launch_name" not in gpu or "op_id" not in gpu:
        return Finding("shapes", OK, "op shapes recorded")
    graph = gpu["launch_name"].astype(str).str.contains("GraphLaunch", na=False).to_numpy()
    if not graph.any():
        return Finding("shapes", OK, "op shapes recorded")
    # A replayed graph's kernels get shapes from the op that launched each at capture (a capture trace's op,
    # cpu_ops.captured); the op around the replay (e.g. a compiled region) has none.
    ops = as_df(t.get("cpu_ops"))
    captured = (set(_num(ops, "op_id")[ops["captured"].astype("boolean").fillna(False).to_numpy(dtype=bool)]
                    .dropna().astype("int64").tolist()) if "captured" in ops and "op_id" in ops else set())
    blind = graph & ~_num(gpu, "op_id").isin(captured).to_numpy()
    dur = _num(gpu, "dur_ns").fillna(0).to_numpy(dtype=float)
    share = float(dur[blind].sum()) / (float(dur.sum()) or 1.0)
    n_graph, n_blind = int(graph.sum()), int(blind.sum())
    if share > UNMODELLED_SHARE:
        return Finding("shapes", CAVEAT, f"op shapes recorded, but {n_blind:,} of the {n_graph:,} graph-replayed "
                       f"kernels ({_pct(share)} of the GPU's busy time) have no captured op to take shapes from",
                       "pass the engine's graph-capture trace where it is not beside the trace (--capture FILE, "
                       "or a capture_traces/ folder); a kernel no captured op launched has no shapes: `tracekit "
                       "counters` measures it")
    return Finding("shapes", OK, f"op shapes recorded; {n_graph - n_blind:,} of the {n_graph:,} graph-replayed "
                   "kernels take them from a captured op")


def _has_dims(v: Any) -> bool:
    """An op's Input Dims value holds at least one shape (a list / array, or its text)."""
    if v is None or (isinstance(v, float) and v != v):
        return False
    if isinstance(v, str):
        return v not in ("", "[]", "null", "None")
    try:
        return len(v) > 0
    except TypeError:
        return False


def _unmodelled(gpu: pd.DataFrame, t: Mapping[str, Any]) -> Finding:
    if "bound" not in gpu or "model" not in gpu:
        return Finding("unmodelled", OK, "no kernel classes (the bound pass did not run)")
    kernels = gpu[gpu["kind"].astype(str) == "kernel"] if "kind" in gpu else gpu
    dur = _num(kernels, "dur_ns").fillna(0)
    total = float(dur.sum())
    none = (kernels["model"].astype(str) == "none") & (kernels["bound"].astype(str) == "other")
    share = float(dur[none].sum()) / total if total else 0.0
    if share <= UNMODELLED_SHARE:
        return Finding("unmodelled", OK, f"{_pct(share)} of the kernel time has no cost model")
    top = dur[none].groupby(kernels.loc[none, "name"].astype(str)).sum().sort_values(ascending=False).head(3)
    names = ", ".join(f"{str(n)[:40]} {_ms(float(v))}" for n, v in top.items())
    return Finding("unmodelled", CAVEAT, f"{_pct(share)} of the kernel time ({_ms(float(dur[none].sum()))}) has no "
                   f"cost model and counts as other_ns (most: {names})",
                   "run `tracekit counters` to measure those kernels with Nsight Compute")


def _profiler(t: Mapping[str, Any], steps: pd.DataFrame) -> Finding:
    manifest = _mapping(t.get("manifest"))
    over = _idle.overheads(manifest)
    if over:
        shares = {k: (extra / (step - extra) if step > extra else 0.0) for k, (extra, step) in over.items()}
        worst = max(shares.items(), key=lambda kv: kv[1])
        text = ", ".join(f"{k} +{_pct(v)}" for k, v in shares.items())
        if worst[1] > PROFILER_SHARE:
            return Finding("profiler", CAVEAT, f"the profiled pass is slower than the unprofiled one ({text}); "
                           "idle_profiler_ns holds that part of the idle time",
                           "record fewer steps (--trace-steps) and read latency from the unprofiled pass")
        return Finding("profiler", OK, f"the profiled pass is within {_pct(PROFILER_SHARE)} of the unprofiled one ({text})")
    meta = _mapping(manifest.get("trace_meta"))
    cpu = live_ops(as_df(t.get("cpu_ops")))
    py = int((cpu["cat"].astype(str) == "python_function").sum()) if len(cpu) and "cat" in cpu else 0
    on = [k for k in ("with_stack", "profile_memory") if meta.get(k) not in (None, 0, False)]
    overhead = _overhead_in_steps(t.get("other_events"), steps)
    bits, fixes = [], []
    if py or "with_stack" in on:
        bits.append(f"Python stack tracing was on ({py:,} python_function events): the host's times include the "
                    "tracer's cost, so host idle is an upper bound")
    if "profile_memory" in on:
        bits.append("memory profiling was on (profile_memory)")
    if bits:
        fixes.append("record without with_stack / profile_memory")
    total = _step_time(steps)
    if overhead and total and overhead / total >= OVERHEAD_SHARE:
        bits.append(f"the profiler's own buffer work takes {_ms(overhead)} ({_pct(overhead / total)}) of the steps")
        fixes.append("record fewer steps (a shorter active window)")
    if bits:
        fixes.append("or record with `tracekit record`, which times the same requests without the profiler")
        return Finding("profiler", CAVEAT, "; ".join(bits) + "; no unprofiled timing pass to measure it",
                       ", ".join(fixes))
    buffers = f"; its buffer work takes {_ms(overhead)} of the steps" if overhead else ""
    return Finding("profiler", OK, f"no Python or memory tracing{buffers}; the profiler's share is unknown (no "
                   "unprofiled timing pass)")


def _overhead_in_steps(other: Any, steps: pd.DataFrame) -> float:
    o = as_df(other)
    if o.empty or "cat" not in o or not len(steps):
        return 0.0
    ov = o[o["cat"].astype(str) == "overhead"]
    if ov.empty:
        return 0.0
    ts = _num(ov, "ts_ns").to_numpy(dtype=float)
    inside = np.zeros(len(ov), dtype=bool)
    s = _num(steps, "start_ns") if "start_ns" in steps else _num(steps, "cpu_start_ns")
    e = _num(steps, "end_ns") if "end_ns" in steps else _num(steps, "cpu_end_ns")
    for lo, hi in zip(s, e, strict=True):
        inside |= (ts >= lo) & (ts < hi)
    return float(_num(ov, "dur_ns").fillna(0).to_numpy()[inside].sum())


def _ceiling(t: Mapping[str, Any]) -> Finding:
    from tracekit.model.ceilings import gpu_name

    c = t.get("ceiling")
    if c is None:
        name = gpu_name(t.get("manifest") or {})
        return Finding("ceiling", CAVEAT, f"no ceiling for the GPU ({name!r} names none tracekit knows)" if name else
                       "no ceiling: the trace names no GPU", "pass --ceiling NAME (a datasheet entry) or a ceiling "
                       "file from `tracekit calibrate` on that GPU: the compute/memory/latency split needs one")
    gpu = c.get("gpu") if isinstance(c, Mapping) else getattr(c, "gpu", None)
    kind = c.get("kind") if isinstance(c, Mapping) else getattr(c, "kind", None)
    return Finding("ceiling", OK, f"ceiling {gpu} ({kind})")
