"""tracekit.store.windows.TimeSlices: a held table's time windows, each found through one index."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa

from tracekit.store.windows import TimeSlices


def _table(rng: np.random.Generator, n: int, sort: bool) -> pa.Table:
    ts = rng.integers(0, 1_000, n)
    if sort:
        ts = np.sort(ts)
    dur = rng.integers(-5, 60, n)
    nulls = rng.random(n) < 0.05
    return pa.table({"ts_ns": pa.array(ts, mask=nulls, type=pa.int64()),
                     "dur_ns": pa.array(dur, mask=rng.random(n) < 0.05, type=pa.int64()),
                     "row": np.arange(n)})


def _expected(t: pa.Table, lo: int | None, hi: int | None, span: np.ndarray) -> list[int]:
    """The rule by brute force over every row: start in [lo, hi), or a span row overlapping it."""
    ts = np.nan_to_num(t.column("ts_ns").to_numpy(zero_copy_only=False).astype(float)).astype(np.int64)
    dur = np.nan_to_num(t.column("dur_ns").to_numpy(zero_copy_only=False).astype(float)).astype(np.int64)
    a = -(2**63) if lo is None else lo
    b = 2**63 - 1 if hi is None else hi
    keep = ((ts >= a) & (ts < b)) | (span & (ts < b) & (ts + np.maximum(dur, 0) > a))
    return np.flatnonzero(keep).tolist()


def test_windows_match_the_rule_in_table_order() -> None:
    # GIVEN sorted and unsorted tables with null times and span rows, WHEN they are cut into windows,
    # THEN each window holds the rule's rows, in table order
    rng = np.random.default_rng(7)
    for sort in (True, False):
        t = _table(rng, 2_000, sort)
        span = rng.random(t.num_rows) < 0.01
        sl = TimeSlices(t, span)
        bounds = [None, 0, 100, 101, 450, 999, None]
        for lo, hi in itertools.pairwise(bounds):
            assert sl.take(lo, hi).column("row").to_pylist() == _expected(t, lo, hi, span), (sort, lo, hi)


def test_a_window_touches_only_its_own_rows() -> None:
    # GIVEN a table cut into many windows, WHEN each is taken, THEN every row is handed to exactly one
    # window and the rows looked at over all windows are the table's rows plus the span rows per
    # window (a filter of the whole table per window would look at windows x rows)
    rng = np.random.default_rng(3)
    for sort in (True, False):
        t = _table(rng, 5_000, sort)
        span = np.zeros(t.num_rows, dtype=bool)
        span[[10, 20]] = True
        sl = TimeSlices(t, span)
        cuts = [None, *range(50, 1_000, 50), None]
        counts = [sl.take(lo, hi).num_rows for lo, hi in itertools.pairwise(cuts)]
        windows = len(cuts) - 1
        assert sl.touched == t.num_rows + 2 * windows
        assert sum(counts) >= t.num_rows  # span rows also go to every window they overlap
        plain = TimeSlices(t, np.zeros(t.num_rows, dtype=bool))
        assert sum(plain.take(lo, hi).num_rows for lo, hi in itertools.pairwise(cuts)) == t.num_rows
        assert plain.touched == t.num_rows


def test_an_empty_table_has_empty_windows() -> None:
    t = pa.table({"ts_ns": pa.array([], pa.int64()), "dur_ns": pa.array([], pa.int64())})
    assert TimeSlices(t, np.zeros(0, dtype=bool)).take(None, 5).num_rows == 0
