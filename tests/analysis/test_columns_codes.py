"""The column helpers the passes' speed rests on give what the per-row pandas code gave: ids, codes,
texts; idle wait per window over bisected intervals equals the mask over all of them; kernel
grid/block text from the Arrow list columns equals str() of each array."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from tracekit.analysis.columns import combine_codes, factorize, object_ids, text_codes
from tracekit.analysis.frames import as_df, plain_frame
from tracekit.analysis.idle import UNKNOWN, wait_ns
from tracekit.analysis.intervals import union


def _names(n: int) -> np.ndarray:
    pool = np.array([f"void kernel_{i}<{'x' * i}>" for i in range(40)] + [None, float("nan")], dtype=object)
    return pool[np.random.default_rng(1).integers(0, len(pool), n)]


def test_object_ids_are_the_ids_of_the_elements() -> None:
    a = _names(5000)
    for view in (a, a[::3], a[10:20], a[::-1], a[:0]):
        assert np.array_equal(object_ids(view), np.fromiter(map(id, view), dtype=np.int64, count=len(view)))


def test_factorize_codes_name_the_values() -> None:
    a = _names(5000)
    codes, uniq = factorize(a)
    missing = pd.isna(a)
    assert (codes[missing] == -1).all()
    assert list(uniq[codes[~missing]]) == list(a[~missing])
    assert len(set(map(str, uniq))) == len(uniq)  # one code per object, and the pool's strings are distinct


@pytest.mark.parametrize("dtype", [object, "string[pyarrow]"])
def test_text_codes_are_astype_str(dtype: object) -> None:
    values = pd.Series([*_names(3000), 7, 7.5], dtype=object)
    if dtype is not object:
        values = values.iloc[:-2].astype(dtype)
    codes, texts = text_codes(values)
    want = values.astype(str).tolist()
    got = [texts[c] for c in codes]
    assert [None if isinstance(x, float) and x != x else x for x in got] == [
        None if isinstance(x, float) and x != x else x for x in want]


def test_combine_codes_one_code_per_tuple() -> None:
    rng = np.random.default_rng(2)
    a, b, c = (rng.integers(-1, 4, 2000) for _ in range(3))
    key = combine_codes(a, b, c)
    seen: dict[tuple[int, int, int], int] = {}
    for t, k in zip(zip(a.tolist(), b.tolist(), c.tolist(), strict=True), key.tolist(), strict=True):
        assert seen.setdefault(t, k) == k
    assert len(set(seen.values())) == len(seen)


def _wait_reference(windows, starts, ends, issued, syncs, latency=5_000) -> int:
    """wait_ns as a mask over every busy and sync interval, per window (the definition)."""
    busy = union(starts, ends)
    ss = np.asarray(starts, dtype=np.int64)
    order = np.argsort(ss, kind="stable")
    ss, iss = ss[order], np.asarray(issued, dtype=np.int64)[order]
    total = 0
    for lo, hi in windows:
        b = busy[(busy[:, 1] > lo) & (busy[:, 0] < hi)]
        ga = np.concatenate([[lo], np.clip(b[:, 1], lo, hi)])
        gb = np.concatenate([np.clip(b[:, 0], lo, hi), [hi]])
        keep = gb > ga
        for a, e in zip(ga[keep].tolist(), gb[keep].tolist(), strict=True):
            at = iss[ss == e]
            split = e if not len(at) or (at == UNKNOWN).any() else min(max(int(at.max()) + latency, a), e)
            total += e - split
            for s0, s1 in syncs.tolist():
                total += max(0, min(split, s1) - max(a, s0))
    return total


def test_wait_over_bisected_intervals_is_the_mask_over_all() -> None:
    rng = np.random.default_rng(3)
    starts = np.sort(rng.integers(0, 1_000_000, 600))
    ends = starts + rng.integers(1, 20_000, 600)
    issued = starts - rng.integers(0, 30_000, 600)
    issued[rng.random(600) < 0.05] = UNKNOWN
    syncs = union(*(lambda s: (s, s + rng.integers(1, 5_000, 80)))(rng.integers(0, 1_000_000, 80)))
    edges = np.sort(rng.integers(0, 1_050_000, 60))
    windows = union(edges[::2], edges[1::2])
    assert len(windows) > 10 and len(syncs) > 10
    assert wait_ns(windows, starts, ends, issued, syncs) == _wait_reference(windows, starts, ends, issued, syncs)


def _texts(col: pd.Series) -> list[str | None]:
    return [None if not isinstance(x, str) and pd.isna(x) else x for x in col]


def _grid_table() -> pa.Table:
    rows = [[22, 1, 1], [1, 128, 1], None, [-3, 1000, 7], [1, 128, 1], [2, 2, 2]] * 30
    return pa.table({"ts_ns": pa.array(range(len(rows)), pa.int64()), "grid": pa.array(rows, pa.list_(pa.int32())),
                     "flags": pa.array([[True, False], [False, False], None] * 60, pa.list_(pa.bool_()))})


def test_grid_text_from_the_list_columns_is_str_of_each_array() -> None:
    table = _grid_table()
    df = as_df(table)  # the passes' frame: its arrays are the ones kernel_bound carries
    fast = plain_frame(df, table)
    assert _texts(fast["grid"]) == [None if v is None else str(v) for v in df["grid"]]
    assert _texts(fast["flags"]) == [None if v is None else str(v) for v in df["flags"]]
    assert fast["grid"].iloc[3] == "[  -3 1000    7]"
    pd.testing.assert_frame_equal(fast, plain_frame(df))


def test_grid_text_of_other_objects_is_made_from_them() -> None:
    table = _grid_table()
    df = as_df(table)
    changed = df.copy()
    changed["grid"] = [None if v is None else v.copy() for v in df["grid"]]
    changed.loc[0, "grid"] = np.array([9, 9, 9], dtype=np.int32)  # not the list the Arrow column holds
    out = plain_frame(changed, table)
    assert out["grid"].iloc[0] == "[9 9 9]"
    assert _texts(out["grid"])[1:] == [None if v is None else str(v) for v in df["grid"]][1:]
