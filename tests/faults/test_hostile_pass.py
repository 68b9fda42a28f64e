"""A small sample of the independent hostile pass (scripts/hostile_pass.py; its figures are in
docs/reliability.md).

Invariant: over the sampled cases, 0 tracebacks, 0 files lost or written outside the run, 0 escape
sequences or markup injected, 0 wrong answers (each case's own check).
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
from faultlib import REPO


def _load() -> object:
    spec = importlib.util.spec_from_file_location("hostile_pass", REPO / "scripts" / "hostile_pass.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["hostile_pass"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_a_sample_of_the_hostile_pass_finds_nothing() -> None:
    hp = _load()
    res = hp.run(seed=7, scale=0.04, only=["paths", "names", "inputs", "env", "query", "datasets", "svg", "twice"])  # type: ignore[attr-defined]
    assert res["total"]["cases"] >= 30
    assert not res["failures"], res["failures"][:3]
