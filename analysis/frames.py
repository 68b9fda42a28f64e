"""The Arrow-to-pandas seam: the one place a pass's pandas frame of an Arrow table is made.

``as_df(table)`` takes an Arrow table, a pandas frame or anything pandas can frame, and returns a
pandas frame with dictionary columns as plain strings (object, None where null). Passes that still work
on pandas call it; nothing else converts tables.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import pandas as pd


def as_df(table: Any) -> pd.DataFrame:
    """A pandas copy of a table with dictionary columns as plain strings (object, None where null).

    An Arrow table is converted once and the frame kept while the table lives (the passes ask for the
    same raw tables again and again); every call returns its own copy (copy-on-write: cheap)."""
    if table is None:
        return pd.DataFrame()
    if isinstance(table, pd.DataFrame):
        df = table.copy(deep=False)
        for c in df.columns:
            if isinstance(df[c].dtype, pd.CategoricalDtype):
                df[c] = df[c].astype(object).where(df[c].notna(), None)
        return df
    if not hasattr(table, "to_pandas"):
        return as_df(pd.DataFrame(table))
    hit = _FRAMES.get(id(table))
    if hit is None or hit[0]() is not table:
        hit = (weakref.ref(table), _arrow_frame(table))
        _FRAMES[id(table)] = hit
        weakref.finalize(table, _FRAMES.pop, id(table), None)
    return hit[1].copy(deep=False)


_FRAMES: dict[int, tuple[Any, pd.DataFrame]] = {}


def _arrow_frame(table: Any) -> pd.DataFrame:
    """``table.to_pandas()`` with dictionary columns as object arrays of str / None, built from each
    column's dictionary (a take on its few distinct values, not a pass over Python strings)."""
    import pyarrow as pa

    dict_cols = [i for i, f in enumerate(table.schema) if pa.types.is_dictionary(f.type)]
    if not dict_cols:
        return table.to_pandas()
    df = table.drop_columns([table.column_names[i] for i in dict_cols]).to_pandas()
    for i in dict_cols:
        name = table.column_names[i]
        col = table.column(name)
        out = np.empty(len(col), dtype=object)
        pos = 0
        for chunk in col.chunks:
            n = len(chunk)
            if n:
                values = chunk.dictionary.to_numpy(zero_copy_only=False).astype(object)
                idx = chunk.indices.fill_null(0).to_numpy(zero_copy_only=False)
                part = values[idx] if len(values) else np.full(n, None, dtype=object)
                if chunk.null_count:
                    part[chunk.is_null().to_numpy(zero_copy_only=False)] = None
                out[pos:pos + n] = part
            pos += n
        df.insert(i, name, pd.Series(out, index=df.index, dtype=object))
    return df
