"""Temporary files of a chunked ingest: scanner columns, and tables written in runs then read in any order.

``RawChunks`` keeps each chunk's scanner columns (tracekit.ingest.native's column dict) in one file
and gives them back as read-only views of one buffer. ``Runs`` keeps one table as a sequence of
Arrow IPC files (one per chunk, in file order); ``gather`` hands out the rows of a permutation of
the concatenated runs in batches, each run memory-mapped only while its rows are taken, so memory is
one batch and one run's pages, never the table. Both live in a folder the caller owns and deletes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tracekit.ingest import arrays as A

GATHER_ROWS = 1 << 18  # rows per batch handed out by Runs.gather


class RawChunks:
    """Scanner column dicts (ints and buffers) stored one file per chunk under ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.count = 0

    def save(self, cols: dict[str, Any]) -> None:
        index: dict[str, Any] = {}
        with open(self.folder / f"raw{self.count}.bin", "wb") as fh:
            pos = 0
            for k, v in cols.items():
                if isinstance(v, int):
                    index[k] = v
                    continue
                fh.write(v)
                index[k] = [pos, len(v)]
                pos += len(v)
        (self.folder / f"raw{self.count}.json").write_text(json.dumps(index))
        self.count += 1

    def load(self, i: int) -> dict[str, Any]:
        index = json.loads((self.folder / f"raw{i}.json").read_text())
        data = memoryview((self.folder / f"raw{i}.bin").read_bytes())
        return {k: v if isinstance(v, int) else data[v[0]:v[0] + v[1]] for k, v in index.items()}

    def drop(self, i: int) -> None:
        for ext in ("bin", "json"):
            (self.folder / f"raw{i}.{ext}").unlink()


class Runs:
    """One table as runs (Arrow IPC files, in order); row ``k`` is row ``k`` of their concatenation."""

    def __init__(self, folder: Path, name: str, schema: pa.Schema) -> None:
        self.folder, self.name, self.schema = folder, name, schema
        self.starts = [0]  # the first row of each run, then the total

    @property
    def rows(self) -> int:
        return self.starts[-1]

    def _path(self, i: int) -> Path:
        return self.folder / f"{self.name}.{i}.arrow"

    def append(self, table: pa.Table) -> None:
        """Add a run (``table`` cast to the first schema); an empty table adds nothing."""
        if table.num_rows == 0:
            return
        with pa.OSFile(str(self._path(len(self.starts) - 1)), "wb") as sink, \
                pa.ipc.new_file(sink, self.schema) as writer:
            writer.write_table(table.cast(self.schema))
        self.starts.append(self.starts[-1] + table.num_rows)

    def gather(self, order: np.ndarray | None, batch: int = GATHER_ROWS) -> Iterator[pa.Table]:
        """The rows ``order`` (a permutation of range(rows); None: in order), ``batch`` at a time."""
        n = self.rows
        starts = np.asarray(self.starts, dtype=np.int64)
        for lo in range(0, n, batch):
            rows = np.arange(lo, min(lo + batch, n), dtype=np.int64) if order is None else order[lo:lo + batch]
            run = np.searchsorted(starts, rows, side="right") - 1
            by_run = np.argsort(run, kind="stable")
            pieces = []
            for r in np.unique(run).tolist():
                local = rows[by_run][run[by_run] == r] - starts[r]
                with pa.memory_map(str(self._path(r))) as src:
                    part = pa.ipc.open_file(src).read_all()
                    pieces.append(part.take(A.from_numpy(local)))  # a copy: the map may go
                    del part
            out = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
            del pieces
            if not (by_run[1:] > by_run[:-1]).all():  # back from run order to the order asked for
                back = np.empty(len(by_run), dtype=np.int64)
                back[by_run] = np.arange(len(by_run), dtype=np.int64)
                out = out.take(A.from_numpy(back))
            yield out


__all__ = ["GATHER_ROWS", "RawChunks", "Runs"]
