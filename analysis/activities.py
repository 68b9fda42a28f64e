"""GPU activities as arrays, split by category and device: busy, compute, memcpy and comm time.

``Activities.of(table)`` reads a GPU activity table (Arrow or pandas: device, ts_ns, dur_ns, and
category or kind and name) once; ``split(rows)`` gives the union lengths of any group of its rows.
Each category is a union per device, summed over devices; ``busy`` is the union of all of them (so
compute + memcpy + comm can exceed busy where they overlap).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit.analysis import arrays
from tracekit.analysis.intervals import clip, length, union


def category(kind: Any, name: Any) -> str:
    """compute | memcpy | memset | comm of one activity. NCCL kernels are communication whatever
    their kind: they occupy the SMs but their time is the collective's, not the model's arithmetic."""
    if name is not None and "nccl" in str(name).lower():
        return "comm"
    k = str(kind).lower() if kind is not None else None
    return k if k in ("memcpy", "memset") else "compute"


def categories(table: Any) -> np.ndarray:
    """``category`` of every row (object array), each distinct (kind, name) once."""
    n = arrays.rows(table)
    if not n:
        return np.empty(0, dtype=object)
    seen: dict[tuple[Any, Any], str] = {}
    out = np.empty(n, dtype=object)
    for i, key in enumerate(zip(arrays.objects(table, "kind").tolist(), arrays.objects(table, "name").tolist(),
                                strict=True)):
        cat = seen.get(key)
        if cat is None:
            cat = seen[key] = category(*key)
        out[i] = cat
    return out


def device_codes(table: Any) -> np.ndarray:
    """A code per row for its device: equal devices one code, a missing device a code of its own."""
    d = arrays.floats(table, "device")
    return np.unique(np.where(np.isnan(d), np.inf, d), return_inverse=True)[1].reshape(-1).astype(np.int64)


class Activities:
    """The split's columns as arrays, so that many groups of one table are split by index."""

    def __init__(self, dev: np.ndarray, ts: np.ndarray, end: np.ndarray, cat: np.ndarray) -> None:
        self.dev, self.ts, self.end, self.cat = dev, ts, end, cat

    @staticmethod
    def of(gpu: Any) -> Activities:
        """The activities of a table with device, ts_ns, dur_ns and category (or kind and name)."""
        cat = arrays.objects(gpu, "category") if arrays.has(gpu, "category") else categories(gpu)
        ts = arrays.ints(gpu, "ts_ns")
        end = ts + arrays.ints(gpu, "dur_ns")
        code = np.full(len(ts), -1, dtype=np.int64)  # 0 compute, 1 memcpy or memset, 2 comm
        code[cat == "compute"] = 0
        code[(cat == "memcpy") | (cat == "memset")] = 1
        code[cat == "comm"] = 2
        return Activities(device_codes(gpu), ts, end, code)

    def split(self, idx: np.ndarray, windows: np.ndarray | None = None) -> dict[str, int]:
        """busy / compute / memcpy (memcpy+memset) / comm ns of the rows ``idx``, summed over devices;
        with ``windows`` (disjoint intervals) everything is cut to them first."""
        out = {"busy": 0, "compute": 0, "memcpy": 0, "comm": 0}
        if not len(idx):
            return out
        dev, ts, end, code = self.dev[idx], self.ts[idx], self.end[idx], self.cat[idx]

        def part_length(mask: np.ndarray) -> int:
            u = union(ts[mask], end[mask])
            if windows is None:
                return length(u)
            if windows.size == 0:
                return 0
            return length(np.concatenate([clip(u, int(lo), int(hi)) for lo, hi in windows]))

        for d in np.unique(dev):
            on = dev == d
            out["busy"] += part_length(on)
            out["compute"] += part_length(on & (code == 0))
            out["memcpy"] += part_length(on & (code == 1))
            out["comm"] += part_length(on & (code == 2))
        return out
