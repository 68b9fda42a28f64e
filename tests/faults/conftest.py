from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

# The suite's harness (faultlib) sits beside its tests.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import faultlib


@pytest.fixture(scope="session")
def good_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete, analysed run to copy (its files are never changed)."""
    return faultlib.good_run(tmp_path_factory.mktemp("template"), "GOOD", 6)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    out = os.environ.get("TRACEKIT_FAULT_STATS")
    if out and faultlib.CASES:
        Path(out).write_text(json.dumps({"cases": faultlib.CASES, "exitstatus": int(exitstatus)}, indent=1) + "\n")
