"""CUDA-event timing of the unprofiled requests, exercised on the CPU with a fake event class."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import need_module

from tracekit.collectors import recording, timing, workload_runner
from tracekit.collectors.hooks import GenerationTracker
from tracekit.collectors.options import RecordOptions
from tracekit.report.record_summary import render

need_module("torch")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        return self.now


class FakeEvent:
    """torch.cuda.Event's timing interface on a given clock (ns), with a fixed device lag."""

    def __init__(self, clock: Any, lag_ns: int = 0) -> None:
        self._clock = clock
        self._lag = lag_ns
        self.t: int | None = None
        self.synced = False

    def record(self) -> None:
        self.t = self._clock() + self._lag

    def synchronize(self) -> None:
        assert self.t is not None, "synchronize before record"
        self.synced = True

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.t is not None and end.t is not None
        return (end.t - self.t) / 1e6  # milliseconds, as torch returns


class _Handle:
    def remove(self) -> None:
        pass


class FakeModel:
    device = None

    def register_forward_pre_hook(self, *a: Any, **k: Any) -> _Handle:
        return _Handle()

    def register_forward_hook(self, *a: Any, **k: Any) -> _Handle:
        return _Handle()


def _fake_generate(clock: FakeClock, gaps_ns: list[int], tail_ns: int) -> Any:
    """A generate that streams one token after each gap (the first gap is prefill)."""

    def gen(model: Any, *args: Any, streamer: Any, **kwargs: Any) -> str:
        streamer.put("prompt")
        for g in gaps_ns:
            clock.now += g
            streamer.put("token")
        clock.now += tail_ns
        streamer.end()
        return "done"

    return gen


def test_events_time_the_same_tokens_as_the_host() -> None:
    # GIVEN a tracker whose events run on the host's clock plus a constant device lag
    clock = FakeClock()
    made: list[FakeEvent] = []

    def factory() -> FakeEvent:
        made.append(FakeEvent(clock, lag_ns=5_000))
        return made[-1]

    tr = GenerationTracker(annotate=False, clock=clock, events=factory)
    gaps = [20_000_000, 15_000_000, 17_000_000, 16_000_000]
    # WHEN one request streams 4 tokens
    tr.generate(_fake_generate(clock, gaps, 1_000_000), FakeModel(), input_ids=None, max_new_tokens=4)
    rec = tr.requests[0]
    # THEN there is one event for the start, one per token, one for the end; token events were waited on
    assert len(made) == 6 and all(e.synced for e in made[1:])
    # AND event offsets from the start are the token times (a constant lag cancels)
    assert rec.event_token_ns == [20_000_000, 35_000_000, 52_000_000, 68_000_000]
    assert rec.event_end_ns == 69_000_000
    view = rec.event_view()
    assert view is not None
    m_ev, m_host = view.metrics(), rec.metrics()
    assert m_ev["ttft_ns"] == m_host["ttft_ns"] == 20_000_000
    assert m_ev["tpot_ns"] == m_host["tpot_ns"] == (69_000_000 - 20_000_000) / 3


def test_event_timings_report_host_minus_events() -> None:
    clock = FakeClock()
    # Events that run 10% slow against the host clock: the difference must show, with its sign.
    base = clock.now

    class Slow(FakeEvent):
        def record(self) -> None:
            self.t = base + (clock.now - base) * 11 // 10

    tr = GenerationTracker(annotate=False, clock=clock, events=lambda: Slow(clock))
    for _ in range(2):
        tr.generate(_fake_generate(clock, [10_000_000] * 5, 0), FakeModel(), max_new_tokens=5)
    ev = timing.event_timings(tr.requests)
    assert ev is not None and ev["aggregate"]["requests"] == 2
    assert "CUDA events" in ev["clock"]
    # host = events / 1.1 -> host - events = -9.09% of events (rounded)
    assert ev["host_minus_events_pct"]["tpot_pct"] == pytest.approx(-100 / 11, abs=0.01)
    assert ev["host_minus_events_pct"]["ttft_pct"] == pytest.approx(-100 / 11, abs=0.01)


def test_no_events_no_section() -> None:
    clock = FakeClock()
    tr = GenerationTracker(annotate=False, clock=clock)
    tr.generate(_fake_generate(clock, [1_000_000] * 3, 0), FakeModel(), max_new_tokens=3)
    assert tr.requests[0].event_view() is None
    assert timing.event_timings(tr.requests) is None


def test_a_failed_request_takes_no_event_times() -> None:
    clock = FakeClock()
    tr = GenerationTracker(annotate=False, clock=clock, events=lambda: FakeEvent(clock))

    def boom(model: Any, *a: Any, streamer: Any, **k: Any) -> None:
        streamer.put("prompt")
        clock.now += 1000
        streamer.put("token")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        tr.generate(boom, FakeModel(), max_new_tokens=4)
    assert tr.requests[0].event_token_ns is None


@pytest.mark.slow
def test_record_stores_event_timings_of_the_unprofiled_pass(tmp_path: Path, monkeypatch, capsys) -> None:
    import time

    need_module("transformers")
    from tracekit.cli import main
    from tracekit.store.rundir import RunDir

    # GIVEN a CPU "device" clock: events stamped with perf_counter_ns
    def factory(model: Any) -> Any:
        return lambda: FakeEvent(time.perf_counter_ns)

    monkeypatch.setattr(workload_runner, "_event_factory", factory)
    rc = main(
        ["record", "--warmup", "0", "--requests", "2", "--output-tokens", "4", "--out", str(tmp_path / "r")]
    )
    assert rc == 0
    m = RunDir.open(tmp_path / "r").read_manifest()
    unprof = m["timings"]["unprofiled"]
    ev = unprof["cuda_events"]
    assert ev["aggregate"]["requests"] == 2 and len(ev["requests"]) == 2
    for e, h in zip(ev["requests"], unprof["requests"], strict=True):
        assert e["output_tokens"] == h["output_tokens"] == 4
        # same requests, stamps taken back to back: the two clocks agree to well under a millisecond
        assert abs(e["ttft_ns"] - h["ttft_ns"]) < 1_000_000
        assert abs(e["e2e_ns"] - h["e2e_ns"]) < 1_000_000
    # the profiled pass has no events: they belong to the unprofiled measurement only
    assert "cuda_events" not in m["timings"]["profiled"]
    out = capsys.readouterr().out
    assert "CUDA events" in out and "same unprofiled requests" in out and "host timers, no profiler" in out
    # and the summary renders from run.json alone
    assert "CUDA events" in render(m, tmp_path / "r")


def test_sampler_maps_the_torch_device_through_cuda_visible_devices(tmp_path: Path, monkeypatch) -> None:
    # GIVEN torch's cuda:1 is NVML's GPU 5 (CUDA_VISIBLE_DEVICES=2,5)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    sampler, off = recording.make_sampler(RecordOptions(out=tmp_path, device_index=1))
    # THEN the recorder samples NVML index 5, not 1
    assert off is None and sampler is not None
    assert sampler.device_index == 5 and sampler.torch_device == 1


def test_summary_names_the_clock_of_every_number() -> None:
    # GIVEN a run with all three: host timers without the profiler, CUDA events, profiled host timers
    m = {
        "status": "complete",
        "timings": {
            "unprofiled": {
                "aggregate": {
                    "ttft_ns": 18e6,
                    "tpot_ns": 16e6,
                    "prefill_tok_s": 1000.0,
                    "decode_tok_s": 60.0,
                },
                "cuda_events": {
                    "aggregate": {"ttft_ns": 18.1e6, "tpot_ns": 16e6},
                    "host_minus_events_pct": {"ttft_pct": -0.2, "tpot_pct": 0.0},
                },
            },
            "profiled": {"aggregate": {"ttft_ns": 32e6, "tpot_ns": 38e6}},
            "profiler_overhead": {"ttft_pct": 77.8, "tpot_pct": 137.5, "e2e_pct": 120.0},
        },
        "nvml": {"available": False, "reason": "off"},
    }
    lines = {ln.split()[0]: ln for ln in render(m, "r").splitlines()[1:] if ln.strip()}
    # THEN each latency line gives the three numbers, each named by its clock
    assert lines["TTFT"].split(None, 1)[1] == (
        "18.00 ms host timers, no profiler | CUDA events 18.10 ms | profiled 32.00 ms"
    )
    assert "16.00 ms host timers, no profiler" in lines["TPOT"] and "profiled 38.00 ms" in lines["TPOT"]
    assert "host timers, no profiler" in lines["decode"]
    assert "+137.5%" in lines["profiler"] and "profiled vs unprofiled host timers" in lines["profiler"]
    assert "host timers minus CUDA events" in lines["host"]
    # AND without an unprofiled pass (API, script) the numbers say they were taken under the profiler
    del m["timings"]["unprofiled"], m["timings"]["profiler_overhead"]
    m["step_boundaries"] = {"streamer": 1}
    text = render(m, "r")
    assert "32.00 ms host timers, under the profiler" in text and "profiler cost" not in text
    assert "CUDA events" not in text and "token to token" in text
