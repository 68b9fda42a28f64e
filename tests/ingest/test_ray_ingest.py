from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tracekit.errors import UsageError
from tracekit.ingest import ray_engine as ri
from tracekit.store import dataset


def _trace(rank_shift: int, kernels: int) -> dict:
    ev = []
    for i in range(kernels):
        ts = 1000.0 + 10 * i + rank_shift
        name = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL" if i % 2 else "sm90_xmma_gemm"
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 4.0,
                   "args": {"device": 0, "stream": 7, "correlation": i + 1}})  # fmt: skip
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts - 5,
                   "dur": 2.0, "args": {"correlation": i + 1}})  # fmt: skip
    return {"schemaVersion": 1, "traceEvents": ev}


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    # GIVEN a 2-rank job named by rank in the file name, a tracekit TP run layout and a second job
    d = tmp_path / "traces"
    d.mkdir()
    for r in (0, 1):
        with gzip.open(d / f"jobA_rank-{r}.json.gz", "wt") as fh:
            json.dump(_trace(r, 6 + r), fh)
        tp = d / "tprun" / "ranks" / str(r)
        tp.mkdir(parents=True)
        (tp / "trace.json.gz").write_bytes(gzip.compress(json.dumps(_trace(r, 4)).encode()))  # ranks differ
    (d / "jobB.json").write_text(json.dumps(_trace(0, 3)))
    return d


def test_plan_names_runs_and_ranks_from_paths(traces: Path) -> None:
    jobs = {(j.run_id, j.rank) for j in ri.plan([traces])}
    assert jobs == {("jobA", 0), ("jobA", 1), ("tprun", 0), ("tprun", 1), ("jobB", None)}


@pytest.mark.slow
def test_ray_engine_writes_the_same_dataset_as_serial(traces: Path, tmp_path: Path, capsys, ray_local) -> None:
    from tracekit.cli import main

    # WHEN `tracekit ingest --engine ray` runs on a real local Ray runtime (the session's: one start-up,
    # ~15 s on 2 cores, shared with the other Ray tests), and the same files are ingested serially
    assert main(["ingest", str(traces), "--engine", "ray", "--out", str(tmp_path / "ds_ray")]) == 0
    assert "5/5 traces" in capsys.readouterr().out
    assert json.loads((tmp_path / "ds_ray" / dataset.MARKER).read_text())["last_ingest"]["engine"] == "ray"
    s_ser = ri.ingest_dataset([traces], tmp_path / "ds_ser", engine="serial")
    # THEN both hold every file, partitioned by run and rank
    assert s_ser.ok and s_ser.files == 5
    assert s_ser.runs == {"jobA": [0, 1], "jobB": [0], "tprun": [0, 1]}
    a = dataset.read_dataset(tmp_path / "ds_ray", "gpu_activity").to_pandas()
    b = dataset.read_dataset(tmp_path / "ds_ser", "gpu_activity").to_pandas()
    assert len(a) == 6 + 7 + 4 + 4 + 3
    key = ["run_id", "rank", "ts_ns"]
    assert (
        a.sort_values(key)[[*key, "name"]]
        .reset_index(drop=True)
        .equals(b.sort_values(key)[[*key, "name"]].reset_index(drop=True))
    )
    per = a.groupby(["run_id", "rank"]).size().to_dict()
    assert per[("jobA", 1)] == 7 and per[("tprun", 1)] == 4
    assert len(list((tmp_path / "ds_ray" / "runtime" / "run_id=jobA" / "rank=1").glob("part-*.parquet"))) == 1
    # AND `tracekit query` over the dataset sees one view per table, run_id and rank from the partitions
    sql = "select run_id, rank, count(*) as n from gpu_activity group by all order by all"
    assert main(["query", sql, "--runs", str(tmp_path / "ds_ray"), "--format", "json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    got = {(r["run_id"], r["rank"]): r["n"] for r in rows}
    assert got == {("jobA", 0): 6, ("jobA", 1): 7, ("jobB", 0): 3, ("tprun", 0): 4, ("tprun", 1): 4}


def test_a_bad_file_is_reported_and_the_rest_kept(traces: Path, tmp_path: Path) -> None:
    (traces / "broken_rank-5.json").write_text('{"traceEvents": [')
    s = ri.ingest_dataset([traces], tmp_path / "ds", engine="process", jobs=2)
    assert not s.ok and len(s.failed) == 1 and s.failed[0][0].endswith("broken_rank-5.json")
    assert "\n" not in s.failed[0][1]
    assert dataset.read_dataset(tmp_path / "ds", "gpu_activity").num_rows == 24
    from tracekit.cli import main  # noqa: F401 -- the CLI module must import without Ray

    code = ri.ingest_command([str(traces)], str(tmp_path / "ds2"), engine="serial", address=None, jobs=None,
                             force=False)  # fmt: skip
    assert code == 1


def test_bad_options_are_usage_errors(traces: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        ri.ingest_dataset([traces], tmp_path / "d", engine="spark")
    with pytest.raises(UsageError):
        ri.ingest_dataset([traces], tmp_path / "d", engine="process", address="ray://x:10001")
    with pytest.raises(UsageError):
        ri.ingest_dataset([tmp_path / "missing.json"], tmp_path / "d", engine="serial")


def test_real_multi_rank_corpus_traces(corpus_dir: Path, tmp_path: Path) -> None:
    files = sorted((corpus_dir / "hta").glob("trace_filter__sampled_rank-*.json.gz"))
    if len(files) < 2:
        pytest.skip("corpus lacks the 2-rank traces")
    s = ri.ingest_dataset(files, tmp_path / "ds", engine="serial")
    assert s.ok and list(s.runs) == ["trace_filter__sampled"] and s.runs["trace_filter__sampled"] == [0, 1]
    k = dataset.read_dataset(tmp_path / "ds", "gpu_activity").to_pandas()
    assert k["name"].astype(str).str.contains("nccl", case=False).any()


def test_files_whose_trace_says_the_same_rank_never_overwrite_each_other(tmp_path: Path) -> None:
    # GIVEN two files named rank-0 and rank-1 whose traces both say distributedInfo.rank = 0
    d = tmp_path / "t"
    d.mkdir()
    for r in (0, 1):
        t = _trace(r, 4 + r)
        t["distributedInfo"] = {"rank": 0, "world_size": 2}
        (d / f"jobC_rank-{r}.json").write_text(json.dumps(t))
    s = ri.ingest_dataset([d], tmp_path / "ds", engine="serial")
    # THEN the trace's rank wins and both files' rows are kept
    assert s.runs == {"jobC": [0]}
    assert dataset.read_dataset(tmp_path / "ds", "gpu_activity").num_rows == 4 + 5


def test_cli_engine_options(traces: Path, tmp_path: Path, capsys) -> None:
    from tracekit.cli import main

    # --address without Ray, --run-id without a dataset: one-line usage errors, nothing written
    assert main(["ingest", str(traces), "--engine", "process", "--address", "x:1", "--out", str(tmp_path / "a")]) == 2
    assert main(["ingest", str(traces / "jobB.json"), "--run-id", "r", "--out", str(tmp_path / "b")]) == 2
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    # --engine serial --dataset writes the same partitions as Ray would
    assert main(["ingest", str(traces), "--engine", "serial", "--dataset", "--out", str(tmp_path / "c")]) == 0
    assert dataset.read_dataset(tmp_path / "c", "gpu_activity").num_rows == 6 + 7 + 4 + 4 + 3
    # the default (process pool, one run directory) keeps today's behaviour: a run, not a dataset
    assert main(["ingest", str(traces / "jobB.json"), "--engine", "serial", "--out", str(tmp_path / "d")]) == 0
    assert (tmp_path / "d" / "run.json").is_file() and not dataset.is_dataset(tmp_path / "d")
