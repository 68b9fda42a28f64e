"""Arrow columns to NumPy arrays and back through their buffers, never pyarrow's pandas shim.

pyarrow imports pandas the first time ``pa.array``, ``pa.scalar`` or ``to_numpy`` runs in a process
(to ask whether the value is a pandas object): about 40 MB of resident memory and a third of a
second that the trace writers need nothing of. These functions build and read fixed-width and
binary arrays from their buffers instead; the results equal those calls' (values, nulls, types).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

BINARY = pa.binary()


def _dtype(t: pa.DataType) -> np.dtype:
    if pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_date64(t):
        return np.dtype("<i8")  # their int64 counts
    if pa.types.is_signed_integer(t):
        return np.dtype(f"<i{t.bit_width // 8}")
    if pa.types.is_unsigned_integer(t):
        return np.dtype(f"<u{t.bit_width // 8}")
    if pa.types.is_floating(t) and t.bit_width in (32, 64):
        return np.dtype(f"<f{t.bit_width // 8}")
    raise TypeError(f"no fixed-width NumPy view of {t}")


def _bits(buf: pa.Buffer | None, offset: int, n: int) -> np.ndarray | None:
    if buf is None:
        return None
    packed = np.frombuffer(buf, dtype=np.uint8)
    return np.unpackbits(packed, bitorder="little", count=offset + n)[offset:].astype(bool)


def _chunks(col: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return list(col.chunks) if isinstance(col, pa.ChunkedArray) else [col]


def valid(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Where the column is not null (bool per row)."""
    parts = []
    for c in _chunks(col):
        if c.null_count == 0:
            parts.append(np.ones(len(c), dtype=bool))
        elif c.null_count == len(c) or c.type == pa.null():
            parts.append(np.zeros(len(c), dtype=bool))
        else:
            parts.append(_bits(c.buffers()[0], c.offset, len(c)))  # type: ignore[arg-type]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def values(col: pa.Array | pa.ChunkedArray, fill: int | float = 0, dtype: type | np.dtype = np.int64) -> np.ndarray:
    """A fixed-width numeric column (or a dictionary column's indices) as ``dtype``, ``fill`` where null."""
    parts = []
    for c in _chunks(col):
        if pa.types.is_dictionary(c.type):
            c = c.indices
        n = len(c)
        if n == 0:
            continue
        if c.null_count == n or c.type == pa.null():
            parts.append(np.full(n, fill, dtype=dtype))
            continue
        if pa.types.is_boolean(c.type):
            v = _bits(c.buffers()[1], c.offset, n).astype(dtype)  # type: ignore[union-attr]
        else:
            dt = _dtype(c.type)
            v = np.frombuffer(c.buffers()[1], dtype=dt, count=n, offset=c.offset * dt.itemsize).astype(dtype)
        if c.null_count:
            v[~_bits(c.buffers()[0], c.offset, n)] = fill  # type: ignore[operator]
        parts.append(v)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def array(a: np.ndarray, mask: np.ndarray | None = None) -> pa.Array:
    """``pa.array(a, mask=mask)`` of a 1-d bool or fixed-width numeric NumPy array (null where ``mask``)."""
    a = np.ascontiguousarray(a)
    validity = None
    if mask is not None and mask.any():
        validity = pa.py_buffer(np.packbits(~np.asarray(mask, dtype=bool), bitorder="little"))
    if a.dtype == np.bool_:
        return pa.Array.from_buffers(pa.bool_(), len(a), [validity, pa.py_buffer(np.packbits(a, bitorder="little"))])
    t = pa.from_numpy_dtype(a.dtype)
    return pa.Array.from_buffers(t, len(a), [validity, pa.py_buffer(a)])


def binary(items: Sequence[bytes]) -> pa.BinaryArray:
    """``pa.array(items, pa.binary())`` of a list of bytes."""
    lens = np.fromiter((len(b) for b in items), dtype=np.int64, count=len(items))
    offsets = np.zeros(len(items) + 1, dtype=np.int32)
    np.cumsum(lens, out=offsets[1:])
    return pa.Array.from_buffers(BINARY, len(items), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(items))])


def scalar(b: bytes | None) -> pa.Scalar:
    """``pa.scalar(b, pa.binary())``."""
    return pa.nulls(1, BINARY)[0] if b is None else binary([b])[0]


def text(s: str) -> pa.Scalar:
    """``pa.scalar(s, pa.string())``."""
    return binary([s.encode()]).cast(pa.string())[0]
