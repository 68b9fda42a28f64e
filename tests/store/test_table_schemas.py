"""Every stored table has its schema in tracekit.model.schema, and the store refuses anything else.

The real paths (ingest and analyze of corpus traces, one of them multi-rank; the committed H200
recordings: a generation trace and a 2-rank tensor-parallel run; a dataset of two ranks) write
into one directory; every Parquet file there must be a declared table with exactly its declared
columns and types. The CPU recording of the tiny preset, the sweep directory and Nsight Compute's
columns are checked beside the fixtures that make them (tests/record). Then the store's one write
path (tracekit.store.rundir.write_table) is shown to refuse an undeclared table, an unknown column
and a column of the wrong type, with a one-line SchemaError.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import DATA, FIXTURES, REPO, undeclared_tables

from tracekit.app.analyze import analyze
from tracekit.errors import SchemaError, TracekitError
from tracekit.ingest import ingest, ray_engine
from tracekit.model import schema
from tracekit.store import dataset
from tracekit.store.rundir import RunDir, write_table


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("written")
    hta = DATA / "hta"  # the committed corpus copies: this test never skips
    # a single-GPU corpus trace, and the two ranks of a corpus job as one multi-file run
    analyze(hta / "trace_filter__sampled_rank-0.json.gz", root / "one")
    ranks = sorted(hta.glob("trace_filter__sampled_rank-*.json.gz"))
    assert len(ranks) == 2
    analyze(ingest(ranks, root / "two").path)
    # an H200 generation trace (kernels with shapes: kernel_bound and step_bound have rows)
    analyze(FIXTURES / "gpu" / "a_batch2.json.gz", root / "h200")
    # a 2-rank tensor-parallel run (rank_steps, rank_skew and the comm_* tables)
    shutil.copytree(FIXTURES / "tp_h200", root / "tp")
    analyze(root / "tp")
    # the same two ranks as a hive-partitioned dataset
    ray_engine.ingest_dataset(ranks, root / "dataset", engine="serial")
    return root


@pytest.mark.slow
def test_every_table_written_is_declared_with_its_columns_and_types(written: Path) -> None:
    problems, seen = undeclared_tables(written)
    assert not problems, "\n".join(problems)
    # the paths really ran: raw, derived, roofline and cross-rank tables were all among them
    assert {"gpu_activity", "cpu_ops", "steps", "phases", "kernel_steps", "kernel_bound", "step_bound",
            "rank_steps", "rank_skew", "comm_steps", "comm_phases", "comm_collectives", "comm_instances"} <= seen
    assert RunDir.open(written / "h200").read_table("kernel_bound").num_rows > 0
    assert RunDir.open(written / "tp").read_table("comm_instances").num_rows > 0
    assert list((written / "dataset" / "gpu_activity").glob("run_id=*/rank=1/part-*.parquet"))


def test_every_declared_table_is_documented_with_its_columns() -> None:
    # docs/schema.md: a section per table (run tables and sweep files), one row per column, in order
    text = (REPO / "docs" / "schema.md").read_text()
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M))
    for name, sch in {**schema.SCHEMAS, **schema.SWEEP_SCHEMAS}.items():
        assert name in sections, f"docs/schema.md has no section for table {name}"
        rows = re.findall(r"^\| (\w+) \| ([^|]+) \|", sections[name], flags=re.M)
        documented = [(c, t.strip()) for c, t in rows if c != "column"]
        assert documented == [(f.name, doc_type(f.type)) for f in sch], name


def doc_type(t: pa.DataType) -> str:
    return f"{t.value_type} (dictionary)" if pa.types.is_dictionary(t) else str(t)


def _steps(**columns: object) -> pa.Table:
    return schema.from_columns("steps", {"step_id": [0, 1], "kind": ["prefill", "decode"], **columns})


def test_an_undeclared_table_is_refused(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "r")
    with pytest.raises(SchemaError) as err:
        run.write_table("kernel_costs", pa.table({"dur_ns": [1, 2]}))
    assert "kernel_costs" in err.value.message and "\n" not in err.value.message
    assert isinstance(err.value, TracekitError)
    assert not run.has_table("kernel_costs")
    # the sweep directory's files go through the same check
    with pytest.raises(SchemaError, match="table 'scores'"):
        write_table(tmp_path / "scores.parquet", pa.table({"x": [1]}))
    with pytest.raises(SchemaError, match="kernel_costs"):
        dataset.write_run_tables(tmp_path / "ds", "r", {"kernel_costs": pa.table({"dur_ns": [1]})})
    assert not list(tmp_path.rglob("*.parquet"))


def test_a_column_the_schema_lacks_is_refused(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "r")
    table = _steps().append_column("bound", pa.array(["memory", "compute"]))
    with pytest.raises(SchemaError, match=r"steps: columns \['bound'\] are not in its schema"):
        run.write_table("steps", table)
    assert not run.has_table("steps")


@pytest.mark.parametrize(
    "column, values, needle",
    [
        ("batch", pa.array(["1", "2"]), "column batch holds string, its schema says int64"),
        ("kind", pa.array([1, 2]), "column kind holds int64"),
        ("captured", pa.array([1.0, 0.0]), "column captured holds double, its schema says bool"),
        ("q_len", pa.array([1.5, 1.0]), "column q_len (double) does not fit int64"),
        ("rank", pa.array([1, 2**40]), "column rank (int64) does not fit int32"),
    ],
)
def test_a_column_of_the_wrong_type_is_refused(tmp_path: Path, column: str, values: pa.Array, needle: str) -> None:
    run = RunDir.create(tmp_path / "r")
    table = _steps()
    table = table.set_column(table.schema.get_field_index(column), column, values)
    with pytest.raises(SchemaError) as err:
        run.write_table("steps", table)
    assert needle in err.value.message and "table steps" in err.value.message
    assert not run.has_table("steps")


def test_what_fits_is_stored_in_the_declared_types(tmp_path: Path) -> None:
    # int64 ids into int32, whole floats (NaN: missing) into int64, plain text into dictionaries,
    # a column without values of any type, absent columns as nulls
    run = RunDir.create(tmp_path / "r")
    table = pa.table({"rank": pa.array([0, 1], pa.int64()), "step_id": pa.array([0.0, float("nan")]),
                      "kind": pa.array(["prefill", "decode"]), "seq_stats": pa.nulls(2, pa.int64())})
    run.write_table("recorded_steps", table)
    back = run.read_table("recorded_steps")
    assert back.schema.equals(schema.schema("recorded_steps"))
    assert back.column("step_id").to_pylist() == [0, None] and back.column("kind").to_pylist() == ["prefill", "decode"]
    assert back.column("batch").null_count == 2


UNIT_WORDS = {"_ns": "ns", "_bytes": "bytes", "_j": "J", "_ms": "ms", "_s": " s", "_tflops": "TFLOP/s", "_tbps": "TB/s"}


def test_every_documented_column_has_a_meaning_and_its_unit() -> None:
    # docs/schema.md: no column left without a meaning; a column whose name carries a unit says it
    text = (REPO / "docs" / "schema.md").read_text()
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M))
    empty, unitless = [], []
    for table, body in sections.items():
        for column, meaning in re.findall(r"^\| (\w+) \| [^|]+ \| (.*) \|\s*$", body, flags=re.M):
            if column == "column":
                continue
            if not meaning.strip():
                empty.append(f"{table}.{column}")
            unit = next((u for suffix, u in UNIT_WORDS.items() if column.endswith(suffix)), None)
            if unit and unit not in meaning:
                unitless.append(f"{table}.{column}: {meaning}")
    assert not empty, f"columns without a meaning in docs/schema.md: {empty}"
    assert not unitless, "columns whose meaning does not give their unit:\n" + "\n".join(unitless)
