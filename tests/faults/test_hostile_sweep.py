"""Fault class: sweep configs and flags no study can run (``tracekit sweep --dry-run``).

Invariant: a value of the wrong kind or out of any range (text, 1.5, 0, -4, 1e20, NaN, inf, an empty
list) is one UsageError line (exit 2), never a traceback and never a study listed with it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from faultlib import cli, one_line


@pytest.mark.parametrize("toml", [
    'shapes = ["chat"]\ntrace_steps = "x"',  # ValueError traceback before
    'shapes = ["chat"]\nrepeats = "x"',
    'prompt_lengths = [8]\nprompt_output_tokens = "x"',
    'output_lengths = [8]\noutput_input_tokens = [1]',  # TypeError traceback before
    'shapes = ["chat"]\ntrace_steps = 0',  # listed before, as was everything below
    'shapes = ["chat"]\nwarmup_runs = -4',
    'shapes = ["chat"]\nwarmup_runs = 1.5',
    "batch = 0", "batch = -5", "batch = true", "batch = 99999999999999999999",
    'shapes = ["999999999999/1"]',
    'shapes = ["chat"]\nquant = []',  # 0 points, exit 0
    'shapes = ["chat"]\npricing = {gpu_per_hour = nan}',
    'shapes = ["chat"]\npricing = {input_per_mtok = inf}',
    "load = {rates = [inf]}", "load = {rates = true}",
    "load = {rates = [1], requests = 99999999999}", "load = {rates = [1], max_batch_tokens = 0}",
    "agent = {steps = 99999999999}", "agent = {steps = 2, tool_tokens = -100}", "agent = {steps = 1.7}",
])
def test_a_sweep_config_out_of_range_is_one_line(tmp_path: Path, toml: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml + "\n")
    r = cli(["sweep", "--dry-run", "--config", cfg, "--out", tmp_path / "sw"])
    one_line(r)
    assert r.rc == 2, r.text
    assert not (tmp_path / "sw").exists()


@pytest.mark.parametrize("flags", [
    ["--quick", "--input-price", "nan"], ["--quick", "--gpu-price", "inf"],
    ["--quick", "--trace-steps", "0"], ["--quick", "--trace-steps", "-5"],
    ["--rates", "1", "--load-requests", "0"],
    ["--agent-steps", "2", "--agent-tool-tokens", "-100"],
    ["--rates", "inf"],
])
def test_sweep_flags_out_of_range_are_one_line(tmp_path: Path, flags: list[str]) -> None:
    # Each was listed as a study (exit 0): NaN prices, --trace-steps 0 ignored and -5 kept, --load-requests 0
    # taken as 16, negative tool tokens, an infinite request rate.
    r = cli(["sweep", "--dry-run", *flags, "--out", tmp_path / "sw"])
    one_line(r)
    assert r.rc == 2, r.text


@pytest.mark.parametrize("content", ["{", "[]", '{"point_ids": 5}', '{"outcomes": []}', '{"elapsed_s": "x"}',
                                     "[" * 100_000 + "]" * 100_000])
def test_a_corrupt_sweep_json_is_one_line_on_resume(tmp_path: Path, content: str) -> None:
    # JSONDecodeError (and for the others an AttributeError or TypeError later) traceback before.
    sweep = tmp_path / "sw"
    sweep.mkdir()
    (sweep / "sweep.json").write_text(content)
    r = cli(["sweep", "--quick", "--resume", "--out", sweep])
    one_line(r)
    assert r.rc == 1 and "corrupt sweep.json" in r.err, r.err
    assert sorted(p.name for p in sweep.iterdir()) == ["sweep.json"]
