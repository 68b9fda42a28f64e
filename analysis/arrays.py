"""A table's columns as NumPy arrays, whichever kind the table is, without importing pandas.

The passes that run on arrays read their inputs here: an Arrow table (the store's, or a pass's
output) or a pandas frame (a pass not yet on arrays, or a table built in code). Every reader returns
a fresh NumPy array of the column's rows in order; a missing value is NaN (``floats``), None
(``objects``) or False (``flags``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def rows(table: Any) -> int:
    """The number of rows (0 for None)."""
    return 0 if table is None else len(table)


def has(table: Any, column: str) -> bool:
    """Whether ``table`` has the column."""
    if table is None:
        return False
    names = table.column_names if isinstance(table, pa.Table) else list(table.columns)
    return column in names


def floats(table: Any, column: str) -> np.ndarray:
    """The column as float64, NaN where missing."""
    if isinstance(table, pa.Table):
        col = table.column(column)
        if pa.types.is_dictionary(col.type) or not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)
                                                   or pa.types.is_boolean(col.type) or pa.types.is_null(col.type)):
            return np.array([np.nan if v is None else float(v) for v in col.to_pylist()], dtype=np.float64)
        return np.asarray(pc.cast(col, pa.float64(), safe=False).to_numpy(zero_copy_only=False), dtype=np.float64)
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
        return np.asarray(pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)
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
        col = table.column(column)
        present = np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)
        return np.asarray(pc.fill_null(col, 0).cast(pa.int64()).to_numpy(zero_copy_only=False)), present
    values = table[column]
    present = np.asarray(values.notna().to_numpy(dtype=bool), dtype=bool)
    return np.asarray(values.to_numpy(dtype="int64", na_value=0), dtype=np.int64), present


def objects(table: Any, column: str) -> np.ndarray:
    """The column's values as a Python-object array, None where missing."""
    if isinstance(table, pa.Table):
        out = np.empty(len(table), dtype=object)
        out[:] = table.column(column).to_pylist()
        return out
    values = table[column].to_numpy(dtype=object)
    missing = np.array([v is None or (isinstance(v, float) and v != v) or type(v).__name__ == "NAType"
                        for v in values.tolist()], dtype=bool)
    values = values.copy()
    values[missing] = None
    return values


def flags(table: Any, column: str) -> np.ndarray:
    """The column as bool, False where missing."""
    if isinstance(table, pa.Table):
        col = pc.fill_null(pc.cast(table.column(column), pa.bool_()), False)
        return np.asarray(col.to_numpy(zero_copy_only=False), dtype=bool)
    return np.asarray(table[column].astype(bool).to_numpy(dtype=bool), dtype=bool)


def table(t: Any) -> pa.Table:
    """``t`` as an Arrow table: an Arrow table as it is, a pandas frame converted (its index dropped;
    categorical columns as their values: Arrow has no dictionary of an all-null categorical's type)."""
    if isinstance(t, pa.Table):
        return t
    plain = {c: object for c in t.columns if str(t[c].dtype) == "category"}
    return pa.Table.from_pandas(t.astype(plain) if plain else t, preserve_index=False)
