"""The tensor-core work a grouped GEMM kernel issues: each group's rows rounded up to the kernel's row granule.

A grouped GEMM (MoE experts: ``aten::_grouped_mm``) runs each group's rows in whole tiles: CUTLASS's
SM90 grouped kernels issue their MMAs over the tile's M rows times the cluster's M CTAs, valid rows or
not (docs/roofline.md, "Grouped GEMMs"). The rows per group (the routing) are values the trace does not
record, so the padding is the expectation under independent uniform routing: each of ``rows`` rows
lands in one of ``groups`` groups at random (rows ~ Binomial(rows, 1/groups) per group). Real routers
are less even, which pads more: the expectation is a lower bound on the issued work.
"""

from __future__ import annotations

import math
import re

import numpy as np

# SM90 grouped kernels (PyTorch's at::cuda::detail grouped GEMM, CUTLASS's ptr-array kernels): the
# mainloop's cluster shape, then the kernel schedule's tile shape. Demangled and mangled spellings.
_DEMANGLED = re.compile(
    r"GroupProblemShape.*?MainloopSm\d+ArrayTmaGmmaWarpSpecialized\w*<\s*\d+\s*,\s*(?:cute::)?tuple<\s*"
    r"(?:cute::)?C<(\d+)>.*?KernelPtrArrayTmaWarpSpecialized\w*>\s*,\s*(?:cute::)?tuple<\s*(?:cute::)?C<(\d+)>")
_MANGLED = re.compile(
    r"GroupProblemShape.*?MainloopSm\d+ArrayTmaGmmaWarpSpecializedILi\d+E\w*?CILi(\d+)EE"
    r".*?KernelPtrArrayTmaWarpSpecialized(?:Cooperative|Pingpong)?EEE\w*?ILi(\d+)EE")


def granule(kernel_name: str) -> int | None:
    """The rows a grouped GEMM kernel rounds each group up to (tile M x cluster M), read from its name;
    None for a kernel that is not a recognised grouped GEMM (or whose name hides the shapes)."""
    if not isinstance(kernel_name, str) or "GroupProblemShape" not in kernel_name:
        return None
    m = _DEMANGLED.search(kernel_name) or _MANGLED.search(kernel_name)
    if m is None:
        return None
    cluster_m, tile_m = int(m.group(1)), int(m.group(2))
    return cluster_m * tile_m if 0 < cluster_m <= 16 and 0 < tile_m <= 1024 else None


def expected_padded_rows(rows: int, groups: int, granule: int) -> float:
    """E[sum over groups of ceil(n_g / granule) * granule] for ``rows`` rows routed uniformly and
    independently over ``groups`` groups: groups * granule * sum_j P(n > j * granule), n ~ B(rows, 1/groups).
    One group: its rows rounded up."""
    if rows <= 0:
        return 0.0
    if groups <= 1 or granule <= 1:
        return float(math.ceil(rows / max(granule, 1)) * max(granule, 1))
    p = 1.0 / groups
    mean, sd = rows * p, math.sqrt(rows * p * (1.0 - p))
    top = min(rows, int(mean + 12.0 * sd + granule))
    k = np.arange(top + 1, dtype=float)
    # log pmf(k) by the ratio pmf(k+1)/pmf(k) = (rows-k)/(k+1) * p/(1-p), summed from log pmf(0)
    steps = np.log(rows - k[:-1]) - np.log(k[:-1] + 1.0) + math.log(p / (1.0 - p))
    logpmf = rows * math.log1p(-p) + np.concatenate(([0.0], np.cumsum(steps)))
    pmf = np.exp(logpmf - logpmf.max())
    pmf /= pmf.sum()
    tiles = np.ceil(k / granule)
    return float(groups * granule * (pmf * tiles).sum())


def padding_factor(rows: int, groups: int, granule: int | None) -> float:
    """Issued rows over useful rows (>= 1): 1 where the granule or the shapes are unknown."""
    if granule is None or rows <= 0 or groups <= 0:
        return 1.0
    return max(1.0, expected_padded_rows(rows, groups, granule) / rows)
