"""Column helpers for the passes: text tests over name columns, once per distinct value.

A trace's name columns hold a few thousand distinct strings over hundreds of thousands of rows
(kernel names, op names, runtime calls). ``s.astype(str).str.contains(...)`` runs Python over every
row; these run it over the distinct values and spread the answers by their codes.

Semantics are those of pandas' ``Series.astype(str)`` followed by the test: a missing value (None,
NaN, NA) stays missing and gets ``na``; any other value is tested as ``str(value)``.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable, Collection
from typing import Any

import numpy as np
import pandas as pd


def unique(values: Any) -> np.ndarray:
    """``np.unique(values)`` (sorted distinct values) by a sort: NumPy's own hashes integers, ~20x slower."""
    a = np.asarray(values)
    if a.dtype == object or (a.dtype.kind == "f" and np.isnan(a).any()):
        return np.unique(a)
    b = np.sort(a, kind="stable")
    return b[np.r_[True, b[1:] != b[:-1]]] if len(b) else b


def object_ids(arr: np.ndarray) -> np.ndarray:
    """``id()`` of every element of a 1-D object array, as int64. On CPython an object's id is its
    address, which is what the array's buffer holds: read there (one copy in C) instead of a Python
    call per element."""
    if sys.implementation.name != "cpython" or arr.dtype != object or arr.ndim != 1 or not len(arr):
        return np.fromiter(map(id, arr), dtype=np.int64, count=len(arr))
    c = np.ascontiguousarray(arr)
    pointers = (ctypes.c_ssize_t * len(c)).from_address(c.ctypes.data)
    return np.frombuffer(memoryview(pointers), dtype=np.intp).astype(np.int64)  # a copy, made while ``c`` lives


def factorize(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """(codes, distinct values) of a column, -1 where missing, like ``pd.factorize``.

    The passes' name columns are object arrays whose equal strings are one Python object (a
    dictionary column's values, taken by index): those are told apart by identity, hashing the
    objects' ids (int64) instead of hundreds of thousands of long kernel names. Distinct objects
    with equal text get codes of their own then, which every caller here tolerates (codes name
    values; they are not counts). Arrays of mostly distinct objects go to ``pd.factorize``."""
    arr = values.to_numpy() if isinstance(values, pd.Series | pd.Index) else np.asarray(values, dtype=object)
    if arr.dtype != object or len(arr) < 64:
        return pd.factorize(arr)
    ids = object_ids(arr)
    codes, uniq = pd.factorize(ids)
    if len(uniq) > len(arr) // 4:
        return pd.factorize(arr)
    first = np.empty(len(uniq), dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)  # each code's first row
    uniques = arr[first]
    missing = pd.isna(uniques)
    if missing.any():
        keep = np.flatnonzero(~missing)
        remap = np.full(len(uniques), -1, dtype=np.int64)
        remap[keep] = np.arange(len(keep))
        codes, uniques = remap[codes], uniques[keep]
    return codes.astype(np.int64, copy=False), uniques


def text_codes(values: Any) -> tuple[np.ndarray, list[Any]]:
    """(codes, texts) with ``texts[codes[i]]`` what ``Series.astype(str)`` gives row i (missing rows
    included: NaN where it keeps them missing), each distinct value converted once. Object columns are told
    apart by identity (see ``factorize``), so equal texts may have several codes; typed columns
    (Arrow-backed strings) by their own factorize."""
    s = values if isinstance(values, pd.Series) else pd.Series(np.asarray(values, dtype=object), dtype=object)
    if s.dtype != object:
        codes, uniq = s.factorize()
        texts = pd.Series(uniq).astype(str).tolist()
        missing = np.flatnonzero(codes < 0)
        if len(missing):  # a typed column's missing values are one value (its NA; astype(str) keeps it NaN)
            texts.append(s.iloc[missing[:1]].astype(str).iloc[0])
            codes = np.where(codes < 0, len(texts) - 1, codes)
        return np.asarray(codes, dtype=np.int64), texts
    arr = s.to_numpy(dtype=object)
    if len(arr) >= 64:
        codes, uniq = pd.factorize(object_ids(arr))
        if len(uniq) <= len(arr) // 4:
            first = np.empty(len(uniq), dtype=np.int64)
            first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)
            return codes.astype(np.int64, copy=False), pd.Series(arr[first], dtype=object).astype(str).tolist()
    text = s.astype(str)
    codes, uniq = text.factorize()
    texts = pd.Series(uniq).astype(str).tolist()
    missing = np.flatnonzero(codes < 0)
    if len(missing):
        texts.append(text.iloc[int(missing[0])])
        codes = np.where(codes < 0, len(texts) - 1, codes)
    return np.asarray(codes, dtype=np.int64), texts


def combine_codes(*codes: np.ndarray) -> np.ndarray:
    """One code per distinct tuple of the given codes (row-wise), from 0, in order of first appearance."""
    key = np.zeros(len(codes[0]), dtype=np.int64)
    for c in codes:
        n = int(c.max()) + 2 if len(c) else 1  # codes from -1
        key, _ = pd.factorize(key * n + (c + 1))  # stays below rows * n: no overflow
    return key.astype(np.int64, copy=False)


def by_value(values: Any, fn: Callable[[str], Any], na: Any = None, dtype: Any = object) -> np.ndarray:
    """``fn(str(v))`` for every value (``na`` where missing), as a NumPy array in the values' order."""
    arr = values.to_numpy() if isinstance(values, pd.Series | pd.Index) else np.asarray(values, dtype=object)
    if len(arr) == 0:
        return np.empty(0, dtype=dtype)
    codes, uniques = factorize(arr)
    table = np.empty(len(uniques) + 1, dtype=dtype)
    for i, u in enumerate(uniques):
        table[i] = fn(str(u))
    table[-1] = na  # code -1: missing
    return table[codes]


def matches(values: Any, test: Callable[[str], bool]) -> np.ndarray:
    """Boolean mask: ``test(str(v))`` per value, False where missing."""
    return by_value(values, lambda t: bool(test(t)), na=False, dtype=bool)


def is_in(values: Any, names: Collection[str]) -> np.ndarray:
    """Boolean mask: the value (as text) is one of ``names``; False where missing."""
    wanted = set(names)
    return matches(values, wanted.__contains__)


def map_values(values: Any, fn: Callable[[Any], Any]) -> np.ndarray:
    """``Series.map(fn)``'s values (fn applied to every value, missing ones included), as an object
    array, with fn called once per distinct value: once for None, once per other missing value."""
    arr = values.to_numpy(dtype=object) if isinstance(values, pd.Series | pd.Index) else np.asarray(values, dtype=object)
    out = np.empty(len(arr), dtype=object)
    if not len(arr):
        return out
    codes, uniques = pd.factorize(arr)
    table = np.empty(len(uniques), dtype=object)
    for i, u in enumerate(uniques):
        table[i] = fn(u)
    ok = codes >= 0
    out[ok] = table[codes[ok]]
    missing = np.flatnonzero(~ok)
    if len(missing):
        is_none = np.array([v is None for v in arr[missing]], dtype=bool)
        if is_none.any():
            none = fn(None)
            for i in missing[is_none].tolist():
                out[i] = none
        for i in missing[~is_none].tolist():  # NaN, NA: each as it is
            out[i] = fn(arr[i])
    return out
