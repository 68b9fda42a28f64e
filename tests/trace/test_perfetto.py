"""Export: tracekit's tracks as native Perfetto protobuf and as Chrome trace-event JSON."""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from helpers import KERNELS, make_run, need_module

from tracekit.cli import main
from tracekit.trace.tracks import TRACEKIT_PID

need_module("perfetto")


def _decode(path: Path) -> dict:
    """Decode a .pftrace into tracks, slices per track and counter values per track."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

    from tracekit.trace.perfetto import read_proto

    trace = read_proto(path)
    tracks: dict[int, dict] = {}
    slices: dict[int, list] = defaultdict(list)
    counters: dict[int, list] = defaultdict(list)
    open_: dict[int, list] = defaultdict(list)
    last_ts = 0
    interned: dict[tuple[str, int], str] = {}
    for p in trace.packet:
        if p.HasField("interned_data"):
            for table in ("event_names", "event_categories", "debug_annotation_names"):
                for e in getattr(p.interned_data, table):
                    assert (table, e.iid) not in interned, "iid interned twice"
                    interned[(table, e.iid)] = e.name
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            tracks[td.uuid] = {
                "name": td.thread.thread_name if td.HasField("thread") else (td.process.process_name if td.HasField("process") else td.name),
                "pid": td.thread.pid if td.HasField("thread") else td.process.pid,
                "tid": td.thread.tid if td.HasField("thread") else None,
                "counter": td.HasField("counter"),
                "unit": td.counter.unit_name,
                "rank": td.sibling_order_rank,
                "parent": td.parent_uuid,
            }
        elif p.HasField("track_event"):
            ev = p.track_event
            assert ev.track_uuid in tracks, "event on a track never described"
            assert p.timestamp >= last_ts, "packets out of time order"
            last_ts = p.timestamp
            if ev.type == TrackEvent.Type.TYPE_SLICE_BEGIN:
                args = {}
                for d in ev.debug_annotations:
                    args[d.name or interned[("debug_annotation_names", d.name_iid)]] = d.string_value if d.HasField("string_value") else (
                        d.int_value if d.HasField("int_value") else d.double_value)
                name = ev.name or interned[("event_names", ev.name_iid)]
                assert all(("event_categories", i) in interned for i in ev.category_iids)
                open_[ev.track_uuid].append((p.timestamp, name, args))
            elif ev.type == TrackEvent.Type.TYPE_SLICE_END:
                ts, name, args = open_[ev.track_uuid].pop()
                slices[ev.track_uuid].append({"ts": ts, "dur": p.timestamp - ts, "name": name, "args": args})
            elif ev.type == TrackEvent.Type.TYPE_COUNTER:
                counters[ev.track_uuid].append((p.timestamp, ev.double_counter_value))
    assert all(not v for v in open_.values()), "unterminated slices"
    by_name = {t["name"]: u for u, t in tracks.items()}
    return {"tracks": tracks, "slices": slices, "counters": counters, "by_name": by_name}


def test_proto_has_every_track_and_counter(tmp_path: Path) -> None:
    # GIVEN a run with 2 requests of 1 prefill + 4 decode steps, kernels and NVML/GPM counters
    run = make_run(tmp_path)
    steps = run.read_df("steps")
    counters = run.read_df("counters")
    out = tmp_path / "t.pftrace"
    # WHEN it is exported as native protobuf
    assert main(["export", str(run.path), "--out", str(out)]) == 0
    d = _decode(out)
    t, s, c, by = d["tracks"], d["slices"], d["counters"], d["by_name"]
    # THEN the tracekit process carries requests, steps and bound tracks, in that order
    assert t[by["requests"]]["pid"] == TRACEKIT_PID
    assert t[by["requests"]]["rank"] < t[by["steps"]]["rank"] < t[by["bound"]]["rank"]
    assert {tr["name"] for tr in t.values() if tr["tid"] is None and not tr["counter"]} >= {"tracekit", "GPU 0 counters", "GPU 0"}
    # every step is one slice named by its kind, at its GPU span
    step_slices = sorted(s[by["steps"]], key=lambda x: x["ts"])
    assert [x["name"] for x in step_slices] == list(steps["kind"])
    assert [x["ts"] for x in step_slices] == list(steps["gpu_start_ns"])
    assert [x["dur"] for x in step_slices] == list(steps["gpu_end_ns"] - steps["gpu_start_ns"])
    assert [x["args"]["step_id"] for x in step_slices] == list(steps["step_id"])
    # every step has a bound slice; without a bound column it comes from the GPU busy share
    bound = sorted(s[by["bound"]], key=lambda x: x["ts"])
    assert len(bound) == len(steps)
    assert {x["args"]["bound_source"] for x in bound} == {"gpu_busy_share"}
    assert {x["name"] for x in bound} == {"host-bound"}  # busy share 0.08-0.25 on these steps
    # requests: one slice each plus a nested ttft slice
    names = Counter(x["name"] for x in s[by["requests"]])
    assert names == {"chat-0": 1, "chat-1": 1, "ttft": 2}
    # every (device, source, metric) counter is a counter track with all its samples and its unit
    for (src, metric), grp in counters.groupby(["source", "metric"]):
        label = f"{src}.{metric} ({grp['unit'].iloc[0]})"
        uuid = by[label]
        assert t[uuid]["counter"] and t[uuid]["unit"] == grp["unit"].iloc[0]
        assert [v for _, v in c[uuid]] == list(grp.sort_values("ts_ns")["value"])
    # kernels on the stream track
    kern = s[by["stream 7"]]
    assert len(kern) == len(steps) * len(KERNELS)


def test_proto_uses_roofline_bound_column_when_present(tmp_path: Path) -> None:
    run = make_run(tmp_path, bound_column=True)
    out = tmp_path / "b.pftrace"
    assert main(["export", str(run.path), "--out", str(out)]) == 0
    d = _decode(out)
    bound = sorted(d["slices"][d["by_name"]["bound"]], key=lambda x: x["ts"])
    kinds = list(run.read_df("steps")["kind"])
    assert [x["name"] for x in bound] == ["memory-bound" if k == "decode" else "compute-bound" for k in kinds]
    assert {x["args"]["bound_source"] for x in bound} == {"roofline"}


def test_window_by_step_keeps_only_those_steps(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    out = tmp_path / "w.pftrace"
    assert main(["export", str(run.path), "--window", "2:3", "--out", str(out)]) == 0
    d = _decode(out)
    steps = d["slices"][d["by_name"]["steps"]]
    assert sorted(x["args"]["step_id"] for x in steps) == [2, 3]
    kern = d["slices"][d["by_name"]["stream 7"]]
    assert len(kern) == 2 * len(KERNELS)
    df = run.read_df("steps").set_index("step_id")
    lo, hi = df.loc[2, "cpu_start_ns"], df.loc[3, "gpu_end_ns"]
    assert all(lo <= x["ts"] and x["ts"] + x["dur"] <= hi for x in kern)
    for samples in d["counters"].values():
        assert all(lo <= ts <= hi for ts, _ in samples)


def test_window_ms_and_bad_windows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path)
    out = tmp_path / "ms.pftrace"
    # The first 26 ms: the first prefill step only.
    assert main(["export", str(run.path), "--window-ms", "0:25", "--out", str(out)]) == 0
    d = _decode(out)
    assert [x["name"] for x in d["slices"][d["by_name"]["steps"]]] == ["prefill"]
    for bad in (["--window", "7"], ["--window", "5:2"], ["--window", "90:99"], ["--window-ms", "a:b"],
                ["--window", "1:2", "--window-ms", "0:1"]):
        capsys.readouterr()
        assert main(["export", str(run.path), "--out", str(tmp_path / "x.pftrace"), *bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("tracekit: error:") and err.count("\n") == 1
    assert not (tmp_path / "x.pftrace").exists()
    # no overwrite without --force
    assert main(["export", str(run.path), "--out", str(out)]) == 2
    assert main(["export", str(run.path), "--out", str(out), "--force"]) == 0


REQUIRED = {"X": {"name", "ph", "ts", "dur", "pid", "tid"}, "C": {"name", "ph", "ts", "pid", "args"},
            "M": {"name", "ph", "pid", "args"}}


def _check_trace_event_format(doc: dict) -> list[dict]:
    """The trace-event format rules tracekit relies on (Chrome's Trace Event Format doc)."""
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    for ev in events:
        assert ev["ph"] in REQUIRED, ev
        assert REQUIRED[ev["ph"]] <= set(ev), ev
        assert isinstance(ev["pid"], int)
        if "tid" in ev:
            assert isinstance(ev["tid"], int)
        if ev["ph"] in "XC":
            assert isinstance(ev["ts"], int | float)
        if ev["ph"] == "X":
            assert isinstance(ev["dur"], int | float) and ev["dur"] >= 0
        if ev["ph"] == "C":
            assert ev["args"] and all(isinstance(v, int | float) for v in ev["args"].values())
        if ev["ph"] == "M":
            assert ev["name"] in {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}
            key = "name" if ev["name"].endswith("_name") else "sort_index"
            assert key in ev["args"]
    return events


def test_json_follows_trace_event_rules_and_nests(tmp_path: Path) -> None:
    run = make_run(tmp_path, requests=3)
    out = tmp_path / "t.json.gz"
    assert main(["export", str(run.path), "--format", "json", "--out", str(out)]) == 0
    with gzip.open(out, "rt") as fh:
        doc = json.load(fh)
    events = _check_trace_event_format(doc)
    meta = {(e["pid"], e.get("tid"), e["name"]): e["args"] for e in events if e["ph"] == "M"}
    named_threads = {(p, t) for (p, t, n) in meta if n == "thread_name"}
    named_procs = {p for (p, _t, n) in meta if n == "process_name"}
    for e in events:
        if e["ph"] == "X":
            assert (e["pid"], e["tid"]) in named_threads and e["pid"] in named_procs
    # every X slice on a thread nests (no partial overlap): what viewers require
    by_thread: dict = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            by_thread[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():
        stack: list[float] = []
        for s, e in sorted(spans, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= s:
                stack.pop()
            assert not stack or e <= stack[-1] + 1e-9
            stack.append(e)
    steps = [e for e in events if e.get("cat") == "tracekit.step"]
    assert len(steps) == len(run.read_df("steps"))
    assert {e["name"]: e["cname"] for e in steps} == {"prefill": "thread_state_running", "decode": "thread_state_iowait"}
    # ts is exact to the ns: microseconds with three decimals of the int64 ns
    first = min(run.read_df("steps")["gpu_start_ns"])
    assert min(e["ts"] for e in steps) == pytest.approx(first / 1000, abs=1e-3)
    assert sum(1 for e in events if e["ph"] == "C") == len(run.read_df("counters"))


def test_missing_tables_export_what_exists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tracekit.model.schema import from_columns
    from tracekit.store.rundir import RunDir

    run = RunDir.create(tmp_path / "bare")
    run.write_table("gpu_activity", from_columns("gpu_activity", {"ts_ns": [10, 20], "dur_ns": [5, 5], "name": ["k", "k"],
                                                                   "kind": ["kernel", None], "device": [0, 0], "stream": [None, 7]}))
    assert main(["export", str(run.path), "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert "steps: not recorded" in out and "counters: not recorded" in out
    with gzip.open(run.path / "trace.tracekit.json.gz", "rt") as fh:
        _check_trace_event_format(json.load(fh))


def test_hta_loads_the_json(tmp_path: Path) -> None:
    pytest.importorskip("hta")
    from hta.trace_analysis import TraceAnalysis

    run = make_run(tmp_path)
    d = tmp_path / "hta"
    d.mkdir()
    assert main(["export", str(run.path), "--format", "json", "--out", str(d / "rank-0.json.gz")]) == 0
    analysis = TraceAnalysis(trace_dir=str(d))
    df = analysis.t.get_trace(0)
    names = set(analysis.t.symbol_table.sym_table)
    assert {"prefill", "decode", "chat-0", KERNELS[0][0]} <= names
    kernels = df[df["stream"] == 7]
    assert len(kernels) == len(run.read_df("gpu_activity"))
    breakdown = analysis.get_temporal_breakdown(visualize=False)
    assert breakdown["compute_time(us)"].iloc[0] > 0


def test_from_trace_splices_tracks_into_the_kineto_trace(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    kineto = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],
              "traceEvents": [{"ph": "X", "cat": "kernel", "name": "orig_kernel", "pid": 0, "tid": 7,
                               "ts": 1.0, "dur": 2.0, "args": {"correlation": 1, "stream": 7, "device": 0}}]}
    with gzip.open(run.trace_path, "wt") as fh:
        json.dump(kineto, fh)
    out = tmp_path / "merged.json.gz"
    assert main(["export", str(run.path), "--format", "json", "--from-trace", "--out", str(out)]) == 0
    with gzip.open(out, "rt") as fh:
        doc = json.load(fh)
    assert doc["deviceProperties"] == kineto["deviceProperties"]  # Kineto's fields kept
    events = _check_trace_event_format({"traceEvents": [e for e in doc["traceEvents"] if e["name"] != "orig_kernel"]})
    assert [e for e in doc["traceEvents"] if e["name"] == "orig_kernel"] == kineto["traceEvents"]
    assert sum(1 for e in events if e.get("cat") == "tracekit.step") == len(run.read_df("steps"))
    assert not any(e.get("cat") == "kernel" for e in events)  # kernels come from Kineto, not rebuilt
    assert main(["export", str(run.path), "--format", "proto", "--from-trace", "--out", str(tmp_path / "x")]) == 2
