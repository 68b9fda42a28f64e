"""Step detection: one row per model forward pass, from whichever source the trace offers.

Sources, in order of trust (the first one present decides; ``steps.source``
says which):

1. ``tracekit``: tracekit's own ``tracekit.step ...`` annotations (stepnames.py).
2. ``vllm`` / ``sglang``: engine annotations, every format the engines have
   written (tracekit.model.stepnames: vLLM ``execute_new_N_cached_M``,
   ``execute_context_C(T)_generation_G(T)`` and its detailed form with per-phase
   sq/sk sums; SGLang ``step[MODE bs=.. toks=..]`` with its detailed suffix). One
   annotation is one step, however many CUDA graphs it launches (a piecewise-
   compiled step launches one per piece). Idle steps (nothing scheduled) are
   not steps; an annotation shaped like an engine step in no known format is
   reported, never guessed.
3. ``model_ops``: no annotations at all. Each forward pass of a decoder starts
   with the token-embedding lookup (``aten::embedding``), whose index tensor has
   dims [batch, q_len]; a pass spans from one lookup to the next. A flat index
   [N] is a packed batch (engines concatenate the sequences): N tokens, batch and
   q_len unknown.
4. ``cuda_graph``: compiled runs replay CUDA graphs per decode step and no aten
   ops inside, so each run of launches that is not part of an eager pass, up to
   the next device-to-host copy (the step's token), is one decode step (q_len 1,
   batch of the prefill before it).

Contradictions (tracekit says decode, the embedding says q_len 5; overlapping
annotated steps) are returned as warnings, never silently resolved.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.analysis import timeline, workload
from tracekit.analysis.columns import is_in, matches
from tracekit.analysis.frames import as_df, derived
from tracekit.analysis.opmodels import is_shape
from tracekit.model.stepnames import (
    ENGINE_FORMATS,
    STEP_PREFIX,
    looks_like_engine_step,
    parse_diffusion_request,
    parse_engine_step,
    parse_request,
    parse_step,
    step_kind,
    unread_numbers,
)

EMBEDDING_OPS = ("aten::embedding",)
ATTENTION_OPS = (
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
)
# Ops that mean "the layers of a forward pass ran eagerly here".
MATMUL_OPS = ("aten::linear", "aten::mm", "aten::addmm", "aten::matmul", "aten::bmm")

# A runtime call that replays a CUDA / HIP graph.
GRAPH_LAUNCH = re.compile(r"GraphLaunch", re.IGNORECASE)
# torch.compile's own record_functions: Inductor's "## Call CompiledFxGraph <hash> ##" around
# each compiled-graph call (a CUDA graph replay included), dynamo's region and autograd
# wrappers. They wrap part of one pass, never a request: they must not cut a step's window.
COMPILER = re.compile(r"^(## .* ##|Torch-Compiled Region|CompiledFunction|CompiledFxGraph)")

STEP_COLUMNS = [
    "step_id",
    "request_id",
    "kind",
    "batch",
    "q_len",
    "kv_len",
    "tokens",
    "source",
    "cpu_start_ns",
    "cpu_end_ns",
    "gpu_start_ns",
    "gpu_end_ns",
    "gpu_busy_ns",
    "seq_stats",
    "graph_launches",
]


@dataclass
class Detected:
    """What step detection found: steps, the step of every GPU activity, warnings."""

    steps: pd.DataFrame
    kernel_steps: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    workload: workload.Workload = field(default_factory=lambda: workload.Workload("other", "not decided"))


def live_ops(cpu: pd.DataFrame) -> pd.DataFrame:
    """cpu_ops without the ops of graph-capture traces (``captured``): those ran at capture time, on
    another clock, and only lend their shapes to the kernels the graphs replay."""
    if cpu.empty or "captured" not in cpu:
        return cpu
    col = cpu["captured"]
    cap = col.to_numpy() if col.dtype == bool else col.astype("boolean").fillna(False).to_numpy(dtype=bool)
    return cpu[~cap] if cap.any() else cpu


def _dims(text: Any) -> list[Any] | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        v = json.loads(text)
    except (ValueError, RecursionError):  # nested past the recursion limit: no tensor's dims
        return None
    return v if isinstance(v, list) else None


def annotation_rows(annotations: pd.DataFrame, cpu_ops: pd.DataFrame) -> pd.DataFrame:
    """Host-side annotations from both tables, deduplicated (ingest may put them in either)."""
    user = None
    if not cpu_ops.empty and "cat" in cpu_ops:
        user = cpu_ops[matches(cpu_ops["cat"], "user_annotation".__eq__)]
    return _annotation_rows(annotations, user)


def host_annotations(annotations: Any, cpu_ops: Any, live: bool = True) -> pd.DataFrame:
    """``annotation_rows`` of the raw tables (Arrow tables or frames); ``live``: of ``live_ops(cpu_ops)``.
    From an Arrow cpu_ops the user annotations are picked on its columns, before a frame is made of
    them; from Arrow tables the rows are made once (tracekit.analysis.frames.derived)."""
    return derived((annotations, cpu_ops), f"host_annotations live={live}",
                   lambda: _host_annotations(annotations, cpu_ops, live))


def _host_annotations(annotations: Any, cpu_ops: Any, live: bool) -> pd.DataFrame:
    if not isinstance(cpu_ops, pa.Table) or "cat" not in cpu_ops.column_names:
        cpu = as_df(cpu_ops)
        return annotation_rows(as_df(annotations), live_ops(cpu) if live else cpu)
    keep = None
    if live and "captured" in cpu_ops.column_names:
        keep = pc.invert(pc.fill_null(cpu_ops.column("captured").cast(pa.bool_()), False))
    if (int(pc.sum(keep).as_py() or 0) if keep is not None else cpu_ops.num_rows) == 0:
        return _annotation_rows(as_df(annotations), None)  # no live op: annotation_rows skips cpu_ops
    user = pc.is_in(cpu_ops.column("cat"), value_set=pa.array(["user_annotation"]))
    picked = cpu_ops.filter(pc.and_(user, keep) if keep is not None else user)
    return _annotation_rows(as_df(annotations), as_df(picked))


def _annotation_rows(annotations: pd.DataFrame, user_ops: pd.DataFrame | None) -> pd.DataFrame:
    """annotation_rows from the annotations and cpu_ops' user annotations (None: cpu_ops left out)."""
    parts = []
    if not annotations.empty:
        a = annotations
        if "cat" in a:
            a = a[~matches(a["cat"], "gpu_user_annotation".__eq__)]
        parts.append(a[["ts_ns", "dur_ns", "name", "cat"]])
    if user_ops is not None:
        parts.append(user_ops[["ts_ns", "dur_ns", "name", "cat"]])
    if not parts:
        return pd.DataFrame(columns=["ts_ns", "dur_ns", "name", "cat"])
    out = pd.concat(parts, ignore_index=True)
    out = out.dropna(subset=["ts_ns", "name"])
    out["dur_ns"] = out["dur_ns"].fillna(0).astype("int64")
    out["ts_ns"] = out["ts_ns"].astype("int64")
    out["name"] = out["name"].astype(str)
    out = out.drop_duplicates(subset=["name", "ts_ns"]).sort_values("ts_ns", kind="stable")
    return out.reset_index(drop=True)


def _row(**kw: Any) -> dict[str, Any]:
    r: dict[str, Any] = dict.fromkeys(STEP_COLUMNS)
    r.update(kw)
    return r


# --- source 1 and 2: annotations -------------------------------------------------


def _from_tracekit(ann: pd.DataFrame, warnings: list[str]) -> list[dict[str, Any]]:
    """One row per tracekit step annotation; those named like one that do not parse (a field missing, a
    number out of range) are counted in one warning naming an example, and are not steps."""
    rows = []
    unread: list[str] = []
    for ts, dur, name in zip(ann["ts_ns"], ann["dur_ns"], ann["name"], strict=True):
        lab = parse_step(name)
        if lab is None:
            if name.startswith(STEP_PREFIX + " "):
                unread.append(name)
            continue
        rows.append(
            _row(
                step_id=lab.step_id,
                request_id=lab.request_id,
                kind=lab.kind,
                batch=lab.batch,
                q_len=lab.q_len,
                kv_len=lab.kv_len,
                tokens=lab.tokens,
                source="tracekit",
                cpu_start_ns=int(ts),
                cpu_end_ns=int(ts + dur),
            )
        )
    if unread:
        warnings.append(f"{len(unread)} {STEP_PREFIX} annotations could not be read and are not steps "
                        f"(e.g. {unread[0][:120]!r})")
    return rows


def _from_engine(ann: pd.DataFrame, warnings: list[str]) -> list[dict[str, Any]]:
    """One row per engine step (tracekit.model.stepnames), in any known format.

    Engine annotations that nest (a profiling patch's detailed ``execute_…`` around SGLang's own
    ``step[…]``) are one forward pass: one step, its window the outermost annotation's, its numbers
    merged (_merge_nested). An annotation holding two or more disjoint ones is not a pass: its
    children are the steps. Idle steps are skipped; annotations shaped like engine steps in no known
    format are counted in one warning naming an example, and are not steps."""
    parsed: list[tuple[int, int, Any]] = []
    unknown: list[str] = []
    unread = 0
    for ts, dur, name in zip(ann["ts_ns"], ann["dur_ns"], ann["name"], strict=True):
        step = parse_engine_step(name)
        if step is None:
            if looks_like_engine_step(name) and parse_diffusion_request(name) is None:
                unknown.append(name)
            continue
        unread += unread_numbers(name)
        parsed.append((int(ts), int(ts + dur), step))
    rows = []
    idle = 0
    nested = 0
    for group in _nest(parsed, warnings):
        step = _merge_nested([g[2] for g in group], warnings)
        nested += len(group) > 1
        if step.kind is None:
            idle += 1
            continue
        stats = step.seq_stats()
        rows.append(
            _row(kind=step.kind, batch=step.batch, q_len=step.q_len, kv_len=step.kv_len, tokens=step.tokens,
                 source=step.engine, cpu_start_ns=group[0][0], cpu_end_ns=group[0][1],
                 seq_stats=json.dumps(stats, sort_keys=True) if stats else None)
        )
    if unknown:
        warnings.append(
            f"{len(unknown)} annotations look like engine steps but match no known format "
            f"(e.g. {unknown[0]!r}; known: {', '.join(ENGINE_FORMATS)}): not used as steps"
        )
    if unread:
        warnings.append(f"{unread} numbers of vLLM step annotations are neither tokens nor a sum of squared query "
                        "lengths (docs/metrics.md, \"Engine step annotations\"): not read")
    if nested:
        warnings.append(f"{nested} steps are nested engine annotations of one forward pass each: one step per "
                        "pass, their numbers merged")
    if rows and idle:
        warnings.append(f"{idle} idle engine steps (nothing scheduled) are not steps")
    if len({r["source"] for r in rows}) > 1:
        warnings.append("both vLLM and SGLang step annotations in one trace: both kept")
    return rows


def _nest(parsed: list[tuple[int, int, Any]], warnings: list[str]) -> list[list[tuple[int, int, Any]]]:
    """Engine annotations grouped by forward pass, outermost first in each group.

    A chain of annotations each holding the next (and nothing else) is one group. An annotation that
    holds two or more disjoint ones is dropped (reported): its children are the passes."""
    parsed = sorted(parsed, key=lambda p: (p[0], -(p[1] - p[0])))
    # children[i]: the annotations directly inside parsed[i]
    parent = [-1] * len(parsed)
    stack: list[int] = []
    for i, (s, e, _) in enumerate(parsed):
        while stack and parsed[stack[-1]][1] <= s:
            stack.pop()
        if stack and e <= parsed[stack[-1]][1]:
            parent[i] = stack[-1]
        stack.append(i)
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parent):
        if p >= 0:
            children.setdefault(p, []).append(i)
    groups: list[list[tuple[int, int, Any]]] = []
    dropped = 0

    def walk(i: int) -> None:
        nonlocal dropped
        chain = [i]
        while len(children.get(chain[-1], [])) == 1:
            chain.append(children[chain[-1]][0])
        kids = children.get(chain[-1], [])
        if kids:  # the last of the chain holds several passes: they are the steps
            dropped += len(chain)
            for k in kids:
                walk(k)
            return
        groups.append([parsed[j] for j in chain])

    for i, p in enumerate(parent):
        if p < 0:
            walk(i)
    if dropped:
        warnings.append(f"{dropped} engine annotations hold several others: not steps themselves (the ones inside are)")
    return sorted(groups, key=lambda g: g[0][0])


def _merge_nested(parts: list[Any], warnings: list[str]) -> Any:
    """One EngineStep from the nested annotations of one pass: the numbers of the most detailed one (the
    most per-phase sums), SGLang's ForwardMode and engine from whichever names one (the engine's own
    step annotation), the rest from the others where the detailed one is silent. Kinds that disagree
    are reported; the detailed one's is kept."""
    if len(parts) == 1:
        return parts[0]

    def detail(p: Any) -> int:
        return sum(len(ph.as_dict()) for ph in (p.context, p.generation) if ph is not None)

    best = max(parts, key=detail)
    moded = next((p for p in parts if p.mode is not None), None)
    kinds = {p.kind for p in parts}
    if len(kinds) > 1:
        warnings.append(f"nested engine annotations of one pass disagree on its kind ({sorted(map(str, kinds))}): "
                        f"the {best.format} one's ({best.kind}) is kept")
    fill = {f: next((getattr(p, f) for p in parts if getattr(p, f) is not None), None)
            for f in ("batch", "tokens", "q_len", "kv_len")}
    own = moded or best
    return replace(best, engine=own.engine, mode=own.mode,
                   **{f: getattr(best, f) if getattr(best, f) is not None else v for f, v in fill.items()})


# --- source 3 and 4: the model's own ops, CUDA graph launches ---------------------


def _embeddings(cpu_ops: pd.DataFrame) -> pd.DataFrame:
    """Token-embedding lookups: ts_ns, batch, q_len, tokens, vocab.

    An index of dims [batch, q_len] is one pass over batch sequences; a flat index [N] is
    a packed batch (vLLM, SGLang concatenate every sequence's tokens): N tokens, batch and
    q_len unknown (null), not one sequence of N."""
    cols = ["ts_ns", "batch", "q_len", "tokens", "vocab"]
    if cpu_ops.empty:
        return pd.DataFrame(columns=cols)
    emb = cpu_ops[is_in(cpu_ops["name"], EMBEDDING_OPS)]
    recs = []
    for ts, dims in zip(emb["ts_ns"], emb["input_dims"] if "input_dims" in emb else [None] * len(emb), strict=True):
        d = _dims(dims)
        if not d or len(d) < 2 or not isinstance(d[0], list) or not isinstance(d[1], list):
            continue
        idx = d[1]
        if not is_shape(idx) or not is_shape(d[0]):
            continue  # dims no tensor has (negative, not integers, beyond any size)
        b: int | None
        q: int | None
        if len(idx) == 2:
            b, q = int(idx[0]), int(idx[1])
            n = b * q
        elif len(idx) == 1:
            n = int(idx[0])
            b, q = (1, 1) if n == 1 else (None, None)
        else:
            continue
        vocab = d[0][0] if d[0] else None
        recs.append((int(ts), b, q, n, vocab))
    df = pd.DataFrame(recs, columns=cols).astype({"batch": "Int64", "q_len": "Int64"})
    if df.empty:
        return df
    # The token embedding has the largest table; position/type embeddings (GPT-2's
    # wpe) are lookups too and must not count as passes of their own.
    df = df[df["vocab"] == df["vocab"].max()]
    return df.sort_values("ts_ns", kind="stable").reset_index(drop=True)


def _attention_kv(cpu_ops: pd.DataFrame) -> pd.DataFrame:
    if cpu_ops.empty:
        return pd.DataFrame(columns=["ts_ns", "kv"])
    att = cpu_ops[is_in(cpu_ops["name"], ATTENTION_OPS)]
    recs = []
    for ts, dims in zip(att["ts_ns"], att["input_dims"] if "input_dims" in att else [None] * len(att), strict=True):
        d = _dims(dims)
        if d and len(d) > 1 and isinstance(d[1], list) and len(d[1]) == 4:
            recs.append((int(ts), int(d[1][2])))  # key: [batch, kv_heads, kv_len, head_dim]
    return pd.DataFrame(recs, columns=["ts_ns", "kv"]).sort_values("ts_ns", kind="stable")


def _d2h_launches(gpu: pd.DataFrame, rt: pd.DataFrame, cpu: pd.DataFrame) -> np.ndarray:
    """Sorted host launch times (ns) of the device-to-host copies: where a step's token leaves the GPU."""
    if gpu.empty or "name" not in gpu or "kind" not in gpu:
        return np.empty(0, dtype=np.int64)
    d2h = gpu[d2h_mask(gpu)]
    if d2h.empty:
        return np.empty(0, dtype=np.int64)
    lt = timeline.launch_times(d2h, rt, cpu).dropna()
    return np.sort(lt.to_numpy(dtype=np.int64))


def d2h_mask(gpu: pd.DataFrame) -> np.ndarray:
    """The device-to-host copies among GPU activities (kind memcpy, DtoH in the name)."""
    return (matches(gpu["kind"], lambda k: k.lower() == "memcpy")
            & matches(gpu["name"], lambda n: "DtoH" in n))


def _graph_launches(runtime: pd.DataFrame) -> pd.DataFrame:
    if runtime.empty:
        return pd.DataFrame(columns=["ts_ns", "dur_ns"])
    g = runtime[matches(runtime["name"], lambda n: GRAPH_LAUNCH.search(n) is not None)]
    return g[["ts_ns", "dur_ns"]].dropna(subset=["ts_ns"]).sort_values("ts_ns", kind="stable")


def _fence_of(ts: int, fences: np.ndarray) -> int:
    """The index of the innermost fence (request / ProfilerStep window) holding ts, else -1."""
    if not fences.size:
        return -1
    inside = np.flatnonzero((fences[:, 0] <= ts) & (fences[:, 1] > ts))
    if not inside.size:
        return -1
    return int(inside[np.argmin(fences[inside, 1] - fences[inside, 0])])


def _from_model_ops(
    cpu_ops: pd.DataFrame, runtime: pd.DataFrame, fences: np.ndarray, d2h: np.ndarray, warnings: list[str]
) -> list[dict[str, Any]]:
    emb = _embeddings(cpu_ops)
    graphs = _graph_launches(runtime)
    # mark: [source E(mbedding) | G(raph), start, reach (end of its last merged launch), batch, q_len, tokens]
    marks: list[list[Any]] = [
        ["E", int(t), int(t), None if pd.isna(b) else int(b), None if pd.isna(q) else int(q), int(n)]
        for t, b, q, n in zip(emb["ts_ns"].to_numpy(), emb["batch"], emb["q_len"], emb["tokens"].to_numpy(),
                              strict=True)
    ]
    marks += [["G", int(t), int(t) + (0 if pd.isna(d) else int(d)), None, 1, None]
              for t, d in zip(graphs["ts_ns"], graphs["dur_ns"], strict=True)]
    if not marks:
        return []
    marks.sort(key=lambda m: (m[1], m[0]))
    mm = np.sort(cpu_ops.loc[is_in(cpu_ops["name"], MATMUL_OPS), "ts_ns"].to_numpy(dtype=np.int64)) \
        if not cpu_ops.empty else np.empty(0, dtype=np.int64)

    starts: list[list[Any]] = []
    for m in marks:
        if m[0] == "G" and starts:
            prev = starts[-1]
            n_mm = np.searchsorted(mm, m[1]) - np.searchsorted(mm, prev[1])
            n_d2h = np.searchsorted(d2h, m[1]) - np.searchsorted(d2h, prev[2])
            same = _fence_of(m[1], fences) == _fence_of(prev[1], fences)
            # An eager embedding then graphs with no layers in between: one pass whose
            # layers were captured (piecewise graphs), not two. Graph after graph with no
            # token copy between them, in a trace that shows its token copies: the pieces
            # of one pass (piecewise, or a compiled model with graph breaks), not a step each.
            if same and ((prev[0] == "E" and n_mm == 0) or (prev[0] == "G" and d2h.size and n_d2h == 0)):
                prev[2] = max(prev[2], m[2])
                continue
        starts.append(m)

    tops = _top_level_ends(cpu_ops, runtime)
    att = _attention_kv(cpu_ops)
    rows = []
    batch_of_chain: int | None = None
    packed = 0
    for i, (src, ts, reach, b, q, n) in enumerate(starts):
        nxt = starts[i + 1][1] if i + 1 < len(starts) else None
        in_fence = bool(fences.size) and bool(((fences[:, 0] <= ts) & (fences[:, 1] > ts)).any())
        if nxt is None and not in_fence:
            end = _last_pass_end(ts, cpu_ops, runtime, reach) if src == "E" else reach
            if end == reach and src == "E":
                end = _window_end(ts, nxt, fences, tops, reach)
        else:
            end = _window_end(ts, nxt, fences, tops, reach)
        if src == "E":
            batch_of_chain = b
            kv_attn = None
            if not att.empty:
                a = att[(att["ts_ns"] >= ts) & (att["ts_ns"] < end)]
                kv_attn = int(a["kv"].to_numpy()[0]) if not a.empty else None
            if q is None:
                # A packed batch of n > 1 tokens: prefill chunks and decodes cannot be told apart.
                packed += 1
                rows.append(_row(kind="mixed", batch=None, q_len=None, tokens=n, source="model_ops",
                                 cpu_start_ns=ts, cpu_end_ns=end, kv_len=None))
                continue
            rows.append(
                _row(kind=step_kind(q), batch=b, q_len=q, tokens=n, source="model_ops",
                     cpu_start_ns=ts, cpu_end_ns=end, kv_len=kv_attn)
            )
        else:
            rows.append(
                _row(kind="decode", batch=batch_of_chain, q_len=1,
                     tokens=batch_of_chain if batch_of_chain is not None else None,
                     source="cuda_graph", cpu_start_ns=ts, cpu_end_ns=end, kv_len=None)
            )
    if packed:
        warnings.append(
            f"{packed} forward passes have a packed (flat) token index: their tokens are known, their batch, "
            "q_len and prefill/decode split are not (kind mixed); an engine step annotation would tell"
        )
    _fill_kv([r for r in rows if r["q_len"] is not None or r["kind"] != "mixed"])
    return rows


def _fill_kv(rows: list[dict[str, Any]]) -> None:
    """KV length after each step: cumulative along a prefill → decode chain.

    The attention op's key length is the witness where it grows step by step
    (dynamic cache); a static cache reports its full size every step, so there
    the running count (prefill q_len, +1 per decode) is used instead.
    """
    chains: list[list[dict[str, Any]]] = []
    for r in rows:
        if r["kind"] != "decode" or not chains:
            chains.append([r])
        else:
            chains[-1].append(r)
    for chain in chains:
        attn = [r["kv_len"] for r in chain]
        growing = all(a is not None for a in attn) and all(
            attn[k + 1] - attn[k] == chain[k + 1]["q_len"] for k in range(len(chain) - 1)
        )
        seed = attn[0] if (attn[0] is not None and chain[0]["kind"] == "decode") else 0
        run = seed
        for k, r in enumerate(chain):
            run = run + (r["q_len"] or 0) if k or chain[0]["kind"] != "decode" else run
            r["kv_len"] = attn[k] if growing else run


def _top_level_ends(cpu_ops: pd.DataFrame, runtime: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(start, running max end) of host events, to find where the last pass ends."""
    parts = []
    for df in (cpu_ops, runtime):
        if not df.empty:
            parts.append(df[["ts_ns", "dur_ns"]].dropna())
    if not parts:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    ev = pd.concat(parts).sort_values("ts_ns", kind="stable")
    s = ev["ts_ns"].to_numpy(dtype=np.int64)
    e = s + ev["dur_ns"].to_numpy(dtype=np.int64)
    return s, e


def _window_end(
    ts: int, nxt: int | None, fences: np.ndarray, tops: tuple[np.ndarray, np.ndarray], floor: int
) -> int:
    """A pass ends at the next pass, at the end of the request/ProfilerStep window
    holding it, or (last pass, no window) at the end of the host events after it."""
    bound = nxt
    if fences.size:
        inside = fences[(fences[:, 0] <= ts) & (fences[:, 1] > ts)]
        if inside.size:
            f = int(inside[:, 1].min())
            bound = f if bound is None else min(bound, f)
    if bound is not None:
        return max(bound, floor) if nxt is None else bound
    s, e = tops
    if s.size:
        after = e[s >= ts]
        if after.size:
            return max(int(after.max()), floor)
    return max(floor, ts + 1)


def _last_pass_end(ts: int, cpu_ops: pd.DataFrame, runtime: pd.DataFrame, floor: int) -> int:
    """The last pass with no next pass and no enclosing window ends with its last
    matmul (the lm_head producing the logits), not at the end of the trace."""
    if cpu_ops.empty:
        return floor
    mm = cpu_ops[is_in(cpu_ops["name"], MATMUL_OPS) & (cpu_ops["ts_ns"] >= ts).to_numpy()]
    if mm.empty:
        return floor
    end = int((mm["ts_ns"] + mm["dur_ns"].fillna(0)).max())
    return max(end, floor)


# --- putting it together ------------------------------------------------------------


def request_fences(ann: pd.DataFrame) -> np.ndarray:
    """Windows that a pass never crosses: requests (any user annotation that is
    not itself a step) and ProfilerStep windows."""
    if ann.empty:
        return np.empty((0, 2), dtype=np.int64)
    names = ann["name"].astype(str)
    is_step = (
        names.str.match(COMPILER.pattern)
        | names.map(lambda n: parse_step(n) is not None)
        | names.map(looks_like_engine_step)
    )
    f = ann[~is_step]
    return np.stack([f["ts_ns"].to_numpy(dtype=np.int64), (f["ts_ns"] + f["dur_ns"]).to_numpy(dtype=np.int64)], axis=1) \
        if not f.empty else np.empty((0, 2), dtype=np.int64)


def _check_overlaps(steps: pd.DataFrame, warnings: list[str]) -> pd.DataFrame:
    if len(steps) < 2:
        return steps
    steps = steps.sort_values("cpu_start_ns", kind="stable").reset_index(drop=True)
    ids = steps["step_id"].tolist()
    srcs = steps["source"].astype(str).tolist()
    starts = steps["cpu_start_ns"].to_numpy()
    ends = steps["cpu_end_ns"].to_numpy().copy()
    for i in range(len(steps) - 1):
        if ends[i] > starts[i + 1]:
            warnings.append(
                f"steps {ids[i]} and {ids[i + 1]} overlap "
                f"({ends[i] - starts[i + 1]} ns; source {srcs[i]}): "
                f"the first is cut at the second's start so no GPU activity counts twice"
            )
            ends[i] = starts[i + 1]
    steps["cpu_end_ns"] = ends
    return steps


def _cross_check(steps: pd.DataFrame, cpu_ops: pd.DataFrame, warnings: list[str]) -> None:
    """Annotated steps against the embedding's shapes: disagreement is reported."""
    emb = _embeddings(cpu_ops)
    if emb.empty or steps.empty:
        return
    ts = emb["ts_ns"].to_numpy()
    recs: list[dict[Any, Any]] = steps.to_dict("records")
    e_batch = emb["batch"].to_numpy(dtype="float64", na_value=np.nan)
    e_q = emb["q_len"].to_numpy(dtype="float64", na_value=np.nan)
    e_n = emb["tokens"].to_numpy()
    for r in recs:
        lo, hi = np.searchsorted(ts, int(r["cpu_start_ns"])), np.searchsorted(ts, int(r["cpu_end_ns"]))
        if hi - lo != 1:
            continue
        if np.isnan(e_q[lo]):
            # A packed index [N] says only how many tokens the pass had.
            if r["tokens"] is not None and not pd.isna(r["tokens"]) and int(r["tokens"]) != int(e_n[lo]):
                warnings.append(f"step {r['step_id']} ({r['source']}): tokens={r['tokens']} but the packed "
                                f"aten::embedding input holds {int(e_n[lo])} tokens (annotation kept, not guessed)")
            continue
        eq, eb = int(e_q[lo]), int(e_batch[lo])
        if eb == 1 and r.get("tokens") is not None and not pd.isna(r["tokens"]) and int(r["tokens"]) == eq \
                and int(r["batch"] or 1) > 1:
            continue  # a packed batch (continuous batching): every request's tokens in one row
        kind = step_kind(eq)
        bad = []
        if r["q_len"] is not None and not pd.isna(r["q_len"]) and int(r["q_len"]) != eq:
            bad.append(f"q_len={r['q_len']} but aten::embedding shows q_len={eq}")
        if r["batch"] is not None and not pd.isna(r["batch"]) and int(r["batch"]) != eb:
            bad.append(f"batch={r['batch']} but aten::embedding shows batch={eb}")
        if r["kind"] in ("prefill", "decode") and r["kind"] != kind:
            bad.append(f"kind={r['kind']} but the embedding's shape says {kind}")
        if bad:
            warnings.append(
                f"step {r['step_id']} ({r['source']}): " + "; ".join(bad) + " (annotation kept, not guessed)"
            )


def detect(
    cpu_ops: Any, annotations: Any, runtime: Any, gpu_activity: Any
) -> Detected:
    """Find the steps of a trace and the step of each GPU activity.

    Pure: inputs (pa.Table or DataFrame) are never modified.
    """
    cpu = live_ops(as_df(cpu_ops))
    ann = host_annotations(annotations, cpu_ops)
    rt = as_df(runtime)
    gpu = as_df(gpu_activity)
    warnings: list[str] = []

    rows = _from_tracekit(ann, warnings)
    if not rows:
        rows = _from_engine(ann, warnings)
    d2h = _d2h_launches(gpu, rt, cpu)
    if rows:
        work = workload.decide(ann, cpu, str(rows[0]["source"]), True)
    else:
        inferred: list[str] = []
        rows = _from_model_ops(cpu, rt, request_fences(ann), d2h, inferred)
        work = workload.decide(ann, cpu, None, bool(rows))
        if work.kind == "llm":
            warnings += inferred
        elif work.kind == "iterations":
            rows = [_row(**r) for r in workload.iteration_rows(ann)]
        elif work.kind == "diffusion":
            found, notes = workload.denoise_rows(ann, cpu)
            rows = [_row(**r) for r in found]
            warnings += notes
    steps = pd.DataFrame(rows, columns=STEP_COLUMNS)
    if not steps.empty:
        reused = int(steps["step_id"].dropna().duplicated().sum())
        if reused:
            a = as_df(annotations)
            ranks = a["rank"].nunique() if "rank" in a else 0
            warnings.append(f"{reused} step annotations reuse another's step id: steps numbered in time order instead"
                            + (f" (the run holds {ranks} ranks' traces; steps are found across them, not per rank)"
                               if ranks > 1 else ""))
        if reused or steps["step_id"].isna().any():
            steps = steps.sort_values("cpu_start_ns", kind="stable").reset_index(drop=True)
            steps["step_id"] = np.arange(len(steps))
        steps = _check_overlaps(steps, warnings)
        if steps["source"].iloc[0] != "model_ops":
            _cross_check(steps, cpu, warnings)
    else:
        warnings.append(
            "no model steps found (no tracekit/vLLM/SGLang step annotations, no aten::embedding with "
            "input shapes, no cudaGraphLaunch, no ProfilerStep window): the whole trace is one outside row "
            "(GPU timeline, kernel classes)"
        )

    kernel_steps = assign_gpu(gpu, rt, cpu, steps)
    steps = fill_gpu_columns(steps, kernel_steps)
    steps["graph_launches"] = graph_launch_counts(steps, rt)
    steps["token_ns"] = token_times(steps, gpu, rt, cpu)
    for c in ("step_id", "request_id", "batch", "q_len", "kv_len", "tokens", "cpu_start_ns", "cpu_end_ns",
              "gpu_start_ns", "gpu_end_ns", "gpu_busy_ns", "graph_launches", "token_ns"):
        steps[c] = steps[c].astype("Int64")
    return Detected(steps=steps.reset_index(drop=True), kernel_steps=kernel_steps, warnings=warnings, workload=work)


def assign_gpu(gpu: pd.DataFrame, rt: pd.DataFrame, cpu: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per GPU activity (row = its position in gpu_activity) with its step or null."""
    cols = ["rank", "row", "device", "ts_ns", "dur_ns", "category", "step_id", "request_id"]
    if gpu.empty:
        return pd.DataFrame({c: pd.Series([], dtype="Int64" if c != "category" else object) for c in cols})
    launch = timeline.launch_times(gpu, rt, cpu)
    if steps.empty:
        sid = pd.Series(pd.NA, index=gpu.index, dtype="Int64")
    else:
        sid = timeline.assign_to_windows(
            launch,
            steps["cpu_start_ns"].to_numpy(dtype=np.int64),
            steps["cpu_end_ns"].to_numpy(dtype=np.int64),
            steps["step_id"].to_numpy(dtype=np.int64),
        )
    out = pd.DataFrame(
        {
            "rank": gpu.get("rank", pd.NA),
            "row": np.arange(len(gpu), dtype=np.int64),
            "device": gpu["device"],
            "ts_ns": gpu["ts_ns"].astype("int64"),
            "dur_ns": gpu["dur_ns"].fillna(0).astype("int64"),
            "category": timeline.categorise(gpu).to_numpy(),
            "step_id": sid.to_numpy(),
            "request_id": pd.arrays.IntegerArray(np.zeros(len(gpu), dtype=np.int64), np.ones(len(gpu), dtype=bool)),
        }
    )
    out["step_id"] = out["step_id"].astype("Int64")
    return out.reset_index(drop=True)


def graph_launch_counts(steps: pd.DataFrame, rt: pd.DataFrame) -> pd.Series:
    """CUDA/HIP graph launches issued inside each step's window (a piecewise step issues many)."""
    out = pd.Series(0, index=steps.index, dtype="Int64")
    g = _graph_launches(rt)
    if steps.empty or g.empty:
        return out
    t = np.sort(g["ts_ns"].to_numpy(dtype=np.int64))
    s0 = steps["cpu_start_ns"].to_numpy(dtype="float64", na_value=np.nan)
    e0 = steps["cpu_end_ns"].to_numpy(dtype="float64", na_value=np.nan)
    ok = ~(np.isnan(s0) | np.isnan(e0))
    n = np.zeros(len(steps), dtype=np.int64)
    n[ok] = np.searchsorted(t, e0[ok], side="left") - np.searchsorted(t, s0[ok], side="left")
    out[:] = n
    return out


def token_times(steps: pd.DataFrame, gpu: pd.DataFrame, rt: pd.DataFrame, cpu: pd.DataFrame) -> pd.Series:
    """When each step's output token reached the host: the GPU end of the first
    device-to-host copy launched after the step's model work (its last matmul op or
    its last CUDA graph launch, whichever is later). Null where none is seen (e.g. an
    annotated step whose sampling runs after it): the step's GPU end stands in then.

    The copy is looked for inside the step's window, which for tracekit's own and
    shape-detected steps runs to the next pass. It also holds the host's preparation
    of that pass (input copies, cache position updates; docs/measurements/2026-12-07-docstring-figures.md
    gives its size on the compiled H200 fixture); ending the step's token there would put every token late by that
    much: the token's own copy (generate's ``.cpu()``/``.item()`` on the sampled ids)
    is the moment the caller has it. An engine's step annotation wraps the forward only
    (vLLM execute_model, SGLang's step span): sampling and the token's copy follow it,
    so for those the copy is looked for up to the next step's start.
    """
    out = pd.Series(pd.NA, index=steps.index, dtype="Int64")
    if steps.empty or gpu.empty or "name" not in gpu:
        return out
    d2h = gpu[d2h_mask(gpu)]
    if d2h.empty:
        return out
    launch = timeline.launch_times(d2h, rt, cpu)
    ok = launch.notna().to_numpy()
    # int64 throughout: epoch-scale ns do not fit a float64's 53 bits
    lt = launch[ok].to_numpy(dtype=np.int64)
    gend = (d2h["ts_ns"].astype("int64") + d2h["dur_ns"].fillna(0).astype("int64")).to_numpy(dtype=np.int64)[ok]
    order = np.argsort(lt, kind="stable")
    lt, gend = lt[order], gend[order]
    mm = np.sort(cpu.loc[is_in(cpu["name"], MATMUL_OPS), "ts_ns"].to_numpy(dtype=np.int64)) \
        if not cpu.empty else np.empty(0, dtype=np.int64)
    gl = np.sort(_graph_launches(rt)["ts_ns"].to_numpy(dtype=np.int64))
    engine = steps["source"].astype(str).isin(["vllm", "sglang", "atom"]).to_numpy()
    big = np.iinfo(np.int64).max
    starts = pd.to_numeric(steps["cpu_start_ns"], errors="coerce").astype("Int64").fillna(big).to_numpy(dtype=np.int64)
    nxt = np.full(len(steps), big, dtype=np.int64)
    order_s = np.argsort(starts, kind="stable")
    nxt[order_s[:-1]] = starts[order_s[1:]]
    for pos, (i, s0, e0) in enumerate(zip(steps.index, steps["cpu_start_ns"], steps["cpu_end_ns"], strict=True)):
        if pd.isna(s0) or pd.isna(e0):
            continue
        s0, e0 = int(s0), int(e0)
        anchor = s0
        for marks in (mm, gl):
            k = np.searchsorted(marks, e0) - 1
            if k >= 0 and marks[k] >= s0:
                anchor = max(anchor, int(marks[k]))
        bound = nxt[pos] if engine[pos] else e0
        j = np.searchsorted(lt, anchor)
        if j < len(lt) and lt[j] < bound:
            out[i] = int(gend[j])
    return out


def fill_gpu_columns(steps: pd.DataFrame, kernel_steps: pd.DataFrame) -> pd.DataFrame:
    steps = steps.copy()
    if steps.empty:
        return steps
    g = timeline.busy_by_group(kernel_steps, "step_id")
    g = g.set_index("step_id") if not g.empty else g
    for c in ("gpu_start_ns", "gpu_end_ns", "gpu_busy_ns"):
        if g.empty:
            steps[c] = pd.NA if c != "gpu_busy_ns" else 0
        else:
            steps[c] = steps["step_id"].map(g[c])
            if c == "gpu_busy_ns":
                steps[c] = steps[c].fillna(0)
    return steps


def request_labels(annotations: Any, cpu_ops: Any) -> list[tuple[int, int, Any]]:
    """(start, end, RequestLabel) of tracekit's own request annotations."""
    ann = host_annotations(annotations, cpu_ops)
    out = []
    for ts, dur, name in zip(ann["ts_ns"], ann["dur_ns"], ann["name"], strict=True):
        lab = parse_request(name)
        if lab is not None:
            out.append((int(ts), int(ts + dur), lab))
    return out


# --- runs recorded by tracekit: the recorder's steps are the truth -------------------


def steps_pass(cpu_ops: Any, annotations: Any, runtime: Any, gpu_activity: Any, recorded_steps: Any = None) -> Detected:
    """The steps pass: ``detect``, merged with the recorder's own steps where the run has them
    (``recorded_steps``: a run tracekit recorded)."""
    found = detect(cpu_ops, annotations, runtime, gpu_activity)
    if recorded_steps is not None and len(recorded_steps) > 0:
        found = merge_recorded(found, recorded_steps, gpu_activity, runtime, cpu_ops)
    return found


def merge_recorded(detected: Detected, recorded: Any, gpu_activity: Any, runtime: Any, cpu_ops: Any) -> Detected:
    """The recorder's steps (every forward pass of the run, host-timed) with the trace's GPU timeline.

    A run recorded with a kernel-capture window (``tracekit record --trace-steps``)
    has a trace that covers only some steps; re-deriving steps from it would lose
    the others. So the recorder's steps table is kept whole; a step the trace
    annotates (same step_id) takes the trace's window (exact on the trace clock)
    and is ``captured``; the others keep the recorder's host window and get null
    GPU columns: no kernel capture, which is not GPU idleness.
    """
    rec = as_df(recorded)
    if rec.empty:
        return detected
    warnings = list(detected.warnings)
    det = detected.steps
    traced = det[det["source"].astype(str) == "tracekit"] if not det.empty else det
    if not det.empty and traced.empty:
        warnings.append(f"the trace's steps come from {det['source'].iloc[0]}, not tracekit's annotations: "
                        "the recorder's steps are used and none is marked captured")
    steps = rec.copy()
    for c in STEP_COLUMNS:
        if c not in steps:
            steps[c] = pd.NA
    steps = steps[[*STEP_COLUMNS]].copy()
    ids = set(traced["step_id"].astype("int64")) if not traced.empty else set()
    unknown = ids - set(steps["step_id"].astype("int64"))
    if unknown:
        warnings.append(f"trace steps {sorted(unknown)[:5]} are not in the recorder's steps table (ignored)")
    steps["captured"] = steps["step_id"].astype("int64").isin(ids)
    if ids:
        win = traced.set_index(traced["step_id"].astype("int64"))
        sel = steps["captured"].to_numpy()
        sid = steps.loc[sel, "step_id"].astype("int64")
        for c in ("cpu_start_ns", "cpu_end_ns"):
            steps.loc[sel, c] = sid.map(win[c]).to_numpy()
    steps = steps.sort_values("cpu_start_ns", kind="stable").reset_index(drop=True)
    gpu, rt, cpu = as_df(gpu_activity), as_df(runtime), as_df(cpu_ops)
    # GPU activity is assigned by launch time to captured steps only: the host
    # windows of uncaptured steps lie outside the trace anyway.
    cap = steps[steps["captured"]]
    kernel_steps = assign_gpu(gpu, rt, cpu, cap.astype({"cpu_start_ns": "int64", "cpu_end_ns": "int64"}))
    filled = fill_gpu_columns(cap, kernel_steps) if not cap.empty else cap
    for c in ("gpu_start_ns", "gpu_end_ns", "gpu_busy_ns"):
        steps[c] = pd.NA
        if not cap.empty:
            steps.loc[steps["captured"], c] = filled[c].to_numpy()
    for c in ("step_id", "request_id", "batch", "q_len", "kv_len", "tokens", "cpu_start_ns", "cpu_end_ns",
              "gpu_start_ns", "gpu_end_ns", "gpu_busy_ns"):
        steps[c] = pd.to_numeric(steps[c], errors="coerce").astype("Int64")
    steps["kind"] = steps["kind"].astype(str)
    steps["source"] = steps["source"].astype(str)
    steps["captured"] = steps["captured"].astype(bool)
    return Detected(steps=steps, kernel_steps=kernel_steps, warnings=warnings,
                    workload=workload.Workload("llm", "tracekit's recorded steps"))
