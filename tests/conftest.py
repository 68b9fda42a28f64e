from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Tests are grouped by room (tests/ingest, tests/analysis, ...); their shared helpers live here.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import CORPUS, CORPUS_ABSENT, FIXTURES

# Terminal tables fold to the terminal's width: every test (and every child it starts) sees one width,
# whatever runs the suite (a terminal, a pipe, pytest-xdist's workers, which set COLUMNS=80). A test
# about the width sets its own.
os.environ["COLUMNS"] = "160"


def _has_cuda() -> bool:
    # scripts/mutation.py runs pytest hundreds of times on a CPU machine: it sets this to skip torch's import.
    if os.environ.get("TRACEKIT_TESTS_NO_CUDA"):
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def corpus_dir() -> Path:
    """The trace corpus: tests/data's copies, or $TRACEKIT_CORPUS (skips, "corpus absent", where that names
    no directory). The corpus tests read its hta/ traces by name, so a corpus without hta/ is an error."""
    if not CORPUS.is_dir():
        pytest.skip(CORPUS_ABSENT)
    assert (CORPUS / "hta").is_dir(), f"no hta/ traces under {CORPUS}"
    return CORPUS


@pytest.fixture(scope="session")
def ray_local() -> object:
    """One local Ray runtime (2 CPUs) for every Ray test of the session: its start-up (~15 s on 2 cores) is
    paid once. Code under test finds Ray initialised and uses it as it is. Skips where Ray is not installed."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "300")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    yield ray
    ray.shutdown()
