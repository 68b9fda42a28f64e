"""Counts of a trace read in chunks, as reading it whole gives them: the same numbers, keys in the same order.

native.count and native.tables add to Counters chunk by chunk, so a key first met in a later chunk
would come later than reading the file whole puts it (run.json keeps the order: its warnings list,
the counts' dicts). ``note_ph`` notes where the whole read would first count each ph; ``merged``
sums the chunks' counts in the whole read's key order.
"""

from __future__ import annotations

import numpy as np

from tracekit.ingest import native, reader
from tracekit.ingest.result import Counts


def note_ph(s: native.Scanned, first: dict[str, tuple[int, int]]) -> None:
    """Where native.count, reading the whole file, would first count each ph key: (route, code)."""
    phd = s.dictionary("ph").to_pylist()
    for r in range(native.N_ROUTES):
        for code in np.unique(s.arr(f"r{r}.ph", np.int32) + 1).tolist():
            key = (phd[code - 1] if code else None) or "(none)"
            first[key] = min(first.get(key, (r, code)), (r, code))


def merged(counted: Counts, built: Counts, first_ph: dict[str, tuple[int, int]], notes: list[str]) -> Counts:
    """The chunks' counts as one Counts, keys in the order reading the file whole gives them."""
    out = Counts(events_read=counted.events_read)
    for key in sorted(counted.by_ph, key=lambda k: first_ph[k]):
        out.by_ph[key] = counted.by_ph[key]
    for name in native.ROUTE_TABLE.values():  # native.count's order; ends past int64 ns subtract after it
        if name in counted.events_by_table or name in built.events_by_table:
            out.events_by_table[name] = counted.events_by_table.get(name, 0) + built.events_by_table.get(name, 0)
    for why in (*native.SKIP_REASON.values(), native.TS_RANGE, reader.END_RANGE):
        n = counted.skipped.get(why, 0) + built.skipped.get(why, 0)
        if why in counted.skipped or why in built.skipped:
            out.skipped[why] = n
    for why in (*native.COUNT_WARNINGS, *notes, *native.TABLE_WARNINGS):
        n = counted.warnings.get(why, 0) + built.warnings.get(why, 0)
        if n and why not in out.warnings:
            out.warnings[why] = n
    for c in (counted, built):  # anything else, after (none today)
        for k, v in c.warnings.items():
            out.warnings.setdefault(k, v)
        for k, v in c.skipped.items():
            out.skipped.setdefault(k, v)
    return out


__all__ = ["merged", "note_ph"]
