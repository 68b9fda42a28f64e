"""Rows of bytes built a column at a time: the vectorised half of the trace writers.

Each function returns one ``pyarrow.BinaryArray`` value per row; ``join`` concatenates such columns row
by row (Arrow's ``binary_join_element_wise``, in C++), and ``data`` hands the rows' bytes, in order, to
a file. A writer thus encodes a million events with a few dozen array operations instead of a
million Python objects. Null entries are absent parts: ``join`` skips them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.model import npa

BINARY = pa.binary()
NULL = npa.scalar(None)


def const(b: bytes) -> pa.Scalar:
    """A part that is the same in every row."""
    return npa.scalar(b)


def from_flat(data: np.ndarray, lens: np.ndarray) -> pa.BinaryArray:
    """Rows from their concatenated bytes and their lengths."""
    offsets = np.zeros(len(lens) + 1, dtype=np.int32)
    np.cumsum(lens, out=offsets[1:])
    return pa.Array.from_buffers(BINARY, len(lens), [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))])


def varints(values: np.ndarray, mask: np.ndarray | None = None) -> pa.BinaryArray:
    """Protobuf varints (an int64 below 0 as its 10-byte two's complement); null where ``mask`` is False."""
    v = np.asarray(values)
    u = v.astype(np.int64).view(np.uint64) if v.dtype.kind == "i" else v.astype(np.uint64)
    n = len(u)
    if mask is not None:
        u = np.where(mask, u, np.uint64(0))
    nbytes = np.ones(n, dtype=np.int64)
    for k in range(1, 10):
        more = u >= np.uint64(1) << np.uint64(7 * k)
        if not more.any():
            break
        nbytes += more
    width = int(nbytes.max()) if n else 1
    mat = np.empty((n, width), dtype=np.uint8)
    for k in range(width):
        b = ((u >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        if k + 1 < width:
            b |= (nbytes > k + 1).astype(np.uint8) << 7
        mat[:, k] = b
    keep = np.arange(width)[None, :] < nbytes[:, None]
    arr = from_flat(mat[keep], nbytes)
    if mask is not None and not mask.all():
        arr = pc.if_else(npa.array(mask), arr, NULL)
    return arr


def varint(value: int) -> bytes:
    """One protobuf varint (an int below 0 as its 10-byte two's complement)."""
    v = value & 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def decimals(values: np.ndarray) -> pa.BinaryArray:
    """Integers as decimal text (str(int))."""
    return pc.cast(pc.cast(npa.array(np.asarray(values, dtype=np.int64)), pa.string()), BINARY)


def micros(ns: np.ndarray) -> pa.BinaryArray:
    """Exact microseconds from int64 ns as JSON numbers: ``-``? whole ``.`` three digits (ns never lost)."""
    ns = np.asarray(ns, dtype=np.int64)
    neg = ns < 0
    mag = np.abs(ns)
    whole = pc.cast(pc.cast(npa.array(mag // 1000), pa.string()), BINARY)
    frac = pc.cast(pc.utf8_lpad(pc.cast(npa.array(mag % 1000), pa.string()), 3, "0"), BINARY)
    parts: list[Any] = [whole, const(b"."), frac]
    if neg.any():
        parts.insert(0, pc.if_else(npa.array(neg), const(b"-"), NULL))
    return join(parts)


def lookup(table: Sequence[bytes], codes: np.ndarray) -> pa.BinaryArray:
    """``table[code]`` per row; null where the code is -1."""
    codes = np.asarray(codes)
    values = npa.binary(list(table))
    if len(values) == 0:
        return pa.nulls(len(codes), BINARY)
    idx = npa.array(codes.astype(np.int32), mask=codes < 0)
    return pc.take(values, idx)


def join(parts: Sequence[Any]) -> pa.BinaryArray:
    """Row-wise concatenation of parts (arrays of one length, or scalars); null parts are left out."""
    arrays = [p for p in parts if isinstance(p, pa.Array | pa.ChunkedArray)]
    if not arrays:
        raise ValueError("join needs at least one array part")
    out = pc.binary_join_element_wise(*parts, const(b""), null_handling="skip")
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def mask(arr: pa.BinaryArray, present: np.ndarray) -> pa.BinaryArray:
    """``arr`` with null where ``present`` is False."""
    return pc.if_else(npa.array(present), arr, NULL)


def lengths(arr: pa.BinaryArray) -> np.ndarray:
    """Byte length of each row (0 for null)."""
    return npa.values(pc.binary_length(arr))


def data(arr: pa.BinaryArray) -> memoryview:
    """The bytes of every row, in order (nulls contribute nothing)."""
    if len(arr) == 0:
        return memoryview(b"")
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1, offset=arr.offset * 4)
    buf = arr.buffers()[2]
    if buf is None:
        return memoryview(b"")
    return memoryview(buf)[int(offsets[0]):int(offsets[-1])]
