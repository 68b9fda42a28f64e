"""Graph capture merge: the kernels a CUDA/HIP graph replays get the ops that launched them at capture.

A replayed graph's kernels carry the correlation of one ``cudaGraphLaunch`` / ``hipGraphLaunch`` and
no CPU op of their own: the ops (and their shapes) ran once, when the graph was captured. A capture
is a ``*StreamBeginCapture`` ... ``*StreamEndCapture`` window: the runtime launch calls (kernels,
memcpys, memsets) in the graph's order, each under the op that made it, and no kernel run. Captured
graphs come from capture traces beside the trace and from the trace's own windows; a replay no
captured graph fits is matched to the same kernels run eagerly in the trace
(tracekit.ingest.replay_match). Captured graph and replay are matched by key, then by position:

- key: the engine step around the replay (tracekit.model.stepnames) gives the size the engine padded
  to (vLLM: scheduled tokens, rounded up to the smallest captured ``capture_<N>_<MODE>``; SGLang: the
  batch, up to the smallest ``bs_<N>`` file), its mode (vLLM: FULL with one launch in the step, else
  PIECEWISE) and the launch's ordinal in the step (the k-th piece); TraceLens's execution_details.json
  (``[{"file", "batch_size", "mode"}]``) keys the files it lists. No key (tracekit's own
  ``record --compile``, a user's script): every captured graph is a candidate.
- position: the i-th replayed activity is the i-th captured launch (a capture holding more launches
  than the replay, e.g. an SGLang file without capture markers, is aligned at the offset where the
  most agree). Activities are checked where they can be: memcpy/memset against the captured call's
  kind, Inductor's Triton kernels against the name of the op that launched them, and any kernel
  against the kernels an op of the same name and shapes launched where it ran eagerly (a softer
  check: most of them must agree). A candidate wins with no disagreement, or >= 90% agreement, and
  only if no other candidate fits as well (an ambiguity matches nothing: shapes are never guessed).

Each matched activity's ``op_id`` becomes the captured op's. A capture trace's ops (those inside
matched windows, with their ancestors) join the run's cpu_ops with ``captured`` true (their times are
the capture trace's: passes that read host timing skip them); the ops inside the trace's own windows
are marked ``captured`` where they are. What cannot be matched is named in the report's warnings with
the replayed time it leaves without shapes; the replay keeps its launch's op. Capture traces are
found beside a trace by ``find_captures``: a ``capture_traces/`` or ``graph_capture_profile/`` folder
(vLLM, SGLang, and tracekit's own recordings), or vLLM's ``graph_capture_rank_*`` files next to it.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tracekit.ingest import arrays as A
from tracekit.ingest import replay_match as RM
from tracekit.ingest.reader import read_file
from tracekit.ingest.result import FileResult
from tracekit.model import schema as _schema
from tracekit.model.stepnames import parse_capture_label, parse_engine_step

CAPTURE_DIRS = ("capture_traces", "graph_capture_profile")
EXECUTION_DETAILS = "execution_details.json"
# vLLM graph_capture_rank_0[_encoder].<ns>.pt.trace.json.gz; SGLang [<runner>_]bs_<n>_rank<r>.json.gz and
# cuda_graph_capture-<runner>-TP-<r>.json.gz; tracekit's own compile_capture.pt.trace.json.gz.
CAPTURE_FILE = re.compile(
    r"^(graph_capture_rank_\d+.*|(?:\w+?_)?bs_\d+_rank\d+|cuda_graph_capture-.*|compile_capture.*)"
    r"\.json(\.gz)?$")
SGLANG_BS = re.compile(r"^(?:(\w+?)_)?bs_(\d+)_rank(\d+)\.json(\.gz)?$")
GRAPH_LAUNCH = re.compile(r"GraphLaunch", re.IGNORECASE)
BEGIN_CAPTURE = re.compile(r"StreamBeginCapture", re.IGNORECASE)
END_CAPTURE = re.compile(r"StreamEndCapture", re.IGNORECASE)
LAUNCH = re.compile(r"^(cuda|hip|cu)\w*(LaunchKernel|LaunchCooperativeKernel|Memcpy|Memset)", re.IGNORECASE)
MATCHED_BY = ("capture trace", "trace capture", "eager run")
AGREEMENT = 0.9  # share of checkable positions that must agree
MAX_OFFSET = 4096  # offsets tried when a capture holds more launches than the replay


@dataclass(frozen=True)
class Launch:
    """One launch call captured into a graph: its kind and the op that made it."""

    kind: str  # kernel | memcpy | memset
    op_id: int | None
    op_name: str | None
    op_dims: str | None = None  # the op's input_dims: two graphs with the same ops and shapes are one
    # the kernels an op of this name and shapes launched where it ran eagerly (empty: not seen run)
    kernels: frozenset[str] = frozenset()

    def shape(self) -> tuple[str, str | None, str | None]:
        return self.kind, self.op_name, self.op_dims


@dataclass
class CapturedGraph:
    file: str
    window: int  # the capture window's ordinal in its file
    size: int | None  # captured (padded) size: tokens (vLLM) or batch (SGLang)
    size_kind: str | None  # "tokens" | "batch"
    mode: str | None  # FULL | PIECEWISE (vLLM)
    prefix: str | None  # a subsystem (vLLM "draft", "encoder"); None: the model itself
    piece: int  # ordinal among the windows of one capture (a piecewise capture has many)
    launches: list[Launch]
    ops: np.ndarray  # row indices (in its file's cpu_ops) of the ops inside the window
    used: int = 0


@dataclass
class CaptureFile:
    path: str
    result: FileResult
    graphs: list[CapturedGraph] = field(default_factory=list)


@dataclass
class CaptureReport:
    """What the merge did, for run.json (``ingest.captures``) and warnings."""

    files: list[str] = field(default_factory=list)
    graphs: int = 0
    graph_launches: int = 0  # replays in the trace
    graph_launches_matched: int = 0
    activities_replayed: int = 0
    activities_matched: int = 0
    ops_added: int = 0
    graphs_in_trace: int = 0  # graphs captured inside the trace itself
    # replays matched, by what: "capture trace" (beside the trace), "trace capture" (in it), "eager run"
    matched_by: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MATCHED_BY, 0))
    kernel_ns: int = 0  # every GPU activity's time
    replayed_ns: int = 0  # replayed activities' time
    unmatched_ns: int = 0  # replayed activities' time left without a captured op
    unmatched: dict[str, int] = field(default_factory=dict)  # why -> graph launches
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"files": self.files, "graphs": self.graphs, "graphs_in_trace": self.graphs_in_trace,
                "graph_launches": self.graph_launches, "graph_launches_matched": self.graph_launches_matched,
                "matched_by": self.matched_by,
                "activities_replayed": self.activities_replayed, "activities_matched": self.activities_matched,
                "ops_added": self.ops_added, "kernel_ns": self.kernel_ns, "replayed_ns": self.replayed_ns,
                "unmatched_ns": self.unmatched_ns, "unmatched": self.unmatched}


# --- finding and reading capture traces -------------------------------------------------------


def is_capture_file(path: Path) -> bool:
    """A capture trace by its name or folder (never a workload trace of its own)."""
    return bool(CAPTURE_FILE.match(path.name)) or path.parent.name in CAPTURE_DIRS


def find_captures(trace: Path) -> list[Path]:
    """Capture traces beside ``trace``: in capture_traces/ or graph_capture_profile/ next to it (or inside
    it, for a run directory), and vLLM's graph_capture_rank_* files in its own folder."""
    base = trace if trace.is_dir() else trace.parent
    out: list[Path] = []
    for d in CAPTURE_DIRS:
        folder = base / d
        if folder.is_dir():
            out += sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz"))
                          and p.name != EXECUTION_DETAILS)
    out += sorted(p for p in base.iterdir() if p.is_file() and CAPTURE_FILE.match(p.name)
                  and p.name.startswith("graph_capture_rank_")) if base.is_dir() else []
    return out


def _execution_details(paths: Sequence[Path]) -> dict[str, tuple[int | None, str | None]]:
    """TraceLens's execution_details.json beside the captures: basename -> (batch_size, mode)."""
    out: dict[str, tuple[int | None, str | None]] = {}
    for folder in {p.parent for p in paths}:
        f = folder / EXECUTION_DETAILS
        if not f.is_file():
            continue
        try:
            rows = json.loads(f.read_text())
        except (OSError, ValueError, RecursionError):  # unreadable, not JSON, nested past the recursion limit
            continue
        for r in rows if isinstance(rows, list) else []:
            if isinstance(r, dict) and isinstance(r.get("file"), str):
                bs = r.get("batch_size")
                mode = r.get("mode")
                out[r["file"]] = (int(bs) if isinstance(bs, int) else None,
                                  str(mode).upper() if isinstance(mode, str) else None)
    return out


def read_captures(paths: Sequence[Path], first_file_index: int) -> tuple[list[CaptureFile], list[str]]:
    """Read capture traces (file indices from ``first_file_index``, so their op ids are the run's own) and
    find their captured graphs; (files, warnings about files that could not be read)."""
    from tracekit.errors import TraceFormatError

    details = _execution_details(paths)
    files: list[CaptureFile] = []
    warnings: list[str] = []
    for i, p in enumerate(paths):
        try:
            res = read_file(p, file_index=first_file_index + i)
        except TraceFormatError as exc:
            warnings.append(f"capture trace {p.name}: not read ({exc.message})")
            continue
        cf = CaptureFile(str(p), res)
        cf.graphs = _graphs(cf, details.get(Path(p).name))
        if not cf.graphs:
            warnings.append(f"capture trace {p.name}: no captured graph in it (no launches between "
                            "StreamBeginCapture and StreamEndCapture)")
        files.append(cf)
    return files, warnings


def _frame(t: pa.Table, cols: Sequence[str]) -> dict[str, np.ndarray]:
    """Columns as numpy: integers with -1 for null, strings (dictionary or plain) as objects with None."""
    out: dict[str, np.ndarray] = {}
    for c in cols:
        col = t[c].combine_chunks() if isinstance(t[c], pa.ChunkedArray) else t[c]
        if pa.types.is_dictionary(col.type):
            codes = A.to_numpy(col.indices, -1).astype(np.int64)
            values = np.array([*col.dictionary.to_pylist(), None], dtype=object)
            out[c] = values[np.where(codes >= 0, codes, len(values) - 1)]
        elif pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            out[c] = np.array(col.to_pylist(), dtype=object)
        else:
            out[c] = A.to_numpy(col, -1).astype(np.int64, copy=False)
    return out


def _name_mask(col: Any, pattern: re.Pattern[str]) -> np.ndarray:
    """Rows whose (dictionary-encoded) name matches: each distinct name is tested once."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(col.type):
        hits = np.array([bool(v) and bool(pattern.search(v)) for v in col.dictionary.to_pylist()] + [False])
        codes = A.to_numpy(col.indices, -1).astype(np.int64)
        return hits[np.where(codes >= 0, codes, len(hits) - 1)]
    return np.array([bool(v) and bool(pattern.search(v)) for v in col.to_pylist()], dtype=bool)


def _launch_ops(rt: dict[str, np.ndarray], sel: np.ndarray, cpu: dict[str, np.ndarray]) -> np.ndarray:
    """Row (in cpu_ops) of the op that made each selected runtime call, or -1: the innermost op with its
    External id, else the innermost op on its thread enclosing it."""
    out = np.full(len(sel), -1, dtype=np.int64)
    if not len(cpu["ts_ns"]):
        return out
    by_ext: dict[int, int] = {}
    for row in np.argsort(cpu["ts_ns"], kind="stable"):  # later (inner) ops overwrite outer ones
        e = int(cpu["external_id"][row])
        if e >= 0:
            by_ext[e] = int(row)
    start, end = cpu["ts_ns"], cpu["ts_ns"] + np.maximum(cpu["dur_ns"], 0)
    for k, r in enumerate(sel):
        hit = by_ext.get(int(rt["external_id"][r]), -1) if rt["external_id"][r] >= 0 else -1
        if hit < 0:
            t = rt["ts_ns"][r]
            inside = np.flatnonzero((cpu["pid"] == rt["pid"][r]) & (cpu["tid"] == rt["tid"][r])
                                    & (start <= t) & (end >= t))
            if len(inside):
                hit = int(inside[np.argmax(start[inside])])
        out[k] = hit
    return out


def _graphs(cf: CaptureFile, detail: tuple[int | None, str | None] | None) -> list[CapturedGraph]:
    return graphs_in(cf.result.tables, cf.path, detail, whole_file=True)


def graphs_in(tables: dict[str, pa.Table], path: str, detail: tuple[int | None, str | None] | None = None,
              whole_file: bool = False) -> list[CapturedGraph]:
    """The graphs captured in a trace's tables: one per StreamBeginCapture ... StreamEndCapture window
    on one thread, its launches in order. ``whole_file``: without capture markers, every launch of the
    trace is one graph (a capture file that holds nothing else); ``detail``: (size, mode) of the file."""
    rt_t, cpu_t, ann_t = tables["runtime"], tables["cpu_ops"], tables["annotations"]
    if rt_t.num_rows == 0:
        return []
    rt = _frame(rt_t, ("ts_ns", "dur_ns", "name", "pid", "tid", "external_id"))
    cpu = _frame(cpu_t, ("ts_ns", "dur_ns", "name", "pid", "tid", "external_id", "op_id", "input_dims"))
    names = rt["name"]
    order = np.argsort(rt["ts_ns"], kind="stable")
    begins = [int(i) for i in order if names[i] and BEGIN_CAPTURE.search(names[i])]
    ends = [int(i) for i in order if names[i] and END_CAPTURE.search(names[i])]
    is_launch = np.array([bool(n) and bool(LAUNCH.search(n)) and not GRAPH_LAUNCH.search(n) for n in names])
    windows: list[tuple[int, int, int, int]] = []  # (start, end, pid, tid)
    used_ends: set[int] = set()
    for b in begins:
        key = (rt["pid"][b], rt["tid"][b])
        e = next((j for j in ends if j not in used_ends and rt["ts_ns"][j] >= rt["ts_ns"][b]
                  and (rt["pid"][j], rt["tid"][j]) == key), None)
        if e is None:
            continue
        used_ends.add(e)
        windows.append((int(rt["ts_ns"][b] + max(rt["dur_ns"][b], 0)), int(rt["ts_ns"][e]), int(key[0]), int(key[1])))
    if not windows and not whole_file:
        return []
    if not windows:
        # No capture markers (SGLang's per-batch files): the file's launches, in order, are one graph
        # whose launches the replay is aligned into.
        windows = [(int(rt["ts_ns"].min()), int((rt["ts_ns"] + np.maximum(rt["dur_ns"], 0)).max()), -1, -1)]
    labels = _capture_labels(ann_t)
    name = Path(path).name
    bs = SGLANG_BS.match(name)
    graphs: list[CapturedGraph] = []
    pieces: dict[Any, int] = {}
    for w, (ws, we, pid, tid) in enumerate(windows):
        sel = np.flatnonzero(is_launch & (rt["ts_ns"] >= ws) & (rt["ts_ns"] <= we)
                             & (((rt["pid"] == pid) & (rt["tid"] == tid)) if pid >= 0 else True))
        sel = sel[np.argsort(rt["ts_ns"][sel], kind="stable")]
        if not len(sel):
            continue
        rows = _launch_ops(rt, sel, cpu)
        launches = [
            Launch("memcpy" if "memcpy" in str(names[r]).lower() else
                   "memset" if "memset" in str(names[r]).lower() else "kernel",
                   int(cpu["op_id"][o]) if o >= 0 else None, str(cpu["name"][o]) if o >= 0 else None,
                   cpu["input_dims"][o] if o >= 0 else None)
            for r, o in zip(sel, rows, strict=True)
        ]
        in_window = np.flatnonzero((cpu["ts_ns"] >= ws) & (cpu["ts_ns"] <= we)
                                   & (((cpu["pid"] == pid) & (cpu["tid"] == tid)) if pid >= 0 else True))
        ops = np.union1d(in_window, rows[rows >= 0])
        label = next((lab for s, e, lab in labels if s <= ws and we <= e), None)
        size: int | None = None
        size_kind: str | None = None
        mode: str | None = None
        prefix: str | None = None
        if label is not None:
            size, size_kind, mode, prefix = label.tokens, "tokens", label.mode, label.prefix
        elif detail is not None:
            size, size_kind, mode = detail[0], "tokens", detail[1]
        elif bs is not None:
            size, size_kind, prefix = int(bs.group(2)), "batch", bs.group(1)
        group = (size, mode, prefix, id(label) if label is not None else None)
        piece = pieces.get(group, 0)
        pieces[group] = piece + 1
        graphs.append(CapturedGraph(path, w, size, size_kind, mode, prefix, piece, launches, ops))
    return graphs


def op_kernels(tables: dict[str, pa.Table], skip: np.ndarray | None = None) -> dict[tuple[str, str | None], frozenset[str]]:
    """(op name, input_dims) -> the names of the kernels ops of that name and shapes launched in these
    tables (activities where ``skip`` is true left out: replays, whose op is the graph launch's)."""
    gpu, cpu = tables["gpu_activity"], tables["cpu_ops"]
    if gpu.num_rows == 0 or cpu.num_rows == 0:
        return {}
    g = _frame(gpu, ("op_id", "name", "kind"))
    keep = (g["op_id"] >= 0) & (g["kind"] == "kernel")
    if skip is not None:
        keep &= ~skip
    if not keep.any():
        return {}
    c = _frame(cpu, ("op_id", "name", "input_dims"))
    order = np.argsort(c["op_id"], kind="stable")
    ids = c["op_id"][order]
    ops = g["op_id"][keep]
    at = np.clip(np.searchsorted(ids, ops), 0, max(len(ids) - 1, 0))
    found = ids[at] == ops
    rows = order[at[found]]
    out: dict[tuple[str, str | None], set[str]] = {}
    for r, n in {(int(r), str(n)) for r, n in zip(rows, g["name"][keep][found], strict=True)}:
        if c["name"][r]:
            out.setdefault((str(c["name"][r]), c["input_dims"][r]), set()).add(n)
    return {k: frozenset(v) for k, v in out.items()}


def _with_kernels(graphs: list[CapturedGraph], known: dict[tuple[str, str | None], frozenset[str]]) -> None:
    """Each launch learns the kernels its op (by name and shapes) launched where it ran eagerly."""
    if not known:
        return
    for g in graphs:
        g.launches = [replace(la, kernels=known.get((la.op_name, la.op_dims), la.kernels))
                      if la.op_name is not None else la for la in g.launches]


def _capture_labels(ann: pa.Table) -> list[tuple[int, int, Any]]:
    if ann.num_rows == 0:
        return []
    a = _frame(ann, ("ts_ns", "dur_ns", "name"))
    out = []
    for ts, dur, name in zip(a["ts_ns"], a["dur_ns"], a["name"], strict=True):
        lab = parse_capture_label(str(name)) if name else None
        if lab is not None:
            out.append((int(ts), int(ts + max(dur, 0)), lab))
    return out


# --- matching replays to captured graphs -------------------------------------------------------


@dataclass(frozen=True)
class _Key:
    size: int | None
    size_kind: str | None
    mode: str | None
    ordinal: int


def _step_keys(tables: dict[str, pa.Table], launch_ts: np.ndarray) -> list[_Key | None]:
    """For each graph launch (sorted times) the key its engine step gives, or None."""
    spans: list[tuple[int, int, Any]] = []
    for name in ("annotations", "cpu_ops"):
        t = tables[name]
        if t.num_rows == 0:
            continue
        if name == "cpu_ops":  # a reader may keep user annotations with the ops: only those
            t = t.filter(A.from_numpy(_name_mask(t["cat"], re.compile("^user_annotation$"))))
            if t.num_rows == 0:
                continue
        a = _frame(t, ("ts_ns", "dur_ns", "name", "cat"))
        for ts, dur, n, cat in zip(a["ts_ns"], a["dur_ns"], a["name"], a["cat"], strict=True):
            if cat == "gpu_user_annotation" or not n:
                continue
            step = parse_engine_step(str(n))
            if step is not None and step.kind is not None:
                spans.append((int(ts), int(ts + max(dur, 0)), step))
    if not spans:
        return [None] * len(launch_ts)
    spans.sort(key=lambda s: s[0])
    starts = [s[0] for s in spans]
    owner = []
    for t in launch_ts:
        i = bisect_right(starts, int(t)) - 1
        owner.append(i if i >= 0 and spans[i][1] >= t else -1)
    counts: dict[int, int] = {}
    for o in owner:
        counts[o] = counts.get(o, 0) + 1
    seen: dict[int, int] = {}
    keys: list[_Key | None] = []
    for o in owner:
        if o < 0:
            keys.append(None)
            continue
        k = seen.get(o, 0)
        seen[o] = k + 1
        step = spans[o][2]
        if step.engine == "sglang":
            size, kind = step.batch, "batch"
        else:
            size, kind = step.tokens, "tokens"
        mode = ("FULL" if counts[o] == 1 else "PIECEWISE") if step.engine == "vllm" else None
        keys.append(_Key(size, kind, mode, k) if size is not None else None)
    return keys


def _agreement(cap: list[Launch], names: list[str], kinds: list[str], offset: int) -> tuple[int, int, int, int]:
    """(agree, disagree, named agree, named miss) of a replay aligned at ``offset``. Kinds and Triton names
    (the op is the kernel's launcher) are checks; the kernels an op launched eagerly elsewhere are a
    softer one ("named"): the same op may pick another kernel when captured."""
    agree = disagree = named = missed = 0
    for i, (n, k) in enumerate(zip(names, kinds, strict=True)):
        c = cap[offset + i]
        if c.kind != k:
            disagree += 1
        elif k == "kernel" and c.op_name and c.op_name.startswith("triton_"):
            if c.op_name == n:
                agree += 1
            else:
                disagree += 1
        elif k == "kernel" and c.kernels:
            if n in c.kernels:
                named += 1
            else:
                missed += 1
        elif k != "kernel":
            agree += 1
    return agree, disagree, named, missed


def _fit(g: CapturedGraph, names: list[str], kinds: list[str]) -> tuple[float, int, int] | None:
    """(score, offset, checked positions) of the best alignment of a replay into g, None if it cannot fit."""
    n, m = len(names), len(g.launches)
    if m < n:
        return None
    best: tuple[float, int, int] | None = None
    for off in range(0, min(m - n, MAX_OFFSET) + 1):
        a, d, na, nm = _agreement(g.launches, names, kinds, off)
        if d and a / (a + d) < AGREEMENT:
            continue
        if nm > na:  # most of the kernels its ops launched elsewhere are not the replay's: another graph
            continue
        score = (a + na - d - nm) / max(n, 1) - (0.001 * off if m > n else 0.0)
        if best is None or score > best[0]:
            best = (score, off, a + d + na + nm)
    return best


def _candidates(graphs: list[CapturedGraph], key: _Key | None) -> list[CapturedGraph]:
    if key is None or key.size is None:
        return graphs
    want = key.size
    sized = [g for g in graphs if g.size is not None and g.size_kind == key.size_kind and g.size >= want
             and g.prefix is None]
    if not sized:
        return []
    padded = min(g.size for g in sized if g.size is not None)
    same = [g for g in sized if g.size == padded]
    for pick in ([g for g in same if g.mode == key.mode and g.piece == key.ordinal],
                 [g for g in same if g.piece == key.ordinal], same):
        if pick:
            return pick
    return []


def _shapes(g: CapturedGraph) -> list[tuple[str, str | None, str | None]]:
    return [launch.shape() for launch in g.launches]


def _match(graphs: list[CapturedGraph], key: _Key | None, names: list[str], kinds: list[str]
           ) -> tuple[CapturedGraph | None, int, str]:
    """The captured graph and offset a replay matches, or (None, 0, why)."""
    for pool, keyed in ((_candidates(graphs, key), True), (graphs, False)):
        if keyed and key is None:
            continue
        fits = [(f, g) for g in pool if (f := _fit(g, names, kinds)) is not None]
        if not fits:
            continue
        fits.sort(key=lambda x: -x[0][0])
        (score, off, checked), g = fits[0]
        # Captures of the same ops with the same shapes (a graph captured twice) are one answer.
        ties = [h for f, h in fits[1:] if f[0] == score and _shapes(h) != _shapes(g)]
        if ties and not (keyed and len(pool) == 1):
            if keyed:
                continue
            return None, 0, f"{len(ties) + 1} captured graphs fit equally (shapes would be a guess)"
        if not keyed and checked == 0 and any(_shapes(h) != _shapes(g) for _, h in fits[1:]):
            return None, 0, f"{len(fits)} captured graphs have room for it and nothing tells them apart"
        return g, off, ""
    if key is not None and not _candidates(graphs, key):
        return None, 0, f"no captured graph of {key.size_kind} >= {key.size}"
    return None, 0, f"no captured graph has its {len(names)} activities in that order"


def merge(tables: dict[str, pa.Table], captures: list[CaptureFile]) -> tuple[dict[str, pa.Table], CaptureReport]:
    """The trace's tables with replayed activities linked to captured ops, and the captured ops added.

    Each replay is matched, in this order, to a graph captured in the capture traces or in the trace
    itself (its launches' ops), else to the same kernels run eagerly in the trace
    (tracekit.ingest.replay_match). Pure on its inputs (new tables are returned). Without graph
    launches the tables come back unchanged; the report says what could not be matched.
    """
    report = CaptureReport(files=[c.path for c in captures])
    graphs = [g for c in captures for g in c.graphs]
    report.graphs = len(graphs)
    gpu, rt = tables["gpu_activity"], tables["runtime"]
    if gpu.num_rows == 0 or rt.num_rows == 0:
        return tables, report
    is_gl = _name_mask(rt["name"], GRAPH_LAUNCH)
    if not is_gl.any():
        return tables, report
    r = _frame(rt, ("ts_ns", "correlation"))
    gl_corr = r["correlation"][is_gl]
    gl_ts = r["ts_ns"][is_gl]
    g = _frame(gpu, ("ts_ns", "dur_ns", "correlation", "name", "kind"))
    corr = g["correlation"]
    replayed = np.isin(corr, gl_corr[gl_corr >= 0]) & (corr >= 0)
    order = np.argsort(gl_ts, kind="stable")
    gl_corr, gl_ts = gl_corr[order], gl_ts[order]
    # one replay per launch that has activities
    rows_of: dict[int, np.ndarray] = {}
    idx = np.flatnonzero(replayed)
    if len(idx):
        srt = idx[np.lexsort((g["ts_ns"][idx], corr[idx]))]
        cs = corr[srt]
        bounds = np.flatnonzero(np.r_[True, cs[1:] != cs[:-1], True])
        for a, b in pairwise(bounds):
            rows_of[int(cs[a])] = srt[a:b]
    keep = np.array([int(c) in rows_of for c in gl_corr], dtype=bool)
    gl_corr, gl_ts = gl_corr[keep], gl_ts[keep]
    report.graph_launches = len(gl_corr)
    report.activities_replayed = int(replayed.sum())
    dur = np.maximum(g["dur_ns"], 0)
    report.kernel_ns = int(dur.sum())
    report.replayed_ns = int(dur[replayed].sum())
    if not len(gl_corr):
        return tables, report
    own = graphs_in(tables, "(the trace)")  # graphs captured inside the trace itself
    report.graphs_in_trace = len(own)
    known = op_kernels(tables, replayed)
    for cf in captures:
        _with_kernels(cf.graphs, {**op_kernels(cf.result.tables), **known})
    _with_kernels(own, known)
    templates = graphs + own
    tokens = RM.activity_tokens(gpu)
    op_id = A.to_numpy(gpu["op_id"], -1).astype(np.int64)
    runs: RM.EagerRuns | None = None
    keys = _step_keys(tables, gl_ts)
    memo: dict[tuple[Any, ...], tuple[CapturedGraph | None, int, str]] = {}
    eager_memo: dict[bytes, RM.EagerMatch | str] = {}
    failures: dict[str, int] = {}
    example: dict[str, str] = {}
    matched = np.zeros(len(op_id), dtype=bool)
    for c, key, ts in zip(gl_corr, keys, gl_ts, strict=True):
        rows = rows_of[int(c)]
        names = [str(n) for n in g["name"][rows]]
        kinds = [str(k) for k in g["kind"][rows]]
        sig = (key, tuple(names), tuple(kinds))
        if sig not in memo:
            memo[sig] = _match(templates, key, names, kinds) if templates else (None, 0, "")
        hit, off, why = memo[sig]
        if hit is not None:
            hit.used += 1
            report.graph_launches_matched += 1
            report.matched_by["trace capture" if any(hit is o for o in own) else "capture trace"] += 1
            for i, row in enumerate(rows):
                launch = hit.launches[off + i]
                if launch.op_id is not None:
                    op_id[row] = launch.op_id
                    matched[row] = True
                    report.activities_matched += 1
            continue
        tok = tokens[rows]
        if tok.tobytes() not in eager_memo:
            if runs is None:
                runs = RM.EagerRuns.of(tokens, op_id, g["ts_ns"], corr, replayed)
            eager_memo[tok.tobytes()] = RM.match(runs, tok, int(ts))
        em = eager_memo[tok.tobytes()]
        if isinstance(em, RM.EagerMatch):
            report.graph_launches_matched += 1
            report.matched_by["eager run"] += 1
            got = em.op_id >= 0
            op_id[rows[got]] = em.op_id[got]
            matched[rows[got]] = True
            report.activities_matched += int(got.sum())
            continue
        why = (f"captured graphs: {why}; " if why else "no capture of it in the trace or beside it; ") + em
        failures[why] = failures.get(why, 0) + 1
        example.setdefault(why, f"{len(rows)} activities, first {names[0][:60]!r}")
    report.unmatched_ns = int(dur[replayed & ~matched].sum())
    for why, n in failures.items():
        report.unmatched[why] = n
        report.warnings.append(f"{n} graph launches matched no captured graph: {why} (e.g. {example[why]})")
    if failures:
        report.warnings.append(
            f"{_ms(report.unmatched_ns)} of kernel time ({_pct(report.unmatched_ns, report.kernel_ns)} of all "
            "GPU activity time) replayed from graphs without its ops' shapes: no model for it"
            + ("" if captures else " (pass --capture FILE..., or put capture traces in a capture_traces/ "
               "folder beside the trace)"))
    unused = [Path(cf.path).name for cf in captures if cf.graphs and not any(gr.used for gr in cf.graphs)]
    if unused and (failures or len(unused) == len(captures)):
        # An engine captures every size it may replay: an unused file is a warning only where replays
        # went unmatched, or where no file matched at all (captures of another run or model).
        report.warnings.append(f"{len(unused)} of {len(captures)} capture traces matched no replay "
                               f"(e.g. {unused[0]}): captures of another run or model?")
    out = dict(tables)
    if own:
        # The ops inside the trace's own capture windows launched nothing that ran then: captured, like
        # a capture trace's (step detection and host timing leave them out).
        out["cpu_ops"] = _marked_captured(tables["cpu_ops"], np.concatenate([gr.ops for gr in own]))
    if not report.activities_matched:
        return out, report
    out["gpu_activity"] = gpu.set_column(gpu.schema.get_field_index("op_id"), "op_id",
                                         A.from_numpy(op_id, op_id >= 0))
    made = [_captured_ops(cf, [gr for gr in cf.graphs if gr.used], tables["cpu_ops"]) for cf in captures]
    added = [a for a in made if a is not None and a.num_rows]
    report.ops_added = sum(a.num_rows for a in added)
    if added:
        out["cpu_ops"] = pa.concat_tables([_schema.conform("cpu_ops", out["cpu_ops"]), *added])
    return out, report


def _marked_captured(cpu: pa.Table, rows: np.ndarray) -> pa.Table:
    """cpu_ops with ``captured`` true on ``rows`` (the others as they were)."""
    t = _schema.conform("cpu_ops", cpu)
    col = t["captured"]
    flag = np.zeros(t.num_rows, dtype=bool) if col.null_count == t.num_rows else A.to_numpy(col, 0).astype(bool)
    flag[rows] = True
    i = t.schema.get_field_index("captured")
    return t.set_column(i, "captured", A.from_numpy(flag))


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.2f} ms"


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "-"


def _captured_ops(cf: CaptureFile, used: list[CapturedGraph], main_cpu: pa.Table) -> pa.Table | None:
    """The capture file's ops inside the used windows, with their ancestors, as captured cpu_ops rows
    on the main trace's rank."""
    if not used:
        return None
    cpu = cf.result.tables["cpu_ops"]
    rows = np.unique(np.concatenate([g.ops for g in used])) if used else np.zeros(0, dtype=np.int64)
    op_ids = A.to_numpy(cpu["op_id"], -1).astype(np.int64)
    parents = A.to_numpy(cpu["parent_id"], -1).astype(np.int64)
    row_of = {int(o): i for i, o in enumerate(op_ids)}
    todo = list(rows)
    seen = set(int(x) for x in rows)
    while todo:
        p = parents[todo.pop()]
        if p >= 0 and int(p) in row_of and row_of[int(p)] not in seen:
            seen.add(row_of[int(p)])
            todo.append(row_of[int(p)])
    take = np.array(sorted(seen), dtype=np.int64)
    t = _schema.conform("cpu_ops", cpu.take(A.from_numpy(take)))
    rank = int(A.to_numpy(main_cpu["rank"], 0)[0]) if main_cpu.num_rows else 0
    t = t.set_column(t.schema.get_field_index("rank"), "rank", A.from_numpy(np.full(t.num_rows, rank, dtype=np.int32)))
    return t.set_column(t.schema.get_field_index("captured"), "captured",
                        A.from_numpy(np.ones(t.num_rows, dtype=bool)))
