"""`tracekit analyze DIR|DATASET`: a fleet of runs, one task per run, every table into one dataset.

The fleet: a 2-rank job (rank in the file names), a one-rank run and a truncated trace. Each good trace
holds one tracekit-annotated request: a prefill step and three decode steps, one 80 µs kernel each,
10 µs into its step; the steps start at 0 and then 100 + i * gap µs (i = 1..3) and the request ends with
the last kernel. Hand-worked: TTFT = the prefill kernel's end = 90 µs; e2e = last decode step's start +
90 µs; TPOT = (e2e - TTFT) / (4 - 1).
  solo  (gap 100): decode steps at 200, 300, 400 -> e2e 490 µs, TPOT 400 / 3 = 133.333 µs
  job 0 (gap 200): 300, 500, 700 -> e2e 790 µs, TPOT 233.333 µs
  job 1 (gap 300): 400, 700, 1000 -> e2e 1090 µs, TPOT 333.333 µs
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from tracekit.app import fleet
from tracekit.cli import main
from tracekit.store import dataset, dataset_runs

TPOT_P99 = "select run_id, rank, quantile_cont(tpot_ns, 0.99) as p99 from requests group by all order by all"


def _trace(gap_us: float, rank: int | None = None) -> dict:
    ev: list[dict] = []
    starts = [0.0] + [100.0 + i * gap_us for i in range(1, 4)]
    for sid, t in enumerate(starts):
        kind, q = ("prefill", 8) if sid == 0 else ("decode", 1)
        ev.append({"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": t, "dur": 95.0,
                   "name": f"tracekit.step id={sid} request=0 kind={kind} batch=1 q_len={q} kv_len={8 + sid}"})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                   "ts": t + 2, "dur": 3.0, "args": {"correlation": sid + 1}})
        ev.append({"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "pid": 0, "tid": 7, "ts": t + 10,
                   "dur": 80.0, "args": {"device": 0, "stream": 7, "correlation": sid + 1}})
    ev.append({"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 0.0, "dur": starts[-1] + 90.0,
               "name": "tracekit.request id=0 name=r0 batch=1 input_tokens=8 output_tokens=4"})
    doc: dict = {"schemaVersion": 1, "traceEvents": ev}
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
    return doc


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fleet") / "traces"
    d.mkdir()
    (d / "job_rank-0.json").write_text(json.dumps(_trace(200.0, 0)))
    (d / "job_rank-1.json").write_text(json.dumps(_trace(300.0, 1)))
    (d / "solo.json").write_text(json.dumps(_trace(100.0)))
    (d / "broken.json").write_text('{"traceEvents": [{"ph": "X", "name": "k", "ts": 1')
    return d


@pytest.fixture(scope="module")
def local(traces: Path) -> tuple[int, Path, str]:
    """The fleet through the local path (serial: no Ray, no pool): exit code, dataset, stderr."""
    import contextlib
    import io

    out = traces.parent / "ds"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["analyze", str(traces), "--out", str(out), "--engine", "serial"])
    return code, out, err.getvalue()


def _query(sql: str, root: Path) -> list[dict]:
    from tracekit.app.query import run_query

    return list(run_query(sql, root).to_pylist())


def test_plan_groups_a_runs_ranks_and_leaves_capture_traces_out(traces: Path, tmp_path: Path) -> None:
    (traces.parent / "other").mkdir(exist_ok=True)
    jobs, given = fleet.plan_traces([traces])
    assert [(j.run_id, len(j.files), j.ranks) for j in jobs] == [
        ("broken", 1, (None,)), ("job", 2, (0, 1)), ("solo", 1, (None,))]
    assert given == {"broken": "broken", "job": "job", "solo": "solo"}


def test_a_bad_trace_fails_alone_the_others_are_kept(local: tuple[int, Path, str]) -> None:
    code, root, err = local
    # THEN exit 1, one warning line for the bad run, and its status in fleet_runs and in the marker
    assert code == 1
    assert "warning: run broken: " in err and "1 of 3 runs could not be analysed" in err
    rows = _query("select run_id, rank, status, error is null as ok from fleet_runs order by all", root)
    assert [(r["run_id"], r["rank"], r["status"], r["ok"]) for r in rows] == [
        ("broken", 0, "failed", False), ("job", 0, "complete", True), ("job", 1, "complete", True),
        ("solo", 0, "complete", True)]
    status = dataset_runs.run_statuses(root)
    assert status["broken"]["status"] == "failed" and "JSON" in status["broken"]["error"]
    assert status["solo"]["status"] == "complete" and status["solo"]["peak_rss_bytes"] > 0
    # AND the good runs' raw and analysis tables are all in the dataset, partitioned by run and rank
    assert sorted(p.name for p in (root / "steps").iterdir()) == ["run_id=job", "run_id=solo"]
    kernels = _query("select run_id, rank, count(*) n, sum(dur_ns) busy from gpu_activity group by all order by all",
                     root)
    assert [(r["run_id"], r["rank"], r["n"], r["busy"]) for r in kernels] == [
        ("job", 0, 4, 320_000), ("job", 1, 4, 320_000), ("solo", 0, 4, 320_000)]


def test_one_query_across_the_fleet_tpot_p99_per_run_and_gpu(local: tuple[int, Path, str]) -> None:
    _, root, _ = local
    got = {(r["run_id"], r["rank"]): r["p99"] for r in _query(TPOT_P99, root)}
    # hand-worked in the module doc: one request per (run, rank), so its p99 is its TPOT
    assert got == pytest.approx({("job", 0): 700_000 / 3, ("job", 1): 1_000_000 / 3, ("solo", 0): 400_000 / 3})
    steps = _query("select run_id, rank, kind, count(*) n from steps group by all order by all", root)
    assert {(r["run_id"], r["rank"], r["kind"]): r["n"] for r in steps} == {
        (run, rank, kind): n for run, rank in (("job", 0), ("job", 1), ("solo", 0))
        for kind, n in (("decode", 3), ("prefill", 1))}


def test_the_dataset_analysed_in_place_gives_the_same_tables(local: tuple[int, Path, str], tmp_path: Path) -> None:
    import shutil

    _, root, _ = local
    copy = tmp_path / "ds"
    shutil.copytree(root, copy)
    # WHEN two of the dataset's runs are analysed again in place (their raw tables read back, one task each)
    s = fleet.analyze_fleet(copy, engine="serial", run_ids=["job", "broken"])
    # THEN the bad run still fails (no tables), the 2-rank run's analysis tables are replaced, not added to
    assert [(o.run_id, o.status) for o in s.outcomes] == [("broken", "failed"), ("job", "complete")]
    assert _query(TPOT_P99, copy) == _query(TPOT_P99, root)
    assert len(list((copy / "requests" / "run_id=job").rglob("*.parquet"))) == 2  # one per rank
    assert _query("select distinct run_id, source from fleet_runs where run_id <> 'broken' order by 1", copy) == [
        {"run_id": "job", "source": "dataset"}, {"run_id": "solo", "source": str(root.parent / "traces" / "solo.json")}]
    last = dataset.read_marker(copy)["last_analyze"]
    assert (last["engine"], last["runs"], last["failed"]) == ("serial", 2, 1)


def test_fleet_options_are_refused_where_they_do_not_apply(traces: Path, tmp_path: Path) -> None:
    from tracekit.errors import UsageError

    with pytest.raises(UsageError, match="--out DATASET"):
        fleet.analyze_fleet(traces, engine="serial")
    with pytest.raises(UsageError, match="--address"):
        fleet.analyze_fleet(traces, tmp_path / "d", engine="process", address="ray://x:10001")
    assert main(["analyze", str(traces / "solo.json"), "--jobs", "2"]) == 2


@pytest.mark.slow
def test_the_fleet_on_ray_gives_the_local_paths_tables(traces: Path, local: tuple[int, Path, str], tmp_path: Path,
                                                       ray_local: object) -> None:
    # WHEN the same fleet runs as Ray tasks (the session's local runtime)
    s = fleet.analyze_fleet(traces, tmp_path / "ds_ray", engine="ray")
    # THEN the same runs fail and succeed, and the query across them gives the local path's answer
    assert [(o.run_id, o.status) for o in s.outcomes] == [("broken", "failed"), ("job", "complete"),
                                                         ("solo", "complete")]
    assert _query(TPOT_P99, tmp_path / "ds_ray") == _query(TPOT_P99, local[1])
    assert all(o.peak_rss_bytes for o in s.outcomes)
    # each run's row names the Ray node and the worker process that analysed it
    workers = _query("select distinct run_id, worker from fleet_runs order by 1", tmp_path / "ds_ray")
    assert len(workers) == 3 and all(r["worker"].startswith("ray-node-") for r in workers), workers


def test_report_of_the_dataset_is_one_row_per_run_and_rank(local: tuple[int, Path, str], capsys) -> None:
    from tracekit.report.fleet import fleet_rows

    _, root, _ = local
    rows = {(r["run_id"], r["rank"]): r for r in fleet_rows(root)}
    assert sorted(rows) == [("broken", 0), ("job", 0), ("job", 1), ("solo", 0)]
    # 4 steps and 4 kernels of 80 µs per good (run, rank): GPU busy 0.32 ms; TPOT p99 as hand-worked
    assert [(rows[k]["steps"], rows[k]["gpu_busy_ms"]) for k in (("job", 0), ("job", 1), ("solo", 0))] == [
        (4, pytest.approx(0.32))] * 3
    assert rows[("job", 1)]["tpot_p99_ms"] == pytest.approx(1.0 / 3)
    assert rows[("broken", 0)]["status"] == "failed" and rows[("broken", 0)]["steps"] is None
    assert main(["report", str(root), "--no-html"]) == 0
    out = capsys.readouterr().out
    assert "3 runs, 4 (run, rank) rows, 1 failed" in out and "failed: broken: " in out


@pytest.mark.skipif(sys.version_info < (3, 11), reason="a process pool recycles its workers from Python 3.11")
def test_a_worker_is_replaced_after_its_share_of_tasks(traces: Path, tmp_path: Path, monkeypatch) -> None:
    # GIVEN workers that may run one task each, WHEN the three runs are analysed on a pool of two
    monkeypatch.setattr(fleet, "TASKS_PER_WORKER", 1)
    s = fleet.analyze_fleet(traces, tmp_path / "ds_pool", engine="process", jobs=2)
    # THEN each run had a worker of its own (memory a task leaves behind does not pile up), same results
    assert [(o.run_id, o.status) for o in s.outcomes] == [("broken", "failed"), ("job", "complete"),
                                                         ("solo", "complete")]
    pids = [o.pid for o in s.outcomes]
    assert None not in pids and len(set(pids)) == 3
    # fleet_runs names each run's worker: this host and the process that ran it
    workers = {r["run_id"]: r["worker"] for r in _query("select distinct run_id, worker from fleet_runs",
                                                        tmp_path / "ds_pool")}
    assert workers == {o.run_id: f"{socket.gethostname()}:{o.pid}" for o in s.outcomes}
