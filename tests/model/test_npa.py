"""tracekit.model.npa gives what pyarrow's own conversions give: values, nulls and types."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tracekit.model import npa

COLUMNS = {
    "int32 with nulls, two chunks": pa.chunked_array([pa.array([1, None, 3], pa.int32()), pa.array([None, -5], pa.int32())]),
    "int64 sliced": pa.chunked_array([pa.array([10, 20, None, 40, 50], pa.int64()).slice(1, 3)]),
    "uint8": pa.chunked_array([pa.array([0, 255, None], pa.uint8())]),
    "float64 with nulls": pa.chunked_array([pa.array([1.5, None, -0.0])]),
    "bool with nulls": pa.chunked_array([pa.array([True, None, False, True])]),
    "timestamp": pa.chunked_array([pa.array([1, None, 3], pa.timestamp("ns"))]),
    "all null": pa.chunked_array([pa.nulls(3, pa.int64())]),
    "empty": pa.chunked_array([], pa.int64()),
}


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_values_and_valid_are_pyarrows(name: str) -> None:
    col = COLUMNS[name]
    want_valid = pc.is_valid(col).to_numpy(zero_copy_only=False) if len(col) else np.zeros(0, bool)
    assert npa.valid(col).tolist() == want_valid.tolist()
    filled = pc.fill_null(col.cast(pa.int64()) if not pa.types.is_floating(col.type) else col, 0)
    want = filled.to_numpy().astype(np.int64) if len(col) else np.zeros(0, np.int64)
    assert npa.values(col).tolist() == want.tolist()


def test_dictionary_indices_with_nulls() -> None:
    d = pa.chunked_array([pa.array(["a", None, "b", "a"]).dictionary_encode()])
    assert npa.values(d, -1).tolist() == [0, -1, 1, 0]


def test_arrays_built_from_buffers_equal_pa_array() -> None:
    a = np.array([3, -1, 7], dtype=np.int32)
    mask = np.array([False, True, False])
    assert npa.array(a, mask=mask).equals(pa.array(a, mask=mask))
    assert npa.array(np.array([True, False, True])).equals(pa.array([True, False, True]))
    assert npa.array(np.arange(5, dtype=np.int64)).equals(pa.array(np.arange(5)))
    items = [b"ab", b"", b"\x00c"]
    assert npa.binary(items).equals(pa.array(items, pa.binary()))
    assert npa.scalar(b"x").equals(pa.scalar(b"x", pa.binary())) and not npa.scalar(None).is_valid
    assert npa.text(",").equals(pa.scalar(",", pa.string()))
