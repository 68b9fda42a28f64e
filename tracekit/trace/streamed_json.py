"""A Chrome JSON trace written from the trace tables a time window at a time.

``write_json_windows`` writes what ``tracekit.trace.tracks.write_chrome_json_gz`` writes for
``build_tracks`` of the same tables, byte for byte, while it holds one window of the raw tables and
the slices still open at the window's end (tracekit.trace.streamed: the same windows, the same
clamping of durations to their parents). The whole-table writer orders the trace's slices by track
(first appearance), then start, then longer first, then position; a window's rows are encoded in
that order and appended to one spill file per track (uncompressed JSON text in a temporary folder
beside the output), and the files are copied into the gzip stream in track order at the end. Memory:
one window; disk: the trace's JSON text once more, until the export ends.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa

from tracekit.trace.streamed import OpenSlices, clamp, window_rows
from tracekit.trace.tracks import JSON_CHUNK, BlockOrder, block_json, write_chrome_json_gz
from tracekit.trace.trackset import TrackSet

MAX_TRACKS = 512  # more tracks than this: one spill file each is too many open files
COPY_BYTES = 1 << 22


def write_json_windows(ts: TrackSet, keys: list[str],
                       windows: Iterable[tuple[int | None, int | None, Mapping[str, pa.Table]]], path: Path,
                       extra: dict[str, Any] | None = None) -> int:
    """Write ``ts`` (its own tracks, and the trace's tracks ``keys`` in the blocks' order, added by
    ``tracekit.trace.streamed.block_tracks``) and the trace's slices from ``windows`` ((lo, hi,
    tables): consecutive, lo None first, hi None last) to ``path``; returns the event count."""
    if len(keys) > MAX_TRACKS:
        raise ValueError(f"{len(keys)} tracks: more than {MAX_TRACKS} spill files")
    with tempfile.TemporaryDirectory(prefix=".tracekit-json-", dir=path.parent) as tmp:
        return write_chrome_json_gz(ts, path, extra=extra, blocks=_spilled(ts, keys, windows, Path(tmp)))


def _spilled(ts: TrackSet, keys: list[str], windows: Iterable[tuple[int | None, int | None, Mapping[str, pa.Table]]],
             tmp: Path) -> Iterator[tuple[bytes, int]]:
    """Every window's block events into its tracks' spill files, then the files' bytes in track order."""
    track_ids = {k: i for i, k in enumerate(keys)}
    files: dict[int, IO[bytes]] = {}
    counts = np.zeros(len(keys), dtype=np.int64)
    op = OpenSlices()
    next_pos = 0
    try:
        for lo, hi, tables in windows:
            blocks, track, bts, bdur, blk, local = window_rows(tables, track_ids)
            n = len(track)
            pos = next_pos + np.arange(n, dtype=np.int64)
            next_pos += n
            cdur = clamp(op, lo, track, bts, bdur, pos)
            order = np.lexsort((pos, -bdur, bts, track))
            bo = BlockOrder(blocks, keys, blk[order], local[order], track[order], bts[order], cdur[order])
            tr = bo.track
            cuts = [0, *(np.flatnonzero(np.diff(tr)) + 1).tolist(), n]
            sets = [(int(tr[a]), np.arange(i, min(i + JSON_CHUNK, b)))
                    for a, b in itertools.pairwise(cuts) for i in range(a, b, JSON_CHUNK)]
            for (k, _), (piece, count) in zip(sets, block_json(ts, bo, (r for _, r in sets)), strict=True):
                fh = files.get(k)
                if fh is None:
                    fh = files[k] = open(tmp / f"{k}.json", "wb")  # noqa: SIM115  (closed below)
                fh.write(piece)
                counts[k] += count
            live = cdur > 0
            op.add(track[live], bts[live], bdur[live], cdur[live], pos[live])
            if hi is not None:
                op.keep(np.flatnonzero(op.ts + op.cdur >= hi))
    finally:
        for fh in files.values():
            fh.close()
    for k in range(len(keys)):
        if k not in files:
            continue
        count = int(counts[k])
        with open(tmp / f"{k}.json", "rb") as fh:
            while chunk := fh.read(COPY_BYTES):
                yield chunk, count
                count = 0
        (tmp / f"{k}.json").unlink()
