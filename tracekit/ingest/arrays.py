"""numpy <-> Arrow by buffers, without pyarrow's pandas shim.

Why: pyarrow imports pandas the first time it converts numpy or Python data (``pa.array``,
``Array.to_numpy``, ``pa.scalar``, a Python scalar passed to a compute function), which costs more
than ingesting a mid-sized trace (docs/measurements/2026-12-07-docstring-figures.md). The ingest path
builds and reads its arrays through these functions instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from tracekit.store import heap

_TYPES = {
    np.dtype(np.int64): pa.int64(),
    np.dtype(np.int32): pa.int32(),
    np.dtype(np.float64): pa.float64(),
    np.dtype(np.uint8): pa.uint8(),
}


def _bitmap(valid: np.ndarray) -> tuple[pa.Buffer | None, int]:
    if valid.all():
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), int(len(valid) - np.count_nonzero(valid))


def from_numpy(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """An Arrow array over ``values`` (int64, int32, float64, uint8 or bool); ``valid`` False -> null."""
    values = np.ascontiguousarray(values)
    bitmap, nulls = _bitmap(valid) if valid is not None else (None, 0)
    if values.dtype == np.bool_:
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
        return pa.Array.from_buffers(pa.bool_(), len(values), [bitmap, data], null_count=nulls)
    return pa.Array.from_buffers(_TYPES[values.dtype], len(values), [bitmap, pa.py_buffer(values)], null_count=nulls)


def strings(values: Sequence[str | None]) -> pa.Array:
    """A string array from a (short) Python sequence: dictionaries, not columns."""
    enc = [v.encode() if v is not None else b"" for v in values]
    offsets = np.zeros(len(enc) + 1, dtype=np.int32)
    np.cumsum([len(b) for b in enc], out=offsets[1:])
    valid = np.array([v is not None for v in values], dtype=bool)
    bitmap, nulls = _bitmap(valid)
    return pa.StringArray.from_buffers(len(enc), pa.py_buffer(offsets), pa.py_buffer(b"".join(enc)), bitmap, nulls)


def dictionary(indices: np.ndarray, values: pa.Array) -> pa.DictionaryArray:
    """A dictionary array; ``indices`` < 0 are null."""
    valid = indices >= 0
    return pa.DictionaryArray.from_arrays(from_numpy(np.where(valid, indices, 0).astype(np.int32), valid), values)


def take_consuming(columns: list[Any], schema: pa.Schema, indices: pa.Array) -> pa.Table:
    """``pa.Table.from_arrays(columns, schema).take(indices)``, built a column at a time.

    ``columns`` is consumed: each entry is replaced by None as soon as its reordered copy exists, so
    where the list holds the only reference to the source table's columns, memory peaks at the source
    plus one column instead of two whole tables. The caller drops its own reference to the source
    table (``cols = t.columns; del t``) before the call.
    """
    out = []
    for i in range(len(columns)):
        col, columns[i] = columns[i], None
        out.append(col.take(indices))
        del col
        heap.trim()  # the source column's pages, else kept by malloc and counted in this peak
    return pa.Table.from_arrays(out, schema=schema)


def _flat(arr: Any) -> pa.Array:
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def valid(arr: Any) -> np.ndarray:
    """Which entries are not null (bool numpy array)."""
    a = _flat(arr)
    n = len(a)
    buf = a.buffers()[0]
    if a.null_count == 0 or buf is None:
        return np.ones(n, dtype=bool)
    bits = np.unpackbits(np.frombuffer(buf, dtype=np.uint8), bitorder="little")
    return bits[a.offset : a.offset + n].astype(bool)


def to_numpy(arr: Any, fill: int | float = 0) -> np.ndarray:
    """The values of a fixed-width numeric array (nulls -> ``fill``) as a numpy array (a copy)."""
    a = _flat(arr)
    n = len(a)
    if pa.types.is_boolean(a.type):
        bits = np.unpackbits(np.frombuffer(a.buffers()[1], dtype=np.uint8), bitorder="little")
        out = bits[a.offset : a.offset + n].astype(bool)
    else:
        if pa.types.is_integer(a.type):
            dt = np.dtype(f"{'u' if pa.types.is_unsigned_integer(a.type) else ''}int{a.type.bit_width}")
        elif pa.types.is_floating(a.type):
            dt = np.dtype(f"float{a.type.bit_width}")
        else:
            raise TypeError(f"not a numeric array: {a.type}")
        buf = a.buffers()[1]
        out = (np.frombuffer(buf, dtype=dt, count=n, offset=a.offset * dt.itemsize) if n else np.zeros(0, dt)).copy()
    if a.null_count:
        out[~valid(a)] = fill
    return out


__all__ = ["dictionary", "from_numpy", "strings", "take_consuming", "to_numpy", "valid"]
