"""`tracekit query`: SQL across runs, one view per table with a run_id column."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import make_run

from tracekit.cli import main


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    make_run(root, "bs1", batch=1, decode_steps=3)
    make_run(root, "bs8", batch=8, decode_steps=5, requests=3, with_counters=False)
    return root


def test_steps_by_kind_across_runs(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", "select run_id, kind, count(*) as n from steps group by all order by all",
                 "--runs", str(runs), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    got = {(r["run_id"], r["kind"]): int(r["n"]) for r in rows}
    # bs1: 2 requests x (1 prefill + 3 decode); bs8: 3 requests x (1 + 5)
    assert got == {("bs1", "prefill"): 2, ("bs1", "decode"): 6, ("bs8", "prefill"): 3, ("bs8", "decode"): 15}


def test_the_readme_query_as_a_table(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", "select kind, count(*) from steps group by kind", "--runs", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "prefill" in out and "decode" in out and "21" in out and "2 row(s)" in out


def test_missing_table_in_one_run_and_absent_everywhere(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # counters exist only in bs1; memory in no run: still a (typed, empty) view
    assert main(["query", "select distinct run_id from counters", "--runs", str(runs), "--format", "json"]) == 0
    assert [json.loads(x) for x in capsys.readouterr().out.splitlines()] == [{"run_id": "bs1"}]
    assert main(["query", "select count(*) as n, sum(bytes) as b from memory", "--runs", str(runs), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"n": 0, "b": None}


def test_parquet_output_and_join(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.parquet"
    sql = ("select s.run_id, avg(r.ttft_ns) / 1e6 as ttft_ms, count(*) as steps from steps s join requests r "
           "using (run_id, request_id) group by s.run_id order by s.run_id")
    assert main(["query", sql, "--runs", str(runs), "--format", "parquet", "--out", str(out)]) == 0
    df = pq.read_table(out).to_pandas()
    assert list(df["run_id"]) == ["bs1", "bs8"]
    assert list(df["steps"]) == [8, 18]
    assert df["ttft_ms"].tolist() == pytest.approx([26.0, 26.0])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["selec kind from steps"], "bad query"),
        (["select nope from steps"], "bad query"),
        (["select * from no_such_table"], "bad query"),
        (["select 1", "--format", "parquet"], "--out"),
    ],
)
def test_bad_sql_is_one_line(runs: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    assert main(["query", *args, "--runs", str(runs)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tracekit: error:") and needle in err and err.count("\n") == 1


def test_no_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    for d in (tmp_path / "empty", tmp_path / "missing"):
        assert main(["query", "select 1", "--runs", str(d)]) == 2
        err = capsys.readouterr().err
        assert "no runs found" in err and err.count("\n") == 1


def test_one_run_directory_is_accepted(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", "select distinct run_id from steps", "--runs", str(runs / "bs8"), "--format", "csv"]) == 0
    assert capsys.readouterr().out.split() == ["run_id", "bs8"]
