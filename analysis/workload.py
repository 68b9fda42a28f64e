"""What kind of workload a trace holds, and the steps and requests of the kinds that are not LLM generation.

Kinds (``WORKLOAD_KINDS``), decided from the trace in this order; ``Workload.rule`` says which
evidence decided:

1. ``llm``: tracekit's or an engine's step annotations (tracekit.step, vLLM, SGLang).
2. ``diffusion``: xDiT's request annotation (``execute_diffusion_{batch}_{H}x{W}``) or a user
   annotation naming a diffusion loop (DIFFUSION_WORDS: "diffusion", "denois").
3. ``iterations``: ``ProfilerStep#N`` windows and a backward pass or an optimizer step in the trace
   (a training loop), whatever the model's ops look like.
4. ``llm``: forward passes found from the model's own ops (token-embedding lookups, CUDA graph replays).
5. ``iterations``: ``ProfilerStep#N`` windows and nothing above (a micro-benchmark, any scheduled profiler).
6. ``other``: none of these.

``iterations``: one step per ProfilerStep window (kind ``iteration``, source ``profiler_step``); no requests.
``diffusion``: one request per diffusion window (e2e only: no tokens, no TTFT/TPOT) and its denoising
steps (kind ``denoise``), in order of trust: the ProfilerStep windows inside it (two or more); the
top-level compiled-graph calls inside it (``## Call CompiledFxGraph … ##``, ``Torch-Compiled Region``:
a compiled transformer or UNet is one call per denoising step); the repeats of its top-level host ops
(the loop body: each place where the window's first HEAD_OPS op names occur again starts a step,
when they occur at least twice); else
the window is one step. Pure functions of the tables they are given.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis.columns import matches
from tracekit.model.stepnames import parse_diffusion_request

WORKLOAD_KINDS = ("llm", "diffusion", "iterations", "other")
PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
DIFFUSION_WORDS = re.compile(r"diffusion|denois", re.IGNORECASE)
COMPILED_CALL = re.compile(r"^(## Call CompiledFxGraph .* ##|Torch-Compiled Region)")
# Host ops of a training step: autograd's engine running a backward, an optimizer's step.
TRAINING = re.compile(r"^(autograd::engine::evaluate_function|Optimizer\.step#)")


@dataclass(frozen=True)
class Workload:
    kind: str  # one of WORKLOAD_KINDS
    rule: str  # the evidence that decided, in words

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "rule": self.rule}


def profiler_steps(ann: pd.DataFrame) -> pd.DataFrame:
    """The ``ProfilerStep#N`` windows of the host annotations (annotation_rows), by start."""
    if ann.empty:
        return ann
    return ann[ann["name"].map(lambda n: PROFILER_STEP.match(n) is not None)].sort_values("ts_ns", kind="stable")


def diffusion_windows(ann: pd.DataFrame) -> list[tuple[int, int, str, str, int | None]]:
    """(start, end, name, source, batch) of each diffusion request: xDiT's annotations, else the user's
    annotations naming a diffusion loop (the outermost ones)."""
    if ann.empty:
        return []
    xdit: list[tuple[int, int, str, str, int | None]] = [(int(t), int(t + d), str(n), "xdit", lab.batch) for t, d, n in zip(ann["ts_ns"], ann["dur_ns"], ann["name"],
                                                                          strict=True)
            if (lab := parse_diffusion_request(n)) is not None]
    if xdit:
        return xdit
    user = [(int(t), int(t + d), n) for t, d, n in zip(ann["ts_ns"], ann["dur_ns"], ann["name"], strict=True)
            if DIFFUSION_WORDS.search(n) and not PROFILER_STEP.match(n)]
    outer = [u for u in user if not any(o is not u and o[0] <= u[0] and u[1] <= o[1] for o in user)]
    return [(s, e, n, "user_annotation", None) for s, e, n in outer]


def decide(ann: pd.DataFrame, cpu: pd.DataFrame, annotated_source: str | None, inferred: bool) -> Workload:
    """The workload kind (module doc). ``annotated_source``: the source of annotated LLM steps (tracekit,
    vllm, sglang) or None; ``inferred``: whether the model's ops gave forward passes."""
    if annotated_source is not None:
        return Workload("llm", f"{annotated_source} step annotations")
    wins = diffusion_windows(ann)
    if wins:
        what = "xDiT's execute_diffusion_* annotation" if wins[0][3] == "xdit" else "an annotation naming a diffusion loop"
        return Workload("diffusion", f"{what} ({wins[0][2]!r})")
    ps = profiler_steps(ann)
    training = False
    if not ps.empty:
        names = pd.concat([ann["name"], cpu["name"]]) if not cpu.empty and "name" in cpu else ann["name"]
        training = bool(matches(names.dropna().astype(str), lambda n: TRAINING.match(n) is not None).any())
    if len(ps) and training:
        return Workload("iterations", f"{len(ps)} ProfilerStep windows with a backward pass or an optimizer step")
    if inferred:
        return Workload("llm", "forward passes from the model's ops (token-embedding lookups, CUDA graph replays)")
    if len(ps):
        return Workload("iterations", f"{len(ps)} ProfilerStep windows and no LLM step")
    return Workload("other", "no step annotation, ProfilerStep window or forward pass")


def _row(**kw: Any) -> dict[str, Any]:
    """A step's kind, source and host window (the step table's other columns are the caller's)."""
    return dict(kw)


def iteration_rows(ann: pd.DataFrame) -> list[dict[str, Any]]:
    """One step per ProfilerStep window (kind ``iteration``)."""
    ps = profiler_steps(ann)
    return [_row(kind="iteration", source="profiler_step", cpu_start_ns=int(t), cpu_end_ns=int(t + d))
            for t, d in zip(ps["ts_ns"], ps["dur_ns"], strict=True)]


def _top_level(cpu: pd.DataFrame, start: int, end: int) -> tuple[np.ndarray, list[str]]:
    """Start times and names of the host ops inside [start, end) that no other op holds (user annotations
    aside)."""
    if cpu.empty:
        return np.empty(0, dtype=np.int64), []
    ops = cpu
    if "cat" in ops:
        ops = ops[~matches(ops["cat"], "user_annotation".__eq__)]
    ops = ops[(ops["ts_ns"] >= start) & (ops["ts_ns"] < end)].dropna(subset=["ts_ns"]).sort_values(
        ["ts_ns", "dur_ns"], ascending=[True, False], kind="stable")
    ts = ops["ts_ns"].to_numpy(dtype=np.int64)
    te = ts + ops["dur_ns"].fillna(0).to_numpy(dtype=np.int64)
    names = ops["name"].astype(str).tolist()
    keep_t: list[int] = []
    keep_n: list[str] = []
    reach = -1
    for t, e, n in zip(ts, te, names, strict=True):
        if t >= reach:
            keep_t.append(int(t))
            keep_n.append(n)
        reach = max(reach, int(e))
    return np.asarray(keep_t, dtype=np.int64), keep_n


HEAD_OPS = 16  # the loop body's first host ops that mark where each repeat starts


def loop_starts(names: list[str], head: int = HEAD_OPS) -> list[int]:
    """Where each repeat of a loop body starts: the positions (non-overlapping) at which the sequence's
    first ``head`` op names occur again; [] unless they occur at least twice (a body's tail may differ
    from one repeat to the next, e.g. a scheduler's last step: only its head is matched)."""
    k = min(head, len(names) // 2)
    if k < 2:
        return []
    sig = names[:k]
    out, i = [], 0
    while i + k <= len(names):
        if names[i:i + k] == sig:
            out.append(i)
            i += k
        else:
            i += 1
    return out if len(out) >= 2 else []


def denoise_rows(ann: pd.DataFrame, cpu: pd.DataFrame) -> tuple[list[dict[str, Any]], list[str]]:
    """The denoising steps of every diffusion window (module doc), and what was noted on the way."""
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    ps = profiler_steps(ann)
    comp = ann[ann["name"].map(lambda n: COMPILED_CALL.match(n) is not None)] if not ann.empty else ann
    for start, end, name, _, _ in diffusion_windows(ann):
        inside = ps[(ps["ts_ns"] < end) & (ps["ts_ns"] + ps["dur_ns"] > start)] if not ps.empty else ps
        # a ProfilerStep window is a denoising step where several cut the request and hold its work
        wins = [(max(int(t), start), min(int(t + d), end)) for t, d in zip(inside["ts_ns"], inside["dur_ns"],
                                                                         strict=True)] if len(inside) else []
        wins = [w for w in wins if len(_top_level(cpu, *w)[1])]
        if len(wins) >= 2:
            rows += [_row(kind="denoise", source="profiler_step", cpu_start_ns=s, cpu_end_ns=e) for s, e in wins]
            continue
        calls = comp[(comp["ts_ns"] >= start) & (comp["ts_ns"] < end)] if not comp.empty else comp
        if len(calls):
            cs = calls["ts_ns"].to_numpy(dtype=np.int64)
            ce = cs + calls["dur_ns"].to_numpy(dtype=np.int64)
            outer = [(int(s), int(e)) for s, e in zip(cs, ce, strict=True)
                     if not ((cs <= s) & (ce >= e) & ((cs != s) | (ce != e))).any()]
            rows += [_row(kind="denoise", source="compiled_graph", cpu_start_ns=s, cpu_end_ns=e)
                     for s, e in sorted(set(outer))]
            continue
        ts, names = _top_level(cpu, start, end)
        at = loop_starts(names)
        if at:
            bounds = [*ts[at].tolist(), end]
            rows += [_row(kind="denoise", source="loop", cpu_start_ns=int(a), cpu_end_ns=int(b))
                     for a, b in itertools.pairwise(bounds)]
            continue
        notes.append(f"diffusion request {name!r}: no ProfilerStep windows, compiled-graph calls or repeating loop "
                     "body inside it: its whole window is one denoising step")
        rows.append(_row(kind="denoise", source="request", cpu_start_ns=start, cpu_end_ns=end))
    return rows, notes


def diffusion_requests(steps: pd.DataFrame, ann: pd.DataFrame) -> list[dict[str, Any]]:
    """One request per diffusion window: start, end (its window, or its last step's GPU end if later),
    batch (xDiT's), and its denoising steps."""
    out = []
    for i, (start, end, name, source, batch) in enumerate(diffusion_windows(ann)):
        st = steps[(steps["cpu_start_ns"] >= start) & (steps["cpu_start_ns"] < end)] if not steps.empty else steps
        gend = pd.to_numeric(st["gpu_end_ns"], errors="coerce").dropna() if len(st) else pd.Series([], dtype=float)
        stop = max(end, int(gend.max())) if len(gend) else end
        out.append({"request_id": i, "name": name, "source": source, "batch": batch, "start_ns": start,
                    "end_ns": stop, "e2e_ns": stop - start, "steps": len(st), "step_ids": st["step_id"].tolist()})
    return out
