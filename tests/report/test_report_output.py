"""The report's output is its own: plotting libraries' warnings never reach the terminal."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from helpers import make_run

from tracekit.cli import main
from tracekit.model.schema import from_columns


def test_a_phase_without_a_split_draws_without_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a run whose phases hold time but no split (a CPU trace: nothing classified, idle unknown)
    run = make_run(tmp_path)
    run.write_table("phases", from_columns("phases", {"phase": ["decode"], "steps": [4], "time_ns": [120_000_000]}))
    # WHEN the report draws it (the split plot then has no bar and nothing to put in a legend)
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        assert main(["report", str(run.path), "--html", str(tmp_path / "r.html")]) == 0
    # THEN nothing but tracekit's own lines: no warning escaped, none printed, none summed up
    assert escaped == []
    err = capsys.readouterr().err
    assert err == ""
    assert (tmp_path / "r.html").stat().st_size > 0
