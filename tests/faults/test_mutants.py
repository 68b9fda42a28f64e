"""Mutants of real and generated traces that once ended in a traceback: each case failed before its fix.

Every case: one line and an exit code, or an analysis whose numbers are finite.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
from faultlib import cli, cli_proc, copy_run, events, manifest, one_line, snapshot, trace_doc, write_trace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _fixture(rel: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress((FIXTURES / rel).read_bytes()))
    return doc


def test_a_graph_launch_without_a_duration_is_a_step(tmp_path: Path) -> None:
    ev = events(4)
    ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 7,
               "ts": ev[-2]["ts"] + 50, "args": {"correlation": 999}})  # no dur: read as null
    src = write_trace(tmp_path / "t.json", trace_doc(ev))
    r = cli(["analyze", "-q", src, "--out", tmp_path / "run"])
    one_line(r, ok=(0,))
    steps = pq.read_table(tmp_path / "run" / "tables" / "steps.parquet").to_pandas()
    assert len(steps) >= 1


def test_kernels_without_durations_leave_the_phase_numbers_finite(tmp_path: Path) -> None:
    # Negative durations are read as null; a shape-modelled op whose kernels all lack one used to get
    # 1/0 of its FLOPs (inf in phases), and the HTML report's roofline then failed on a log scale.
    doc = _fixture("ncu/compiled_qwen2.5-0.5b_b1.json.gz")
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and isinstance(e.get("dur"), int | float):
            e["dur"] = -abs(e["dur"]) - 1
    src = write_trace(tmp_path / "neg.json", doc)
    run = tmp_path / "run"
    one_line(cli(["analyze", "-q", src, "--out", run]), ok=(0,))
    assert any("negative dur" in w for w in manifest(run)["warnings"])
    phases = pq.read_table(run / "tables" / "phases.parquet").to_pandas()
    for col in ("flops", "bytes", "achieved_tflops", "achieved_tbps"):
        vals = phases[col].dropna().astype(float)
        assert all(math.isfinite(v) for v in vals), (col, vals.tolist())
    one_line(cli(["report", "--html", tmp_path / "r.html", run]), ok=(0,))


def test_the_phase_roofline_skips_phases_with_non_finite_numbers() -> None:
    from tracekit.report.charts import phase_roofline_svg, roofline_phases

    inf = float("inf")
    phases = pd.DataFrame({"request_id": [None, None], "phase": ["prefill", "decode"], "time_ns": [10, 10],
                           "flops": [inf, 1e9], "bytes": [inf, 1e6], "achieved_tflops": [inf, 1.0],
                           "pct_peak_flops": [inf, 1.0], "achieved_tbps": [inf, 1.0], "pct_peak_bandwidth": [inf, 1.0]})
    ph = roofline_phases(phases)
    assert ph is not None and ph["phase"].tolist() == ["decode"]
    assert phase_roofline_svg(phases)
    assert roofline_phases(phases.iloc[:1]) is None


def test_metadata_nested_just_below_the_reader_limit_is_skipped(tmp_path: Path) -> None:
    # orjson reads 990 levels; run.json (written with Python's json) could not hold them.
    doc = _fixture("cpu/batch2.json.gz")
    data = json.dumps(doc).encode()
    data = data[:-1] + b', "deep": ' + b"[" * 990 + b"]" * 990 + b"}"
    src = write_trace(tmp_path / "deep.json", data)
    run = tmp_path / "run"
    one_line(cli(["analyze", "-q", src, "--out", run]), ok=(0,))
    m = manifest(run)
    assert "deep" not in m["trace_meta"] and "schemaVersion" in m["trace_meta"]
    assert any("deep" in w and "skipped" in w for w in m["warnings"])


def test_negative_timestamps_are_one_line_for_a_protobuf_export(tmp_path: Path) -> None:
    doc = _fixture("cpu/batch2.json.gz")
    doc.pop("baseTimeNanoseconds", None)
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), int | float):
            e["ts"] = -e["ts"]
    src = write_trace(tmp_path / "neg.json", doc)
    run = tmp_path / "run"
    one_line(cli(["analyze", "-q", src, "--out", run]), ok=(0,))
    r = cli(["export", "-q", run])
    one_line(r, ok=(1,))
    assert "before 0" in r.err
    assert not list(run.glob("*.pftrace*"))
    one_line(cli(["export", "-q", "--format", "json", run]), ok=(0,))


def test_step_annotations_that_reuse_an_id_are_numbered_in_time_order(tmp_path: Path) -> None:
    # Two traces of one recorder pasted together, or a recorder restarted: the same step id twice.
    doc = _fixture("ncu/compiled_qwen2.5-0.5b_b1.json.gz")
    ev = doc["traceEvents"]
    step = next(e for e in ev if str(e.get("name", "")).startswith("tracekit.step id="))
    last = max(e["ts"] + e.get("dur", 0) for e in ev if isinstance(e.get("ts"), int | float))
    ev.append({**step, "ts": last + 10, "dur": 5})
    src = write_trace(tmp_path / "dup.json", doc)
    run = tmp_path / "run"
    one_line(cli(["analyze", "-q", src, "--out", run]), ok=(0,))
    steps = pq.read_table(run / "tables" / "steps.parquet").to_pandas()
    assert steps["step_id"].is_unique
    assert any("reuse another's step id" in w for w in manifest(run)["warnings"])


def test_window_ms_out_of_any_range_is_one_line_or_clamped(tmp_path: Path, good_template: Path) -> None:
    for text in ("nan:1", "0:inf", "-inf:0"):
        r = cli(["export", "-q", "--window-ms", text, "--out", tmp_path / "w.pftrace", good_template])
        one_line(r, ok=(2,))
        assert "expected A:B" in r.err
    for i, text in enumerate(("0:1e308", "1e20:1e21", "-1e300:1e300", "-1e308:-1e307")):
        for fmt, suffix in (("proto", "pftrace"), ("json", "json.gz")):
            out = tmp_path / f"w{i}.{suffix}"
            one_line(cli(["export", "-q", "--format", fmt, "--window-ms", text, "--out", out, good_template]), ok=(0,))
            assert out.is_file()


def test_an_output_file_never_lands_on_a_file_of_a_run(tmp_path: Path, good_template: Path) -> None:
    run = copy_run(good_template, tmp_path / "run")
    before = snapshot(run)
    for target in (run / "run.json", run / "tables" / "steps.parquet", run / "tables" / "new.csv",
                   run / "tables" / ".." / "run.json", run / "trace.json.gz"):
        verbs = [["report", "--html", target, good_template],
                 ["query", "--runs", good_template, "--format", "csv", "--out", target, "select 1"],
                 ["export", "-q", "--force", "--out", target, good_template]]
        if target.suffix in (".csv", ".parquet"):
            verbs.append(["diff", "--out", target, good_template, good_template])
        for argv in verbs:
            r = cli(argv)
            one_line(r, ok=(2,))
            assert "a file of the run directory" in r.err, argv
    assert snapshot(run) == before
    one_line(cli(["report", "--html", run / "report.html", run]), ok=(0,))


def test_a_ceiling_file_with_a_field_of_the_wrong_kind_is_one_line(tmp_path: Path, good_template: Path) -> None:
    good = json.loads((FIXTURES / "gpu" / "h200_ceiling.json").read_text())
    run = copy_run(good_template, tmp_path / "run")
    before = snapshot(run)
    bad: list[Any] = [[good], "x", {k: v for k, v in good.items() if k != "gpu"}]
    for key, value in [("peak_bytes_per_s", None), ("peak_bytes_per_s", []), ("peak_bytes_per_s", 0),
                       ("peak_bytes_per_s", -1.0), ("peak_bytes_per_s", True), ("peak_flops", None),
                       ("peak_flops", [["fp16", 1e15]]), ("peak_flops", {"fp16": -1}), ("gpu", None),
                       ("aliases", 5)]:
        bad.append({**good, key: value})
    for i, doc in enumerate(bad):
        path = tmp_path / f"ceiling{i}.json"
        path.write_text(json.dumps(doc))
        r = cli(["analyze", "-q", run, "--ceiling", path])
        one_line(r, ok=(2,))
        assert "cannot read ceiling file" in r.err, (doc, r.err)
    for value in ("NaN", "Infinity"):
        path = tmp_path / "nonfinite.json"
        path.write_text(json.dumps(good).replace('"peak_bytes_per_s": 4043555248723.8716', f'"peak_bytes_per_s": {value}'))
        one_line(cli(["analyze", "-q", run, "--ceiling", path]), ok=(2,))
    assert snapshot(run) == before
    one_line(cli(["analyze", "-q", run, "--ceiling", FIXTURES / "gpu" / "h200_ceiling.json"]), ok=(0,))


def test_pids_and_tids_outside_int32_export_as_protobuf(tmp_path: Path) -> None:
    doc = _fixture("cpu/batch2.json.gz")
    for i, e in enumerate(doc["traceEvents"]):
        if e.get("cat") == "cpu_op":
            e["pid"], e["tid"] = (-(10**18), 2**40 + 3) if i % 2 else (2**33, -(2**31) - 5)
    src = write_trace(tmp_path / "pids.json", doc)
    run = tmp_path / "run"
    one_line(cli(["analyze", "-q", src, "--out", run]), ok=(0,))
    one_line(cli(["export", "-q", "--out", tmp_path / "t.pftrace", run]), ok=(0,))
    assert (tmp_path / "t.pftrace").stat().st_size > 0


def test_two_ranks_ingested_into_one_run_analyse(tmp_path: Path) -> None:
    # Each rank's recorder numbers its steps from the same id: one run of both used to fail in pandas.
    ranks = [FIXTURES / "tp_h200" / "ranks" / r / "trace.json.gz" for r in ("0", "1")]
    run = tmp_path / "run"
    one_line(cli(["ingest", "-q", *ranks, "--out", run, "--engine", "serial"]), ok=(0,))
    one_line(cli(["analyze", "-q", run]), ok=(0,))
    assert any("2 ranks' traces" in w for w in manifest(run)["warnings"])
    assert pq.read_table(run / "tables" / "steps.parquet").to_pandas()["step_id"].is_unique


def test_a_pipe_given_as_a_trace_is_one_line_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    folder = tmp_path / "ranks"
    folder.mkdir()
    os.mkfifo(folder / "rank0.json")
    for argv in (["ingest", "-q", fifo, "--out", tmp_path / "a"], ["analyze", "-q", fifo, "--out", tmp_path / "b"],
                 ["ingest", "-q", folder, "--out", tmp_path / "c"]):
        r = cli_proc(argv, cwd=tmp_path, timeout=60)  # opening a pipe for reading blocks until a writer comes
        one_line(r, ok=(2,))
    assert not any((tmp_path / n).exists() for n in "abc")


@pytest.mark.parametrize("dims", ["nested", "text", "negative", "beyond_int64", "too_many_elements"])
def test_input_dims_no_tensor_has_are_no_shape(tmp_path: Path, dims: str) -> None:
    # The embedding lookup's dims decide steps and every op's dims its FLOPs and bytes: dims that are
    # not a tensor's failed in int() or gave negative FLOPs and bytes.
    doc = _fixture("ncu/compiled_qwen2.5-0.5b_b1.json.gz")
    for e in doc["traceEvents"]:
        a = e.get("args")
        if e.get("cat") == "cpu_op" and isinstance(a, dict) and isinstance(a.get("Input Dims"), list):
            d = a["Input Dims"]
            a["Input Dims"] = {
                "nested": [[[1, 2]], [[3]]], "text": [["a", "b"], ["c"]],
                "negative": [[-x for x in s] if isinstance(s, list) and all(isinstance(x, int) for x in s) else s for s in d],
                "beyond_int64": [[2**64 + 1, 2], [2, 2**64 + 1]], "too_many_elements": [[2**31 + 1, 2**31 + 1]] * 2,
            }[dims]
    src = write_trace(tmp_path / "dims.json", doc)
    run = tmp_path / "run"
    one_line(cli(["analyze", "-q", src, "--out", run]), ok=(0,))
    kb = pq.read_table(run / "tables" / "kernel_bound.parquet").to_pandas()
    assert not (kb["flops"] < 0).any() and not (kb["bytes"] < 0).any()
    phases = pq.read_table(run / "tables" / "phases.parquet").to_pandas()
    assert (phases["pct_peak_flops"].dropna() <= 100).all()


@pytest.mark.parametrize("name", [
    "tracekit.step id={n} request=1 kind=prefill batch={n} q_len={n} kv_len={n}",
    "execute_context_1({n})_generation_1(1)",
    "step[DECODE bs={n} toks={n}]",
])
def test_step_names_with_numbers_past_any_count_are_no_steps(tmp_path: Path, name: str) -> None:
    # Parsed as Python ints, they overflowed the int64 step columns (OverflowError).
    doc = _fixture("ncu/compiled_qwen2.5-0.5b_b1.json.gz")
    for n in (10**23, 2**62):
        ev = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("tracekit.step")]
        steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("tracekit.step")]
        ev += [{**e, "name": name.format(n=n)} for e in steps]
        src = write_trace(tmp_path / f"n{n}.json", {**doc, "traceEvents": ev})
        run = tmp_path / f"run{n}"
        one_line(cli(["analyze", "-q", src, "--out", run]), ok=(0,))
        if not name.startswith("tracekit."):
            assert any("match no known format" in w for w in manifest(run)["warnings"])
        elif name.startswith("tracekit.step "):  # said, not dropped silently
            assert any("tracekit.step annotations could not be read" in w for w in manifest(run)["warnings"])
