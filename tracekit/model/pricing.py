"""API prices, $ per million tokens, to put a workload's tokens in money.

The default is one published list price, cited with its date, because the
seed study compared an agent loop with one chat request "at API prices": the
ratio depends on the input/output price ratio, not on the absolute level.
Override it from a sweep's TOML (``[pricing]``) or with flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tracekit.errors import UsageError


@dataclass(frozen=True)
class Pricing:
    name: str
    input_per_mtok: float  # $ per 1e6 input (prompt) tokens
    output_per_mtok: float  # $ per 1e6 output (generated) tokens
    source: str
    as_of: str

    def cost(self, input_tokens: float, output_tokens: float) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6

    def manifest(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "input_per_mtok": self.input_per_mtok,
            "output_per_mtok": self.output_per_mtok,
            "source": self.source,
            "as_of": self.as_of,
        }


# OpenAI's list price for gpt-4o-mini at its launch (openai.com/api/pricing,
# announced 2024-07-18): $0.15 per 1M input tokens, $0.60 per 1M output tokens.
DEFAULT = Pricing(
    name="gpt-4o-mini list price",
    input_per_mtok=0.15,
    output_per_mtok=0.60,
    source="openai.com/api/pricing (gpt-4o-mini launch price)",
    as_of="2024-07-18",
)


def from_mapping(data: Mapping[str, Any], base: Pricing = DEFAULT) -> Pricing:
    """Override the default with keys input_per_mtok, output_per_mtok, name, source, as_of."""
    known = {"input_per_mtok", "output_per_mtok", "name", "source", "as_of"}
    unknown = set(data) - known
    if unknown:
        raise UsageError(f"pricing: unknown keys {sorted(unknown)}; known: {', '.join(sorted(known))}")
    out = base
    changed = False
    for key in ("input_per_mtok", "output_per_mtok"):
        if key in data and data[key] is not None:
            try:
                value = float(data[key])
            except (TypeError, ValueError):
                raise UsageError(f"pricing: {key} must be a number") from None
            if value < 0:
                raise UsageError(f"pricing: {key} must not be negative")
            out = replace(out, **{key: value})  # type: ignore[arg-type]
            changed = True
    for key in ("name", "source", "as_of"):
        if key in data:
            out = replace(out, **{key: str(data[key])})  # type: ignore[arg-type]
    if changed and "source" not in data:
        out = replace(out, name="user override", source="given by the user", as_of="")
    return out
