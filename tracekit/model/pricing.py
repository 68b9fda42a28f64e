"""API prices, $ per million tokens, to put a workload's tokens in money.

The default is one published list price, cited with its date, because the
seed study compared an agent loop with one chat request "at API prices": the
ratio depends on the input/output price ratio, not on the absolute level.
Beside it, a GPU's rental price per hour, which turns a request's share of the
GPU's time (analysis/cost.py) into dollars per request. Override either from a
sweep's TOML (``[pricing]``) or with flags.
"""

from __future__ import annotations

import math
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
    # What the GPU costs to rent, $ per hour: a request's share of the steps' time, in money.
    gpu_per_hour: float = 0.0
    gpu_source: str = ""

    def cost(self, input_tokens: float, output_tokens: float) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6

    def gpu_cost(self, gpu_ns: float) -> float:
        """$ for holding the GPU ``gpu_ns`` nanoseconds."""
        return gpu_ns / 3.6e12 * self.gpu_per_hour

    def manifest(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "input_per_mtok": self.input_per_mtok,
            "output_per_mtok": self.output_per_mtok,
            "source": self.source,
            "as_of": self.as_of,
            "gpu_per_hour": self.gpu_per_hour,
            "gpu_source": self.gpu_source,
        }


# OpenAI's list price for gpt-4o-mini at its launch (openai.com/api/pricing,
# announced 2024-07-18): $0.15 per 1M input tokens, $0.60 per 1M output tokens.
# The GPU: an H200 SXM rented on demand from a specialty cloud, $3.50-4.50 per GPU-hour in a
# May 2026 survey of cloud prices (mercatus-ai.com/blog/cloud-gpu-pricing); the midpoint.
DEFAULT = Pricing(
    name="gpt-4o-mini list price",
    input_per_mtok=0.15,
    output_per_mtok=0.60,
    source="openai.com/api/pricing (gpt-4o-mini launch price)",
    as_of="2024-07-18",
    gpu_per_hour=4.0,
    gpu_source="H200 SXM on demand, specialty clouds, $3.50-4.50/h (mercatus-ai.com cloud GPU pricing, 2026-05)",
)


def from_mapping(data: Mapping[str, Any], base: Pricing = DEFAULT) -> Pricing:
    """Override the default with keys input_per_mtok, output_per_mtok, name, source, as_of, gpu_per_hour,
    gpu_source."""
    known = {"input_per_mtok", "output_per_mtok", "name", "source", "as_of", "gpu_per_hour", "gpu_source"}
    unknown = set(data) - known
    if unknown:
        raise UsageError(f"pricing: unknown keys {sorted(unknown)}; known: {', '.join(sorted(known))}")
    out = base
    changed = False
    if data.get("gpu_per_hour") is not None:
        try:
            gpu = float(data["gpu_per_hour"])
        except (TypeError, ValueError):
            raise UsageError("pricing: gpu_per_hour must be a number") from None
        if not 0 <= gpu < math.inf:  # NaN fails too
            raise UsageError("pricing: gpu_per_hour must be a finite number, not negative")
        out = replace(out, gpu_per_hour=gpu, gpu_source=str(data.get("gpu_source", "given by the user")))
    for key in ("input_per_mtok", "output_per_mtok"):
        if key in data and data[key] is not None:
            try:
                value = float(data[key])
            except (TypeError, ValueError):
                raise UsageError(f"pricing: {key} must be a number") from None
            if not 0 <= value < math.inf:  # NaN fails too
                raise UsageError(f"pricing: {key} must be a finite number, not negative")
            out = replace(out, **{key: value})  # type: ignore[arg-type]
            changed = True
    for key in ("name", "source", "as_of"):
        if key in data:
            out = replace(out, **{key: str(data[key])})  # type: ignore[arg-type]
    if changed and "source" not in data:
        out = replace(out, name="user override", source="given by the user", as_of="")
    return out
