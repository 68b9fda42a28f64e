"""tracekit.ingest.arrays.take_consuming: the same table as ``Table.take``, its input list consumed."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracekit.ingest import arrays as A


def _table() -> pa.Table:
    names = pa.array(["b", None, "a", "b", "c"]).dictionary_encode()
    chunked = pa.chunked_array([pa.array([1, 2], pa.int64()), pa.array([None, 4, 5], pa.int64())])
    return pa.table({
        "ts_ns": chunked, "name": names, "dims": pa.array(["[1]", "[2, 3]", None, "[]", "[4]"]),
        "grid": pa.array([[1, 2], None, [3], [], [4, 5, 6]], pa.list_(pa.int32())),
    })


def test_take_consuming_equals_take_and_consumes_its_columns() -> None:
    t = _table()
    order = np.array([4, 0, 3, 1, 2], dtype=np.int64)
    want = t.take(pa.array(order))
    cols = t.columns
    got = A.take_consuming(cols, t.schema, A.from_numpy(order))
    assert got.equals(want)
    assert got.schema.equals(t.schema)
    assert cols == [None] * t.num_columns


def test_take_consuming_with_null_indices_and_no_rows() -> None:
    t = _table()
    idx = A.from_numpy(np.array([2, 0, 1], dtype=np.int64), np.array([True, False, True]))
    assert A.take_consuming(t.columns, t.schema, idx).equals(t.take(idx))
    empty = A.from_numpy(np.zeros(0, dtype=np.int64))
    assert A.take_consuming(t.columns, t.schema, empty).equals(t.take(empty))
