"""Windowed analysis (tracekit.app.windowed) against the whole-run analysis of the same trace."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
from helpers import FIXTURES

from tracekit.app import analyze, windowed
from tracekit.ingest import ingest
from tracekit.store.rundir import RunDir

TRACE = FIXTURES / "gpu" / "foreign" / "engine_format.json.gz"  # 5 SGLang/vLLM-annotated steps, one request
# The starts of steps 1-4 (their outermost annotations, execute_3_context_0...), read from the trace.
STEP_STARTS = (1796610860939141702, 1796610861504210940, 1796610861626145614, 1796610861749683040)


def _same(x: pd.DataFrame, y: pd.DataFrame) -> None:
    assert list(x.columns) == list(y.columns) and len(x) == len(y)
    for c in x.columns:
        u, v = x[c], y[c]
        if u.dtype.kind in "fc":  # sums of floats: equal up to summation order
            np.testing.assert_allclose(v.to_numpy(float), u.to_numpy(float), rtol=1e-12, err_msg=c)
        else:
            assert u.astype(str).tolist() == v.astype(str).tolist(), c


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunDir, RunDir, windowed.Cuts]:
    root = tmp_path_factory.mktemp("windowed")
    whole = ingest([TRACE], root / "whole")
    shutil.copytree(whole.path, root / "win")
    win = RunDir.open(root / "win")
    analyze.analyse_run(whole)
    cuts = windowed.cut_times(win, 500)  # ~20 windows asked for: more than the trace has steps
    windowed.analyse_windowed(win, analyze, window_events=500)
    return whole, win, cuts


def test_cuts_move_to_step_starts(runs: tuple[RunDir, RunDir, windowed.Cuts]) -> None:
    # GIVEN windows far shorter than a step, WHEN the run is cut, THEN every cut that falls inside a
    # step moves to the next step's start: one window per step, no step split
    _, _, cuts = runs
    assert cuts.cuts == STEP_STARTS


def test_windowed_tables_equal_the_whole_runs(runs: tuple[RunDir, RunDir, windowed.Cuts]) -> None:
    whole, win, _ = runs
    assert win.read_manifest()["analysis"]["windows"] == 5
    for name in analyze.OUTPUTS:
        if whole.has_table(name):
            _same(whole.read_df(name), win.read_df(name))
    assert win.read_df("steps")["step_id"].tolist() == [0, 1, 2, 3, 4]  # engine steps numbered across windows


def test_step_sources_that_are_not_local_are_refused() -> None:
    steps = pd.DataFrame({"source": ["model_ops", "model_ops"]})
    with pytest.raises(windowed.NotLocal):
        windowed.local_offset(steps, 3)
    assert windowed.local_offset(pd.DataFrame({"source": ["sglang"]}), 3) == 3  # numbered in time order
    assert windowed.local_offset(pd.DataFrame({"source": ["tracekit"]}), 3) == 0  # ids from the annotations


def test_each_window_gets_only_its_share_of_other_events(runs: tuple[RunDir, RunDir, windowed.Cuts]) -> None:
    # GIVEN the run cut into windows, WHEN the windows' raw tables are read, THEN other_events'
    # rows are handed out once each (none spans a window here): the windows' counts sum to the table's
    _, win, cuts = runs
    other = win.read_columns("other_events", analyze.RAW_COLUMNS["other_events"])
    assert not windowed.spanning(other, cuts.long_ns, False).any()
    counts = [w.tables["other_events"].num_rows
              for w in windowed.windows(win, cuts, analyze.RAW_COLUMNS["other_events"])]
    assert len(counts) == len(cuts.cuts) + 1 and sum(counts) == other.num_rows > 0
    assert sum(1 for c in counts if c) > 1  # spread over the windows, not all in one


def test_a_windowed_run_is_windowed_again(runs: tuple[RunDir, RunDir, windowed.Cuts]) -> None:
    # GIVEN a run analysed window by window (its outputs include step_requests), WHEN it is analysed
    # again, THEN it is windowed again (an analysis output is not a recording's table) with the same tables
    _, win, _ = runs
    assert win.has_table("step_requests") and windowed.should_window(win, window_events=500)
    before = {name: win.read_df(name) for name in analyze.OUTPUTS if win.has_table(name)}
    windowed.analyse_windowed(win, analyze, window_events=500)
    assert win.read_manifest()["analysis"]["windows"] == 5
    for name, df in before.items():
        _same(df, win.read_df(name))
