"""Ingest: tables, linkage, counts, metadata, several ranks, cache, bad input, HTA parity."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from helpers import corpus_traces

from tracekit.cli import main
from tracekit.errors import TraceFormatError
from tracekit.ingest import TABLES_OUT, ingest, read_trace_tables
from tracekit.store.rundir import RunDir


def _trace() -> dict[str, Any]:
    """A small CUDA trace: two nested ops, a kernel launch, a CUDA graph launch, a memcpy."""
    X = "X"
    ev = [
        {"ph": X, "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 7, "ts": "~1712195495519689.047", "dur": 100.5, "args": {"External id": 10, "Input Dims": [[2, 3], [4, 3]], "Input type": ["float", "float"]}},
        {"ph": X, "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 7, "ts": "~1712195495519690.001", "dur": 50, "args": {"External id": 11}},
        {"ph": X, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 7, "ts": 1712195495519695.5, "dur": 5, "args": {"correlation": 100, "External id": 11}},
        {"ph": X, "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": "~1712195495519710.250", "dur": 20.125, "args": {"correlation": 100, "External id": 11, "device": 0, "stream": 7, "grid": [1, 2, 3], "block": [128, 1, 1]}},
        # graph launch without External id: linked by time nesting inside aten::linear's span on tid 7
        {"ph": X, "cat": "cpu_op", "name": "graph_replay", "pid": 1, "tid": 8, "ts": 1712195495519800, "dur": 30},
        {"ph": X, "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 8, "ts": 1712195495519810, "dur": 3, "args": {"correlation": 200}},
        {"ph": X, "cat": "kernel", "name": "k1", "pid": 0, "tid": 9, "ts": 1712195495519820, "dur": 2, "args": {"correlation": 200, "device": 0, "stream": 9}},
        {"ph": X, "cat": "kernel", "name": "k2", "pid": 0, "tid": 9, "ts": 1712195495519823, "dur": 2, "args": {"correlation": 200, "device": 0, "stream": 9}},
        {"ph": X, "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 9, "ts": 1712195495519830, "dur": 1, "args": {"correlation": 201, "device": 0, "stream": 9, "bytes": 4096}},
        {"ph": X, "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 7, "ts": 1712195495519600, "dur": 500},
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 7, "ts": 1712195495519691, "args": {"Device Type": 1, "Device Id": 0, "Addr": 123, "Bytes": 512, "Total Allocated": 512, "Total Reserved": 2048}},
        {"ph": "C", "name": "util", "pid": 0, "ts": 1712195495519700, "args": {"sm": 50.0, "mem": 20}},
        {"ph": "s", "id": 100, "pid": 1, "tid": 7, "ts": 1712195495519695.5, "cat": "ac2g", "name": "ac2g"},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "X", "cat": "mystery", "name": "m", "pid": "Spans", "tid": "x", "ts": 1712195495519600, "dur": 1, "args": {"k": [1, {"a": 2}]}},
        {"ph": "X", "cat": "cpu_op", "name": "no_ts", "pid": 1, "tid": 7, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 1, "tid": 7, "ts": 1712195495519999, "dur": -4},
    ]
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "distributedInfo": {"rank": 2}, "traceEvents": ev, "displayTimeUnit": "ms"}


def _write(path: Path, doc: Any, gz: bool = True) -> Path:
    # "~123.456" stands for the bare number: Python floats cannot hold Kineto's ns digits.
    data = re.sub(rb'"~(-?[0-9.]+)"', rb"\1", json.dumps(doc, indent=2).encode())
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_tables_linkage_and_exact_ns(tmp_path: Path) -> None:
    t = read_trace_tables(_write(tmp_path / "t.json.gz", _trace()))
    cpu = t["cpu_ops"].to_pandas().set_index("name")
    gpu = t["gpu_activity"].to_pandas().set_index("name")
    # exact ns from float-µs text
    assert cpu.loc["aten::linear", "ts_ns"] == 1712195495519689047
    assert cpu.loc["aten::linear", "dur_ns"] == 100500
    assert gpu.loc["gemm", "dur_ns"] == 20125
    # parent by nesting; kernel -> innermost op by External id
    assert cpu.loc["aten::addmm", "parent_id"] == cpu.loc["aten::linear", "op_id"]
    assert gpu.loc["gemm", "op_id"] == cpu.loc["aten::addmm", "op_id"]
    assert gpu.loc["gemm", "launch_name"] == "cudaLaunchKernel"
    assert list(gpu.loc["gemm", "grid"]) == [1, 2, 3]
    # graph launch: both kernels share the correlation, linked by time nesting
    assert gpu.loc["k1", "launch_name"] == gpu.loc["k2", "launch_name"] == "cudaGraphLaunch"
    assert gpu.loc["k1", "op_id"] == gpu.loc["k2", "op_id"] == cpu.loc["graph_replay", "op_id"]
    assert gpu.loc["Memcpy HtoD (Pageable -> Device)", "kind"] == "memcpy"
    assert gpu.loc["Memcpy HtoD (Pageable -> Device)", "memcpy_kind"] == "HtoD"
    assert gpu.loc["Memcpy HtoD (Pageable -> Device)", "bytes"] == 4096
    assert json.loads(cpu.loc["aten::linear", "input_dims"]) == [[2, 3], [4, 3]]
    assert cpu.loc["neg"].isna()["dur_ns"]
    assert t["memory"].num_rows == 1 and t["memory"]["total_reserved_bytes"][0].as_py() == 2048
    counters = t["counters"].to_pandas()
    assert sorted(counters["metric"]) == ["util.mem", "util.sm"]
    other = t["other_events"].to_pandas().set_index("name")
    assert other.loc["m", "pid"] == "Spans" and json.loads(other.loc["m", "args"])["args"] == {"k": [1, {"a": 2}]}
    assert json.loads(other.loc["ac2g", "args"])["id"] == 100


def test_run_dir_counts_balance_and_meta(tmp_path: Path) -> None:
    run = ingest([_write(tmp_path / "t.json.gz", _trace())], tmp_path / "run")
    m = run.read_manifest()
    c = m["ingest"]["counts"]
    assert m["status"] == "complete"
    assert c["events_read"] == len(_trace()["traceEvents"])
    assert c["events_read"] == sum(c["events_by_table"].values()) + sum(c["skipped"].values())
    assert c["skipped"] == {"no ts": 1}
    assert c["by_ph"]["X"] == 13
    assert m["trace_meta"]["deviceProperties"][0]["name"] == "NVIDIA H200"
    assert m["trace_meta"]["distributedInfo"]["rank"] == 2
    assert any("negative dur" in w for w in m["warnings"])
    for name in TABLES_OUT:
        assert run.has_table(name)
    assert set(run.read_table("gpu_activity")["rank"].to_pylist()) == {2}


def test_cache_returns_at_once_and_no_cache_rereads(tmp_path: Path) -> None:
    src = _write(tmp_path / "t.json.gz", _trace())
    run = ingest([src], tmp_path / "run")
    stamp = run.read_manifest()["completed_at"]
    again = ingest([src], tmp_path / "run")  # no --force needed: cache hit
    assert again.read_manifest()["completed_at"] == stamp
    assert again.read_manifest()["ingest"]["cache_key"] == run.read_manifest()["ingest"]["cache_key"]
    with pytest.raises(Exception, match="already exists"):
        ingest([src], tmp_path / "run", use_cache=False)
    ingest([src], tmp_path / "run", use_cache=False, force=True)
    assert RunDir(tmp_path / "run").read_manifest()["completed_at"] != stamp


def test_several_ranks_one_dataset_in_parallel(tmp_path: Path) -> None:
    d = tmp_path / "ranks"
    d.mkdir()
    for r in (0, 1):
        doc = _trace()
        doc["distributedInfo"] = {"rank": r}
        _write(d / f"rank{r}.json.gz", doc)
    run = ingest([d], tmp_path / "run", jobs=2)
    gpu = run.read_table("gpu_activity")
    assert sorted(set(gpu["rank"].to_pylist())) == [0, 1]
    cpu = run.read_table("cpu_ops")
    assert len(set(cpu["op_id"].to_pylist())) == cpu.num_rows  # op ids unique across ranks
    assert run.read_manifest()["ingest"]["counts"]["events_read"] == 2 * len(_trace()["traceEvents"])


@pytest.mark.parametrize(
    ("content", "needle"),
    [(b"{not json", "invalid JSON"), (b'{"traceEvents": []}', "empty"), (b'{"meta": 1}', "no traceEvents")],
)
def test_cli_bad_input_one_line_nonzero_and_incomplete(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, needle: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    rc = main(["ingest", str(p), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and needle in err and err.count("\n") == 0
    assert RunDir(tmp_path / "run").status == "incomplete"


def test_truncated_gzip_keeps_events_and_marks_incomplete(tmp_path: Path) -> None:
    doc = _trace()
    doc["traceEvents"] = doc["traceEvents"] * 3000
    data = gzip.compress(json.dumps(doc).encode())
    p = tmp_path / "t.json.gz"
    p.write_bytes(data[: int(len(data) * 0.7)])
    with pytest.raises(TraceFormatError, match="truncated"):
        ingest([p], tmp_path / "run")
    run = RunDir(tmp_path / "run")
    assert run.status == "incomplete"
    assert run.read_table("cpu_ops").num_rows > 0


def test_cli_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _write(tmp_path / "t.json", _trace(), gz=False)
    assert main(["ingest", str(p), "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "events" in out and "gpu_activity 4" in out


def _corpus(corpus_dir: Path) -> list[Path]:
    return corpus_traces(corpus_dir)  # every trace in the corpus, whatever folder it is in


def test_every_corpus_trace_ingests(corpus_dir: Path, tmp_path: Path) -> None:
    files = _corpus(corpus_dir)
    assert files
    for i, f in enumerate(files):
        run = ingest([f], tmp_path / f"run{i}", jobs=1)
        m = run.read_manifest()
        c = m["ingest"]["counts"]
        assert m["status"] == "complete", f
        assert c["events_read"] == sum(c["events_by_table"].values()) + sum(c["skipped"].values()), f
        # every element of the traceEvents array, as an independent JSON parser counts them
        doc = json.loads(gzip.decompress(f.read_bytes()))
        assert c["events_read"] == len(doc["traceEvents"] if isinstance(doc, dict) else doc), f
        if "mtia" in f.name:
            assert any("non-CUDA" in w for w in m["warnings"])
            assert m["trace_meta"]["baseTimeNanoseconds"] == 1767189312000000000
            # ts_ns is absolute: base + relative µs
            assert run.read_table("cpu_ops")["ts_ns"][0].as_py() > 1767189312000000000
        if "ns_resolution" in f.name:
            ts = run.read_table("cpu_ops")["ts_ns"].to_pylist()
            assert any(t % 1000 for t in ts)  # ns fractions kept


def test_kernels_per_stream_match_hta(corpus_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("hta")
    from hta.trace_analysis import TraceAnalysis

    src = corpus_dir / "hta" / "trace_filter__sampled_rank-0.json.gz"
    d = tmp_path / "hta"
    d.mkdir()
    shutil.copy(src, d / src.name)
    # HTA drops the last ProfilerStep by default; tracekit drops nothing.
    ta = TraceAnalysis(trace_dir=str(d), include_last_profiler_step=True)
    df = ta.t.get_trace(0)
    syms = ta.t.symbol_table.get_sym_table()
    k = df[df["cat"].map(lambda i: syms[i]) == "kernel"]
    hta_stats = {int(s): (int(g["dur"].count()), int(g["dur"].sum())) for s, g in k.groupby("stream")}

    gpu = read_trace_tables(src)["gpu_activity"]
    kern = gpu.filter(pc.equal(gpu["kind"].cast("string"), "kernel")).to_pandas()
    ours = {int(s): (len(g), int(g["dur_ns"].sum()) // 1000) for s, g in kern.groupby("stream")}
    assert ours == hta_stats
    assert sum(v[0] for v in ours.values()) > 500


def _mini(events: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    return {"schemaVersion": 1, **top, "traceEvents": events}


def test_culaunchkernelex_and_ac2g_flows_fill_missing_correlations(tmp_path: Path) -> None:
    # GIVEN a cuLaunchKernelEx driver call whose kernel carries its correlation, and a
    # cudaLaunchKernel whose kernel and runtime call lack it: only the ac2g flow pair links them
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100, "dur": 50, "args": {"External id": 5}},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernelEx", "pid": 1, "tid": 1, "ts": 110, "dur": 4, "args": {"correlation": 70, "External id": 5}},
        {"ph": "X", "cat": "kernel", "name": "gemm_ex", "pid": 0, "tid": 7, "ts": 130, "dur": 3, "args": {"correlation": 70, "device": 0, "stream": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 200, "dur": 50, "args": {"External id": 6}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 210, "dur": 4, "args": {"External id": 6}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 71, "pid": 1, "tid": 1, "ts": 210},
        {"ph": "X", "cat": "kernel", "name": "add_kernel", "pid": 0, "tid": 7, "ts": 230, "dur": 2, "args": {"device": 0, "stream": 7}},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 71, "pid": 0, "tid": 7, "ts": 230, "bp": "e"},
    ]
    run = ingest([_write(tmp_path / "t.json.gz", _mini(ev))], tmp_path / "run")
    gpu = run.read_table("gpu_activity").to_pandas().set_index("name")
    cpu = run.read_table("cpu_ops").to_pandas().set_index("name")
    rt = run.read_table("runtime").to_pandas().set_index("name")
    # THEN the cuLaunchKernelEx kernel is linked to its launch and its op
    assert gpu.loc["gemm_ex", "launch_name"] == "cuLaunchKernelEx"
    assert gpu.loc["gemm_ex", "op_id"] == cpu.loc["aten::mm", "op_id"]
    # AND the flow events filled both missing correlations, so the kernel finds its launch
    assert gpu.loc["add_kernel", "correlation"] == 71 == rt.loc["cudaLaunchKernel", "correlation"]
    assert gpu.loc["add_kernel", "launch_name"] == "cudaLaunchKernel"
    assert gpu.loc["add_kernel", "op_id"] == cpu.loc["aten::add", "op_id"]
    m = run.read_manifest()
    assert m["ingest"]["counts"]["events_by_table"]["other_events"] == 2  # the flows are kept too
    assert any(w.startswith("correlations filled from ac2g flow events: 2") for w in m["warnings"])


def test_base_time_after_trace_events_is_applied(tmp_path: Path) -> None:
    # MTIA-style: ts relative to baseTimeNanoseconds, written after the array
    doc = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": "~1.5", "dur": 2}],
           "baseTimeNanoseconds": 1767189312000000000, "traceName": "x"}
    for gz in (True, False):
        t = read_trace_tables(_write(tmp_path / ("t.json.gz" if gz else "t.json"), doc, gz=gz))
        assert t["cpu_ops"]["ts_ns"].to_pylist() == [1767189312000001500]
        assert t["cpu_ops"]["dur_ns"].to_pylist() == [2000]


def test_exact_ns_at_and_beyond_double_precision(tmp_path: Path) -> None:
    # 19 significant digits (beyond a double's ~16) and sub-ns digits (rounded to the ns)
    vals = ["1712195495519689.047", "4503599627370495.999", "9007199254740993.001", "12.3456789", "0.0004", "-3.25"]
    ev = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": i, "ts": f"~{v}", "dur": 1} for i, v in enumerate(vals)]
    t = read_trace_tables(_write(tmp_path / "t.json", _mini(ev), gz=False))
    got = dict(zip(t["cpu_ops"]["name"].to_pylist(), t["cpu_ops"]["ts_ns"].to_pylist(), strict=True))
    assert [got[f"op{i}"] for i in range(len(vals))] == [
        1712195495519689047, 4503599627370495999, 9007199254740993001, 12346, 0, -3250]
    assert int(float(vals[2]) * 1000) != 9007199254740993001  # a double could not have given this


def test_bare_list_in_place_and_unexpected_types_coerced(tmp_path: Path) -> None:
    ev = [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]
    p = _write(tmp_path / "bare.json", ev, gz=False)
    assert read_trace_tables(p)["cpu_ops"].num_rows == 1
    # a non-object element and a string ts: the coercing reader, counted, nothing lost
    odd = [*ev, 5, {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": "abc", "dur": 1}]
    run = ingest([_write(tmp_path / "odd.json", odd, gz=False)], tmp_path / "run")
    c = run.read_manifest()["ingest"]["counts"]
    assert c["events_read"] == 3
    assert c["skipped"] == {"not a JSON object": 1, "no ts": 1}
    assert c["events_by_table"] == {"cpu_ops": 1}
    assert c["warnings"]["events with unexpected field types (coerced)"] == 1


def test_truncated_json_closes_after_the_last_complete_event(tmp_path: Path) -> None:
    ev = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(5000)]
    data = json.dumps(_mini(ev)).encode()
    p = tmp_path / "cut.json"
    p.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(TraceFormatError, match="ends early"):
        ingest([p], tmp_path / "run")
    run = RunDir(tmp_path / "run")
    names = run.read_table("cpu_ops")["name"].to_pylist()
    assert run.status == "incomplete" and 0 < len(names) < 5000
    assert sorted(names, key=lambda s: int(s[2:])) == [f"op{i}" for i in range(len(names))]


def test_pieces_read_in_parallel_give_the_same_tables(corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tracekit.ingest.duckdb_reader as sql
    monkeypatch.setenv("TRACEKIT_INGEST_ENGINE", "duckdb")  # the DuckDB reader (the fallback) is under test

    # GIVEN a corpus trace with flows and ns fractions, and the fixture (a trailer, a string pid,
    # a nested list in args), read as one file and as pieces of ~64 KB (many splits)
    doc = _trace()
    doc["baseTimeNanoseconds"] = 5000
    # boundaries inside a string and inside a nested list: splits there make invalid pieces
    doc["traceEvents"].insert(0, {"ph": "X", "cat": "weird", "name": "a}, {b", "pid": 1, "tid": 7, "ts": 1712195495519700,
                               "args": {"l": [{"a": 1}, {"b": 2}]}})
    files = [corpus_dir / "hta" / "ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
             _write(tmp_path / "fixture.json.gz", doc)]
    for i, f in enumerate(files):
        one = read_trace_tables(f)
        monkeypatch.setattr(sql, "PIECE_BYTES", 1 << 16 if i == 0 else 16)
        (tmp_path / f"p{i}").mkdir()
        # WHEN it is really split: read as pieces (the corpus trace), or rejected by DuckDB and
        # merged back into one file (the fixture, split inside its string and nested list)
        assert len(sql.extract_pieces(f, tmp_path / f"p{i}").pieces) > 1, f
        (tmp_path / f"q{i}").mkdir()
        b, ex = sql.open_events(f, tmp_path / f"q{i}")
        b.close()
        assert (len(ex.pieces) > 1) == (i == 0), f
        many = read_trace_tables(f)
        monkeypatch.setattr(sql, "PIECE_BYTES", 32 << 20)
        # THEN every table has the same rows
        for t in TABLES_OUT:
            assert one[t].num_rows == many[t].num_rows and one[t].schema == many[t].schema, (f, t)
            assert sorted(map(repr, one[t].to_pylist())) == sorted(map(repr, many[t].to_pylist())), (f, t)
    assert "a}, {b" in many["other_events"]["name"].to_pylist()


def test_staged_tables_equal_direct_queries_and_drop_the_events_table(tmp_path: Path) -> None:
    # GIVEN the events of a trace with every table populated (counters and memory added)
    import tracekit.ingest.duckdb_reader as sql
    from tracekit.ingest import Counts
    from tracekit.ingest.duckdb_reader import count as _count

    doc = _trace()
    doc["traceEvents"] += [
        {"ph": "C", "name": "mem", "pid": 0, "tid": 0, "ts": 5, "args": {"used": 3}},
        {"ph": "i", "name": "[memory]", "pid": 0, "tid": 0, "ts": 6, "args": {"Bytes": 8, "Addr": 1}},
    ]
    f = _write(tmp_path / "t.json.gz", doc)
    (tmp_path / "w").mkdir()
    b, _ = sql.open_events(f, tmp_path / "w")
    counts = Counts()
    _count(b, counts)
    names = [n for n in TABLES_OUT if counts.events_by_table.get(n, 0)]
    assert {"counters", "memory", "gpu_activity", "cpu_ops"} <= set(names)
    direct: dict[str, Any] = {n: b.counter_rows() if n == "counters" else b.table(n) for n in names}
    # WHEN the tables are staged inside DuckDB
    b.stage(names)
    # THEN the events table is gone, and each table fetched after it is the same and its copy dropped
    left = {r[0] for r in b.rows("SELECT table_name FROM duckdb_tables()")}
    assert "ev" not in left and "flows" not in left and {f"t_{n}" for n in names} == left
    for n in names:
        if n == "counters":
            assert b.counter_rows() == direct[n]
        else:
            t = b.table(n)
            assert sorted(map(repr, t.to_pylist())) == sorted(map(repr, direct[n].to_pylist())), n
            if "ORDER BY" in sql._TABLE_SQL[n]:  # the time order survives staging
                ts = t["ts_ns"].to_pylist()
                assert ts == sorted(ts) and len(ts) > 0, n
    assert b.rows("SELECT count(*) FROM duckdb_tables()")[0][0] == 0
    b.close()


def test_large_input_path_stages_and_gives_the_same_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a trace read normally (small: no staging)
    monkeypatch.setenv("TRACEKIT_INGEST_ENGINE", "duckdb")  # the DuckDB reader (the fallback) is under test
    import tracekit.ingest.duckdb_reader as sql

    f = _write(tmp_path / "t.json.gz", _trace())
    one = read_trace_tables(f)
    staged: list[list[str]] = []
    real = sql.TableBuilder.stage

    def spy(self: Any, names: Any) -> None:
        staged.append(list(names))
        real(self, names)

    monkeypatch.setattr(sql.TableBuilder, "stage", spy)
    assert staged == [] and read_trace_tables(f) and staged == []
    # WHEN it counts as a large input
    monkeypatch.setattr(sql, "STAGE_BYTES", 0)
    two = read_trace_tables(f)
    # THEN it was staged, and every table is the same
    assert len(staged) == 1 and "gpu_activity" in staged[0]
    for t in TABLES_OUT:
        assert one[t].schema == two[t].schema, t
        assert sorted(map(repr, one[t].to_pylist())) == sorted(map(repr, two[t].to_pylist())), t
