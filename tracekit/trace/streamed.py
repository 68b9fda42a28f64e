"""A Perfetto protobuf trace written from the trace tables a time window at a time.

``write_proto_windows`` writes what ``tracekit.trace.perfetto.write_proto`` writes for
``build_tracks`` of the same tables, byte for byte, while it holds one window of the raw tables
(kernels, CPU ops, runtime calls, annotations) and the slices still open at the window's end, never
the tables. Its inputs: tracekit's own tracks (``build_tracks(..., include_trace=False)``); the trace
tables once in stored order, batch by batch, for the tracks (their order is that of first
appearance over the whole tables); then the same rows again as consecutive time windows (each table's
rows with ``ts_ns`` in the window, in stored order; ``kernel_bound`` aligned with ``gpu_activity``).

The whole-table writer sorts every event by (time, kind, sequence), a slice's sequence being its
place in the blocks' order (track, start, longer first, position). Within a window that order is the
same over the window's rows, since every earlier row starts before the window; a slice still open
at a window's end carries its end event, and its (clamped) end as the parent its track's next slices
nest in, to the next window. Interned ids go to names in order of first use, as the events come.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tracekit.model import npa, progress
from tracekit.trace import encode as E
from tracekit.trace.blocks import TraceBlock, trace_blocks
from tracekit.trace.perfetto import (
    SEQUENCE_ID,
    Interner,
    check_time,
    debug_annotation,
    framed,
    length_field,
    serialize_packet,
    stable_uuid,
    value_field,
    write_proto,
)
from tracekit.trace.tracks import BOUND_CNAME, BlockOrder, nested, nested_durations
from tracekit.trace.trackset import Slice, TrackSet

_CHUNK = BlockOrder.CHUNK


def block_tracks(ts: TrackSet, batches: Iterable[Mapping[str, pa.Table]]) -> list[str]:
    """Add the trace tables' tracks to ``ts`` in the order the whole-table blocks add them; ``batches``:
    the tables' rows in stored order (any columns the blocks' tracks need), one table after another."""
    keys: dict[str, None] = {}
    for tables in batches:
        for b in trace_blocks(ts, tables, None, BOUND_CNAME):
            keys.update(dict.fromkeys(b.keys))
    return list(keys)


class OpenSlices:
    """Block slices whose end event is still to come: global track, start, raw and clamped duration, position."""

    def __init__(self) -> None:
        z = np.empty(0, dtype=np.int64)
        self.track, self.ts, self.dur, self.cdur, self.pos = z, z, z, z, z

    def keep(self, where: np.ndarray) -> None:
        self.track, self.ts, self.dur, self.cdur, self.pos = (
            a[where] for a in (self.track, self.ts, self.dur, self.cdur, self.pos))

    def add(self, track: np.ndarray, ts: np.ndarray, dur: np.ndarray, cdur: np.ndarray, pos: np.ndarray) -> None:
        self.track, self.ts, self.dur, self.cdur, self.pos = (
            np.concatenate([a, b]) for a, b in ((self.track, track), (self.ts, ts), (self.dur, dur),
                                                  (self.cdur, cdur), (self.pos, pos)))


def clamp(op: OpenSlices, lo: int | None, track: np.ndarray, ts: np.ndarray, dur: np.ndarray, pos: np.ndarray
          ) -> np.ndarray:
    """``nested``'s clamped durations of a window's block rows, the slices of ``op`` still open at
    ``lo`` standing as each track's parents (phantom rows just before ``lo``, longest first)."""
    still = np.flatnonzero(op.ts + op.cdur > (lo if lo is not None else np.iinfo(np.int64).min))
    k = len(still)
    p_ts = np.full(k, (lo or 0) - 1, dtype=np.int64)
    all_track = np.concatenate([op.track[still], track])
    all_ts = np.concatenate([p_ts, ts])
    all_dur = np.concatenate([op.ts[still] + op.cdur[still] - p_ts, dur])
    all_pos = np.concatenate([np.full(k, -1, dtype=np.int64), pos])
    order = np.lexsort((all_pos, -all_dur, all_ts, all_track))
    clamped = nested_durations(all_track[order], all_ts[order], all_dur[order])
    out = np.empty(len(order), dtype=np.int64)
    out[order] = clamped
    return out[k:]


def window_rows(tables: Mapping[str, pa.Table], track_ids: Mapping[str, int]
                ) -> tuple[list[TraceBlock], np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A window's trace blocks and, per block row (blocks one after another): global track id (by
    ``track_ids``), start, raw duration, block, row in its block."""
    blocks = trace_blocks(TrackSet(), tables, None, BOUND_CNAME)
    z = np.zeros(0, np.int64)
    lut = [np.array([track_ids[k] for k in b.keys], dtype=np.int64) for b in blocks]
    track = np.concatenate([lut[i][b.track] if b.n else z for i, b in enumerate(blocks)] + [z])
    bts = np.concatenate([b.ts for b in blocks] + [z]).astype(np.int64)
    bdur = np.concatenate([b.dur for b in blocks] + [z]).astype(np.int64)
    blk = np.concatenate([np.full(b.n, i, dtype=np.int64) for i, b in enumerate(blocks)] + [z])
    local = np.concatenate([np.arange(b.n, dtype=np.int64) for b in blocks] + [z])
    return blocks, track, bts, bdur, blk, local


def write_proto_windows(ts: TrackSet, windows: Iterable[tuple[int | None, int | None, Mapping[str, pa.Table]]],
                        path: Path) -> dict[str, int]:
    """Write ``ts`` (its own tracks, and the trace's tracks added by ``block_tracks``) and the trace's
    slices from ``windows`` ((lo, hi, tables): consecutive, lo None first, hi None last) to ``path``."""

    def events(fh: Any, begin: Any, interner: Interner) -> dict[str, int]:
        return _Stream(ts, fh, begin, interner).run(windows)

    return write_proto(ts, path, write_events=events)


class _Stream:
    def __init__(self, ts: TrackSet, fh: Any, begin: Any, interner: Interner) -> None:
        self.ts, self.fh, self.begin, self.interner = ts, fh, begin, interner
        by_track: dict[str, list[Any]] = defaultdict(list)
        for s in ts.own_slices:
            by_track[s.track].append(s)
        self.own: list[tuple[str, Any, int]] = []
        for key, group in by_track.items():
            self.own.extend((key, s, dur) for s, dur in nested(group))
        self.o_ts = np.array([s.ts_ns for _, s, _ in self.own], dtype=np.int64)
        self.o_dur = np.array([d for _, _, d in self.own], dtype=np.int64)
        self.c_ts = np.array([c.ts_ns for c in ts.counters], dtype=np.int64)
        self.track_keys = list(ts.tracks)
        self.track_ids = {k: i for i, k in enumerate(self.track_keys)}  # global track rank: tracks' order
        self.track_b = [b"\x58" + E.varint(stable_uuid(k)) for k in ts.tracks]
        self.end_te = [length_field(11, b"\x48\x02" + tb) for tb in self.track_b]
        self.keys: dict[tuple[str, str], int] = {}  # interned: key -> id
        self.open = OpenSlices()
        self.seq_b = b"\x50" + E.varint(SEQUENCE_ID)
        self.n_slices = self.n_counters = 0
        self.next_pos = 0

    def run(self, windows: Iterable[tuple[int | None, int | None, Mapping[str, pa.Table]]]) -> dict[str, int]:
        for lo, hi, tables in windows:
            self.window(lo, hi, tables)
        return {"slices": self.n_slices, "counters": self.n_counters}

    # --- one window ------------------------------------------------------------------------

    def window(self, lo: int | None, hi: int | None, tables: Mapping[str, pa.Table]) -> None:
        blocks, track, bts, bdur, blk, local = window_rows(tables, self.track_ids)
        n = len(track)
        pos = self.next_pos + np.arange(n, dtype=np.int64)
        self.next_pos += n
        cdur = clamp(self.open, lo, track, bts, bdur, pos)
        a = np.iinfo(np.int64).min if lo is None else lo
        b_ = np.iinfo(np.int64).max if hi is None else hi

        # the window's events: (time, kind, group, k1..k4, instant) as the whole-table sort orders them
        cols: list[list[np.ndarray]] = [[] for _ in range(9)]  # t, kind, grp, k1, k2, k3, k4, inst, tag
        refs: list[np.ndarray] = []

        def add(t: np.ndarray, kind: int, grp: int, ks: tuple[Any, ...], inst: int, tag: int, ref: np.ndarray) -> None:
            m = len(t)
            vals = [t, np.full(m, kind), np.full(m, grp), *[np.broadcast_to(np.asarray(k, dtype=np.int64), (m,))
                                                             for k in ks], np.full(m, inst), np.full(m, tag)]
            for c, v in zip(cols, vals, strict=True):
                c.append(np.asarray(v, dtype=np.int64))
            refs.append(ref)

        o_in = np.flatnonzero((self.o_ts >= a) & (self.o_ts < b_))
        o_end = self.o_ts + self.o_dur
        o_end_in = np.flatnonzero((self.o_dur > 0) & (o_end >= a) & (o_end < b_))
        o_inst = o_in[self.o_dur[o_in] == 0]
        z = 0
        add(self.o_ts[o_in], 1, 0, (o_in, z, z, z), 0, 0, o_in)  # own begins
        add(self.o_ts[o_inst], 1, 0, (o_inst, z, z, z), 1, 1, o_inst)  # own instants' ends
        add(o_end[o_end_in], 0, 1, (-o_end_in, z, z, z), 0, 1, o_end_in)  # own ends
        rows = np.arange(n, dtype=np.int64)
        add(bts, 1, 1, (track, bts, -bdur, pos), 0, 2, rows)  # block begins
        inst = rows[cdur == 0]
        add(bts[inst], 1, 1, (track[inst], bts[inst], -bdur[inst], pos[inst]), 1, 3, track[inst])  # instants' ends
        self.open.add(track[cdur > 0], bts[cdur > 0], bdur[cdur > 0], cdur[cdur > 0], pos[cdur > 0])
        op = self.open
        o_e = op.ts + op.cdur
        due = np.flatnonzero(o_e < b_)
        add(o_e[due], 0, 0, (-op.track[due], -op.ts[due], op.dur[due], -op.pos[due]), 0, 3, op.track[due])
        op.keep(np.flatnonzero(o_e >= b_))
        c_in = np.flatnonzero((self.c_ts >= a) & (self.c_ts < b_))
        add(self.c_ts[c_in], 2, 0, (c_in, z, z, z), 0, 4, c_in)

        t, kind, grp, k1, k2, k3, k4, inst_, tag = (np.concatenate(c) for c in cols)
        ref = np.concatenate(refs)
        cols.clear()  # the parts (and below the sort keys): the window's peak is its event columns
        refs.clear()
        if len(t):
            check_time(int(t.min()))
        ev = np.lexsort((inst_, k4, k3, k2, k1, grp, kind, t))
        del kind, grp, k1, k2, k3, k4, inst_
        t, tag, ref = t[ev], tag[ev], ref[ev]
        del ev
        interning = self._intern(blocks, blk, local, tag, ref)
        for c0 in range(0, len(t), _CHUNK):
            progress.report("writing the Perfetto trace", c0, len(t))
            self._chunk(slice(c0, c0 + _CHUNK), t, tag, ref, interning, blocks, blk, local, track, bts)

    def _intern(self, blocks: list[TraceBlock], blk: np.ndarray, local: np.ndarray, tag: np.ndarray,
                ref: np.ndarray) -> np.ndarray:
        """Give the keys first used in this window their ids (by first use); the output places whose
        packet interns a new key."""
        fresh: dict[tuple[str, str], int] = {}
        firsts: list[np.ndarray] = []
        places: list[np.ndarray] = []

        def gid(key: tuple[str, str]) -> int:
            if key in self.keys:
                return -1
            return fresh.setdefault(key, len(fresh))

        slots = 2 + max([len(s.args) for _, s, _ in self.own] + [len(b.args) for b in blocks] + [0])
        o_begin = np.flatnonzero(tag == 0)
        for place, i in zip(o_begin.tolist(), ref[o_begin].tolist(), strict=True):
            s = self.own[i][1]
            ks = [gid(("event_names", s.name)), gid(("event_categories", s.cat))] + [
                gid(("debug_annotation_names", str(k))) for k in s.args]
            for j, g in enumerate(ks):
                if g >= 0:
                    firsts.append(np.array([g]))
                    places.append(np.array([place * slots + j]))
        b_begin = np.flatnonzero(tag == 2)
        rows = ref[b_begin]
        for bi, b in enumerate(blocks):
            sel = blk[rows] == bi
            if not sel.any():
                continue
            lc, p = local[rows[sel]], b_begin[sel] * slots
            for codes, values, table, slot in ((b.name[lc], b.names, "event_names", 0),
                                               (b.cat[lc], b.cats, "event_categories", 1)):
                g = np.array([gid((table, x)) for x in values] + [-1], dtype=np.int64)[codes]
                firsts.append(g[g >= 0])
                places.append(p[g >= 0] + slot)
            for ai, arg in enumerate(b.args):
                g = gid(("debug_annotation_names", arg.key))
                pres = arg.present[lc]
                if g >= 0 and pres.any():
                    firsts.append(np.array([g]))
                    places.append(np.array([int(p[pres].min()) + 2 + ai]))
        interning = np.zeros(len(tag), dtype=bool)
        if not fresh:
            return interning
        first = np.full(len(fresh), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, np.concatenate(firsts), np.concatenate(places))
        used = np.flatnonzero(first < np.iinfo(np.int64).max)
        by_first = used[np.argsort(first[used], kind="stable")]
        inv = {g: k for k, g in fresh.items()}
        base = len(self.keys)
        for j, g in enumerate(by_first.tolist()):
            self.keys[inv[g]] = base + j + 1
        interning[first[used] // slots] = True
        self.interner.fixed = self.keys
        return interning

    def _chunk(self, sl: slice, t: np.ndarray, tag: np.ndarray, ref: np.ndarray, interning: np.ndarray,
               blocks: list[TraceBlock], blk: np.ndarray, local: np.ndarray, track: np.ndarray, bts: np.ndarray) -> None:
        t, tag, ref, interning = t[sl], tag[sl], ref[sl], interning[sl]
        parts: list[Any] = []
        srcs: list[np.ndarray] = []
        iid = self.keys
        fast = (tag == 2) & ~interning
        slow = (tag == 0) | ((tag == 2) & interning)
        if fast.any():
            at = np.flatnonzero(fast)
            rows = ref[at]
            for bi, b in enumerate(blocks):
                sel = blk[rows] == bi
                if not sel.any():
                    continue
                r, lc = rows[sel], local[rows[sel]]
                cat_b = [b"\x18" + E.varint(iid.get(("event_categories", x), 0)) for x in b.cats]
                name_b = [b"\x50" + E.varint(iid.get(("event_names", x), 0)) for x in b.names]
                pieces: list[Any] = [E.lookup(cat_b, b.cat[lc])]
                for a in b.args:
                    present = a.present[lc]
                    if not present.any():
                        continue
                    head = b"\x08" + E.varint(iid.get(("debug_annotation_names", a.key), 0))
                    if a.ints is None:
                        vals = [debug_annotation(head + value_field(v)) for v in a.values]
                        da = E.lookup(vals, np.where(present, a.codes[lc], -1))  # type: ignore[index]
                    else:
                        inner = E.join([E.const(head + b"\x20"), E.varints(a.ints[lc])])
                        da = E.join([E.const(b"\x22"), E.varints(E.lengths(inner)), inner])
                        da = da if present.all() else E.mask(da, present)
                    pieces.append(da)
                pieces += [E.const(b"\x48\x01"), E.lookup(name_b, b.name[lc]), E.lookup(self.track_b, track[r])]
                te = E.join(pieces)
                pk = E.join([E.const(b"\x40"), E.varints(bts[r]), E.const(self.seq_b), E.const(b"\x5a"),
                             E.varints(E.lengths(te)), te, E.const(b"\x68\x02")])
                parts.append(framed(pk))
                srcs.append(at[sel])
            self.n_slices += int(fast.sum())
        ends = (tag == 1) | (tag == 3)
        if ends.any():
            at = np.flatnonzero(ends)
            codes = np.empty(len(at), dtype=np.int64)
            table = list(self.end_te)
            blk_end = tag[at] == 3
            codes[blk_end] = ref[at][blk_end]
            own_te: dict[str, int] = {}
            for j in np.flatnonzero(~blk_end).tolist():
                key = self.own[int(ref[at[j]])][0]
                if key not in own_te:
                    own_te[key] = len(table)
                    table.append(length_field(11, b"\x48\x02" + b"\x58" + E.varint(stable_uuid(key))))
                codes[j] = own_te[key]
            pk = E.join([E.const(b"\x40"), E.varints(t[at]), E.const(self.seq_b), E.lookup(table, codes),
                         E.const(b"\x68\x02")])
            parts.append(framed(pk))
            srcs.append(at)
        cnt = tag == 4
        if cnt.any():
            at = np.flatnonzero(cnt)
            cs = [self.ts.counters[i] for i in ref[at].tolist()]
            tb: dict[bytes, int] = {}
            cc = np.array([tb.setdefault(b"\x58" + E.varint(stable_uuid(c.track)), len(tb)) for c in cs], dtype=np.int64)
            te = E.join([E.const(b"\x48\x04"), E.lookup(list(tb), cc), E.const(b"\xe1\x02"),
                         E.from_flat(np.array([float(c.value) for c in cs], dtype="<f8").view(np.uint8),
                                     np.full(len(cs), 8))])
            pk = E.join([E.const(b"\x40"), E.varints(t[at]), E.const(self.seq_b), E.const(b"\x5a"),
                         E.varints(E.lengths(te)), te, E.const(b"\x68\x02")])
            parts.append(framed(pk))
            srcs.append(at)
            self.n_counters += len(cs)
        if slow.any():
            at = np.flatnonzero(slow)
            enc = []
            for j in at.tolist():
                if tag[j] == 0:
                    key, s, _ = self.own[int(ref[j])]
                else:
                    key, s = self._block_slice(blocks, blk, local, track, int(ref[j]))
                enc.append(serialize_packet(self.begin(int(t[j]), key, s)))
            parts.append(npa.binary(enc))
            srcs.append(at)
            self.n_slices += len(enc)
        if not parts:
            return
        src = np.concatenate(srcs)
        inverse = np.empty(len(src), dtype=np.int64)
        inverse[src] = np.arange(len(src))
        merged = pa.concat_arrays(parts).take(npa.array(inverse)) if len(parts) > 1 else parts[0]
        self.fh.write(E.data(merged))

    def _block_slice(self, blocks: list[TraceBlock], blk: np.ndarray, local: np.ndarray, track: np.ndarray,
                     row: int) -> tuple[str, Slice]:
        b = blocks[int(blk[row])]
        i = int(local[row])
        key = self.track_keys[int(track[row])]
        args = {a.key: a.value(i) for a in b.args if a.present[i]}
        return key, Slice(key, b.names[int(b.name[i])], int(b.ts[i]), int(b.dur[i]), b.cats[int(b.cat[i])], args,
                          b.cnames[int(b.cname[i])] if b.cname[i] >= 0 else None)
