"""The seed study's claims as values: what the sweep's report compares its measurements with.

The numbers live in tracekit/data/seed_study.json (with their source); tracekit.store.reference reads
them; tracekit.analysis.sweep compares a summary with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Claim:
    key: str
    text: str
    seed: float
    unit: str
    relative: bool  # a ratio or share (comparable across GPUs) vs an absolute number (hardware-specific)


@dataclass(frozen=True)
class SeedStudy:
    """The study's setup, its claims, the factor within which a relative claim holds, and its KV figure."""

    source: str
    gpu: str
    model: str
    dtype: str
    hold_factor: float
    kv_measured_bytes_per_token: float
    kv_formula_bytes_per_token: float
    claims: tuple[Claim, ...]

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> SeedStudy:
        kv = d["kv_bytes_per_token"]
        return SeedStudy(
            str(d["source"]), str(d["gpu"]), str(d["model"]), str(d["dtype"]), float(d["hold_factor"]),
            float(kv["measured"]), float(kv["formula"]),
            tuple(Claim(str(c["key"]), str(c["text"]), float(c["value"]), str(c["unit"]), bool(c["relative"]))
                  for c in d["claims"]))
