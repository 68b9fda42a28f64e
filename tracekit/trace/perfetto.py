"""Native Perfetto protobuf traces of a run (``.pftrace``).

Smaller and faster to load than Chrome JSON: the UI parses protobuf natively
instead of a multi-GB JSON text. Built with the ``perfetto`` package's
``StreamingTraceProtoBuilder`` (one TracePacket written at a time) from the
same ``TrackSet`` the JSON writer uses (tracekit.trace.tracks).

Layout of the trace:
  * one process track per process (ProcessDescriptor: pid, name), ordered by
    ``sibling_order_rank`` = the process sort index;
  * one thread track per slice track (ThreadDescriptor: pid, tid, name), ordered
    by its sort index;
  * one counter track per counter (CounterDescriptor, name, unit), parented to
    its process track;
  * slices as TYPE_SLICE_BEGIN / TYPE_SLICE_END pairs, args as debug annotations;
    counters as TYPE_COUNTER with ``double_counter_value``.
All packets sit on one trusted sequence; timestamps are the trace's ns. Event
names, categories and debug-annotation names are interned (InternedData).
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tracekit.errors import TracekitError
from tracekit.model import npa, progress
from tracekit.trace.blocks import TraceBlock
from tracekit.trace.tracks import BlockOrder, TrackSet, columnar, nested
from tracekit.trace.trackset import Slice

SEQUENCE_ID = 0x7C0DE  # any fixed id; all packets share one sequence


def stable_uuid(text: str) -> int:
    # Stable 63-bit ids from track keys: the same run exports the same uuids.
    h = zlib.crc32(text.encode()) << 31 | zlib.adler32(text.encode())
    return h & 0x7FFF_FFFF_FFFF_FFFF or 1


class Interner:
    """Interned strings of one sequence: each name is written once, then referred to by id."""

    def __init__(self) -> None:
        self.ids: dict[tuple[str, str], int] = {}
        # Where every id was decided beforehand (the columnar path): the id to write at first use.
        self.fixed: dict[tuple[str, str], int] | None = None

    def iid(self, packet: Any, table: str, text: str) -> int:
        key = (table, text)
        found = self.ids.get(key)
        if found is not None:
            return found
        new = len(self.ids) + 1 if self.fixed is None else self.fixed[key]
        self.ids[key] = new
        entry = getattr(packet.interned_data, table).add()
        entry.iid = new
        entry.name = text
        return new


def check_time(t_ns: int) -> None:
    """Perfetto's timestamps are unsigned 64-bit ns: an event before 0 (or past 2**64) cannot be written."""
    if not 0 <= t_ns < 2**64:
        raise TracekitError(f"an event at {t_ns} ns on the trace clock: a Perfetto protobuf trace cannot hold a "
                            "time before 0 or past 2**64 ns (export --format json can)")


def _int32(pid: int) -> int:
    """A pid or tid as the descriptors' int32: values outside it (from 2**31 up: tracekit's counter
    processes of a trace tracekit wrote, read back; any a foreign trace holds) wrap as a C cast would."""
    return (pid + 2**31) % 2**32 - 2**31


def _annotate(event: Any, args: dict[str, Any], packet: Any, interner: Interner) -> None:
    for k, v in args.items():
        da = event.debug_annotations.add()
        da.name_iid = interner.iid(packet, "debug_annotation_names", str(k))
        if isinstance(v, bool):
            da.bool_value = v
        elif isinstance(v, int) and -(2**63) <= v < 2**63:
            da.int_value = v
        elif isinstance(v, float):
            da.double_value = v
        else:
            da.string_value = str(v)


def write_proto(ts: TrackSet, path: Path, write_events: Any = None) -> dict[str, int]:
    """Write the track set as a Perfetto protobuf trace; returns packet counts. ``write_events``: where
    given, ``write_events(file, begin, interner)`` writes every event packet after the track descriptors
    (tracekit.trace.streamed) and returns the slice and counter counts."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackDescriptor, TrackEvent
    from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

    from tracekit.store.rundir import atomic_path

    counts = {"tracks": 0, "slices": 0, "counters": 0}
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        b = StreamingTraceProtoBuilder(fh)
        first = True
        # Names, categories and arg names repeat across thousands of kernels:
        # interning them makes the file several times smaller than plain strings.
        interner = Interner()

        def packet(ts_ns: int | None = None) -> Any:
            nonlocal first
            p = b.create_packet()
            p.trusted_packet_sequence_id = SEQUENCE_ID
            if first:
                # Tells the reader no interned state precedes this packet.
                p.sequence_flags = 1  # SEQ_INCREMENTAL_STATE_CLEARED
                first = False
            if ts_ns is not None:
                check_time(ts_ns)
                p.timestamp = ts_ns
            return p

        processes: dict[int, tuple[str, int]] = {}
        for t in ts.tracks.values():
            processes.setdefault(t.pid, (t.process, t.process_sort_index))
        for pid, (pname, psort) in processes.items():
            p = packet()
            td = p.track_descriptor
            td.uuid = stable_uuid(f"process/{pid}")
            td.process.pid = _int32(pid)
            td.process.process_name = pname
            td.sibling_order_rank = psort
            td.child_ordering = TrackDescriptor.ChildTracksOrdering.EXPLICIT
            b.write_packet(p)
            counts["tracks"] += 1
        for t in ts.tracks.values():
            p = packet()
            td = p.track_descriptor
            td.uuid = stable_uuid(t.key)
            td.sibling_order_rank = t.sort_index
            if t.kind == "slice":
                td.thread.pid = _int32(t.pid)
                td.thread.tid = _int32(t.tid)
                td.thread.thread_name = t.name
            else:
                td.parent_uuid = stable_uuid(f"process/{t.pid}")
                td.name = t.name
                td.counter.SetInParent()
                if t.unit:
                    td.counter.unit_name = t.unit
            b.write_packet(p)
            counts["tracks"] += 1

        def begin(t_ns: int, key: str, s: Any) -> Any:
            p = packet(t_ns)
            p.sequence_flags |= 2  # SEQ_NEEDS_INCREMENTAL_STATE: uses interned strings
            ev = p.track_event
            ev.track_uuid = stable_uuid(key)
            ev.type = TrackEvent.Type.TYPE_SLICE_BEGIN
            ev.name_iid = interner.iid(p, "event_names", s.name)
            ev.category_iids.append(interner.iid(p, "event_categories", s.cat))
            _annotate(ev, s.args, p, interner)
            return p

        if write_events is not None:
            counts.update(write_events(fh, begin, interner))
            return counts
        if columnar(ts):
            counts.update(_write_columnar(ts, fh, begin, interner))
            return counts

        # Slices: BEGIN/END pairs per track, properly nested, then all events in
        # time order (ends before begins at the same instant on a track).
        events: list[tuple[int, int, float, str, Any]] = []
        by_track: dict[str, list[Any]] = defaultdict(list)
        for s in ts.slices:
            by_track[s.track].append(s)
        seq = 0
        for key, slices in by_track.items():
            for s, dur in nested(slices):
                events.append((s.ts_ns, 1, seq, key, s))
                if dur > 0:
                    events.append((s.ts_ns + dur, 0, -seq, key, None))
                else:  # an instant-length slice: its end must follow its own begin
                    events.append((s.ts_ns, 1, seq + 0.5, key, None))
                seq += 1
        for c in ts.counters:
            events.append((c.ts_ns, 2, 0, c.track, c.value))
        events.sort(key=lambda e: (e[0], e[1], e[2]))
        for t_ns, kind, _, key, payload in events:
            if kind == 1 and payload is not None:
                b.write_packet(begin(t_ns, key, payload))
                counts["slices"] += 1
                continue
            p = packet(t_ns)
            p.sequence_flags |= 2
            ev = p.track_event
            ev.track_uuid = stable_uuid(key)
            if payload is None:
                ev.type = TrackEvent.Type.TYPE_SLICE_END
            else:
                ev.type = TrackEvent.Type.TYPE_COUNTER
                ev.double_counter_value = float(payload)
                counts["counters"] += 1
            b.write_packet(p)
    return counts


# --- the columnar path: the trace's blocks encoded with Arrow (tracekit.trace.encode) -----------


def _write_columnar(ts: TrackSet, fh: Any, begin: Any, interner: Interner) -> dict[str, int]:
    """Every event packet of a track set whose trace slices are in blocks, byte for byte what the
    object path writes: the same order, interned ids and fields (in field-number order, as the
    protobuf runtime writes them). Packets that intern a new string, and the slices of tracekit's own
    tracks, are built as objects; the rest a chunk of events at a time with array operations."""
    from tracekit.trace import encode as E

    blocks: list[TraceBlock] = ts.blocks  # type: ignore[assignment]
    order = BlockOrder.of(blocks)
    own: list[tuple[str, Any, int]] = []  # (key, slice, clamped duration) in seq order
    by_track: dict[str, list[Any]] = defaultdict(list)
    for s in ts.own_slices:
        by_track[s.track].append(s)
    for key, group in by_track.items():
        own.extend((key, s, dur) for s, dur in nested(group))
    m, nb, nc = len(own), len(order), len(ts.counters)

    # Every event: (time, kind, sub) sorted as the object path sorts (time, kind, seq): begin 2*seq,
    # an instant's end 2*seq + 1, an end -2*seq, a counter 0 (ties: insertion order, a stable sort).
    o_ts = np.array([s.ts_ns for _, s, _ in own], dtype=np.int64)
    o_dur = np.array([d for _, _, d in own], dtype=np.int64)
    seq = np.arange(m + nb, dtype=np.int64)
    s_ts = np.concatenate([o_ts, order.ts])
    s_dur = np.concatenate([o_dur, order.dur])
    c_ts = np.array([c.ts_ns for c in ts.counters], dtype=np.int64)
    n_s = m + nb
    t = np.concatenate([s_ts, s_ts + s_dur, c_ts])
    if len(t):
        check_time(int(t.min()))
    kind = np.concatenate([np.ones(n_s, np.int8), np.where(s_dur > 0, 0, 1).astype(np.int8), np.full(nc, 2, np.int8)])
    sub = np.concatenate([2 * seq, np.where(s_dur > 0, -2 * seq, 2 * seq + 1), np.zeros(nc, np.int64)])
    del seq, s_ts, s_dur, o_ts, o_dur
    ev_order = np.lexsort((sub, kind, t))  # a stable sort: ties keep insertion order
    del kind, sub

    # Interned ids in order of first use: per begin packet its name, category, then its args' names.
    keys: dict[tuple[str, str], int] = {}

    def gid(table: str, text: str) -> int:
        return keys.setdefault((table, text), len(keys))

    pos = np.empty(len(t), dtype=np.int64)
    pos[ev_order] = np.arange(len(t))  # event -> its place in the output
    # A key's first use: the least (output place, slot) of the packets naming it, slot 0 the name,
    # 1 the category, 2 + i the i-th arg; ids go to keys in that order, and the packets where a
    # key is first used are the ones that write it into their interned data.
    slots = 2 + max([len(s.args) for _, s, _ in own] + [len(b.args) for b in blocks] + [0])
    never = np.iinfo(np.int64).max
    first = np.full(0, never, dtype=np.int64)

    def use(g: np.ndarray | int, at: np.ndarray | int) -> None:
        nonlocal first
        if len(keys) > len(first):
            first = np.concatenate([first, np.full(len(keys) - len(first), never, dtype=np.int64)])
        np.minimum.at(first, g, at)

    for i, (_, s, _) in enumerate(own):
        ks = [gid("event_names", s.name), gid("event_categories", s.cat)] + [
            gid("debug_annotation_names", str(k)) for k in s.args]
        use(np.array(ks, dtype=np.int64), int(pos[i]) * slots + np.arange(len(ks)))
    name_gid = [np.array([gid("event_names", x) for x in b.names], dtype=np.int64) for b in blocks]
    cat_gid = [np.array([gid("event_categories", x) for x in b.cats], dtype=np.int64) for b in blocks]
    arg_gid = [[gid("debug_annotation_names", a.key) for a in b.args] for b in blocks]
    bpos = pos[m:n_s]  # output place of each block row's begin (order's positions)
    for bi, b in enumerate(blocks):
        where = np.flatnonzero(order.block == bi)
        local = order.local[where]
        p = bpos[where] * slots
        use(name_gid[bi][b.name[local]], p)
        use(cat_gid[bi][b.cat[local]], p + 1)
        for ai, a in enumerate(b.args):
            pres = a.present[local]
            if pres.any():
                use(arg_gid[bi][ai], int(p[pres].min()) + 2 + ai)
        del where, local, p
    use(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))  # every key has its entry
    used = np.flatnonzero(first < never)
    by_first = used[np.argsort(first[used], kind="stable")]
    iid = np.zeros(len(keys) + 1, dtype=np.int64)
    iid[by_first] = np.arange(1, len(by_first) + 1)
    interning = np.zeros(len(t), dtype=bool)  # output places whose packet interns something new
    interning[first[used] // slots] = True
    del first, used, by_first, pos, bpos
    interner.fixed = {k: int(iid[g]) for k, g in keys.items()}

    # What a block row's begin packet holds: encodings per code, per track.
    uuid_of = {k: stable_uuid(k) for k in order.keys}
    track_uuid = [b"\x58" + E.varint(uuid_of[k]) for k in order.keys]
    name_b = [[b"\x50" + E.varint(int(iid[g])) for g in name_gid[bi]] for bi in range(len(blocks))]
    cat_b = [[b"\x18" + E.varint(int(iid[g])) for g in cat_gid[bi]] for bi in range(len(blocks))]
    da_head = [[b"\x08" + E.varint(int(iid[g])) for g in arg_gid[bi]] for bi in range(len(blocks))]
    da_vals = [[[debug_annotation(da_head[bi][ai] + value_field(v)) for v in a.values] if a.ints is None else None
                for ai, a in enumerate(b.args)] for bi, b in enumerate(blocks)]
    seq_b = b"\x50" + E.varint(SEQUENCE_ID)
    end_te = [length_field(11, b"\x48\x02" + track_uuid[i]) for i in range(len(order.keys))]
    own_uuid: dict[str, bytes] = {}

    def track_bytes(key: str) -> bytes:
        if key not in own_uuid:
            own_uuid[key] = b"\x58" + E.varint(stable_uuid(key))
        return own_uuid[key]

    n_slices = n_counters = 0
    for lo in range(0, len(t), BlockOrder.CHUNK):
        progress.report("writing the Perfetto trace", lo, len(t))
        out_pos = np.arange(lo, min(lo + BlockOrder.CHUNK, len(t)))
        evs = ev_order[out_pos]
        parts: list[Any] = []
        srcs: list[np.ndarray] = []
        # begins of block rows that intern nothing new: encoded as arrays
        is_block_begin = (evs >= m) & (evs < n_s)
        fast = is_block_begin & ~interning[out_pos]
        slow = (evs < m) | (is_block_begin & interning[out_pos])
        if fast.any():
            rows = evs[fast] - m
            for bi, local, where in order.by_block(rows):
                b = blocks[bi]
                pieces: list[Any] = [E.lookup(cat_b[bi], b.cat[local])]
                for ai, a in enumerate(b.args):
                    present = a.present[local]
                    if not present.any():
                        continue
                    if a.ints is None:
                        da = E.lookup(da_vals[bi][ai] or [], np.where(present, a.codes[local], -1))  # type: ignore[index]
                    else:
                        inner = E.join([E.const(da_head[bi][ai] + b"\x20"), E.varints(a.ints[local])])
                        da = E.join([E.const(b"\x22"), E.varints(E.lengths(inner)), inner])
                        da = da if present.all() else E.mask(da, present)
                    pieces.append(da)
                pieces += [E.const(b"\x48\x01"), E.lookup(name_b[bi], b.name[local]),
                           E.lookup(track_uuid, order.track[where])]
                te = E.join(pieces)
                pk = E.join([E.const(b"\x40"), E.varints(order.ts[where]), E.const(seq_b), E.const(b"\x5a"),
                             E.varints(E.lengths(te)), te, E.const(b"\x68\x02")])
                parts.append(framed(pk))
                # positions in this chunk of these rows, in by_block's order
                srcs.append(_positions(evs, where + m))
            n_slices += int(fast.sum())
        ends = (evs >= n_s) & (evs < 2 * n_s)
        if ends.any():
            e_idx = evs[ends] - n_s
            is_blk = e_idx >= m
            # codes into end_te (one per block track), then one per own slice's track
            te_codes = np.empty(len(e_idx), dtype=np.int64)
            te_codes[is_blk] = order.track[e_idx[is_blk] - m]
            te_table = list(end_te)
            for j in np.flatnonzero(~is_blk).tolist():
                te_codes[j] = len(te_table)
                te_table.append(length_field(11, b"\x48\x02" + track_bytes(own[int(e_idx[j])][0])))
            pk = E.join([E.const(b"\x40"), E.varints(t[evs[ends]]), E.const(seq_b),
                         E.lookup(te_table, te_codes), E.const(b"\x68\x02")])
            parts.append(framed(pk))
            srcs.append(np.flatnonzero(ends))
        cnt = evs >= 2 * n_s
        if cnt.any():
            c_idx = evs[cnt] - 2 * n_s
            cs = [ts.counters[i] for i in c_idx.tolist()]
            te = E.join([E.const(b"\x48\x04"), E.lookup(*_swap(_codes(np.array([track_bytes(c.track) for c in cs],
                                                                                  dtype=object)))),
                         E.const(b"\xe1\x02"),
                         E.from_flat(np.array([float(c.value) for c in cs], dtype="<f8").view(np.uint8),
                                     np.full(len(cs), 8))])
            pk = E.join([E.const(b"\x40"), E.varints(c_ts[c_idx]), E.const(seq_b), E.const(b"\x5a"),
                         E.varints(E.lengths(te)), te, E.const(b"\x68\x02")])
            parts.append(framed(pk))
            srcs.append(np.flatnonzero(cnt))
            n_counters += len(cs)
        if slow.any():
            enc = []
            for e in evs[slow].tolist():
                if e < m:
                    key, s, _ = own[e]
                else:
                    row = e - m
                    key, s = order.keys[int(order.track[row])], _block_slice(blocks, order, row)
                enc.append(serialize_packet(begin(int(t[e]), key, s)))
            parts.append(npa.binary(enc))
            srcs.append(np.flatnonzero(slow))
            n_slices += len(enc)
        src = np.concatenate(srcs)
        inverse = np.empty(len(src), dtype=np.int64)
        inverse[src] = np.arange(len(src))
        merged = pa.concat_arrays(parts).take(npa.array(inverse)) if len(parts) > 1 else parts[0]
        fh.write(E.data(merged))
    return {"slices": n_slices, "counters": n_counters}


def _positions(evs: np.ndarray, events: np.ndarray) -> np.ndarray:
    """Positions in ``evs`` of ``events`` (each present once), in ``events``' order."""
    where = np.argsort(evs, kind="stable")
    return where[np.searchsorted(evs[where], events)]


def _codes(values: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
    table: dict[bytes, int] = {}
    codes = np.array([table.setdefault(v, len(table)) for v in values.tolist()], dtype=np.int64)
    return codes, list(table)


def _swap(pair: tuple[np.ndarray, list[bytes]]) -> tuple[list[bytes], np.ndarray]:
    return pair[1], pair[0]


def length_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length, the payload."""
    from tracekit.trace.encode import varint

    return varint(number << 3 | 2) + varint(len(payload)) + payload


def debug_annotation(inner: bytes) -> bytes:
    return length_field(4, inner)


def value_field(v: Any) -> bytes:
    """A debug annotation's value as ``_annotate`` sets it: bool, int64, double or string."""
    import struct

    from tracekit.trace.encode import varint

    if isinstance(v, bool):
        return b"\x10" + (b"\x01" if v else b"\x00")
    if isinstance(v, int) and -(2**63) <= v < 2**63:
        return b"\x20" + varint(v)
    if isinstance(v, float):
        return b"\x29" + struct.pack("<d", v)
    text = str(v).encode()
    return b"\x32" + varint(len(text)) + text


def framed(packet: Any) -> Any:
    """Each packet as the trace file holds it: Trace.packet's tag and length, then the packet."""
    from tracekit.trace import encode as E

    return E.join([E.const(b"\x0a"), E.varints(E.lengths(packet)), packet])


def serialize_packet(p: Any) -> bytes:
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    trace = Trace()
    trace.packet.append(p)
    return bytes(trace.SerializeToString())


def _block_slice(blocks: list[TraceBlock], order: BlockOrder, row: int) -> Any:
    """The Slice of one row of the blocks (in ``order``), for a packet built as an object."""
    b = blocks[int(order.block[row])]
    i = int(order.local[row])
    args = {a.key: a.value(i) for a in b.args if a.present[i]}
    return Slice(order.keys[int(order.track[row])], b.names[int(b.name[i])], int(b.ts[i]), int(b.dur[i]),
                 b.cats[int(b.cat[i])], args, b.cnames[int(b.cname[i])] if b.cname[i] >= 0 else None)


def read_proto(path: Path) -> Any:
    """Decode a trace written by ``write_proto`` (a ``perfetto.protos...Trace``)."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    trace = Trace()
    trace.ParseFromString(Path(path).read_bytes())
    return trace
