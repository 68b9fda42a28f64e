"""Every example output in docs/ and the README is what tracekit prints today (tests/doc_outputs.py)."""

from __future__ import annotations

import pytest
from doc_outputs import PAGES, blocks, produce, unmarked

CASES = [(page, key, shown) for page in PAGES for key, shown in blocks(page)]


def test_every_example_output_is_marked_and_some_are() -> None:
    assert not [u for page in PAGES for u in unmarked(page)], "example outputs without an output marker"
    assert {key for _, key, _ in CASES} >= {"record-summary-smoke", "analyze-smoke", "report-smoke", "query-smoke",
                                            "diff-smoke"}


_cache: dict[str, str] = {}


@pytest.mark.parametrize("page, key, shown", CASES, ids=[f"{p.name}:{k}" for p, k, _ in CASES])
def test_the_example_output_is_what_tracekit_prints(page, key: str, shown: str) -> None:
    if key not in _cache:
        _cache[key] = produce(key)
    assert shown == _cache[key], (f"{page.name} shows another output for {key}: "
                                  "python tests/doc_outputs.py --write rewrites it")
