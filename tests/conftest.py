from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# Real traces other projects wrote; never copied into the repo.
CORPUS = Path(os.environ.get("TRACEKIT_CORPUS", REPO.parent / "shared" / "corpus"))


def _has_cuda() -> bool:
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
    if not CORPUS.is_dir():
        pytest.skip(f"trace corpus not found at {CORPUS}")
    return CORPUS
