"""Every verb names exactly the options that conflict, in one line, with exit 2 and nothing written."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from helpers import make_run, need

from tracekit.cli import main

HAS_RECORD = all(importlib.util.find_spec(m) for m in ("torch", "transformers"))


def _error(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    assert main(args) == 2, args
    err = capsys.readouterr().err.strip()
    assert err.startswith("tracekit: error:") and "\n" not in err, err
    return err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--preset", "seed", "--quick"], "--quick and --preset seed conflict"),
        (["--quick", "--shapes", "chat", "--batch", "1,2"], "--quick, --shapes chat and --batch 1,2 conflict"),
        (["--config", "x.toml", "--preset", "seed"], "--preset seed and --config x.toml conflict"),
        (["--quick", "--resume", "--force"], "--resume and --force conflict"),
    ],
)
def test_sweep_names_the_conflicting_options(tmp_path: Path, capsys, args, needle) -> None:
    err = _error(capsys, ["sweep", *args, "--out", str(tmp_path / "s")])
    assert needle in err
    assert not (tmp_path / "s").exists()


def test_sweep_point_flags_together_are_one_source(capsys) -> None:
    assert main(["sweep", "--shapes", "chat", "--batch", "1,2", "--device", "cpu", "--dry-run"]) == 0
    assert "3 points" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "tiny", "--batch", "2", "--", "python", "my.py"],
         "--model tiny, --batch 2 and the script 'python my.py' conflict"),
        (["--trust-remote-code", "--", "python", "my.py"], "--trust-remote-code and the script"),
        (["--model", "tiny", "--model-preset", "tiny"], "--model tiny and --model-preset tiny conflict"),
        (["--no-nvml", "--sample-hz", "5"], "--sample-hz 5 and --no-nvml conflict"),
    ],
)
def test_record_names_the_conflicting_options(tmp_path: Path, capsys, monkeypatch, args, needle) -> None:
    need("torch and transformers (tracekit record)", HAS_RECORD)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my.py").write_text("print('ran')\n")
    err = _error(capsys, ["record", "--out", str(tmp_path / "r"), *args])
    assert needle in err
    assert not (tmp_path / "r").exists()


def test_export_names_the_conflicting_options(tmp_path: Path, capsys) -> None:
    run = make_run(tmp_path)
    out = str(tmp_path / "x")
    assert "--from-trace and --format proto conflict" in _error(
        capsys, ["export", str(run.path), "--from-trace", "--out", out])
    assert "--from-trace and --window 0:1 conflict" in _error(
        capsys, ["export", str(run.path), "--from-trace", "--format", "json", "--window", "0:1", "--out", out])
    assert "--window 0:1 and --window-ms 0:5 conflict" in _error(
        capsys, ["export", str(run.path), "--window", "0:1", "--window-ms", "0:5", "--out", out])
    assert not Path(out).exists()


def test_ingest_names_the_conflicting_options(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    assert "--address x:1 and --engine process conflict" in _error(
        capsys, ["ingest", str(trace), "--address", "x:1", "--out", str(tmp_path / "a")])
    assert "--run-id r needs --dataset" in _error(
        capsys, ["ingest", str(trace), "--run-id", "r", "--out", str(tmp_path / "b")])


def test_analyze_of_a_run_directory_refuses_another_out(tmp_path: Path, capsys) -> None:
    run = make_run(tmp_path / "runs").path
    before = sorted((p.name, p.stat().st_mtime_ns) for p in run.rglob("*"))
    err = _error(capsys, ["analyze", str(run), "--out", str(tmp_path / "elsewhere")])
    assert "is a run directory, analysed in place" in err and "--out" in err
    assert not (tmp_path / "elsewhere").exists()
    assert sorted((p.name, p.stat().st_mtime_ns) for p in run.rglob("*")) == before
