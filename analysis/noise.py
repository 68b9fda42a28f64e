"""Is a change between two sets of runs more than their noise? (pure: frames in, frame out)

Each side is one or more runs of the same workload (``record --repeat N``). A phase's cost is its mean
step time (cpu_end_ns - cpu_start_ns of its steps). The change B/A gets a confidence interval from a
two-level bootstrap: draw the runs of each side with replacement, then the steps inside each drawn run
with replacement, and take the ratio of the pooled means; ``rounds`` draws, the central ``level`` of the
ratios. Runs carry the run-to-run noise (other load, clocks, threads), steps the step-to-step noise.

The verdict: "within noise" when the interval holds 1.0; "B slower" / "B faster" when it does not;
"no noise estimate" when a side has a single step in all (nothing to resample). With one run on a side the
interval covers only step-to-step noise, which misses the run-to-run kind: the verdict then ends in
"(step noise only)".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

COLUMNS = ["phase", "runs_a", "runs_b", "steps_a", "steps_b", "mean_a_ns", "mean_b_ns", "ratio", "ratio_lo",
           "ratio_hi", "verdict"]
WITHIN = "within noise"
NO_ESTIMATE = "no noise estimate"


def step_times(steps: pd.DataFrame | None) -> dict[str, np.ndarray]:
    """Per phase (step kind), each step's wall time in ns, from a steps table; steps without both ends
    are left out."""
    if steps is None or steps.empty or not {"kind", "cpu_start_ns", "cpu_end_ns"} <= set(steps):
        return {}
    s = steps.dropna(subset=["cpu_start_ns", "cpu_end_ns"])
    d = (s["cpu_end_ns"].astype("float64") - s["cpu_start_ns"].astype("float64")).to_numpy()
    kinds = s["kind"].astype(str).to_numpy()
    return {k: d[kinds == k] for k in dict.fromkeys(kinds)}


def bootstrap_ratio(a: Sequence[np.ndarray], b: Sequence[np.ndarray], rounds: int = 2000, level: float = 0.95,
                    seed: int = 0) -> tuple[float, float, float] | None:
    """(mean B / mean A, low, high) over runs and steps; None where either side has no step."""
    a = [np.asarray(x, dtype="float64") for x in a if len(x)]
    b = [np.asarray(x, dtype="float64") for x in b if len(x)]
    if not a or not b:
        return None
    mean_a = float(np.concatenate(a).mean())
    mean_b = float(np.concatenate(b).mean())
    if mean_a <= 0:
        return None
    rng = np.random.default_rng(seed)

    def draw(side: list[np.ndarray]) -> np.ndarray:
        out = np.zeros(rounds)
        n = np.zeros(rounds)
        picks = rng.integers(0, len(side), size=(rounds, len(side)))
        for j in range(len(side)):
            for i, run in enumerate(side):
                rows = picks[:, j] == i
                k = int(rows.sum())
                if not k:
                    continue
                steps = run[rng.integers(0, len(run), size=(k, len(run)))]
                out[rows] += steps.sum(axis=1)
                n[rows] += len(run)
        return out / n

    ratios = draw(b) / draw(a)
    tail = (1 - level) / 2
    lo, hi = np.quantile(ratios, [tail, 1 - tail])
    return mean_b / mean_a, float(lo), float(hi)


def phase_changes(a: Sequence[pd.DataFrame], b: Sequence[pd.DataFrame], rounds: int = 2000,
                  level: float = 0.95) -> pd.DataFrame:
    """One row per phase found on both sides: mean step time of A and B, B/A with its interval, verdict.

    ``a`` and ``b``: the steps tables of each side's runs."""
    ta, tb = [step_times(s) for s in a], [step_times(s) for s in b]
    phases = [p for p in dict.fromkeys([k for t in ta + tb for k in t]) if any(p in t for t in ta)
              and any(p in t for t in tb)]
    rows = []
    for p in phases:
        sa = [t[p] for t in ta if p in t]
        sb = [t[p] for t in tb if p in t]
        na, nb = sum(len(x) for x in sa), sum(len(x) for x in sb)
        got = bootstrap_ratio(sa, sb, rounds=rounds, level=level)
        if got is None:
            continue
        ratio, lo, hi = got
        if na < 2 or nb < 2:
            verdict, lo, hi = NO_ESTIMATE, float("nan"), float("nan")
        elif lo <= 1.0 <= hi:
            verdict = WITHIN
        else:
            verdict = "B slower" if lo > 1.0 else "B faster"
            if len(sa) < 2 or len(sb) < 2:
                verdict += " (step noise only)"
        rows.append({"phase": p, "runs_a": len(sa), "runs_b": len(sb), "steps_a": na, "steps_b": nb,
                     "mean_a_ns": float(np.concatenate(sa).mean()), "mean_b_ns": float(np.concatenate(sb).mean()),
                     "ratio": ratio, "ratio_lo": lo, "ratio_hi": hi, "verdict": verdict})
    return pd.DataFrame(rows, columns=COLUMNS)
