"""The Arrow/pandas seam: the one place tables cross between Arrow and pandas.

``as_df(table)`` takes an Arrow table, a pandas frame or anything pandas can frame, and returns a
pandas frame with dictionary columns as plain strings (object, None where null): what the passes that
work on pandas read. ``derived(tables, tag, make)`` keeps a frame made from raw Arrow tables (the host
annotations) while they live, so that the passes that ask for it make it once. ``output_table(name, frame, rank, gpu)`` turns a pass's frame into the Arrow table
the store writes (mixed object columns as text, as NumPy prints them).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from tracekit.model import schema as _schema


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


def derived(tables: tuple[Any, ...], tag: str, make: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """``make()``, a frame made from ``tables`` alone, made once while those Arrow tables live (several
    passes ask for the same one); each call returns its own copy (copy-on-write: cheap). Made anew
    where any of ``tables`` is not an Arrow table. ``tag`` names what ``make`` makes."""
    if not all(isinstance(t, pa.Table) for t in tables):
        return make()
    key = (tag, *map(id, tables))
    hit = _DERIVED.get(key)
    if hit is None or any(ref() is not t for ref, t in zip(hit[0], tables, strict=True)):
        hit = (tuple(weakref.ref(t) for t in tables), make())
        _DERIVED[key] = hit
        for t in tables:
            weakref.finalize(t, _DERIVED.pop, key, None)
    return hit[1].copy(deep=False)


_DERIVED: dict[tuple[Any, ...], tuple[tuple[Any, ...], pd.DataFrame]] = {}


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


def output_table(name: str, df: Any, rank: int, gpu: pa.Table | None) -> pa.Table:
    """A pass's output (a pandas frame, or an Arrow table as it is) as the Arrow table the store writes,
    its ``rank`` column filled with ``rank``. ``gpu``: the raw gpu_activity kernel_bound's frame was
    made from (its grid / block text comes from the Arrow lists)."""
    if name not in ("kernel_bound", "step_bound"):
        table = _schema.from_pandas(name, df) if isinstance(df, pd.DataFrame) else _schema.conform(name, df)
        return _schema.fill_rank(table, rank)
    # kernel_bound / step_bound: mixed object columns as text; the store fits them to their schemas.
    # kernel_bound carries gpu_activity's grid and block: their text comes from its list columns.
    frame = plain_frame(df, gpu)
    if name == "kernel_bound" and "name" in frame:
        frame.insert(list(frame.columns).index("name") + 1, "short_name",
                     pd.Series(short_names(frame["name"]), index=frame.index, dtype=object))
    # One thread: the conversion is short, and a pool's threads cost more to start than they save
    # on a busy machine of few cores.
    return pa.Table.from_pandas(frame, preserve_index=False, nthreads=1)


def short_names(names: pd.Series) -> list[str | None]:
    """Each kernel's short name (tracekit.model.kernelnames), computed once per distinct name."""
    from tracekit.model.kernelnames import short_name

    values = names.tolist()
    cache = {n: short_name(n) if isinstance(n, str) else None for n in set(values) if n is not None}
    return [cache[n] if n is not None else None for n in values]


def plain_frame(df: pd.DataFrame, source: pa.Table | None = None) -> pd.DataFrame:
    """Object columns of mixed Python values as strings, so Parquet accepts them.

    ``source``: a raw table whose list columns ``df`` carries as they are (the same array objects,
    row for row, as the passes' frame of it holds): their text is made from its Arrow columns."""
    out = df.copy(deep=False)
    for c in out.columns:
        # infer_dtype (C) says "string" where every non-null value is a str, "empty" where all are null
        if out[c].dtype == object and pd.api.types.infer_dtype(out[c], skipna=True) not in ("string", "empty"):
            values = out[c].to_numpy()
            text = _source_texts(values, source, c) if source is not None else None
            # an object column, as the values were (a list would be made a pandas string column first)
            out[c] = pd.Series(text if text is not None else _as_text(values), index=out.index, dtype=object)
    return out


def _source_texts(values: Any, source: pa.Table, column: str) -> list[str | None] | None:
    """_as_text(values) where ``values`` are the very objects of ``column`` in the passes' frame of
    ``source`` (as_df), row for row: each distinct list of the Arrow column
    formatted once, as NumPy formats the array it becomes. None otherwise."""
    from tracekit.analysis.columns import object_ids

    if column not in source.column_names or not pa.types.is_list(source.schema.field(column).type):
        return None
    held = as_df(source)[column].to_numpy()
    if len(held) != len(values) or not np.array_equal(object_ids(held), object_ids(values)):
        return None
    return _list_texts(source.column(column).combine_chunks())


def _list_texts(arr: pa.ListArray) -> list[str | None] | None:
    """str() of the NumPy array each list of an integer / bool list column converts to (None for a
    null list), each distinct list once; None where the lists are not all one length > 0 without
    null values (to_pandas makes float arrays of lists with nulls)."""
    import pyarrow.compute as pc

    from tracekit.analysis.columns import combine_codes

    vt = arr.type.value_type
    if not (pa.types.is_integer(vt) or pa.types.is_boolean(vt)):
        return None
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    flat = arr.flatten()
    if flat.null_count:
        return None
    lens = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)[valid]
    out = np.full(len(arr), None, dtype=object)
    if not len(lens):
        return out.tolist()
    k = int(lens[0])
    if k == 0 or (lens != k).any():
        return None
    m = flat.to_numpy(zero_copy_only=False).reshape(-1, k)
    key = combine_codes(*(pd.factorize(m[:, j])[0] for j in range(k)))
    first = np.empty(int(key.max()) + 1, dtype=np.int64)
    first[key[::-1]] = np.arange(len(key) - 1, -1, -1)
    texts = np.array([str(m[i]) for i in first.tolist()], dtype=object)
    out[valid] = texts[key]
    result: list[str | None] = out.tolist()
    return result


def _as_text(values: Any) -> list[str | None]:
    """str() of each value (None for None / NaN). Values repeat (a kernel's grid and block are a few
    shapes over thousands of launches) and str() of a NumPy array is slow: each distinct one once."""
    import numpy as np

    fast = _array_texts(values)
    if fast is not None:
        return fast
    seen: dict[Any, str] = {}
    out: list[str | None] = []
    for v in values:
        if v is None or (isinstance(v, float) and v != v):
            out.append(None)
            continue
        # Only values whose text is fixed by the key (not floats: 0.0 == -0.0).
        if isinstance(v, np.ndarray) and v.dtype.kind in "iub":
            key: Any = (v.dtype.str, v.shape, v.tobytes())
        elif type(v) in (int, str):
            key = (type(v), v)
        else:
            out.append(str(v))
            continue
        text = seen.get(key)
        if text is None:
            text = seen[key] = str(v)
        out.append(text)
    return out


def _array_texts(values: Any) -> list[str | None] | None:
    """_as_text's result where every value is None, NaN or a 1-D integer / bool array of one dtype and
    length (a kernel's grid or block): the arrays stacked, each distinct row formatted once by NumPy
    (rows told apart by their columns' codes, a hash per column, not a sort). None where the values
    are anything else."""
    import numpy as np

    null = pd.isna(values)
    rest = values[~null]
    if not len(rest) or type(rest[0]) is not np.ndarray:
        return None
    dtype = rest[0].dtype
    if not all(type(v) is np.ndarray and v.dtype == dtype for v in rest):
        return None
    if not all(v is None or type(v) is float for v in values[null]):  # pd.NA, NaT: _as_text writes their str()
        return None
    if dtype.kind not in "iub" or rest[0].ndim != 1 or not rest[0].shape[0]:
        return None
    try:
        stacked = np.stack(list(rest))
    except ValueError:  # arrays of different lengths
        return None
    key = np.zeros(len(stacked), dtype=np.int64)
    for j in range(stacked.shape[1]):
        codes, uniq = pd.factorize(stacked[:, j])
        key, _ = pd.factorize(key * len(uniq) + codes)  # stays below rows²: no overflow
    n_rows = int(key.max()) + 1
    first = np.empty(n_rows, dtype=np.int64)
    first[key[::-1]] = np.arange(len(key) - 1, -1, -1)  # each row code's first row
    texts = np.array([str(stacked[i]) for i in first.tolist()] + [None], dtype=object)
    out = np.full(len(values), n_rows, dtype=np.int64)
    out[~null] = key
    result: list[str | None] = texts[out].tolist()
    return result
