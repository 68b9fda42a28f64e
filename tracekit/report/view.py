"""The report's view model: what a run says, as plain text and numbers, for every renderer.

Terminal, HTML and Markdown renderers (tracekit.report.terminal, .html, .markdown) format these;
nothing here escapes or styles text. Every function copes with its table being absent or empty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from tracekit.analysis.advice import finite
from tracekit.store.rundir import RunDir

NOT_RECORDED = "not recorded"
TABLES = ("phases", "steps", "requests", "counters", "kernel_bound", "step_memory", "op_class_split")  # kernel_bound: the per-kernel roofline
# kernel_bound is as long as the trace's kernels: the report reads only what its roofline draws.
COLUMNS = {"kernel_bound": ("model", "flops", "dur_ns", "intensity", "phase")}
# ... and, summed per (phase, op, class) as they are read (kernel_ops), what the largest-ops table shows
OP_COLUMNS = ("phase", "op_name", "kclass", "bound", "dur_ns")


@dataclass
class RunView:
    """What the report needs from one run: its id, manifest and tables (absent ones empty).

    ``warmups``: the request ids left out of the run-level phase rows (warm-ups)."""

    run_id: str
    manifest: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    warmups: tuple[int, ...] = ()
    projected: tuple[str, ...] = ()  # advice with the time it would save (tracekit.report.whatif.run_advice)

    def df(self, name: str) -> pd.DataFrame:
        return self.tables.get(name, pd.DataFrame())


def load_view(run: RunDir, warmup_requests: int | None = None) -> RunView:
    """A run's view: its id, manifest and the tables the report reads.

    The phases' run-level rows are as ``tracekit analyze`` stored them (without the warm-ups it left
    out, run.json ``analysis.warmup_requests``); ``warmup_requests`` N instead leaves out the first N
    requests and those the recorder marked (tracekit.analysis.warmup.rebase; nothing is rewritten)."""
    m = run.read_manifest()
    tables = {t: read_df(run, t) for t in TABLES if run.has_table(t)}
    if run.has_table("kernel_bound"):
        tables["kernel_ops"] = kernel_ops(run.read_columns("kernel_bound", OP_COLUMNS))
    done = tuple(int(i) for i in ((m.get("analysis") or {}).get("warmup_requests") or []))
    from tracekit.report.whatif import run_advice

    projected = tuple(run_advice(run))
    if warmup_requests is None:
        return RunView(run.run_id, m, tables, done, projected)
    from tracekit.analysis.warmup import rebase, warmup_ids

    want = tuple(warmup_ids(tables.get("requests", pd.DataFrame()), m.get("warmup_requests") or [],
                            warmup_requests))
    if "phases" in tables:
        phases = rebase(tables["phases"], remove=set(want) - set(done), add=set(done) - set(want))
        tables["phases"] = phases if isinstance(phases, pd.DataFrame) else phases.to_pandas()
    return RunView(run.run_id, m, tables, want, projected)


def read_df(run: RunDir, name: str) -> pd.DataFrame:
    """A table as the report reads it: whole (``RunDir.read_df``), or only its ``COLUMNS``
    (``RunDir.read_columns``)."""
    columns = COLUMNS.get(name)
    if columns is None:
        return run.read_df(name)
    return run.read_columns(name, columns).to_pandas()


def kernel_ops(table: Any) -> pd.DataFrame:
    """kernel_bound's kernels of the steps summed per (phase, op_name, kclass, bound): time_ns, kernels.
    Summed over the columns' dictionary codes, so no per-kernel text reaches Python (a run has as
    many rows as kernels)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = ["phase", "op_name", "kclass", "bound"]
    cols = [*keys, "time_ns", "kernels"]
    if table is None or not all(c in table.column_names for c in OP_COLUMNS) or not table.num_rows:
        return pd.DataFrame(columns=cols)
    codes, values = [], []
    for name in keys:
        col = table.column(name)
        enc = (col if pa.types.is_dictionary(col.type) else pc.dictionary_encode(col)).combine_chunks()
        codes.append(pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64))
        values.append(enc.dictionary.to_pylist())
    dur = pc.fill_null(table.column("dur_ns").cast(pa.int64()), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    keep = codes[0] >= 0  # kernels of a step (a phase)
    key = np.zeros(int(keep.sum()), dtype=np.int64)
    for c, v in zip(codes, values, strict=True):
        key = key * (len(v) + 1) + (c[keep] + 1)
    uniq, inv = np.unique(key, return_inverse=True)
    time_ns = np.bincount(inv, weights=np.maximum(dur[keep], 0).astype(float), minlength=len(uniq))
    kernels = np.bincount(inv, minlength=len(uniq))
    out: dict[str, Any] = {}
    rest = uniq.copy()
    for name, v in reversed(list(zip(keys, values, strict=True))):
        code = rest % (len(v) + 1) - 1
        rest = rest // (len(v) + 1)
        out[name] = [v[i] if i >= 0 else None for i in code.tolist()]
    return pd.DataFrame({**{k: pd.Series(out[k], dtype=object) for k in keys}, "time_ns": time_ns,
                         "kernels": kernels}, columns=cols)


def has_columns(df: pd.DataFrame, *cols: str) -> bool:
    return not df.empty and all(c in df and df[c].notna().any() for c in cols)


def run_phases(phases: pd.DataFrame) -> pd.DataFrame:
    """The whole-run rows of the phases table (request_id null), else all rows."""
    if phases.empty or "phase" not in phases:
        return pd.DataFrame()
    if "request_id" in phases and phases["request_id"].isna().any():
        return phases[phases["request_id"].isna()].reset_index(drop=True)
    return phases.reset_index(drop=True)


OUTSIDE = "outside"  # the phases table's row for time outside every step: shown as its own line, not a phase


def shown_phases(phases: pd.DataFrame) -> pd.DataFrame:
    """Whole-run phase rows that hold time, without the ``outside`` row (``outside_line`` says it)."""
    ph = run_phases(phases)
    if ph.empty or "time_ns" not in ph:
        return ph
    return ph[(ph["time_ns"].fillna(0) > 0) & (ph["phase"].astype(str) != OUTSIDE)].reset_index(drop=True)


def outside_line(phases: pd.DataFrame) -> str | None:
    """Time outside every step (model loading, compilation, host work between requests), or None."""
    ph = run_phases(phases)
    if ph.empty or "time_ns" not in ph:
        return None
    row = ph[ph["phase"].astype(str) == OUTSIDE]
    t = finite(row["time_ns"].iloc[0]) if len(row) else None
    if not t:
        return None
    busy = finite(row["gpu_busy_ns"].iloc[0]) if "gpu_busy_ns" in row else None
    gpu = f", GPU busy {busy / 1e6:,.2f} ms of it" if busy is not None else ""
    return (f"outside every step: {t / 1e6:,.1f} ms{gpu} (model loading, compilation, host work between "
            "requests; in no phase's totals)")


def ceiling_source_line(view: RunView) -> str | None:
    """Which ceiling the analysis used, of which kind, and its source (run.json ``analysis.ceiling``), or None."""
    c = (view.manifest.get("analysis") or {}).get("ceiling")
    if not isinstance(c, dict) or not c.get("gpu"):
        return None
    return f"ceiling in use: {c['gpu']} ({c.get('kind', 'datasheet')}); source: {c.get('source') or 'not recorded'}"


def over_peak_line(view: RunView) -> str | None:
    """How many kernels the analysis modelled above the peak (run.json ``analysis.kernels_over_peak``), or None."""
    n = (view.manifest.get("analysis") or {}).get("kernels_over_peak")
    return over_peak_text(int(n)) if isinstance(n, int) and n > 0 else None


def over_peak_text(n: int) -> str:
    """The line that counts kernels modelled above the peak."""
    return (f"{n} kernel{'s' if n != 1 else ''} modelled above the peak: their model over-counts "
            "(kernel_bound.over_peak; that rate is left out of their class)")


def warmup_line(view: RunView) -> str | None:
    """Which requests are warm-ups, left out of the phase totals, or None."""
    if not view.warmups:
        return None
    ids = ", ".join(str(i) for i in view.warmups)
    return f"warm-up: request(s) {ids} left out of the phase totals (their own rows stay in the tables)"


# Where a phase's time can go (they add up to the phase's wall time), and how a
# summary names the one that dominates. GPU idle is split by cause (idle_host_ns +
# idle_wait_ns + idle_before_window_ns + idle_profiler_ns == idle_ns); a table written before that split has
# only idle_ns, which then counts as the host's.
LIMITERS = (("idle_host_ns", "the host: GPU idle while the host issues work (Python, kernel launches)"),
            ("idle_wait_ns", "waiting: GPU idle on a sync, a copy or another stream"),
            ("idle_before_window_ns", "unseen work: the GPU ran work launched before the trace window "
                                      "(or by another process)"),
            ("idle_profiler_ns", "the profiler: GPU idle the unprofiled run does not have"),
            ("memory_bound_ns", "memory bandwidth: memory-bound kernels"),
            ("compute_bound_ns", "compute: compute-bound kernels"),
            ("latency_bound_ns", "latency: kernels under the latency line of both peaks (launch, occupancy, dependencies)"),
            ("other_ns", "kernels without a cost model"),
            ("comm_ns", "communication"), ("memcpy_ns", "memcpy"))
SHORT_LIMITER = {"idle_host_ns": "host (GPU idle)", "idle_wait_ns": "waiting (GPU idle)",
                 "idle_before_window_ns": "unseen work (before the window)",
                 "idle_profiler_ns": "profiler (GPU idle)", "memory_bound_ns": "memory BW",
                 "compute_bound_ns": "compute", "latency_bound_ns": "latency", "other_ns": "unmodelled kernels",
                 "comm_ns": "communication", "memcpy_ns": "memcpy"}


def split_ns(r: dict[Any, Any]) -> dict[str, float]:
    """ns per LIMITERS column of a phase row; idle_ns as the host's where the idle split is absent."""
    out = {c: finite(r.get(c)) or 0.0 for c, _ in LIMITERS}
    if finite(r.get("idle_host_ns")) is None and finite(r.get("idle_wait_ns")) is None:
        out["idle_host_ns"] = finite(r.get("idle_ns")) or 0.0
    return out


def limiter(r: dict[Any, Any]) -> tuple[str, float] | None:
    """The column that holds most of the phase's time and its share of it."""
    t = finite(r.get("time_ns"))
    if not t:
        return None
    best = max(split_ns(r).items(), key=lambda cv: cv[1])
    return (best[0], best[1] / t) if best[1] > 0 else None


def idle_text(r: dict[Any, Any]) -> str:
    """How much of a phase's idle time is the profiler's and how much waiting, in words."""
    idle, t = finite(r.get("idle_ns")), finite(r.get("time_ns"))
    if not idle or not t:
        return ""
    prof, wait = finite(r.get("idle_profiler_ns")), finite(r.get("idle_wait_ns"))
    if wait is None and finite(r.get("idle_host_ns")) is None:
        return ""  # a table from before the idle split
    bits = []
    if prof is not None:
        bits.append(f"{100 * prof / idle:.0f}% of it is the profiler's own cost")
    elif str(r.get("phase")) != "outside":  # time between steps has no profiled/unprofiled pair
        bits.append("the profiler's share is unknown (no unprofiled timing pass)")
    if wait and wait / idle >= 0.005:
        bits.append(f"{100 * wait / idle:.0f}% waiting on syncs, copies or other streams")
    before = finite(r.get("idle_before_window_ns"))
    if before and before / idle >= 0.005:
        bits.append(f"{100 * before / idle:.0f}% behind work the trace does not show (launched before its window)")
    return f"GPU idle {100 * idle / t:.0f}% of the time" + (": " + ", ".join(bits) if bits else "")


@dataclass(frozen=True)
class CeilingInfo:
    name: str | None
    dtype: str | None
    tflops: float | None
    tbps: float | None

    def text(self) -> str:
        if not (self.name or self.tflops or self.tbps):
            return f"ceiling: {NOT_RECORDED}"
        peaks = ", ".join(x for x in (f"{self.tflops:,.0f} TFLOP/s" if self.tflops else "",
                                      f"{self.tbps:.2f} TB/s" if self.tbps else "") if x)
        ridge = f", ridge {self.tflops / self.tbps:.0f} FLOP/byte" if self.tflops and self.tbps else ""
        dtype = f" {self.dtype}" if self.dtype else ""
        return f"ceiling: {self.name or 'unnamed'}{dtype}: {peaks}{ridge}"


def ceiling_of(phases: pd.DataFrame) -> CeilingInfo:
    """The ceiling the bound pass used: its name from the table, its peaks implied by achieved / % of peak."""
    ph = run_phases(phases)
    if ph.empty:
        return CeilingInfo(None, None, None, None)

    def first(col: str) -> str | None:
        if col not in ph:
            return None
        vals = ph[col].dropna()
        return str(vals.iloc[0]) if len(vals) else None

    # Per-request rows imply the same peaks where the run's rows cannot (all their steps warm-ups).
    rows = phases if "phase" in phases else ph
    tflops = implied_peak(ph, "achieved_tflops", "pct_peak_flops") or implied_peak(rows, "achieved_tflops", "pct_peak_flops")
    tbps = implied_peak(ph, "achieved_tbps", "pct_peak_bandwidth") or implied_peak(rows, "achieved_tbps", "pct_peak_bandwidth")
    return CeilingInfo(first("ceiling"), first("ceiling_dtype"), tflops, tbps)


def params_text(n: float) -> str:
    """A parameter count with the unit that keeps three significant digits (0.29 M, 1.10 B)."""
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:,.2f} {unit} params"
    return f"{int(n)} params"


def workload_text(m: dict[str, Any]) -> str:
    """One line: what ran, on what (from run.json's workload, model and environment)."""
    w, model, env = m.get("workload") or {}, m.get("model") or {}, m.get("environment") or {}
    if not isinstance(w, dict):
        w = {}
    if not isinstance(model, dict):
        model = {"preset": model}
    parts = []
    name = w.get("model") or model.get("preset")
    if name:
        params = model.get("parameters")
        extra = ", ".join(str(x) for x in (model.get("model_type"),
                                           params_text(params) if isinstance(params, int | float) else None,
                                           f"{model['weights']} weights" if model.get("weights") else None) if x)
        parts.append(f"{name} ({extra})" if extra else str(name))
    for key, fmt in (("dtype", "{}"), ("shape", "shape {}"), ("batch", "batch {}"), ("requests", "{} request(s)")):
        if w.get(key) is not None:
            parts.append(fmt.format(w[key]))
    if w.get("input_tokens") is not None:
        parts.append(f"{w['input_tokens']} in / {w.get('output_tokens', '?')} out tokens")
    for key, fmt in (("gpu", "{}"), ("driver", "driver {}"), ("torch", "torch {}"), ("transformers", "transformers {}")):
        if isinstance(env, dict) and env.get(key):
            parts.append(fmt.format(env[key]))
    kind, rule = workload_kind(m)
    if rule:
        parts.append(f"workload kind {kind} ({rule})")
    return " · ".join(parts) if parts else "workload: not recorded"


def timed_steps(r: dict[Any, Any]) -> float | None:
    """The steps a phase row's time covers: those with kernel capture where the row says
    (``steps_captured``; a run recorded with --trace-steps times only those), else all its steps."""
    cap = finite(r.get("steps_captured"))
    return cap if cap else finite(r.get("steps"))


def verdicts(phases: pd.DataFrame) -> list[str]:
    """One sentence per phase: what limited it, and how close the GPU got to the ceiling while busy."""
    out = []
    for r in shown_phases(phases).to_dict("records"):
        t, n = finite(r.get("time_ns")), finite(r.get("steps"))
        cap = finite(r.get("steps_captured"))
        head = f"{r.get('phase')}: {int(n) if n is not None else '?'} step(s), {t / 1e6:,.1f} ms" if t else str(r.get("phase"))
        if t and cap is not None and n is not None and 0 < cap < n:
            # the time columns cover the steps with kernel capture (--trace-steps) only
            head = f"{r.get('phase')}: {int(n)} step(s), {int(cap)} with kernels: {t / 1e6:,.1f} ms"
            n = cap
        if t and n and n > 1:
            head += f" ({t / n / 1e6:,.2f} ms per step)"
        lim = limiter(r)
        if lim is None:
            out.append(head + "; split not recorded")
            continue
        col, share = lim
        text = f"{head}. Limited by {dict(LIMITERS)[col]}, {100 * share:.0f}% of the time"
        idle = idle_text(r)
        if idle:
            text += f". {idle}"
        busy = finite(r.get("gpu_busy_ns"))
        cb, mb, lb = finite(r.get("compute_bound_ns")), finite(r.get("memory_bound_ns")), finite(r.get("latency_bound_ns"))
        if busy:
            bits = []
            if mb is not None and cb is not None:
                lat = f", latency-bound {100 * lb / busy:.0f}%" if lb is not None else ""
                bits.append(f"memory-bound {100 * mb / busy:.0f}%{lat}, compute-bound {100 * cb / busy:.0f}% of it")
            tb, ptb = finite(r.get("achieved_tbps")), finite(r.get("pct_peak_bandwidth"))
            tf, ptf = finite(r.get("achieved_tflops")), finite(r.get("pct_peak_flops"))
            if tb is not None and ptb is not None:
                bits.append(f"{tb:.2f} TB/s = {ptb:.0f}% of peak bandwidth")
            if tf is not None and ptf is not None:
                bits.append(f"{tf:,.1f} TFLOP/s = {ptf:.1f}% of peak compute")
            text += f". GPU busy {100 * busy / t:.0f}% of the time" + (": " + "; ".join(bits) if bits else "") if t else ""
        out.append(text)
    return out


def advice_lines(phases: pd.DataFrame) -> list[str]:
    """What would help each shown phase (tracekit.analysis.advice), one sentence each."""
    from tracekit.analysis.advice import advice

    out = []
    for r in shown_phases(phases).to_dict("records"):
        if str(r.get("phase")) == "outside":
            continue  # time between steps: no phase of the work to fix
        text = r.get("advice") if isinstance(r.get("advice"), str) else advice({str(k): v for k, v in r.items()})
        if text:
            out.append(text)
    return out


def implied_peak(ph: pd.DataFrame, achieved: str, pct: str) -> float | None:
    # The analysis stored achieved and % of peak; their ratio is the ceiling it used.
    if not has_columns(ph, achieved, pct):
        return None
    ok = ph[(ph[pct] > 0) & ph[achieved].notna()]
    if ok.empty:
        return None
    v = float((ok[achieved] * 100 / ok[pct]).median())
    return v if math.isfinite(v) and v > 0 else None




# --- table rows (plain text cells) ---------------------------------------------------


def cell(v: Any, kind: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "—"
    if kind == "ms":
        return f"{float(v) / 1e6:,.2f}"
    if kind == "pct":
        return f"{100 * float(v):.1f}%"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def steps_text(r: dict[Any, Any]) -> str:
    """The steps a phase row's time covers; "1 of 3" where only some had capture (--trace-steps)."""
    n, cap = finite(r.get("steps")), finite(r.get("steps_captured"))
    if cap is not None and n is not None and 0 < cap < n:
        return f"{int(cap)} of {int(n)}"
    return cell(r.get("steps"))


def phase_rows(phases: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    ph = shown_phases(phases)
    headers = ["phase", "steps", "time (ms)", "ms / step", "compute", "memory", "latency", "other", "idle (host)",
               "idle (wait)", "idle (before window)", "idle (profiler)", "limited by", "TFLOP/s", "% peak", "TB/s",
               "% peak"]
    rows = []

    def share(r: dict[Any, Any], c: str) -> str:
        t, v = finite(r.get("time_ns")), finite(r.get(c))
        return cell(v / t, "pct") if t and v is not None else "—"

    def pct(v: Any) -> str:
        x = finite(v)
        return "—" if x is None else f"{x:.1f}%"

    for r in ph.to_dict("records"):
        t, n = finite(r.get("time_ns")), timed_steps(r)
        other = sum(x for x in (finite(r.get(c)) for c in ("other_ns", "comm_ns", "memcpy_ns")) if x is not None)
        lim = limiter(r)
        parts = split_ns(r)
        host = cell(parts["idle_host_ns"] / t, "pct") if t and (finite(r.get("idle_ns")) is not None) else "—"
        rows.append([str(r.get("phase")), steps_text(r), cell(t, "ms"), cell(t / n, "ms") if t and n else "—",
                     share(r, "compute_bound_ns"), share(r, "memory_bound_ns"), share(r, "latency_bound_ns"),
                     cell(other / t, "pct") if t else "—", host, share(r, "idle_wait_ns"),
                     share(r, "idle_before_window_ns"), share(r, "idle_profiler_ns"),
                     str(SHORT_LIMITER[lim[0]]) if lim else "—",
                     cell(r.get("achieved_tflops")), pct(r.get("pct_peak_flops")),
                     cell(r.get("achieved_tbps")), pct(r.get("pct_peak_bandwidth"))])
    return headers, rows


OPS_PER_PHASE = 5
PHASE_ORDER = ("prefill", "decode", "mixed")


def op_rows(ops: pd.DataFrame, per_phase: int = OPS_PER_PHASE) -> tuple[list[str], list[list[str]]]:
    """The ops with the most kernel time in each phase of the run's steps, from ``kernel_ops``: the
    launching op (else the kernels' name class), its kernels, their time, its share of the phase's kernel
    time, and the class that holds most of that time (tracekit.analysis.bound)."""
    headers = ["phase", "op", "kernels", "kernel time (ms)", "share of the phase", "mostly"]
    if ops.empty or not all(c in ops for c in ("phase", "op_name", "kclass", "bound", "time_ns", "kernels")):
        return headers, []
    parts = ops[ops["phase"].notna()].copy()
    if parts.empty:
        return headers, []
    parts["op"] = parts["op_name"].astype(object).where(
        parts["op_name"].notna(),
        "(" + parts["kclass"].astype(object).fillna("other").astype(str) + " kernels, no op)").astype(str)
    parts["bound"] = parts["bound"].astype(object).fillna("—").astype(str)
    parts["phase"] = parts["phase"].astype(str)
    parts["time_ns"] = pd.to_numeric(parts["time_ns"], errors="coerce").fillna(0).astype(float)
    by_op = parts.groupby(["phase", "op"], sort=False)[["time_ns", "kernels"]].sum().reset_index()
    by_class = parts.groupby(["phase", "op", "bound"], sort=False)["time_ns"].sum().reset_index()
    top_class = by_class.sort_values("time_ns", ascending=False, kind="stable").drop_duplicates(["phase", "op"])
    by_op = by_op.merge(top_class.rename(columns={"time_ns": "class_ns"}), on=["phase", "op"], how="left")
    total = by_op.groupby("phase")["time_ns"].sum()
    phases = [p for p in PHASE_ORDER if p in total.index] + sorted(p for p in total.index if p not in PHASE_ORDER)
    rows = []
    for ph in phases:
        t = float(total[ph])
        part = by_op[by_op["phase"] == ph].sort_values(["time_ns", "op"], ascending=[False, True], kind="stable")
        for r in part.head(per_phase).to_dict("records"):
            mostly = f"{r['bound']} {cell(r['class_ns'] / r['time_ns'], 'pct')}" if r["time_ns"] > 0 else "—"
            rows.append([ph, str(r["op"]), cell(int(r["kernels"])), cell(r["time_ns"], "ms"),
                         cell(r["time_ns"] / t, "pct") if t > 0 else "—", mostly])
    return headers, rows


def workload_kind(m: dict[str, Any]) -> tuple[str, str | None]:
    """(kind, the rule that decided it) from run.json's analysis (tracekit.analysis.workload); ("llm", None)
    for runs analysed before kinds were recorded."""
    a = m.get("analysis") if isinstance(m, dict) else None
    w = a.get("workload") if isinstance(a, dict) else None
    if isinstance(w, dict) and isinstance(w.get("kind"), str):
        return w["kind"], w.get("rule") if isinstance(w.get("rule"), str) else None
    return "llm", None


def request_rows(requests: pd.DataFrame, warmups: tuple[int, ...] = (), kind: str = "llm"
                 ) -> tuple[list[str], list[list[str]]]:
    """Per-request latency; a diffusion request has no tokens: its denoising steps and e2e only."""
    if kind == "diffusion":
        return (["request", "batch", "denoising steps", "e2e (ms)"],
                [[str(r.get("name", r.get("request_id"))), cell(r.get("batch")), cell(r.get("steps")),
                  cell(r.get("e2e_ns"), "ms")] for r in (requests.to_dict("records") if not requests.empty else [])])
    headers = ["request", "batch", "input tok", "output tok", "TTFT (ms)", "TPOT (ms)", "ITL p50 (ms)", "ITL p99 (ms)",
               "e2e (ms)", "decode tok/s", "prefill share"]
    rows = []
    for r in requests.to_dict("records") if not requests.empty else []:
        name = str(r.get("name", r.get("request_id")))
        if finite(r.get("request_id")) in {float(i) for i in warmups}:
            name += " (warm-up)"
        rows.append([name, cell(r.get("batch")), cell(r.get("input_tokens")),
                     cell(r.get("output_tokens")), cell(r.get("ttft_ns"), "ms"), cell(r.get("tpot_ns"), "ms"),
                     cell(r.get("itl_p50_ns"), "ms"), cell(r.get("itl_p99_ns"), "ms"), cell(r.get("e2e_ns"), "ms"),
                     cell(r.get("decode_tok_s")),
                     cell(r.get("prefill_share"), "pct")])
    return headers, rows


def cost_rows(requests: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Each request's latency beside its cost inside the batches it shared (analysis/cost.py): empty
    when the cost pass has not run."""
    headers = ["request", "TTFT (ms)", "TPOT (ms)", "e2e (ms)", "queue (ms)", "steps", "mean share",
               "step time (ms)", "GPU time (ms)", "compute", "memory", "GFLOP", "GB", "J"]
    if not has_columns(requests, "step_time_ns"):
        return headers, []
    rows = []
    def part(r: dict[Any, Any], c: str) -> str:
        g, v = finite(r.get("gpu_time_ns")), finite(r.get(c))
        return cell(v / g, "pct") if g and v is not None else "—"

    for r in requests.to_dict("records"):
        g = finite(r.get("gpu_time_ns"))

        flops, nbytes = finite(r.get("flops")), finite(r.get("bytes"))
        rows.append([str(r.get("name", r.get("request_id"))), cell(r.get("ttft_ns"), "ms"), cell(r.get("tpot_ns"), "ms"),
                     cell(r.get("e2e_ns"), "ms"), cell(r.get("queue_ns"), "ms"), cell(r.get("steps")),
                     cell(r.get("mean_step_share"), "pct"), cell(r.get("step_time_ns"), "ms"), cell(g, "ms"),
                     part(r, "compute_bound_ns"), part(r, "memory_bound_ns"),
                     cell(flops / 1e9 if flops is not None else None), cell(nbytes / 1e9 if nbytes is not None else None),
                     cell(r.get("energy_j"))])
    return headers, rows


def assisted_rows(requests: pd.DataFrame, steps: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Speculative decoding per assisted request: acceptance, where its time went (draft forwards, verify
    forwards, the host outside both) and the speed-up against the same prompt without the assistant."""
    headers = ["request", "assistant", "proposed", "accepted", "acceptance", "draft (ms)", "verify (ms)",
               "host (ms)", "e2e (ms)", "plain e2e (ms)", "speed-up"]
    if not has_columns(requests, "assistant"):
        return headers, []
    dur: dict[tuple[int, str], float] = {}
    if has_columns(steps, "request_id", "kind", "cpu_start_ns", "cpu_end_ns"):
        st = steps.dropna(subset=["request_id", "cpu_start_ns", "cpu_end_ns"])
        d = (st["cpu_end_ns"].astype(float) - st["cpu_start_ns"].astype(float))
        kind = st["kind"].astype(str).replace({"prefill": "verify"})  # the first round's verify also prefills
        sums = d.groupby([st["request_id"].astype(int), kind]).sum()
        dur = {(int(rid), str(k)): float(v) for (rid, k), v in zip(sums.index, sums.to_numpy(), strict=True)}
    by_id = requests.set_index("request_id") if "request_id" in requests else pd.DataFrame()
    rows = []
    for r in requests[requests["assistant"].notna()].to_dict("records"):
        rid = int(r["request_id"])
        draft, verify, e2e = dur.get((rid, "draft")), dur.get((rid, "verify")), finite(r.get("e2e_ns"))
        host = e2e - (draft or 0) - (verify or 0) if e2e is not None and (draft or verify) else None
        plain = finite(by_id.loc[int(r["plain_request_id"]), "e2e_ns"]) if finite(r.get("plain_request_id")) is not None \
            and int(r["plain_request_id"]) in by_id.index else None
        sp = finite(r.get("speedup"))
        rows.append([str(r.get("name", rid)), str(r["assistant"]), cell(r.get("proposed_tokens")),
                     cell(r.get("accepted_tokens")), cell(r.get("acceptance_rate"), "pct"), cell(draft, "ms"),
                     cell(verify, "ms"), cell(host, "ms"), cell(e2e, "ms"), cell(plain, "ms"),
                     f"{sp:.2f}x" if sp is not None else "—"])
    return headers, rows


def meta_rows(m: dict[str, Any]) -> list[list[str]]:
    rows = [[str(k), str(v)] for k, v in m.items() if isinstance(v, str | int | float) and v != ""]
    for group in ("workload", "environment", "profiler"):
        sub = m.get(group)
        if isinstance(sub, dict):
            rows += [[str(f"{group}.{k}"), str(v)] for k, v in sub.items() if isinstance(v, str | int | float)]
    return rows[:40]


# --- CPU runs: the split by operator class (tracekit.analysis.opclass) ---------------------

OP_CLASSES = ("attention", "gemm", "norm", "elementwise", "sampling", "framework")
OP_CLASS_LABEL = {"attention": "attention", "gemm": "GEMM", "norm": "norm", "elementwise": "elementwise",
                  "sampling": "sampling", "framework": "framework overhead"}
NO_ROOFLINE = ("CPU run: a CPU has no roofline here (no kernels, no ceilings), so there is no compute / memory / "
               "idle split; each phase's time is split by operator class instead (host self time of the aten ops, "
               "the rest is framework overhead)")


def is_cpu_view(view: RunView) -> bool:
    """The run has the CPU split by operator class (the analysis found no GPU activity)."""
    return has_columns(view.df("op_class_split"), "phase", "op_class", "time_ns")


def _split_phases(split: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    if not has_columns(split, "phase", "op_class", "time_ns"):
        return []
    order = [p for p in (*PHASE_ORDER, OUTSIDE) if p in set(split["phase"].astype(str))]
    order += sorted(set(split["phase"].astype(str)) - set(order))
    return [(p, split[split["phase"].astype(str) == p]) for p in order]


def cpu_split_lines(split: pd.DataFrame) -> list[str]:
    """One sentence per phase: its time and the classes that took it, largest first (shares of the phase)."""
    out = []
    for phase, part in _split_phases(split):
        total = float(pd.to_numeric(part["time_ns"], errors="coerce").fillna(0).sum())
        if total <= 0:
            continue
        n = int(part["steps"].max()) if "steps" in part and part["steps"].notna().any() else 0
        head = f"{phase}: {n} step(s), {total / 1e6:,.1f} ms" if phase != OUTSIDE else \
            f"outside every step (between and around the steps): {total / 1e6:,.1f} ms"
        if n > 1:
            head += f" ({total / n / 1e6:,.2f} ms per step)"
        parts = part.assign(t=pd.to_numeric(part["time_ns"], errors="coerce").fillna(0)).sort_values(
            "t", ascending=False, kind="stable")
        shares = [f"{OP_CLASS_LABEL.get(str(c), str(c))} {100 * t / total:.1f}%"
                  for c, t in zip(parts["op_class"], parts["t"], strict=True) if t > 0]
        out.append(f"{head}: " + ", ".join(shares))
    return out


def cpu_split_rows(split: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The split as a table: one row per phase, each class's share of the phase (the row sums to 100%)."""
    headers = ["phase", "steps", "time (ms)", "ms / step", *(OP_CLASS_LABEL[c] for c in OP_CLASSES)]
    rows = []
    for phase, part in _split_phases(split):
        by = dict(zip(part["op_class"].astype(str), pd.to_numeric(part["time_ns"], errors="coerce").fillna(0),
                      strict=True))
        total = float(sum(by.values()))
        if total <= 0:
            continue
        n = int(part["steps"].max()) if "steps" in part and part["steps"].notna().any() else 0
        rows.append([phase, str(n) if n else "—", cell(total, "ms"), cell(total / n, "ms") if n else "—",
                     *(cell(by.get(c, 0.0) / total, "pct") for c in OP_CLASSES)])
    return headers, rows
