"""Reference data shipped with tracekit (tracekit/data/*.json), read once per process."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from tracekit.model.seedstudy import SeedStudy


@cache
def seed_study() -> SeedStudy:
    """The seed study's claims (tracekit/data/seed_study.json)."""
    text = resources.files("tracekit").joinpath("data", "seed_study.json").read_text(encoding="utf-8")
    return SeedStudy.from_dict(json.loads(text))
