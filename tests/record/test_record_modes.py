"""`tracekit record --compile` and `--tp N` on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import need_module

from tracekit.cli import main
from tracekit.store.rundir import STATUS_COMPLETE, RunDir

need_module("torch")
need_module("transformers")


def test_compile_uses_a_static_cache_and_says_so(tmp_path: Path, capsys) -> None:
    # WHEN recording with --compile and no warm-up asked for
    out = tmp_path / "c"
    rc = main(["record", "--compile", "--warmup", "0", "--output-tokens", "4", "--out", str(out)])
    assert rc == 0
    run = RunDir.open(out)
    m = run.read_manifest()
    assert m["status"] == STATUS_COMPLETE
    # THEN run.json says what the compiled mode did here: static cache, no auto-compile on CPU
    c = m["compiled"]
    assert m["workload"]["mode"] == "compiled"
    assert c["cache_implementation"] == "static" and c["max_cache_len"] == 22 + 4
    assert c["auto_compile"] is False and any("CPU" in n for n in c["notes"])
    # AND one untimed warm-up request was added so compilation never lands in a timed one
    assert c["warmup_requests"] == 1 and c["compile_s"] >= 0
    # AND the steps still follow the forced shape through the static cache
    steps = run.read_df("steps")
    assert steps["kind"].tolist() == ["prefill"] + ["decode"] * 3
    assert steps["kv_len"].tolist() == [22, 23, 24, 25]
    # AND they were taken by the streamer, not by hooks inside the (on a GPU compiled) forward
    assert m["step_boundaries"] == {"streamer": 1}
    assert "static cache" in capsys.readouterr().out


def test_eager_is_the_default_mode(tmp_path: Path) -> None:
    rc = main(["record", "-q", "--warmup", "0", "--output-tokens", "2", "--out", str(tmp_path / "e")])
    assert rc == 0
    m = RunDir.open(tmp_path / "e").read_manifest()
    assert m["workload"]["mode"] == "eager" and "compiled" not in m
    assert m["step_boundaries"] == {"hooks": 1}


def test_compile_with_a_script_is_a_usage_error(tmp_path: Path, capsys) -> None:
    script = tmp_path / "s.py"
    script.write_text("print('hi')\n")
    assert main(["record", "--compile", "--out", str(tmp_path / "r"), "--", "python", str(script)]) == 2
    assert "--compile" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, needle", [(["--compile"], "--compile"), (["--device", "cuda:1"], "CUDA_VISIBLE_DEVICES")]
)
def test_tp_refuses_what_it_cannot_do(tmp_path: Path, capsys, extra: list[str], needle: str) -> None:
    assert main(["record", "--tp", "2", *extra, "--out", str(tmp_path / "x")]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
