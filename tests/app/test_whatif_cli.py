"""``tracekit whatif`` and the report's projected advice on real H200 traces (tests/fixtures/gpu).

a_batch2: TinyLlama-1.1B shape, eager, batch 2, 24 prompt / 8 answer tokens, every step traced;
d_compiled: the same model compiled (decode replayed as CUDA graphs), batch 1.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import FIXTURES

from tracekit.cli import main


@pytest.fixture(scope="module")
def eager(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("whatif")
    shutil.copy(FIXTURES / "gpu" / "a_batch2.json.gz", d / "a_batch2.json.gz")
    assert main(["analyze", str(d / "a_batch2.json.gz")]) == 0
    return d / "a_batch2.tracekit"


def test_whatif_json_has_measured_and_projected_per_phase(eager: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["whatif", str(eager), "--graphs", "--no-profiler", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for side in ("measured", "projected"):
        for ph in ("prefill", "decode"):
            assert {"ttft_ms", "tpot_ms", "step_ms"} <= set(d[side]["phases"][ph])
    # the trace's own decode step: ~72 ms under the profiler, 2.4 ms of it on the GPU; under graphs
    # the step is its kernels (fused) plus the graph host time: a few ms
    assert d["measured"]["phases"]["decode"]["step_ms"] == pytest.approx(72.3, abs=0.5)
    assert 1.5 < d["projected"]["tpot_ms"] < 6.0
    assert any("CUDA graphs" in a for a in d["assumptions"])



def test_whatif_cache_len_sizes_the_static_caches_reads(eager: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # TinyLlama at batch 2 under graphs: a 4,096-slot static cache against the default prompt + answer
    # (32 slots) adds 0.777 ps x 2 x (4096 - 32) x 32 heads x 64 x 22 layers x 4 B = 1.14 ms of decode;
    # the trace has no model config: the heads, head size and layers come from its attention kernels
    def tpot(*extra: str) -> float:
        capsys.readouterr()
        assert main(["whatif", str(eager), "--graphs", "--no-profiler", "--json", *extra]) == 0
        d = json.loads(capsys.readouterr().out)
        return float(d["projected"]["tpot_ms"])

    grown = tpot("--cache-len", "4096") - tpot()
    assert grown == pytest.approx(0.000777 * 2 * (4096 - 32) * 32 * 64 * 22 * 4 / 1e6, rel=0.01)

def test_whatif_text_prints_measured_beside_projected(eager: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["whatif", str(eager), "--batch", "8", "--gpu", "H100 SXM", "--no-profiler"]) == 0
    out = capsys.readouterr().out
    assert "measured" in out and "projected" in out and "TPOT ms" in out and "assumptions:" in out
    assert "H100 SXM" in out


def test_whatif_says_what_is_missing_in_one_line(eager: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["whatif", str(eager), "--gpu", "no such GPU"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no ceiling for GPU" in err


def test_report_advice_carries_the_time_it_would_save(eager: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["report", str(eager)]) == 0
    out = capsys.readouterr().out
    assert "projected: capture CUDA graphs" in out and "saves" in out


def test_api_whatif(eager: Path) -> None:
    import tracekit

    p = tracekit.whatif(eager, graphs=True, no_profiler=True)
    assert p.phases["decode"].saved_ns > 0
    assert tracekit.open(eager).whatif(no_profiler=True).change.no_profiler
