"""A table's columns as NumPy arrays and back, whichever kind the table is, without importing pandas.

The passes that run on arrays read their inputs here: an Arrow table (the store's, or a pass's
output) or a pandas frame (a pass not yet on arrays, or a table built in code). Every reader returns
a NumPy array of the column's rows in order; a missing value is NaN (``floats``), None
(``objects``) or False (``flags``). ``column`` and ``texts`` build Arrow columns from NumPy arrays
and lists of str.

pyarrow imports pandas, where it is installed, the first time it converts between Arrow and NumPy or
Python values (``Array.to_numpy``, ``pa.array``, ``pa.scalar``: its pandas shim). Arrow tables are
therefore read and built here through their buffers (tracekit.model.npa), and text through
``to_pylist``, which do not.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.model import npa


def rows(table: Any) -> int:
    """The number of rows (0 for None)."""
    return 0 if table is None else len(table)


def has(table: Any, column: str) -> bool:
    """Whether ``table`` has the column."""
    if table is None:
        return False
    names = table.column_names if isinstance(table, pa.Table) else list(table.columns)
    return column in names


def _values(col: Any, typ: pa.DataType, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """(values, present mask) of an Arrow column cast to ``typ`` (int64, float64 or bool), 0 where
    missing."""
    cast = pc.cast(col, typ, safe=False)
    return npa.values(cast, fill=0, dtype=dtype), npa.valid(cast)


def floats(table: Any, column: str) -> np.ndarray:
    """The column as float64, NaN where missing."""
    if isinstance(table, pa.Table):
        col = table.column(column)
        if pa.types.is_dictionary(col.type) or not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)
                                                   or pa.types.is_boolean(col.type) or pa.types.is_null(col.type)):
            return np.array([np.nan if v is None else float(v) for v in col.to_pylist()], dtype=np.float64)
        v, present = _values(col, pa.float64(), np.float64)
        return np.where(present, v, np.nan)
    values = table[column]
    if values.dtype == object:
        return np.array([np.nan if v is None or v != v else float(v) for v in values.tolist()], dtype=np.float64)
    return np.asarray(values.to_numpy(dtype="float64", na_value=np.nan), dtype=np.float64)


def ints(table: Any, column: str) -> np.ndarray:
    """The column as int64; every value must be present."""
    if isinstance(table, pa.Table):
        col = table.column(column)
        if col.null_count:
            raise ValueError(f"column {column} has missing values")
        return _values(col, pa.int64(), np.int64)[0].copy()
    return np.asarray(table[column].to_numpy(dtype="int64"), dtype=np.int64)


def is_integer(table: Any, column: str) -> bool:
    """Whether the column holds integers (nullable ones included), not floats or text."""
    if isinstance(table, pa.Table):
        return pa.types.is_integer(table.schema.field(column).type)
    return getattr(table[column].dtype, "kind", "") in "iu"


def ints_or_null(table: Any, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values, present mask) of an integer column, exactly (0 where missing); a float column's
    values truncated to int64 (its NaN missing)."""
    if not is_integer(table, column):
        f = floats(table, column)
        present = ~np.isnan(f)
        return np.where(present, f, 0).astype(np.int64), present
    if isinstance(table, pa.Table):
        v, present = _values(table.column(column), pa.int64(), np.int64)
        return np.where(present, v, 0), present
    values = table[column]
    present = np.asarray(values.notna().to_numpy(dtype=bool), dtype=bool)
    return np.asarray(values.to_numpy(dtype="int64", na_value=0), dtype=np.int64), present


def objects(table: Any, column: str) -> np.ndarray:
    """The column's values as a Python-object array, None where missing."""
    if isinstance(table, pa.Table):
        out = np.empty(len(table), dtype=object)
        out[:] = table.column(column).to_pylist()
        return out
    values = table[column]
    missing = np.asarray(values.isna().to_numpy(dtype=bool), dtype=bool)  # None, NaN, NA (the frame's own test)
    out = np.array(values.to_numpy(dtype=object), dtype=object, copy=True)
    if missing.any():
        out[missing] = None
    return out


def flags(table: Any, column: str) -> np.ndarray:
    """The column as bool, False where missing."""
    if isinstance(table, pa.Table):
        v, present = _values(table.column(column), pa.bool_(), bool)
        return v & present
    return np.asarray(table[column].astype(bool).to_numpy(dtype=bool), dtype=bool)


def table(t: Any) -> pa.Table:
    """``t`` as an Arrow table: an Arrow table as it is, a pandas frame converted (its index dropped;
    categorical columns as their values: Arrow has no dictionary of an all-null categorical's type)."""
    if isinstance(t, pa.Table):
        return t
    plain = {c: object for c in t.columns if str(t[c].dtype) == "category"}
    return pa.Table.from_pandas(t.astype(plain) if plain else t, preserve_index=False)


def column(values: np.ndarray, typ: pa.DataType, present: np.ndarray | None = None) -> pa.Array:
    """An Arrow int64, float64 or bool column (cast to ``typ``) from NumPy ``values``, null where
    ``present`` is False (float64: also where a value is NaN, as Arrow makes of a pandas column)."""
    base = np.float64 if pa.types.is_floating(typ) else bool if pa.types.is_boolean(typ) else np.int64
    values = np.asarray(values, dtype=base)
    missing = np.zeros(len(values), dtype=bool) if present is None else ~np.asarray(present, dtype=bool)
    if base is np.float64:
        missing |= np.isnan(values)
    arr = npa.array(values, mask=missing)
    return arr if arr.type == typ else pc.cast(arr, typ)


def texts(values: list[Any]) -> pa.Array:
    """An Arrow string column from Python values: str() of each, null for None."""
    arr = npa.binary([str(v).encode() if v is not None else b"" for v in values]).cast(pa.string())
    present = np.array([v is not None for v in values], dtype=bool)
    return arr if present.all() else pc.if_else(npa.array(present), arr, pa.nulls(len(values), pa.string()))


def ints_column(values: list[Any]) -> pa.Array:
    """An Arrow int64 column from Python ints (None: null)."""
    present = np.array([v is not None for v in values], dtype=bool)
    return column(np.array([0 if v is None else int(v) for v in values], dtype=np.int64), pa.int64(), present)


def floats_column(values: list[Any]) -> pa.Array:
    """An Arrow float64 column from Python numbers (None or NaN: null)."""
    return column(np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64), pa.float64())


def from_columns(columns: dict[str, pa.Array]) -> pa.Table:
    """A table of the given columns, in order."""
    return pa.Table.from_arrays(list(columns.values()), names=list(columns))
