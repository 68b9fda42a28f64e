from __future__ import annotations

import json

import pyarrow as pa
import pytest

from tracekit.errors import RunExistsError, UsageError
from tracekit.model import schema
from tracekit.store import dataset


def _steps(rank_values: list[int | None], offset: int = 0) -> pa.Table:
    n = len(rank_values)
    return schema.from_columns(
        "steps",
        {
            "rank": rank_values,
            "step_id": list(range(n)),
            "kind": ["prefill"] + ["decode"] * (n - 1),
            "gpu_start_ns": [offset + 100 * i for i in range(n)],
            "gpu_end_ns": [offset + 100 * i + 50 for i in range(n)],
        },
    )


@pytest.fixture
def root(tmp_path):
    # GIVEN two runs: a 2-rank TP run (ranks in one table) and a single-GPU run (rank null)
    r = dataset.init_dataset(tmp_path / "ds")
    parts = dataset.write_run_tables(r, "tp-run", {"steps": _steps([0, 0, 1, 1, 1])})
    parts += dataset.write_run_tables(
        r, "0042", {"steps": _steps([None, None]), "gpu_activity": schema.empty("gpu_activity")}
    )
    dataset.record_parts(r, parts)
    return r


def test_layout_is_hive_partitioned_by_run_and_rank(root) -> None:
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*.parquet"))
    assert files == [
        "gpu_activity/run_id=0042/rank=0/part-0.parquet",
        "steps/run_id=0042/rank=0/part-0.parquet",
        "steps/run_id=tp-run/rank=0/part-0.parquet",
        "steps/run_id=tp-run/rank=1/part-0.parquet",
    ]
    import pyarrow.parquet as pq

    # partition columns live in the path only
    assert "rank" not in pq.read_schema(root / files[1]).names
    marker = (root / dataset.MARKER).read_text()
    assert '"tp-run"' in marker and dataset.is_dataset(root)


def test_pyarrow_reader_returns_partition_columns_and_prunes(root) -> None:
    t = dataset.read_dataset(root, "steps")
    assert t.num_rows == 7
    assert t.column_names[:2] == ["run_id", "rank"]
    assert t.schema.field("rank").type == pa.int32()
    assert t.schema.field("run_id").type == pa.string()
    one = dataset.read_dataset(root, "steps", run_ids=["tp-run"], ranks=[1])
    assert one.num_rows == 3 and set(one.column("rank").to_pylist()) == {1}
    assert dataset.read_dataset(root, "gpu_activity").num_rows == 0
    # a table never written is empty with its schema, not an error
    assert dataset.read_dataset(root, "phases").num_rows == 0


def test_duckdb_reads_it_directly_with_hive_partitioning(root) -> None:
    duckdb = pytest.importorskip("duckdb")
    sql = f"SELECT run_id, rank, count(*) AS n FROM {dataset.duckdb_source(root, 'steps')} GROUP BY ALL ORDER BY ALL"
    rows = duckdb.sql(sql).fetchall()
    # "0042" stays text: hive_types keeps run ids from being parsed as integers
    assert rows == [("0042", 0, 2), ("tp-run", 0, 2), ("tp-run", 1, 3)]
    plain = duckdb.sql(
        f"SELECT count(DISTINCT rank) FROM read_parquet('{root}/steps/**/*.parquet', hive_partitioning=true)"
    ).fetchall()
    assert plain == [(2,)]


def test_polars_reads_it_directly(root) -> None:
    pl = pytest.importorskip("polars")
    df = pl.scan_parquet(str(root / "steps" / "**" / "*.parquet"), hive_partitioning=True).collect()
    assert df.height == 7 and set(df["rank"].to_list()) == {0, 1}


def test_a_foreign_directory_is_refused_and_bad_roots_say_so(tmp_path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "notes.txt").write_text("mine")
    with pytest.raises(RunExistsError):
        dataset.init_dataset(tmp_path / "x")
    assert (tmp_path / "x" / "notes.txt").exists()
    with pytest.raises(UsageError):
        dataset.read_dataset(tmp_path / "x", "steps")


def test_run_ids_are_made_safe_for_paths() -> None:
    assert dataset.safe_run_id("a/b=c d") == "a-b-c-d"
    assert dataset.safe_run_id("..") == "run"


def test_tracekit_query_reads_a_dataset(root, capsys) -> None:
    from tracekit.cli import main

    # WHEN the brief's query runs over the dataset
    sql = "select kind, count(*) as n from steps group by kind order by kind"
    assert main(["query", sql, "--runs", str(root), "--format", "json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    # THEN every run and rank is counted (5 TP rows + 2 single-GPU rows)
    assert rows == [{"kind": "decode", "n": 5}, {"kind": "prefill", "n": 2}]
    sql = "select run_id, rank, count(*) as n from steps group by all order by all"
    assert main(["query", sql, "--runs", str(root), "--format", "json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["run_id"], r["rank"], r["n"]) for r in rows] == [("0042", 0, 2), ("tp-run", 0, 2), ("tp-run", 1, 3)]
    # a table no run wrote is an empty view with the partition columns, not an error
    assert main(["query", "select count(*) as n, max(run_id) as r, max(rank) as k, max(ttft_ns) as t from requests",
                 "--runs", str(root), "--format", "json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out) == {"n": 0, "r": None, "k": None, "t": None}


def test_the_dataset_module_does_not_import_pandas() -> None:
    # GIVEN a fresh process WHEN it imports the dataset module and the fleet use case (what `tracekit
    # analyze` imports to tell a fleet from one run) THEN pandas is not loaded: pyarrow.dataset, which
    # would load it, is imported only where a dataset table is read
    import subprocess
    import sys

    code = ("import sys, tracekit.store.dataset, tracekit.app.fleet; "
            "print('pandas' in sys.modules, 'pyarrow.dataset' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
