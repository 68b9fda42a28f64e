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

from tracekit.trace.tracks import TrackSet, nested

SEQUENCE_ID = 0x7C0DE  # any fixed id; all packets share one sequence


def _uuid(text: str) -> int:
    # Stable 63-bit ids from track keys: the same run exports the same uuids.
    h = zlib.crc32(text.encode()) << 31 | zlib.adler32(text.encode())
    return h & 0x7FFF_FFFF_FFFF_FFFF or 1


class _Interner:
    """Interned strings of one sequence: each name is written once, then referred to by id."""

    def __init__(self) -> None:
        self.ids: dict[tuple[str, str], int] = {}

    def iid(self, packet: Any, table: str, text: str) -> int:
        key = (table, text)
        found = self.ids.get(key)
        if found is not None:
            return found
        new = len(self.ids) + 1
        self.ids[key] = new
        entry = getattr(packet.interned_data, table).add()
        entry.iid = new
        entry.name = text
        return new


def _int32(pid: int) -> int:
    """A pid or tid as the descriptors' int32: values from 2**31 up (tracekit's counter processes of a
    trace tracekit wrote, read back) wrap as a C cast would; a bigger value is an error."""
    return pid - 2**32 if 2**31 <= pid < 2**32 else pid


def _annotate(event: Any, args: dict[str, Any], packet: Any, interner: _Interner) -> None:
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


def write_proto(ts: TrackSet, path: Path) -> dict[str, int]:
    """Write the track set as a Perfetto protobuf trace; returns packet counts."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackDescriptor, TrackEvent
    from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

    from tracekit.store.rundir import atomic_path

    counts = {"tracks": 0, "slices": 0, "counters": 0}
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        b = StreamingTraceProtoBuilder(fh)
        first = True
        # Names, categories and arg names repeat across thousands of kernels:
        # interning them makes the file several times smaller than plain strings.
        interner = _Interner()

        def packet(ts_ns: int | None = None) -> Any:
            nonlocal first
            p = b.create_packet()
            p.trusted_packet_sequence_id = SEQUENCE_ID
            if first:
                # Tells the reader no interned state precedes this packet.
                p.sequence_flags = 1  # SEQ_INCREMENTAL_STATE_CLEARED
                first = False
            if ts_ns is not None:
                p.timestamp = ts_ns
            return p

        processes: dict[int, tuple[str, int]] = {}
        for t in ts.tracks.values():
            processes.setdefault(t.pid, (t.process, t.process_sort_index))
        for pid, (pname, psort) in processes.items():
            p = packet()
            td = p.track_descriptor
            td.uuid = _uuid(f"process/{pid}")
            td.process.pid = _int32(pid)
            td.process.process_name = pname
            td.sibling_order_rank = psort
            td.child_ordering = TrackDescriptor.ChildTracksOrdering.EXPLICIT
            b.write_packet(p)
            counts["tracks"] += 1
        for t in ts.tracks.values():
            p = packet()
            td = p.track_descriptor
            td.uuid = _uuid(t.key)
            td.sibling_order_rank = t.sort_index
            if t.kind == "slice":
                td.thread.pid = _int32(t.pid)
                td.thread.tid = _int32(t.tid)
                td.thread.thread_name = t.name
            else:
                td.parent_uuid = _uuid(f"process/{t.pid}")
                td.name = t.name
                td.counter.SetInParent()
                if t.unit:
                    td.counter.unit_name = t.unit
            b.write_packet(p)
            counts["tracks"] += 1

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
            p = packet(t_ns)
            p.sequence_flags |= 2  # SEQ_NEEDS_INCREMENTAL_STATE: uses interned strings
            ev = p.track_event
            ev.track_uuid = _uuid(key)
            if kind == 1 and payload is not None:
                ev.type = TrackEvent.Type.TYPE_SLICE_BEGIN
                ev.name_iid = interner.iid(p, "event_names", payload.name)
                ev.category_iids.append(interner.iid(p, "event_categories", payload.cat))
                _annotate(ev, payload.args, p, interner)
                counts["slices"] += 1
            elif payload is None:
                ev.type = TrackEvent.Type.TYPE_SLICE_END
            else:
                ev.type = TrackEvent.Type.TYPE_COUNTER
                ev.double_counter_value = float(payload)
                counts["counters"] += 1
            b.write_packet(p)
    return counts


def read_proto(path: Path) -> Any:
    """Decode a trace written by ``write_proto`` (a ``perfetto.protos...Trace``)."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    trace = Trace()
    trace.ParseFromString(Path(path).read_bytes())
    return trace
