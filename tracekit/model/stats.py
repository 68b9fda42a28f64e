"""Summary statistics every room shares, so that the recorder and the analysis report one number alike."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``values``: linear interpolation between the two closest ranks
    (NumPy's default method, the one vLLM's benchmarks report); None when there are no values. The p99 of
    two values is 99% of the way from the smaller to the larger, never simply the maximum."""
    arr = np.fromiter((float(v) for v in values), dtype=np.float64)
    return float(np.percentile(arr, q)) if arr.size else None
