"""Replayed kernels matched to the same kernels run eagerly: a graph's ops from its warm-up.

Before a CUDA/HIP graph is captured, its work usually runs once eagerly (torch.compile's cudagraph
trees run a warm-up pass, ``torch.cuda.graph`` recipes warm up on a side stream, engines run a dummy
batch): there the kernels execute under the ops that launch them, with their shapes. Every GPU
activity gets a token, equal for equal (kind, name, grid, block); a replay's tokens (in GPU order)
are aligned against the trace's activities outside every replay (in launch order):

- candidates: the offsets that put the replay's rarest tokens on their eager occurrences, best
  first by how many positions agree in place (at most ``MAX_CANDIDATES`` aligned in full);
- alignment: greedy, in order, a mismatch resolved by looking up to ``LOOKAHEAD`` positions ahead in
  either sequence (an eager activity the graph lacks, a graph branch that ran in another order);
- a replay matches where >= ``AGREEMENT`` of its activities align; of equal alignments the latest
  before the replay wins (the warm-up nearest its capture), else the earliest after it.

Each aligned replayed activity takes the eager activity's op. Equal tokens mean the same kernel
launched with the same launch configuration; the shapes come from the op that launched it there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.ingest import arrays as A

AGREEMENT = 0.9  # share of a replay's activities that must align
LOOKAHEAD = 8  # positions looked ahead past a mismatch, in each sequence
MAX_CANDIDATES = 8  # alignments tried in full per replay
MAX_CELLS = 4_000_000  # offsets x positions compared in place per replay (bounds the memory: 32 MB)


def _codes(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """One int per row, equal for equal strings; -1 for null."""
    if pa.types.is_dictionary(col.type):
        col = col.cast(pa.string())
    enc = pc.dictionary_encode(col)
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    return A.to_numpy(enc.indices, -1).astype(np.int64)


def _dims(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A list<int> column (grid, block) as an (n, 3) int array; -1 where missing."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    out = np.full((len(col), 3), -1, dtype=np.int64)
    if not len(col):
        return out
    lens = A.to_numpy(pc.list_value_length(col), 0).astype(np.int64)
    flat = A.to_numpy(pc.list_flatten(col), -1).astype(np.int64)
    if np.isin(lens, (0, 3)).all():
        out[lens == 3] = flat.reshape(-1, 3)
        return out
    for i, v in enumerate(col.to_pylist()):  # other lengths (rare): padded or cut to three
        if v:
            w = [int(x) if x is not None else -1 for x in v[:3]]
            out[i, :len(w)] = w
    return out


def activity_tokens(gpu: pa.Table) -> np.ndarray:
    """One int per gpu_activity row, equal where (kind, name, grid, block) are equal."""
    if gpu.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    key = np.column_stack([_codes(gpu["kind"]), _codes(gpu["name"]), _dims(gpu["grid"]), _dims(gpu["block"])])
    _, inverse = np.unique(key, axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


@dataclass(frozen=True)
class EagerRuns:
    """The activities outside every replay, in launch order: their tokens, ops (-1: none) and start times."""

    tokens: np.ndarray
    op_id: np.ndarray
    ts: np.ndarray

    @classmethod
    def of(cls, tokens: np.ndarray, op_id: np.ndarray, ts: np.ndarray, correlation: np.ndarray,
           replayed: np.ndarray) -> EagerRuns:
        """From every activity's token, op, start and correlation; ``replayed`` marks those left out."""
        rows = np.flatnonzero(~replayed)
        # launch order: correlation ids grow with each launch call; activities without one by start
        corr = np.where(correlation[rows] >= 0, correlation[rows], np.iinfo(np.int64).max)
        rows = rows[np.lexsort((ts[rows], corr))]
        return cls(tokens[rows], op_id[rows], ts[rows])

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class EagerMatch:
    """Per replayed position, the eager activity's op (-1: none aligned), and the share that aligned."""

    op_id: np.ndarray
    agreement: float


def _align(template: np.ndarray, replay: np.ndarray, start: int) -> np.ndarray:
    """Template position of each replay position from ``start`` (-1: none), greedy with look-ahead."""
    n, m = len(replay), len(template)
    out = np.full(n, -1, dtype=np.int64)
    t = template.tolist()
    r = replay.tolist()
    i, j = 0, max(start, 0)
    while i < n and j < m:
        if t[j] == r[i]:
            out[i] = j
            i += 1
            j += 1
            continue
        ahead = next((d for d in range(1, LOOKAHEAD + 1) if j + d < m and t[j + d] == r[i]), 0)
        back = next((d for d in range(1, LOOKAHEAD + 1) if i + d < n and r[i + d] == t[j]), 0)
        if ahead and (not back or ahead <= back):
            j += ahead  # eager activities the graph does not hold
        elif back:
            i += back  # replayed activities the eager run does not hold
        else:
            i += 1
            j += 1
    return out


def match(runs: EagerRuns, replay: np.ndarray, replay_ts: int) -> EagerMatch | str:
    """The eager run a replay's tokens align with, or why none does."""
    n, m = len(replay), len(runs)
    if n == 0:
        return "no activities"
    if m == 0:
        return "no kernels run eagerly in the trace"
    order = np.argsort(runs.tokens, kind="stable")
    srt = runs.tokens[order]
    lo = np.searchsorted(srt, replay, side="left")
    hi = np.searchsorted(srt, replay, side="right")
    count = hi - lo
    if (count > 0).sum() < AGREEMENT * n:
        return "its kernels (name, grid, block) were not run eagerly in the trace"
    # anchors: the first replay position of each of the rarest tokens that occur eagerly
    _, first = np.unique(replay, return_index=True)
    first = first[count[first] > 0]
    first = first[np.argsort(count[first], kind="stable")][:4]
    offsets = np.unique(np.concatenate([order[lo[i]:hi[i]] - i for i in first]))
    offsets = offsets[(offsets > -n) & (offsets < m)]
    most = max(MAX_CANDIDATES, MAX_CELLS // n)
    if len(offsets) > most:
        offsets = offsets[np.linspace(0, len(offsets) - 1, most).astype(np.int64)]
    pos = np.arange(n)
    idx = offsets[:, None] + pos[None, :]
    ok = (idx >= 0) & (idx < m)
    in_place = ((runs.tokens[np.clip(idx, 0, m - 1)] == replay[None, :]) & ok).sum(axis=1)
    best: tuple[int, int, np.ndarray] | None = None  # (aligned, preference, positions)
    for o in offsets[np.argsort(-in_place, kind="stable")][:MAX_CANDIDATES]:
        at = _align(runs.tokens, replay, int(o))
        aligned = int((at >= 0).sum())
        first_at = int(at[at >= 0][0]) if aligned else 0
        t0 = int(runs.ts[first_at])
        # the latest run before the replay first, then the earliest after it
        pref = t0 if t0 <= replay_ts else -t0 - (1 << 62)
        if best is None or (aligned, pref) > best[:2]:
            best = (aligned, pref, at)
    if best is None or best[0] < AGREEMENT * n:
        got = 0 if best is None else best[0]
        return f"its kernels run eagerly in the trace, but at most {got} of its {n} in its order"
    at = best[2]
    return EagerMatch(np.where(at >= 0, runs.op_id[np.clip(at, 0, m - 1)], -1), best[0] / n)
