"""Speed work changes nothing users see: every table, the Perfetto file (decoded), the Chrome JSON and the
report of the corpus traces and the committed GPU recordings are those of the committed digests
(tests/golden.py computes them; tests/golden_outputs.json holds the ones computed before the
pipeline was made fast)."""

from __future__ import annotations

from pathlib import Path

import pytest
from golden import cases, compute, load

WANT = load()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(cases()))
def test_outputs_are_the_committed_ones(name: str, tmp_path: Path) -> None:
    # GIVEN a trace (or run directory) whose outputs were digested before the speed-ups
    assert name in WANT, f"{name}: no committed digests (run python tests/golden.py --write at the branch point)"
    # WHEN it is ingested, analysed, exported (proto, JSON, windows, --from-trace) and reported
    got = compute(name, tmp_path)
    # THEN every digest is the committed one: same tables, same decoded trace files, same report
    diff = {k: (WANT[name].get(k), got.get(k)) for k in sorted(set(got) | set(WANT[name])) if got.get(k) != WANT[name].get(k)}
    assert not diff, f"{name}: outputs changed: {diff}"


def test_every_case_is_covered() -> None:
    # every committed fixture trace is a case, and each case digests tables, exports and the report
    assert set(WANT) == set(cases())
    for name, d in WANT.items():
        assert any(k.startswith("table/") for k in d) and "export/proto" in d and "report/html" in d, name
    assert len([n for n in WANT if n.startswith("hta/")]) == len(list((Path(__file__).parent / "data" / "hta").glob("*.json.gz")))


def test_a_table_digests_its_values_not_its_container(tmp_path: Path) -> None:
    # GIVEN one table written from pandas (float for a nullable int, NaN, object strings, an index) and
    # the same values written from Arrow (int64 with a null, a dictionary-encoded string)
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq
    from golden import table_digest

    df = pd.DataFrame({"ts_ns": [1.0, float("nan"), 3.0], "name": ["a", "b", "a"], "busy": [0.5, 0.25, 1.0]},
                      index=[7, 8, 9])
    df.to_parquet(tmp_path / "pandas.parquet")
    arrow = pa.table({"ts_ns": pa.array([1, None, 3], pa.int64()),
                      "name": pa.array(["a", "b", "a"]).dictionary_encode(), "busy": [0.5, 0.25, 1.0]})
    pq.write_table(arrow, tmp_path / "arrow.parquet")
    # THEN both digest alike, and a changed value changes the digest
    assert table_digest(tmp_path / "pandas.parquet") == table_digest(tmp_path / "arrow.parquet")
    pq.write_table(arrow.set_column(2, "busy", pa.array([0.5, 0.26, 1.0])), tmp_path / "changed.parquet")
    assert table_digest(tmp_path / "changed.parquet") != table_digest(tmp_path / "arrow.parquet")
