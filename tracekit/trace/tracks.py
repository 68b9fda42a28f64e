"""tracekit's tracks: what a run looks like on a timeline, independent of the file format.

One function, ``build_tracks``, turns a run's tables into a ``TrackSet``: plain
tracks, slices and counter points. Both writers read it: the Chrome trace-event
JSON writer here (``write_chrome_json``) and the native Perfetto protobuf
writer (``tracekit.trace.perfetto``). Keeping the content in one place means the two
files show the same thing, and the tests check the content once per format.

Tracks:
  * tracekit / requests   one slice per request (with a nested ``ttft`` slice);
                          overlapping requests get extra lanes, because slices on
                          one thread must nest.
  * tracekit / steps      one slice per forward pass, named by its kind
                          (prefill / decode / mixed). Perfetto colours slices by
                          name, so every prefill has one colour; Chrome's legacy
                          viewer gets an explicit ``cname`` too.
  * tracekit / bound      the step's bound class: the class holding most of the step's
                          time in the bound pass's ``step_bound`` table (compute-bound,
                          memory-bound, latency-bound, host-bound, waiting, before-window, profiler,
                          other, comm, memcpy; every class's share in args), else the
                          steps' ``bound`` column, else ``host-bound`` / ``gpu-busy``
                          from the step's GPU busy share (source recorded in args).
                          Kernel slices carry their own class (``kernel_bound``) in
                          args and, for Chrome's viewer, as their colour.
  * GPU <n> counters      one counter track per (device, source, metric).
  * memory (record --memory)  counter tracks of the step_memory table at each step's end:
                          allocated, reserved, peak in the step, weights, KV cache, transient;
                          and the allocator's total after every [memory] event (the ingested
                          ``memory`` table: profile_memory), one track per device.
  * the trace itself      kernels per device/stream, CPU ops and runtime calls per
                          thread, annotations: rebuilt from the tables, so a
                          windowed export needs no pass over the raw JSON.

Timestamps stay int64 ns; the JSON writer formats microseconds exactly from them.
"""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import pyarrow as pa

from tracekit.model import npa, progress
from tracekit.model.trackids import COUNTER_PID_BASE, MEMORY_PID, TRACEKIT_PID
from tracekit.trace import encode as E
from tracekit.trace.blocks import TraceBlock, json_or_text, trace_blocks
from tracekit.trace.trackset import CounterPoint, Slice, Track, TrackSet, Window

__all__ = [
    "BOUND_CNAME",
    "KIND_CNAME",
    "BlockOrder",
    "CounterPoint",
    "Slice",
    "Track",
    "TrackSet",
    "Window",
    "build_tracks",
    "chrome_event_dicts",
    "chrome_events",
    "columnar",
    "nested",
    "step_span",
    "window_for_steps",
    "write_chrome_json",
    "write_chrome_json_gz",
]

# Chrome's legacy viewer takes reserved colour names; Perfetto colours by slice name.
KIND_CNAME = {"prefill": "thread_state_running", "decode": "thread_state_iowait", "mixed": "yellow"}
BOUND_CNAME = {
    "compute": "good",
    "compute-bound": "good",
    "memory": "bad",
    "memory-bound": "bad",
    "latency": "yellow",
    "latency-bound": "yellow",
    "host": "terrible",
    "host-bound": "terrible",
    "waiting": "grey",
    "before-window": "grey",
    "profiler": "olive",
    "other": "generic_work",
    "comm": "thread_state_iowait",
    "memcpy": "thread_state_iowait",
    "gpu-busy": "generic_work",
}
# step_bound's time columns and the name a step's bound slice takes when that column holds most of it
STEP_CLASSES = (("compute_bound_ns", "compute-bound"), ("memory_bound_ns", "memory-bound"),
                ("latency_bound_ns", "latency-bound"), ("idle_host_ns", "host-bound"), ("idle_wait_ns", "waiting"),
                ("idle_before_window_ns", "before-window"), ("idle_profiler_ns", "profiler"), ("other_ns", "other"),
                ("comm_ns", "comm"), ("memcpy_ns", "memcpy"))
# Below this share of the step's wall time with a kernel running, the GPU mostly
# waited for the host (DESIGN.md: idle inside a step is host-bound time).
HOST_BOUND_BUSY_SHARE = 0.5


# --- table access that tolerates missing tables and columns ------------------


def _col(table: pa.Table | None, name: str) -> list[Any]:
    if table is None:
        return []
    if name not in table.column_names:
        return [None] * table.num_rows
    return table.column(name).to_pylist()


def _rows(table: pa.Table | None, names: Iterable[str]) -> Iterator[dict[str, Any]]:
    if table is None or table.num_rows == 0:
        return iter(())
    cols = {n: _col(table, n) for n in names}
    return (dict(zip(cols, vals, strict=True)) for vals in zip(*cols.values(), strict=True))


def _clip(ts: int, dur: int, window: Window | None) -> tuple[int, int] | None:
    end = ts + max(dur, 0)
    if window is None:
        return ts, max(dur, 0)
    # Touching the window's start edge is not overlapping it (no zero-length stubs).
    if end < window.start_ns or ts > window.end_ns or (end == window.start_ns and dur > 0):
        return None
    s, e = max(ts, window.start_ns), min(end, window.end_ns)
    return s, e - s


def step_span(row: dict[str, Any]) -> tuple[int, int] | None:
    """A step's (start, end) ns: GPU span when recorded, else the CPU span."""
    for a, b in (("gpu_start_ns", "gpu_end_ns"), ("cpu_start_ns", "cpu_end_ns")):
        if row.get(a) is not None and row.get(b) is not None and row[b] >= row[a]:
            return int(row[a]), int(row[b])
    return None


def window_for_steps(steps: pa.Table, first: int, last: int) -> Window:
    """The time window covering steps ``first``..``last`` (step ids, inclusive)."""
    spans = [
        sp
        for r in _rows(steps, ("step_id", "cpu_start_ns", "cpu_end_ns", "gpu_start_ns", "gpu_end_ns"))
        if r["step_id"] is not None and first <= r["step_id"] <= last and (sp := _span_both(r)) is not None
    ]
    if not spans:
        raise ValueError(f"no steps with ids {first}..{last} and a recorded time span")
    return Window(min(s for s, _ in spans), max(e for _, e in spans))


def _span_both(row: dict[str, Any]) -> tuple[int, int] | None:
    # For a window, cover both the CPU launch and the GPU execution of the steps.
    pts = [row[c] for c in ("cpu_start_ns", "cpu_end_ns", "gpu_start_ns", "gpu_end_ns") if row.get(c) is not None]
    return (int(min(pts)), int(max(pts))) if pts else None


def _lanes(spans: list[tuple[int, int, int]]) -> dict[int, int]:
    """Greedy lane assignment so slices on one lane never partially overlap."""
    lane_end: list[int] = []
    out: dict[int, int] = {}
    for idx, s, e in sorted(spans, key=lambda t: (t[1], t[2])):
        for lane, end in enumerate(lane_end):
            if end <= s:
                lane_end[lane] = e
                out[idx] = lane
                break
        else:
            lane_end.append(e)
            out[idx] = len(lane_end) - 1
    return out


# --- builders -----------------------------------------------------------------


def build_tracks(
    tables: Mapping[str, pa.Table],
    *,
    window: Window | None = None,
    include_trace: bool = True,
) -> TrackSet:
    """All of a run's tracks from its tables (absent tables: no tracks, a note)."""
    ts = TrackSet()
    _request_tracks(ts, tables.get("requests"), window)
    _step_tracks(ts, tables.get("steps"), window, tables.get("step_bound"))
    _counter_tracks(ts, tables.get("counters"), window)
    _memory_tracks(ts, tables.get("step_memory"), window)
    _allocator_tracks(ts, tables.get("memory"), window)
    if include_trace:
        _trace_tracks(ts, tables, window)
    return ts


def _request_tracks(ts: TrackSet, requests: pa.Table | None, window: Window | None) -> None:
    rows = list(
        _rows(
            requests,
            ("request_id", "name", "batch", "input_tokens", "output_tokens", "start_ns", "end_ns", "ttft_ns", "tpot_ns", "e2e_ns"),
        )
    )
    spans = []
    for i, r in enumerate(rows):
        if r["start_ns"] is None:
            continue
        end = r["end_ns"] if r["end_ns"] is not None else (r["start_ns"] + r["e2e_ns"] if r["e2e_ns"] is not None else None)
        if end is None:
            continue
        spans.append((i, int(r["start_ns"]), int(end)))
    if not rows:
        ts.notes.append("requests: not recorded")
        return
    lanes = _lanes(spans)
    for i, s, e in spans:
        r = rows[i]
        clipped = _clip(s, e - s, window)
        if clipped is None:
            continue
        lane = lanes[i]
        key = f"tracekit/requests/{lane}"
        ts.add_track(
            Track(key, "requests" if lane == 0 else f"requests ({lane + 1})", "tracekit", TRACEKIT_PID, 1 + lane, "slice", lane)
        )
        rid = r["request_id"]
        args = {k: r[k] for k in ("request_id", "batch", "input_tokens", "output_tokens", "ttft_ns", "tpot_ns", "e2e_ns") if r[k] is not None}
        ts.slices.append(Slice(key, str(r["name"] or f"request {rid}"), clipped[0], clipped[1], "tracekit.request", args))
        if r["ttft_ns"] is not None:
            ttft = _clip(s, min(int(r["ttft_ns"]), e - s), window)
            if ttft is not None:
                ts.slices.append(Slice(key, "ttft", ttft[0], ttft[1], "tracekit.request", {"request_id": rid}))


def _step_classes(step_bound: pa.Table | None) -> dict[int, dict[str, float]]:
    """step_id -> {class name: share of the step's time} from the bound pass's step_bound table."""
    if step_bound is None or "step_id" not in step_bound.column_names or "time_ns" not in step_bound.column_names:
        return {}
    cols = [c for c, _ in STEP_CLASSES if c in step_bound.column_names]
    out: dict[int, dict[str, float]] = {}
    for r in _rows(step_bound, ("step_id", "time_ns", "idle_ns", *cols)):
        t = r["time_ns"]
        if r["step_id"] is None or not t:
            continue
        vals = {name: float(r[c] or 0) / float(t) for c, name in STEP_CLASSES if c in cols}
        if "idle_host_ns" not in cols and r.get("idle_ns") is not None:  # written before the idle split
            vals["host-bound"] = float(r["idle_ns"]) / float(t)
        out[int(r["step_id"])] = vals
    return out


def _step_tracks(ts: TrackSet, steps: pa.Table | None, window: Window | None,
                 step_bound: pa.Table | None = None) -> None:
    names = ("step_id", "request_id", "kind", "batch", "q_len", "kv_len", "tokens", "source",
             "cpu_start_ns", "cpu_end_ns", "gpu_start_ns", "gpu_end_ns", "gpu_busy_ns", "bound")
    rows = list(_rows(steps, names))
    if not rows:
        ts.notes.append("steps: not recorded")
        return
    has_bound = steps is not None and "bound" in steps.column_names
    classes = _step_classes(step_bound)
    step_key, bound_key = "tracekit/steps", "tracekit/bound"
    # Steps of one run are sequential forward passes; if an engine overlapped two
    # (pipelining), lanes keep the JSON valid.
    spans = [(i, *sp) for i, r in enumerate(rows) if (sp := step_span(r)) is not None]
    lanes = _lanes(spans)
    for i, s, e in spans:
        r = rows[i]
        clipped = _clip(s, e - s, window)
        if clipped is None:
            continue
        lane = lanes[i]
        skey, bkey = (step_key, bound_key) if lane == 0 else (f"{step_key}/{lane}", f"{bound_key}/{lane}")
        suffix = "" if lane == 0 else f" ({lane + 1})"
        ts.add_track(Track(skey, "steps" + suffix, "tracekit", TRACEKIT_PID, 100 + lane, "slice", 100 + lane))
        ts.add_track(Track(bkey, "bound" + suffix, "tracekit", TRACEKIT_PID, 200 + lane, "slice", 200 + lane))
        kind = str(r["kind"] or "unknown")
        args = {k: r[k] for k in names if r[k] is not None and k != "bound"}
        ts.slices.append(Slice(skey, kind, clipped[0], clipped[1], "tracekit.step", args, KIND_CNAME.get(kind)))
        shares = classes.get(int(r["step_id"])) if r["step_id"] is not None else None
        if shares and max(shares.values()) > 0:
            bound, source = max(shares.items(), key=lambda kv: kv[1])[0], "step_bound"
        else:
            bound, source = _bound_of(r, e - s, has_bound)
        bargs: dict[str, Any] = {"step_id": r["step_id"], "bound_source": source}
        if shares:
            bargs.update({f"{k} share": round(v, 4) for k, v in shares.items() if v > 0})
        if r["gpu_busy_ns"] is not None and e > s:
            bargs["gpu_busy_share"] = round(int(r["gpu_busy_ns"]) / (e - s), 4)
        ts.slices.append(Slice(bkey, bound, clipped[0], clipped[1], "tracekit.bound", bargs, BOUND_CNAME.get(bound)))


def _bound_of(row: dict[str, Any], dur: int, has_bound: bool) -> tuple[str, str]:
    if has_bound and row.get("bound"):
        return str(row["bound"]), "roofline"
    busy = row.get("gpu_busy_ns")
    if busy is None or dur <= 0:
        return "not classified", "none"
    return ("host-bound" if busy / dur < HOST_BOUND_BUSY_SHARE else "gpu-busy"), "gpu_busy_share"


def _counter_tracks(ts: TrackSet, counters: pa.Table | None, window: Window | None) -> None:
    rows = _rows(counters, ("ts_ns", "device", "metric", "value", "unit", "source"))
    seen = False
    devices: dict[int, int] = {}
    for r in rows:
        seen = True
        if r["ts_ns"] is None or r["value"] is None or r["metric"] is None or not math.isfinite(r["value"]):
            continue
        t = int(r["ts_ns"])
        if window is not None and not (window.start_ns <= t <= window.end_ns):
            continue
        dev = int(r["device"]) if r["device"] is not None else -1
        devices.setdefault(dev, len(devices))
        src = str(r["source"] or "counter")
        unit = str(r["unit"] or "")
        key = f"counter/{dev}/{src}/{r['metric']}"
        if key not in ts.tracks:
            label = f"{src}.{r['metric']}" + (f" ({unit})" if unit else "")
            pname = f"GPU {dev} counters" if dev >= 0 else "host counters"
            ts.add_track(Track(key, label, pname, COUNTER_PID_BASE + dev + 1, 0, "counter", 0, 10 + dev + 1, unit))
        ts.counters.append(CounterPoint(key, t, float(r["value"])))
    if not seen:
        ts.notes.append("counters: not recorded")


MEMORY_COUNTERS = ("allocated_bytes", "reserved_bytes", "peak_allocated_bytes", "weights_bytes", "kv_cache_bytes",
                   "transient_bytes")


def _memory_tracks(ts: TrackSet, step_memory: pa.Table | None, window: Window | None) -> None:
    """One counter track per step_memory column, a point at each step's end (null values skipped)."""
    rows = _rows(step_memory, ("ts_ns", *MEMORY_COUNTERS))
    for r in rows:
        if r["ts_ns"] is None:
            continue
        t = int(r["ts_ns"])
        if window is not None and not (window.start_ns <= t <= window.end_ns):
            continue
        for i, col in enumerate(MEMORY_COUNTERS):
            if r[col] is None:
                continue
            key = f"memory/{col}"
            if key not in ts.tracks:
                ts.add_track(Track(key, f"memory.{col.removesuffix('_bytes')} (bytes)", "memory",
                                   MEMORY_PID, i, "counter", i, 9, "bytes"))
            ts.counters.append(CounterPoint(key, t, float(r[col])))


def _allocator_tracks(ts: TrackSet, memory: pa.Table | None, window: Window | None) -> None:
    """The allocator's total allocated bytes after each [memory] event, one counter track per device."""
    rows = _rows(memory, ("ts_ns", "device_type", "device", "total_allocated_bytes"))
    for r in rows:
        if r["ts_ns"] is None or r["total_allocated_bytes"] is None:
            continue
        t = int(r["ts_ns"])
        if window is not None and not (window.start_ns <= t <= window.end_ns):
            continue
        # Kineto's device types: 0 CPU, 1 CUDA.
        dev = ("cpu" if r["device_type"] == 0 else f"cuda:{r['device'] if r['device'] is not None else 0}"
               if r["device_type"] == 1 else f"type{r['device_type']}:{r['device']}")
        key = f"memory/allocator/{dev}"
        if key not in ts.tracks:
            lane = len(MEMORY_COUNTERS) + sum(1 for k in ts.tracks if k.startswith("memory/allocator/"))
            ts.add_track(Track(key, f"allocator {dev} allocated (bytes)", "memory", MEMORY_PID, lane, "counter",
                               lane, 9, "bytes"))
        ts.counters.append(CounterPoint(key, t, float(r["total_allocated_bytes"])))


def _trace_tracks(ts: TrackSet, tables: Mapping[str, pa.Table], window: Window | None) -> None:
    """The trace's own events (kernels, CPU ops, runtime calls, annotations) as columnar blocks
    (tracekit.trace.blocks), their tracks added in the order their first rows come."""
    ts.blocks.extend(trace_blocks(ts, tables, window, BOUND_CNAME))


def _json_or_text(text: str) -> Any:
    return json_or_text(text)


def nested(slices: list[Slice]) -> Iterator[tuple[Slice, int]]:
    """Slices of one track in start order, with each end clamped to its parent's.

    Trace formats require slices on one thread to nest; real data occasionally
    has a child ending a few ns after its parent (clock rounding). Clamping keeps
    the file valid and the slice visible instead of dropping it.
    """
    stack: list[int] = []
    for s in sorted(slices, key=lambda x: (x.ts_ns, -x.dur_ns)):
        while stack and stack[-1] <= s.ts_ns:
            stack.pop()
        end = s.ts_ns + s.dur_ns
        if stack and end > stack[-1]:
            end = stack[-1]
        stack.append(end)
        yield s, end - s.ts_ns


# --- Chrome trace-event JSON --------------------------------------------------


def _us(ns: Sequence[int]) -> list[str]:
    """Exact microseconds as JSON numbers (floats lose ns at epoch scale): trace.encode's ``micros``."""
    return [b.decode() for b in E.micros(np.asarray(ns, dtype=np.int64)).to_pylist()]


def _dump(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), default=str)


def chrome_events(ts: TrackSet) -> Iterator[str]:
    """The track set as trace-event JSON objects (one string each)."""
    yield from _meta_events(ts)
    yield from _slice_events(ts, ts.slices)
    yield from _counter_events(ts)


def _meta_events(ts: TrackSet) -> Iterator[str]:
    processes: dict[int, tuple[str, int]] = {}
    for t in ts.tracks.values():
        processes.setdefault(t.pid, (t.process, t.process_sort_index))
    for pid, (pname, psort) in processes.items():
        yield _dump({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": pname}})
        yield _dump({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": psort}})
    for t in ts.tracks.values():
        if t.kind == "slice":
            yield _dump({"ph": "M", "name": "thread_name", "pid": t.pid, "tid": t.tid, "args": {"name": t.name}})
            yield _dump({"ph": "M", "name": "thread_sort_index", "pid": t.pid, "tid": t.tid, "args": {"sort_index": t.sort_index}})


def _slice_events(ts: TrackSet, slices: list[Slice]) -> Iterator[str]:
    by_track: dict[str, list[Slice]] = defaultdict(list)
    for s in slices:
        by_track[s.track].append(s)
    for key, group in by_track.items():
        t = ts.tracks[key]
        rows = list(nested(group))
        starts, durs = _us([s.ts_ns for s, _ in rows]), _us([d for _, d in rows])
        for (s, _dur), start, dur in zip(rows, starts, durs, strict=True):
            ev = (
                f'{{"ph":"X","cat":{_dump(s.cat)},"name":{_dump(s.name)},"pid":{t.pid},"tid":{t.tid},'
                f'"ts":{start},"dur":{dur}'
            )
            if s.cname:
                ev += f',"cname":{_dump(s.cname)}'
            yield ev + f',"args":{_dump(s.args)}}}'


def _counter_events(ts: TrackSet) -> Iterator[str]:
    for c, start in zip(ts.counters, _us([c.ts_ns for c in ts.counters]), strict=True):
        t = ts.tracks[c.track]
        yield f'{{"ph":"C","name":{_dump(t.name)},"pid":{t.pid},"tid":0,"ts":{start},"args":{{"value":{c.value!r}}}}}'


def columnar(ts: TrackSet) -> bool:
    """Whether the writers can take the trace's blocks as they are: no block track also holds one of
    the track set's own slices (those must nest together)."""
    if not ts.blocks:
        return False
    own = {s.track for s in ts.own_slices}
    return not any(k in own for b in ts.blocks for k in b.keys)  # type: ignore[attr-defined]


def _chrome_parts(ts: TrackSet, blocks: Iterable[tuple[bytes, int]] | None = None) -> Iterator[tuple[bytes, int]]:
    """(bytes, events) pieces of the traceEvents array body, every event after the first preceded by
    ",\n": the events of ``chrome_events`` in its order, the blocks' encoded a chunk at a time
    (``blocks``: those pieces made elsewhere, each event preceded by ",\n", in ``block_json``'s order)."""
    n = 0

    def text(events: Iterator[str]) -> Iterator[tuple[bytes, int]]:
        nonlocal n
        for ev in events:
            yield ((",\n" if n else "") + ev).encode(), 1
            n += 1

    if blocks is None and not columnar(ts):
        yield from text(chrome_events(ts))
        return
    yield from text(_meta_events(ts))
    yield from text(_slice_events(ts, ts.own_slices))
    if blocks is None:
        blocks = block_json(ts, BlockOrder.of(ts.blocks))  # type: ignore[arg-type]
    for chunk, count in blocks:
        if not n and chunk:
            chunk = chunk[2:]  # the first event: no separator
        yield chunk, count
        n += count
    yield from text(_counter_events(ts))


def block_json(ts: TrackSet, order: BlockOrder, row_sets: Iterable[np.ndarray] | None = None
               ) -> Iterator[tuple[bytes, int]]:
    """(bytes, events): the Chrome JSON of ``order``'s rows, each event preceded by ",\n", one piece
    per array of positions in ``row_sets`` (default: all of them, JSON_CHUNK at a time); the tracks of
    ``order.keys`` are ``ts``'s."""
    blocks = order.blocks
    pidtid = [f',"pid":{ts.tracks[k].pid},"tid":{ts.tracks[k].tid},"ts":'.encode() for k in order.keys]
    cats = [[_dump(c).encode() for c in b.cats] for b in blocks]
    names = [[_dump(x).encode() for x in b.names] for b in blocks]
    cnames = [[b',"cname":' + _dump(c).encode() for c in b.cnames] for b in blocks]
    args = [[(_dump(a.key) + ":").encode() for a in b.args] for b in blocks]
    values = [[[_dump(v).encode() for v in a.values] if a.ints is None else None for a in b.args] for b in blocks]
    for rows in order.chunks(JSON_CHUNK) if row_sets is None else row_sets:
        if not len(rows):
            continue
        progress.report("writing the Chrome trace", int(rows[0]), len(order))
        parts = []
        for bi, local, where in order.by_block(rows):
            b = blocks[bi]
            pieces: list[Any] = [E.const(b',\n{"ph":"X","cat":'), E.lookup(cats[bi], b.cat[local]),
                                 E.const(b',"name":'), E.lookup(names[bi], b.name[local]),
                                 E.lookup(pidtid, order.track[where]), E.micros(b.ts[local]), E.const(b',"dur":'),
                                 E.micros(order.dur[where]), E.lookup(cnames[bi], b.cname[local]),
                                 E.const(b',"args":{')]
            before = np.zeros(len(local), dtype=bool)
            for ai, a in enumerate(b.args):
                present = a.present[local]
                if not present.any():
                    continue
                val = (E.decimals(a.ints[local]) if a.ints is not None
                       else E.lookup(values[bi][ai] or [], a.codes[local]))  # type: ignore[index]
                piece = E.join([E.lookup([b"", b","], before.astype(np.int64)), E.const(args[bi][ai]), val])
                pieces.append(piece if present.all() else E.mask(piece, present))
                before |= present
            pieces.append(E.const(b"}}"))
            parts.append(E.join(pieces))
        merged = order.merge(parts, rows)
        yield bytes(E.data(merged)), len(rows)


JSON_CHUNK = 1 << 12  # events per encoded piece of Chrome JSON (~1.5 MB of text)


class BlockOrder:
    """The blocks' rows in the writers' order: by track (first appearance), then start, then longer
    first, then position (``nested``'s order), with durations clamped to their parents'."""

    CHUNK = 1 << 15

    def __init__(self, blocks: list[TraceBlock], keys: list[str], block: np.ndarray, local: np.ndarray,
                 track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> None:
        self.blocks, self.keys = blocks, keys
        self.block, self.local, self.track, self.ts, self.dur = block, local, track, ts, dur

    @staticmethod
    def of(blocks: list[TraceBlock]) -> BlockOrder:
        ids: dict[str, int] = {}
        tracks, blk, local = [], [], []
        for i, b in enumerate(blocks):
            lut = np.array([ids.setdefault(k, len(ids)) for k in b.keys], dtype=np.int32)
            tracks.append(lut[b.track] if len(lut) else np.zeros(0, dtype=np.int32))
            blk.append(np.full(b.n, i, dtype=np.int8 if len(blocks) < 128 else np.int64))
            local.append(np.arange(b.n, dtype=np.int32 if b.n < 2**31 else np.int64))
        track = np.concatenate(tracks)
        ts = np.concatenate([b.ts for b in blocks])
        dur = np.concatenate([b.dur for b in blocks])
        pos = np.arange(len(ts))
        order = np.lexsort((pos, -dur, ts, track))
        track, ts, dur = track[order], ts[order], dur[order]
        return BlockOrder(blocks, list(ids), np.concatenate(blk)[order], np.concatenate(local)[order], track, ts,
                          nested_durations(track, ts, dur))

    def __len__(self) -> int:
        return len(self.ts)

    def chunks(self, size: int | None = None) -> Iterator[np.ndarray]:
        step = size or self.CHUNK
        for lo in range(0, len(self.ts), step):
            yield np.arange(lo, min(lo + step, len(self.ts)))

    def by_block(self, rows: np.ndarray) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """(block, its rows, their positions in this order) of the given positions, block by block."""
        blk = self.block[rows]
        for bi in np.unique(blk):
            where = rows[blk == bi]
            yield int(bi), self.local[where], where

    def merge(self, parts: list[Any], rows: np.ndarray) -> Any:
        """One array of ``rows``' encodings, in order, from by_block's parts."""
        if len(parts) == 1:
            return parts[0]
        blk = self.block[rows]
        src = np.concatenate([np.flatnonzero(blk == bi) for bi in np.unique(blk)])
        inverse = np.empty(len(src), dtype=np.int64)
        inverse[src] = np.arange(len(src))
        return pa.concat_arrays(parts).take(npa.array(inverse))


def nested_durations(track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """``nested``'s clamped durations of slices sorted by (track, start, longer first).

    A slice that starts once every earlier slice of its track has ended has no parent: its duration
    stands, and the stack ``nested`` keeps is empty after it but for itself. Only the runs of slices
    that start inside an earlier one go through the stack."""
    out = dur.copy()
    n = len(ts)
    if n < 2:
        return out
    end = ts + dur
    low = np.iinfo(np.int64).min
    starts = np.flatnonzero(np.r_[True, track[1:] != track[:-1]])
    prev = np.r_[low, end[:-1]]  # the latest end among the earlier slices of the same track
    prev[starts] = low
    for a, b in zip(starts.tolist(), [*starts[1:].tolist(), n], strict=True):
        prev[a:b] = np.maximum.accumulate(prev[a:b])
    inside = ts < prev
    if not inside.any():
        return out
    # Runs of slices inside an earlier one, each after the slice that opens it (never inside: the
    # first slice of a track has no earlier one); only these go through the stack, a run at a time.
    rows = np.flatnonzero(inside)
    first = np.r_[True, rows[1:] != rows[:-1] + 1]
    starts_in = rows[first]
    ends_in = np.r_[rows[np.flatnonzero(first)[1:] - 1], rows[-1]] + 1
    step = 1 << 13  # rows of a run as Python ints at a time: a run can be the whole trace
    for a, b in zip(starts_in.tolist(), ends_in.tolist(), strict=True):
        stack = [int(end[a - 1])]
        for lo in range(a, b, step):
            hi = min(lo + step, b)
            tl, el = ts[lo:hi].tolist(), end[lo:hi].tolist()
            clamped = []
            for t, e in zip(tl, el, strict=True):
                while stack and stack[-1] <= t:
                    stack.pop()
                if stack and e > stack[-1]:
                    e = stack[-1]
                stack.append(e)
                clamped.append(e - t)
            out[lo:hi] = clamped
    return out


def chrome_event_dicts(ts: TrackSet) -> list[dict[str, Any]]:
    """The track set as trace-event dicts, e.g. for ``tracekit.trace.chrome.merge`` into a Kineto trace."""
    return [json.loads(e) for e in chrome_events(ts)]


def write_chrome_json(ts: TrackSet, out: IO[str], *, extra: dict[str, Any] | None = None) -> int:
    """Stream the track set as a Chrome trace (``{"traceEvents": [...]}``); returns the event count."""
    out.write('{"traceEvents":[\n')
    n = 0
    for piece, count in _chrome_parts(ts):
        out.write(piece.decode("ascii"))
        n += count
    out.write("\n]")
    for k, v in (extra or {}).items():
        out.write(f",{_dump(k)}:{_dump(v)}")
    out.write("}\n")
    return n


def write_chrome_json_gz(ts: TrackSet, path: Path, *, extra: dict[str, Any] | None = None,
                         blocks: Iterable[tuple[bytes, int]] | None = None) -> int:
    """``write_chrome_json`` gzipped (ISA-L's deflate where installed: the same text, written several
    times faster than zlib's level 6); ``blocks``: as ``_chrome_parts`` takes them."""
    from tracekit.store.rundir import atomic_path

    with atomic_path(path) as tmp, _gzip_writer(tmp) as fh:
        fh.write(b'{"traceEvents":[\n')
        n = 0
        for piece, count in _chrome_parts(ts, blocks):
            fh.write(piece)
            n += count
        fh.write(b"\n]")
        for k, v in (extra or {}).items():
            fh.write(f",{_dump(k)}:{_dump(v)}".encode())
        fh.write(b"}\n")
        return n


def _gzip_writer(path: Path) -> IO[bytes]:
    try:
        from isal import igzip

        return cast(IO[bytes], igzip.open(path, "wb", compresslevel=2))
    except ImportError:
        return cast(IO[bytes], gzip.open(path, "wb", compresslevel=6))
