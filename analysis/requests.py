"""Requests and their latency metrics, from the steps of a trace.

Request windows, in order of trust (``requests.source``): tracekit's own
``tracekit.request`` annotations; a caller-named user annotation (e.g. a
``record_function`` around ``generate``) or a ``ProfilerStep#N`` window holding
exactly one prefill, the innermost such; otherwise each prefill starts a new
request that lasts until the next one (``prefill_boundary``). Steps no window
holds before the first window (all steps of a trace with no prefill and no
request annotation: it starts mid-generation, or an engine ran decode only) are
split into requests at long idle gaps (``gap``); a long idle gap inside a
``prefill_boundary`` request splits it too, and is reported (``_gap_windows``).

Definitions (docs/metrics.md has the sources): the first token is available
when the GPU work of the request's first prefill step has completed (including
the sampling kernels and the copy of the token to the host, which fall in the
same step window); TTFT = that time − request start; e2e = request end −
request start; TPOT = (e2e − TTFT) / (output_tokens − 1); ITL = the gaps
between successive token times (each step's completion from the first token on: the
chunks of a chunked prefill before the last yield none); percentiles are
tracekit.model.stats.percentile's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis import workload as _workload
from tracekit.analysis.columns import is_in, matches
from tracekit.analysis.frames import as_df
from tracekit.analysis.steps import MATMUL_OPS, host_annotations, live_ops, request_labels
from tracekit.model.stats import percentile
from tracekit.model.stepnames import looks_like_engine_step

REQUEST_COLUMNS = [
    "request_id", "name", "batch", "input_tokens", "output_tokens", "start_ns", "end_ns", "ttft_ns",
    "tpot_ns", "e2e_ns", "prefill_share", "source", "itl_p50_ns", "itl_p90_ns", "itl_p99_ns",
    "prefill_tok_s", "decode_tok_s", "prefill_gpu_ns_per_token", "decode_gpu_ns_per_token",
    "host_ttft_ns", "host_tpot_ns", "host_e2e_ns",
]

PROFILER_STEP = _workload.PROFILER_STEP
# The profiler's own session annotation: it spans whatever ran under ``with profile()``
# (the caller's timers, synchronisations, start-up), so it is never a request window.
PROFILER_SESSION = re.compile(r"^PyTorch Profiler \(\d+\)$")

# Gap rule: a new request starts after an idle gap (previous step's end of work to the
# next step's start) longer than max(GAP_FACTOR x the trace's median inter-step gap,
# GAP_FLOOR_NS). Inside one generate() the gaps are the host's sampling and input
# preparation (sub-millisecond); the floor keeps jitter of very fast steps (compiled
# decode, median gap ~tens of µs) and the profiler's own stalls (0.4-2.2 ms buffer
# requests on the H200 traces) from ever splitting a request.
GAP_FACTOR = 10
GAP_FLOOR_NS = 20_000_000


def _done(steps: pd.DataFrame) -> pd.Series:
    """When each step's token is on the host: its token copy (steps.token_ns) where the
    trace shows one, else its GPU end where it launched GPU work, else its CPU end."""
    def col(name: str) -> pd.Series:  # Int64: epoch-scale ns do not fit a float64's 53 bits
        return pd.to_numeric(steps[name], errors="coerce").astype("Int64")

    g, c = col("gpu_end_ns"), col("cpu_end_ns")
    if "token_ns" in steps:
        return col("token_ns").fillna(g).fillna(c)
    return g.fillna(c)


def _after_profiler_stall(windows: list[tuple[int, int, str, str, Any]], cpu_ops: Any, runtime: Any,
                          other_events: Any) -> list[tuple[int, int, str, str, Any]]:
    """Move each window's start past profiler overhead that opens it.

    Kineto's ``overhead`` events (``Activity Buffer Request``: the profiler allocating
    its buffers) stall the thread; one that starts inside a request window before the
    window's first host op or runtime call is the profiler's time, not the request's
    (the stall ends the caller's own synchronise, before its timer starts; sizes measured
    on the fixtures: docs/measurements/2026-12-07-docstring-figures.md). The first CPU op is the witness: runtime calls before it (the caller's
    synchronise, event record) may follow the stall. Overhead later in a window is
    kept: the caller's timer sees that too.
    """
    oth = as_df(other_events)
    if not windows or oth.empty or "cat" not in oth:
        return windows
    ov = oth[matches(oth["cat"], "overhead".__eq__)].dropna(subset=["ts_ns"])
    if ov.empty:
        return windows
    ov_s = ov["ts_ns"].to_numpy(dtype=np.int64)
    ov_e = ov_s + ov["dur_ns"].fillna(0).to_numpy(dtype=np.int64)
    ops = as_df(cpu_ops)
    if not ops.empty and "cat" in ops:
        ops = ops[~matches(ops["cat"], "user_annotation".__eq__)]  # a missing cat is kept, as != kept it
    hs = np.sort(ops["ts_ns"].dropna().to_numpy(dtype=np.int64)) if not ops.empty else np.empty(0, dtype=np.int64)
    out = []
    for w in windows:
        start, end = w[0], w[1]
        k = np.searchsorted(hs, start)
        first = int(hs[k]) if k < len(hs) and hs[k] < end else end
        head = (ov_s >= start) & (ov_s < first)
        if head.any():
            start = min(int(ov_e[head].max()), first)
        out.append((start, *w[1:]))
    return out


def _windows(steps: pd.DataFrame, annotations: Any, cpu_ops: Any, runtime: Any = None,
             warnings: list[str] | None = None) -> list[tuple[int, int, str, str, Any]]:
    """(start, end, name, source, label) of each request; what was ambiguous is appended to ``warnings``.

    A user annotation (or ProfilerStep window) is a request when it holds exactly one prefill and at least
    one step; the innermost such wins. Ambiguous, and reported: two such ranges that overlap without one
    holding the other (both kept), and a user range holding several prefills and no request range (a
    loop over requests: each prefill starts a request)."""
    notes = warnings if warnings is not None else []
    labels = request_labels(annotations, cpu_ops)
    if labels:
        return [(s, e, lab.name, "tracekit", lab) for s, e, lab in labels]
    ann = host_annotations(annotations, cpu_ops, live=False)
    pre = steps[steps["kind"].isin(["prefill", "mixed"])]["cpu_start_ns"].to_numpy(dtype=np.int64)
    starts = steps["cpu_start_ns"].to_numpy(dtype=np.int64)
    step_names = {"tracekit.step", "execute_", "step["}
    cands = []
    several: list[tuple[int, int, str, int]] = []
    for ts, dur, name in zip(ann["ts_ns"], ann["dur_ns"], ann["name"], strict=True):
        if any(name.startswith(p) for p in step_names) or looks_like_engine_step(name) or PROFILER_SESSION.match(name):
            continue
        n_pre = int(((pre >= ts) & (pre < ts + dur)).sum())
        n_all = int(((starts >= ts) & (starts < ts + dur)).sum())
        if n_pre == 1 and n_all >= 1:
            src = "profiler_step" if PROFILER_STEP.match(name) else "user_annotation"
            cands.append((int(ts), int(ts + dur), name, src, None))
        elif n_pre > 1 and not PROFILER_STEP.match(name):
            several.append((int(ts), int(ts + dur), name, n_pre))
    crossing = [(a[2], b[2]) for i, a in enumerate(cands) for b in cands[i + 1:]
                if a[0] < b[1] and b[0] < a[1] and not (a[0] <= b[0] and b[1] <= a[1])
                and not (b[0] <= a[0] and a[1] <= b[1])]
    if crossing:
        notes.append(f"{len(crossing)} pairs of request ranges overlap without one holding the other (e.g. "
                     f"{crossing[0][0]!r} and {crossing[0][1]!r}): both kept, a step between them counts in the first")
    loops = [w for w in several if not any(w[0] <= c[0] and c[1] <= w[1] for c in cands)]
    if loops:
        notes.append(f"user range {loops[0][2]!r} holds {loops[0][3]} prefills and no range holding one: not taken "
                     "as one request (each prefill starts one)" + (f"; {len(loops) - 1} more such ranges"
                                                                  if len(loops) > 1 else ""))
    # Innermost wins: drop any candidate that contains another one.
    chosen = [c for c in cands if not any(o is not c and c[0] <= o[0] and o[1] <= c[1] and o[:2] != c[:2]
                                          for o in cands)]
    # Two annotations with the same span (e.g. nested with equal times): keep the user's name.
    seen: dict[tuple[int, int], tuple[int, int, str, str, Any]] = {}
    for c in chosen:
        if c[:2] not in seen or seen[c[:2]][3] == "profiler_step":
            seen[c[:2]] = c
    chosen = sorted(seen.values())
    covered = np.zeros(len(pre), dtype=bool)
    for s, e, *_ in chosen:
        covered |= (pre >= s) & (pre < e)
    # Prefills outside every window: each starts a request that runs to the next prefill.
    loose = [int(p) for p, cov in zip(pre, covered, strict=True) if not cov]
    boundaries = sorted({int(p) for p in pre} | {s for s, *_ in chosen})
    ops = as_df(cpu_ops)
    if not ops.empty and "cat" in ops:
        ops = ops[~matches(ops["cat"], "user_annotation".__eq__)]
    host_ts = [int(ops["ts_ns"].min())] if not ops.empty else []
    rt = as_df(runtime)
    if not rt.empty:
        host_ts.append(int(rt["ts_ns"].min()))
    first_op = min(host_ts) if host_ts else None
    for p in loose:
        later = [b for b in boundaries if b > p]
        start = p
        if (first_op is not None and not any(b < p for b in boundaries) and not any(e <= p for _, e, *_ in chosen)
                and not (starts < p).any()):
            # The first request of a trace without request annotations starts with
            # its first host event (a CPU op or runtime call: generate's input
            # handling, the caller's synchronise), not at its first forward pass:
            # what the caller's own timer around generate() sees. Not when steps ran
            # before it (a trace that starts mid-generation): those are an earlier
            # request's (_gap_windows).
            start = min(p, first_op)
        end_bound = later[0] if later else None
        in_req = steps[(steps["cpu_start_ns"] >= p) & ((steps["cpu_start_ns"] < end_bound) if end_bound else True)]
        end = int(max(in_req["cpu_end_ns"].max(), _done(in_req).max()))
        chosen.append((start, end, f"request-{len(chosen)}", "prefill_boundary", None))
    return sorted(chosen, key=lambda c: c[0])


def _busy_end(steps: pd.DataFrame, cpu_ops: Any) -> np.ndarray:
    """When each step's own work ended (int64 ns), in the order of ``steps``.

    An annotated step ends with its annotation; a ``model_ops`` / ``cuda_graph``
    step's window runs to the next pass by construction (steps.py), so there its
    work ends with its last matmul op (the lm_head) or its GPU work / token copy,
    whichever is later: the window's tail after that is idle.
    """
    gpu = steps["gpu_end_ns"].astype("Float64").fillna(-1).to_numpy(dtype=np.int64)
    tok = (steps["token_ns"].astype("Float64").fillna(-1).to_numpy(dtype=np.int64)
           if "token_ns" in steps else np.full(len(steps), -1, dtype=np.int64))
    start = steps["cpu_start_ns"].to_numpy(dtype=np.int64)
    cend = steps["cpu_end_ns"].astype("Float64").fillna(-1).to_numpy(dtype=np.int64)
    windowed = steps["source"].astype(str).isin(["model_ops", "cuda_graph"]).to_numpy()
    ops = as_df(cpu_ops)
    mm_s = mm_e = np.empty(0, dtype=np.int64)
    if not ops.empty and "name" in ops:
        mm = ops[is_in(ops["name"], MATMUL_OPS)].dropna(subset=["ts_ns"]).sort_values("ts_ns")
        mm_s = mm["ts_ns"].to_numpy(dtype=np.int64)
        mm_e = mm_s + mm["dur_ns"].fillna(0).to_numpy(dtype=np.int64)
    out = np.maximum(np.maximum(gpu, tok), start)
    for i in np.flatnonzero(windowed):
        lo, hi = np.searchsorted(mm_s, start[i]), np.searchsorted(mm_s, cend[i]) if cend[i] >= 0 else len(mm_s)
        if hi > lo:
            out[i] = max(out[i], int(mm_e[lo:hi].max()))
    out[~windowed] = np.maximum(out[~windowed], cend[~windowed])
    return out


def _gap_windows(steps: pd.DataFrame, windows: list[tuple[int, int, str, str, Any]], cpu_ops: Any
                 ) -> tuple[list[tuple[int, int, str, str, Any]], list[str]]:
    """Requests from idle gaps (source ``gap``), and the splits they make; pure.

    Gaps are measured between consecutive steps of the whole trace (by start):
    next start − the previous step's end of work (``_busy_end``); a gap longer
    than max(GAP_FACTOR × their median, GAP_FLOOR_NS) starts a new request.
    (b) Steps that start before every window (all of them when there is none)
    become requests split at such gaps. (a) A ``prefill_boundary`` request holding
    such a gap is split there: the rest becomes a ``gap`` request, and a warning
    says so (a request without a prefill, or two requests the trace could not
    tell apart). Annotated and ProfilerStep windows are never split: the caller
    said where the request is.
    """
    order = steps.sort_values("cpu_start_ns", kind="stable")
    starts = order["cpu_start_ns"].to_numpy(dtype=np.int64)
    if starts.size < 2:
        if windows or starts.size == 0:
            return windows, []
        return [(int(starts[0]), int(_busy_end(order, cpu_ops)[0]), "request-0", "gap", None)], []
    ends = _busy_end(order, cpu_ops)
    gaps = np.maximum(starts[1:] - ends[:-1], 0)
    median = float(np.median(gaps))
    thr = max(GAP_FACTOR * median, float(GAP_FLOOR_NS))
    new_at = set((np.flatnonzero(gaps > thr) + 1).tolist())  # positions that open a request
    rule = f"> max({GAP_FACTOR} x median gap {median / 1e6:.3f} ms, {GAP_FLOOR_NS / 1e6:g} ms) = {thr / 1e6:.1f} ms"

    def pieces(pos: np.ndarray) -> list[tuple[int, int]]:
        """(first, last) positions of each run of ``pos`` between gap cuts."""
        out: list[tuple[int, int]] = []
        for p in pos.tolist():
            if not out or p in new_at:
                out.append((p, p))
            else:
                out[-1] = (out[-1][0], p)
        return out

    warnings: list[str] = []
    result: list[tuple[int, int, str, str, Any]] = []
    first = min((w[0] for w in windows), default=None)
    lead = np.flatnonzero(starts < first) if first is not None else np.arange(starts.size)
    for k, (a, b) in enumerate(pieces(lead)):
        result.append((int(starts[a]), int(ends[b]), f"request-{k}", "gap", None))
    for w in windows:
        start, end, name, source, label = w
        pos = np.flatnonzero((starts >= start) & (starts < end))
        parts = pieces(pos) if source == "prefill_boundary" else []
        if len(parts) < 2:
            result.append(w)
            continue
        result.append((start, int(ends[parts[0][1]]), name, source, label))
        for k, (a, b) in enumerate(parts[1:], 1):
            result.append((int(starts[a]), max(int(ends[b]), end) if k == len(parts) - 1 else int(ends[b]),
                           f"{name}.{k}", "gap", None))
            warnings.append(f"request {name}: idle gap of {gaps[a - 1] / 1e6:.1f} ms before its step at "
                            f"{int(starts[a])} ns ({rule}): split there; {name}.{k} (source gap) has no prefill")
    return sorted(result, key=lambda c: c[0]), warnings


def _first_batch(pre: pd.DataFrame, steps: pd.DataFrame) -> int | None:
    """The request's batch: its first prefill's, else (a trace that starts mid-generation, an engine's
    decode-only window) its first step's that states one."""
    for part in (pre, steps):
        if part.empty:
            continue
        b = pd.to_numeric(part["batch"], errors="coerce").dropna()
        if len(b):
            return int(b.to_numpy()[0])
    return None


def _step_tokens(steps: pd.DataFrame, fallback: float) -> float:
    """Query tokens of the steps: their own ``tokens`` where every step states it (an engine step's real
    count, e.g. 32 decodes of a 32-request batch), else ``fallback`` (steps × batch)."""
    if steps.empty:
        return 0.0
    tok = pd.to_numeric(steps["tokens"], errors="coerce") if "tokens" in steps else None
    if tok is not None and tok.notna().all():
        return float(tok.sum())
    return float(fallback)


def _pct(x: np.ndarray, q: float) -> float | None:
    return percentile(x.tolist(), q)


def _host_timings(manifest: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per-request host timings from run.json ``timings``, in nanoseconds.

    Accepted shapes: ``{"requests": [{...}, ...]}`` or a list; keys ``ttft``,
    ``tpot``, ``e2e`` with a unit suffix ``_ns``, ``_us``, ``_ms`` or ``_s``.
    """
    if not manifest:
        return []
    t = manifest.get("timings")
    reqs = t.get("requests") if isinstance(t, dict) else t
    if not isinstance(reqs, list):
        return []
    scale = {"_ns": 1, "_us": 1e3, "_ms": 1e6, "_s": 1e9}
    out = []
    for r in reqs:
        vals: dict[str, Any] = {}
        if isinstance(r, dict):
            for key in ("ttft", "tpot", "e2e"):
                for suf, k in scale.items():
                    v = r.get(key + suf)
                    if isinstance(v, int | float):
                        vals[key] = float(v) * k
                        break
        out.append(vals)
    return out


def build(
    steps: pd.DataFrame, kernel_steps: pd.DataFrame, annotations: Any, cpu_ops: Any,
    manifest: dict[str, Any] | None = None, runtime: Any = None, other_events: Any = None,
    workload: dict[str, Any] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[str]]:
    """(requests, steps with request_id, kernel_steps with request_id, warnings). Inputs untouched.

    ``runtime`` and ``other_events`` (optional) let a window skip the profiler's own
    stall at its head (_after_profiler_stall). ``workload`` (the steps pass's): an ``iterations``
    trace has no requests; a ``diffusion`` one has its diffusion windows (_diffusion)."""
    steps = steps.copy()
    kernel_steps = kernel_steps.copy()
    warnings: list[str] = []
    kind = (workload or {}).get("kind", "llm")
    if steps.empty or kind == "iterations":
        steps["request_id"] = pd.Series(pd.NA, index=steps.index, dtype="Int64")
        if not kernel_steps.empty:
            kernel_steps["request_id"] = pd.Series(pd.NA, index=kernel_steps.index, dtype="Int64")
        return pd.DataFrame(columns=REQUEST_COLUMNS), steps, kernel_steps, warnings
    if kind == "diffusion":
        return _diffusion(steps, kernel_steps, annotations, cpu_ops)
    cpu_ops = live_ops(as_df(cpu_ops))
    ambiguous: list[str] = []
    windows, warnings = _gap_windows(steps, _windows(steps, annotations, cpu_ops, runtime, ambiguous), cpu_ops)
    warnings = ambiguous + warnings
    windows = _after_profiler_stall(windows, cpu_ops, runtime, other_events)
    host = _host_timings(manifest)
    has_tracekit_ids = (steps["source"] == "tracekit").all() and steps["request_id"].notna().all()
    rows = []
    rid_of_step = pd.Series(pd.NA, index=steps.index, dtype="Int64")
    for i, (start, end, name, source, label) in enumerate(windows):
        rid = label.request_id if label is not None else i
        if has_tracekit_ids and label is not None:
            mask = steps["request_id"] == rid
        else:
            mask = (steps["cpu_start_ns"] >= start) & (steps["cpu_start_ns"] < end)
        rid_of_step[mask & rid_of_step.isna()] = rid
        st = steps[mask].sort_values("cpu_start_ns")
        if st.empty:
            warnings.append(f"request {rid} ({name}): no steps inside its window")
            continue
        done = _done(st).dropna().to_numpy(dtype=np.int64)
        end = int(max(end, done.max())) if len(done) else int(end)
        pre = st[st["kind"] != "decode"]
        dec = st[st["kind"] == "decode"]
        batch = _first_batch(pre, st)
        input_tokens = int(pre["q_len"].fillna(0).sum()) if not pre.empty else 0
        output_tokens = len(dec) + (1 if not pre.empty else 0)
        if label is not None:
            batch = label.batch
            input_tokens, output_tokens = label.input_tokens, label.output_tokens
        first = int(_done(pre).max()) if not pre.empty else int(done[0])
        ttft = int(first - start)
        e2e = int(end - start)
        tpot = (e2e - ttft) / (output_tokens - 1) if output_tokens > 1 else None
        tokens = np.sort(done)
        tokens = tokens[tokens >= first]  # a prefill chunk before the last yields no token
        itl = np.diff(tokens) if len(tokens) > 1 else np.empty(0)
        pre_time = first - start
        b = batch or 1
        pre_busy = float(pre["gpu_busy_ns"].fillna(0).sum())
        dec_busy = float(dec["gpu_busy_ns"].fillna(0).sum())
        dec_tokens = _step_tokens(dec, len(dec) * b)
        pre_tokens = _step_tokens(pre, input_tokens * b)
        h = host[i] if i < len(host) else {}
        if pre.empty:
            warnings.append(f"request {rid} ({name}): no prefill step in the trace window; TTFT is the first step's")
        rows.append({
            "request_id": rid, "name": name, "batch": batch, "input_tokens": input_tokens,
            "output_tokens": output_tokens, "start_ns": int(start), "end_ns": end, "ttft_ns": ttft,
            "tpot_ns": tpot, "e2e_ns": e2e, "prefill_share": pre_time / e2e if e2e > 0 else None,
            "source": source, "itl_p50_ns": _pct(itl, 50), "itl_p90_ns": _pct(itl, 90),
            "itl_p99_ns": _pct(itl, 99),
            "prefill_tok_s": pre_tokens / (pre_time / 1e9) if pre_time > 0 and pre_tokens else None,
            "decode_tok_s": dec_tokens / ((e2e - ttft) / 1e9) if e2e > ttft and dec_tokens else None,
            "prefill_gpu_ns_per_token": pre_busy / pre_tokens if pre_tokens else None,
            "decode_gpu_ns_per_token": dec_busy / dec_tokens if dec_tokens else None,
            "host_ttft_ns": h.get("ttft"), "host_tpot_ns": h.get("tpot"), "host_e2e_ns": h.get("e2e"),
        })
    steps["request_id"] = rid_of_step.astype("Int64")
    if not kernel_steps.empty:
        m = steps.set_index("step_id")["request_id"]
        kernel_steps["request_id"] = kernel_steps["step_id"].map(m).astype("Int64")
    n_out = int(steps["request_id"].isna().sum())
    if n_out and windows:
        warnings.append(f"{n_out} steps fall outside every request window")
    return pd.DataFrame(rows, columns=REQUEST_COLUMNS), steps, kernel_steps, warnings


def _diffusion(steps: pd.DataFrame, kernel_steps: pd.DataFrame, annotations: Any, cpu_ops: Any
               ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[str]]:
    """Requests of a diffusion trace (tracekit.analysis.workload): e2e from each window's start to its
    end or its last step's GPU end, whichever is later; no tokens, TTFT or TPOT (a denoising step emits
    no token)."""
    ann = host_annotations(annotations, cpu_ops)
    rid_of_step = pd.Series(pd.NA, index=steps.index, dtype="Int64")
    rows = []
    for r in _workload.diffusion_requests(steps, ann):
        rid_of_step[steps["step_id"].isin(r["step_ids"]) & rid_of_step.isna()] = r["request_id"]
        rows.append({**dict.fromkeys(REQUEST_COLUMNS), "request_id": r["request_id"], "name": r["name"],
                     "batch": r["batch"], "start_ns": r["start_ns"], "end_ns": r["end_ns"], "e2e_ns": r["e2e_ns"],
                     "source": r["source"]})
    steps["request_id"] = rid_of_step
    if not kernel_steps.empty:
        m = steps.set_index("step_id")["request_id"]
        kernel_steps["request_id"] = kernel_steps["step_id"].map(m).astype("Int64")
    return pd.DataFrame(rows, columns=REQUEST_COLUMNS), steps, kernel_steps, []


def requests_pass(
    steps: pd.DataFrame, kernel_steps: pd.DataFrame, annotations: Any, cpu_ops: Any, runtime: Any,
    other_events: Any, *, manifest: Mapping[str, Any], workload: dict[str, Any] | None,
    recorded_steps: Any = None, recorded_requests: Any = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[str]]:
    """The requests pass: (requests, steps, kernel_steps, warnings). A run tracekit recorded (its steps
    table, or at least its host timings: run.json ``timings.profiled``, the latency truth whatever part
    of the run the trace covers) takes its requests from the recorder (``from_recorded``); any other
    trace from its annotations and steps (``build``)."""
    recorded = (recorded_steps is not None and len(recorded_steps) > 0) or bool(
        timing_requests(dict(manifest), "profiled"))
    if recorded:
        return from_recorded(recorded_requests, steps, kernel_steps, dict(manifest))
    return build(steps, kernel_steps, annotations, cpu_ops, dict(manifest), runtime=runtime,
                 other_events=other_events, workload=workload)


def timing_requests(manifest: dict[str, Any] | None, which: str) -> list[dict[str, Any]]:
    t = (manifest or {}).get("timings")
    block = t.get(which) if isinstance(t, dict) else None
    reqs = block.get("requests") if isinstance(block, dict) else None
    return [r for r in reqs if isinstance(r, dict)] if isinstance(reqs, list) else []


def from_recorded(
    recorded: Any, steps: pd.DataFrame, kernel_steps: pd.DataFrame, manifest: dict[str, Any] | None
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[str]]:
    """Requests of a run recorded by tracekit: latency from the recorder's host timers.

    TTFT, TPOT, e2e, prefill share and ITL are the recorder's (host clock,
    synchronised, the profiled run the trace belongs to: run.json
    ``timings.profiled``, or the requests table it wrote); a kernel-capture
    window covers only some steps, so the trace cannot give them. The trace
    adds the GPU time per token of the captured steps. ``host_*`` are the same
    requests timed without the profiler (``timings.unprofiled``).
    """
    warnings: list[str] = []
    rec = as_df(recorded)
    prof = {int(r["request_id"]): r for r in timing_requests(manifest, "profiled") if "request_id" in r}
    unprof = {int(r["request_id"]): r for r in timing_requests(manifest, "unprofiled") if "request_id" in r}
    ids = [int(i) for i in rec["request_id"]] if not rec.empty else sorted(prof)
    if not ids:
        ids = sorted({int(i) for i in steps["request_id"].dropna()})
    by_id = {int(r["request_id"]): r for r in rec.to_dict("records")} if not rec.empty else {}
    rows = []
    for rid in ids:
        r: dict[Any, Any] = {**prof.get(rid, {}), **{k: v for k, v in by_id.get(rid, {}).items() if v is not None and not
                                      (isinstance(v, float) and np.isnan(v))}}
        st = steps[steps["request_id"] == rid]
        cap = st[st["captured"]] if "captured" in st else st
        pre, dec = cap[cap["kind"] != "decode"], cap[cap["kind"] == "decode"]
        b = int(r.get("batch") or 1)
        pre_tok = float((pre["q_len"].fillna(0) * b).sum()) if not pre.empty else 0.0
        dec_tok = float(len(dec) * b)
        raw_itl = r.get("itl_ns")
        itl: dict[str, Any] = raw_itl if isinstance(raw_itl, dict) else {}
        ttft, e2e = r.get("ttft_ns"), r.get("e2e_ns")
        out_tok = r.get("output_tokens")
        u = unprof.get(rid, {})
        if ttft is None:
            warnings.append(f"request {rid}: the recorder has no host timings for it")
        rows.append({
            "request_id": rid, "name": r.get("name"), "batch": r.get("batch"),
            "input_tokens": r.get("input_tokens"), "output_tokens": out_tok,
            "start_ns": r.get("start_ns"), "end_ns": r.get("end_ns"),
            "ttft_ns": ttft, "tpot_ns": r.get("tpot_ns"), "e2e_ns": e2e,
            "prefill_share": r.get("prefill_share"), "source": "tracekit_host",
            "itl_p50_ns": r.get("itl_p50_ns", itl.get("p50")), "itl_p90_ns": r.get("itl_p90_ns", itl.get("p90")),
            "itl_p99_ns": r.get("itl_p99_ns", itl.get("p99")),
            "prefill_tok_s": (r["input_tokens"] * b / (ttft / 1e9)) if ttft and r.get("input_tokens") else None,
            "decode_tok_s": ((out_tok - 1) * b / ((e2e - ttft) / 1e9))
            if ttft is not None and e2e and e2e > ttft and out_tok and out_tok > 1 else None,
            "prefill_gpu_ns_per_token": float(pre["gpu_busy_ns"].sum()) / pre_tok if pre_tok else None,
            "decode_gpu_ns_per_token": float(dec["gpu_busy_ns"].sum()) / dec_tok if dec_tok else None,
            "host_ttft_ns": u.get("ttft_ns"), "host_tpot_ns": u.get("tpot_ns"), "host_e2e_ns": u.get("e2e_ns"),
        })
    kernel_steps = kernel_steps.copy()
    if not kernel_steps.empty:
        m = steps.set_index("step_id")["request_id"]
        kernel_steps["request_id"] = kernel_steps["step_id"].map(m).astype("Int64")
    out = pd.DataFrame(rows, columns=REQUEST_COLUMNS)
    # Columns only some recorders write (record --serve: queue_ns; --assistant: acceptance) stay as recorded.
    extra = [c for c in rec.columns if c not in REQUEST_COLUMNS] if not rec.empty else []
    if extra and len(out):
        by = rec.drop_duplicates("request_id").set_index(rec["request_id"].drop_duplicates().astype("int64"))
        for c in extra:
            out[c] = out["request_id"].astype("int64").map(by[c]).to_numpy()
    return out, steps.copy(), kernel_steps, warnings
