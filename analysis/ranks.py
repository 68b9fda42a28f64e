"""Across ranks: aligned steps, communication per phase, exposed communication, skew.

Pure functions over the ``steps`` and ``gpu_activity`` tables of a
multi-rank run (every row carries ``rank``). Nothing here does I/O and no
input is modified.

Definitions (docs/multi-gpu.md):

- A step is aligned across ranks by ``step_id``: tensor parallelism runs the
  same forward pass on every rank, so step k on rank 0 and step k on rank 1
  are one step. A step missing on some rank is reported, never dropped.
- Communication: GPU kernels whose name contains ``nccl`` (NCCL's
  ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``, ``ncclKernel_...`` on older
  releases). Time is the union of their intervals, so two collectives on two
  streams at once count once.
- Exposed communication: the part of that union not covered by any other
  kernel on the same (rank, device) -- the time the GPU did nothing but
  communicate (TraceLens' and HTA's "exposed comm" by interval arithmetic).
- Skew of a step: max - min of the step's end across ranks; the straggler is
  the rank that ended last. GPU end is used where known, else CPU end. On one
  host every rank's trace shares the clock (Kineto writes epoch ns), so ends
  compare directly; traces of several hosts need ``clock_offsets_ns``.
- Transfer vs wait: an NCCL kernel starts when its rank reaches the
  collective and ends when every rank has (the data cannot move before the
  last peer arrives), so on the rank that arrives first it spins. The k-th
  NCCL kernel of a step on each rank is one collective instance (matched by
  order, as NCCL itself requires every rank to issue collectives in the same
  order); its shortest duration across ranks ~ transfer time (an upper bound:
  it still holds NCCL's own launch and sync latency), and each rank's
  duration minus that is wait caused by the skew of arrival. Kernels that
  cannot be matched (a step whose NCCL kernel count or collective order
  differs across ranks, or a run with one rank) are ``unmatched``, never
  guessed: transfer + wait + unmatched = the NCCL kernel time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

OUTSIDE = "outside"  # communication outside every step window

_NCCL = re.compile(r"nccl", re.IGNORECASE)
_COLLECTIVES = (
    ("AllReduce", re.compile(r"all_?reduce", re.I)),
    ("AllGather", re.compile(r"all_?gather", re.I)),
    ("ReduceScatter", re.compile(r"reduce_?scatter", re.I)),
    ("AllToAll", re.compile(r"all_?to_?all", re.I)),
    ("Broadcast", re.compile(r"broadcast", re.I)),
    ("SendRecv", re.compile(r"send|recv", re.I)),
    ("Reduce", re.compile(r"reduce", re.I)),
)


def _int(x: Any) -> int:
    # pandas-stubs types group keys as Hashable; they are ints here.
    return int(x)


def _df(table: pa.Table | pd.DataFrame) -> pd.DataFrame:
    # to_pandas / copy: passes never mutate what they were given.
    if isinstance(table, pa.Table):
        return table.to_pandas()
    return table.copy()


def is_nccl(names: pd.Series) -> np.ndarray:
    """True for kernel names of NCCL collectives."""
    return names.astype("string").str.contains(_NCCL, na=False).to_numpy(dtype=bool)


def collective(name: str) -> str:
    """The collective an NCCL kernel runs (AllReduce, AllGather, ...), or 'other'."""
    for label, pat in _COLLECTIVES:
        if pat.search(name):
            return label
    return "other"


# --- interval arithmetic ---------------------------------------------------------


def _segments(
    a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray, b_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Elementary segments of the boundaries of A and B with the coverage of each.

    Returns (seg_start, seg_end, in_a, in_b): consecutive, disjoint segments
    and whether each lies inside some interval of A / of B. A sweep over
    sorted boundaries instead of a Python loop: ~10^5 kernels per rank.
    """
    pts = np.concatenate([a_start, a_end, b_start, b_end]).astype(np.int64)
    da = np.concatenate([np.ones(len(a_start)), -np.ones(len(a_end)), np.zeros(len(b_start) + len(b_end))])
    db = np.concatenate([np.zeros(len(a_start) + len(a_end)), np.ones(len(b_start)), -np.ones(len(b_end))])
    order = np.argsort(pts, kind="stable")
    pts, da, db = pts[order], da[order], db[order]
    ca, cb = np.cumsum(da), np.cumsum(db)
    seg_start, seg_end = pts[:-1], pts[1:]
    keep = seg_end > seg_start
    return seg_start[keep], seg_end[keep], ca[:-1][keep] > 0, cb[:-1][keep] > 0


def _covered_in(starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Length of sorted disjoint intervals [starts, ends) inside each window [lo, hi)."""
    if len(starts) == 0:
        return np.zeros(len(lo), dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(ends - starts)])

    def upto(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(starts, t, side="right") - 1
        ok = i >= 0
        ic = np.where(ok, i, 0)
        val = cum[ic] + np.minimum(t, ends[ic]) - starts[ic]
        return np.where(ok, val, 0)

    return (upto(hi) - upto(lo)).astype(np.int64)


@dataclass(frozen=True)
class _Coverage:
    """Disjoint sorted interval lists of one (rank, device)."""

    comm: tuple[np.ndarray, np.ndarray]
    exposed: tuple[np.ndarray, np.ndarray]
    compute: tuple[np.ndarray, np.ndarray]


def _coverage(kernels: pd.DataFrame) -> _Coverage:
    nccl = kernels["_nccl"].to_numpy(dtype=bool)
    s = kernels["ts_ns"].to_numpy(dtype=np.int64)
    e = s + kernels["dur_ns"].to_numpy(dtype=np.int64)
    ss, se, in_comm, in_comp = _segments(s[nccl], e[nccl], s[~nccl], e[~nccl])
    return _Coverage(
        comm=(ss[in_comm], se[in_comm]),
        exposed=(ss[in_comm & ~in_comp], se[in_comm & ~in_comp]),
        compute=(ss[in_comp], se[in_comp]),
    )


# --- steps across ranks ----------------------------------------------------------


def _step_frame(steps: pa.Table | pd.DataFrame, clock_offsets_ns: Mapping[int, int] | None) -> pd.DataFrame:
    df = _df(steps)
    if df.empty:
        return df.assign(start_ns=pd.Series(dtype="int64"), end_ns=pd.Series(dtype="int64"))
    df["rank"] = df["rank"].fillna(0).astype("int64")
    # GPU window where the trace has one; else the CPU one (a trace without kernels).
    df["start_ns"] = df["gpu_start_ns"].fillna(df["cpu_start_ns"])
    df["end_ns"] = df["gpu_end_ns"].fillna(df["cpu_end_ns"])
    if clock_offsets_ns:
        off = df["rank"].map(lambda r: clock_offsets_ns.get(int(r), 0)).astype("int64")
        df["start_ns"] = df["start_ns"] - off
        df["end_ns"] = df["end_ns"] - off
    df["kind"] = df["kind"].astype("string")
    return df


def align_steps(
    steps: pa.Table | pd.DataFrame, *, clock_offsets_ns: Mapping[int, int] | None = None
) -> pd.DataFrame:
    """One row per step_id across ranks: skew, straggler and missing ranks.

    Columns: step_id, request_id, kind, ranks, missing_ranks (text, "" if
    none), start_min_ns, start_skew_ns, end_min_ns, end_max_ns, skew_ns,
    straggler_rank, dur_min_ns, dur_max_ns. ``clock_offsets_ns`` maps a rank
    to what must be subtracted from its timestamps (traces of other hosts).
    """
    cols = [
        "step_id", "request_id", "kind", "ranks", "missing_ranks", "start_min_ns", "start_skew_ns",
        "end_min_ns", "end_max_ns", "skew_ns", "straggler_rank", "dur_min_ns", "dur_max_ns",
    ]  # fmt: skip
    df = _step_frame(steps, clock_offsets_ns)
    if df.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
    all_ranks = sorted(df["rank"].unique())
    df = df.dropna(subset=["end_ns"]).copy()
    df["dur_ns"] = df["end_ns"] - df["start_ns"]
    g = df.groupby("step_id", sort=True)
    out = pd.DataFrame(
        {
            "request_id": g["request_id"].first(),
            "kind": g["kind"].first(),
            "ranks": g["rank"].nunique(),
            "start_min_ns": g["start_ns"].min(),
            "start_skew_ns": g["start_ns"].max() - g["start_ns"].min(),
            "end_min_ns": g["end_ns"].min(),
            "end_max_ns": g["end_ns"].max(),
            "dur_min_ns": g["dur_ns"].min(),
            "dur_max_ns": g["dur_ns"].max(),
        }
    )
    out["skew_ns"] = out["end_max_ns"] - out["end_min_ns"]
    # Straggler: the rank whose step ended last (ties: the lowest rank).
    last = df.sort_values(["step_id", "end_ns", "rank"], ascending=[True, False, True]).drop_duplicates(
        "step_id"
    )
    out["straggler_rank"] = last.set_index("step_id")["rank"]
    present: dict[int, set[int]] = {}
    for sid, r in zip(df["step_id"].to_numpy(), df["rank"].to_numpy(), strict=True):
        present.setdefault(int(sid), set()).add(int(r))
    out["missing_ranks"] = [
        ",".join(str(r) for r in all_ranks if r not in present[int(s)]) for s in out.index
    ]
    out = out.reset_index()
    return out[cols]


def skew_summary(aligned: pd.DataFrame) -> pd.DataFrame:
    """Per phase (step kind): steps, median / p90 / max skew and how often each rank straggled."""
    if aligned.empty:
        return pd.DataFrame(
            columns=["phase", "steps", "skew_p50_ns", "skew_p90_ns", "skew_max_ns", "straggler_counts"]
        )
    rows = []
    for kind, g in aligned.groupby("kind", sort=True):
        counts = g["straggler_rank"].value_counts().sort_index()
        rows.append(
            {
                "phase": kind,
                "steps": len(g),
                "skew_p50_ns": float(g["skew_ns"].quantile(0.5)),
                "skew_p90_ns": float(g["skew_ns"].quantile(0.9)),
                "skew_max_ns": int(g["skew_ns"].max()),
                "straggler_counts": {_int(r): _int(n) for r, n in counts.items()},
            }
        )
    return pd.DataFrame(rows)


def gpu_windows(
    steps: pa.Table | pd.DataFrame, runtime: pa.Table | pd.DataFrame, gpu_activity: pa.Table | pd.DataFrame
) -> pd.DataFrame:
    """Steps with gpu_start_ns / gpu_end_ns / gpu_busy_ns filled from the kernels they launched.

    A kernel belongs to the step whose CPU window holds the runtime call that
    launched it (same rank, same correlation id). Rows that already have a
    GPU window keep it. Returns a copy of ``steps`` as a DataFrame.
    """
    st = _df(steps)
    if st.empty:
        return st
    rt = _df(runtime)
    k = _df(gpu_activity)
    st["rank"] = st["rank"].fillna(0).astype("int64")
    if rt.empty or k.empty:
        return st
    rt = rt.dropna(subset=["correlation", "ts_ns"]).assign(rank=lambda d: d["rank"].fillna(0).astype("int64"))
    k = k.dropna(subset=["correlation", "ts_ns", "dur_ns"]).assign(
        rank=lambda d: d["rank"].fillna(0).astype("int64")
    )
    filled = []
    for rank, s in st.groupby("rank", sort=True):
        s = s.sort_values("cpu_start_ns")
        r = rt[rt["rank"] == rank]
        starts = s["cpu_start_ns"].to_numpy(dtype=np.int64)
        ends = s["cpu_end_ns"].to_numpy(dtype=np.int64)
        ts = r["ts_ns"].to_numpy(dtype=np.int64)
        i = np.searchsorted(starts, ts, side="right") - 1
        ok = (i >= 0) & (ts < ends[np.clip(i, 0, None)])
        launch = pd.DataFrame({"correlation": r["correlation"].to_numpy()[ok], "_row": i[ok]})
        kk = k[k["rank"] == rank].merge(launch, on="correlation", how="inner")
        kk["_end"] = kk["ts_ns"] + kk["dur_ns"]
        g = kk.groupby("_row")
        s = s.reset_index(drop=True)
        win = pd.DataFrame({"_gs": g["ts_ns"].min(), "_ge": g["_end"].max(), "_busy": g["dur_ns"].sum()})
        s = s.join(win, how="left")
        for col, src in (("gpu_start_ns", "_gs"), ("gpu_end_ns", "_ge"), ("gpu_busy_ns", "_busy")):
            s[col] = s[col].fillna(s[src]) if col in s else s[src]
        filled.append(s.drop(columns=["_gs", "_ge", "_busy"]))
    return pd.concat(filled, ignore_index=True)


# --- communication ---------------------------------------------------------------


def comm_per_step(steps: pa.Table | pd.DataFrame, gpu_activity: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """One row per (rank, step): communication, exposed communication and compute inside the step window.

    Columns: rank, step_id, request_id, kind, window_ns, comm_ns,
    exposed_comm_ns, compute_ns, nccl_kernels. Each rank is measured on its
    own clock; the device is the one its kernels ran on.
    """
    cols = ["rank", "step_id", "request_id", "kind", "window_ns", "comm_ns", "exposed_comm_ns", "compute_ns",
            "nccl_kernels"]  # fmt: skip
    st = _step_frame(steps, None)
    if st.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
    st = st.dropna(subset=["start_ns", "end_ns"]).copy()
    k = _kernels(gpu_activity)
    parts = []
    for rank, srank in st.groupby("rank", sort=True):
        lo = srank["start_ns"].to_numpy(dtype=np.int64)
        hi = srank["end_ns"].to_numpy(dtype=np.int64)
        comm = np.zeros(len(srank), dtype=np.int64)
        exposed = np.zeros_like(comm)
        compute = np.zeros_like(comm)
        n_nccl = np.zeros_like(comm)
        for _, kdev in k[k["rank"] == rank].groupby("device", sort=True, dropna=False):
            cov = _coverage(kdev)
            comm += _covered_in(*cov.comm, lo, hi)
            exposed += _covered_in(*cov.exposed, lo, hi)
            compute += _covered_in(*cov.compute, lo, hi)
            # A kernel belongs to the step its start falls in.
            starts = np.sort(kdev.loc[kdev["_nccl"], "ts_ns"].to_numpy(dtype=np.int64))
            n_nccl += np.searchsorted(starts, hi, side="left") - np.searchsorted(starts, lo, side="left")
        parts.append(
            pd.DataFrame(
                {
                    "rank": rank,
                    "step_id": srank["step_id"].to_numpy(),
                    "request_id": srank["request_id"].to_numpy(),
                    "kind": srank["kind"].to_numpy(),
                    "window_ns": hi - lo,
                    "comm_ns": comm,
                    "exposed_comm_ns": exposed,
                    "compute_ns": compute,
                    "nccl_kernels": n_nccl,
                }
            )
        )
    return pd.concat(parts, ignore_index=True)[cols]


def _kernels(gpu_activity: pa.Table | pd.DataFrame) -> pd.DataFrame:
    k = _df(gpu_activity)
    if k.empty:
        return pd.DataFrame({"rank": [], "device": [], "ts_ns": [], "dur_ns": [], "name": [], "_nccl": []})
    k = k[k["kind"].astype("string") == "kernel"].dropna(subset=["ts_ns", "dur_ns"]).copy()
    k["rank"] = k["rank"].fillna(0).astype("int64")
    k["device"] = k["device"].fillna(-1).astype("int64")
    k["_nccl"] = is_nccl(k["name"])
    return k


def comm_per_phase(steps: pa.Table | pd.DataFrame, gpu_activity: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """Communication per (rank, phase), plus an ``outside`` row for NCCL time outside every step.

    Columns: rank, phase, steps, time_ns (sum of step windows), comm_ns,
    exposed_comm_ns, overlapped_comm_ns, comm_share, exposed_share (of
    time_ns), nccl_kernels.
    """
    per_step = comm_per_step(steps, gpu_activity)
    k = _kernels(gpu_activity)
    rows = []
    for (rank, kind), g in per_step.groupby(["rank", "kind"], sort=True):
        rows.append(_phase_row(_int(rank), str(kind), len(g), g))
    for rank, kr in k.groupby("rank", sort=True):
        total_comm = total_exposed = 0
        for _, kdev in kr.groupby("device", sort=True, dropna=False):
            cov = _coverage(kdev)
            total_comm += int((cov.comm[1] - cov.comm[0]).sum())
            total_exposed += int((cov.exposed[1] - cov.exposed[0]).sum())
        in_steps = per_step[per_step["rank"] == rank]
        out_comm = total_comm - int(in_steps["comm_ns"].sum())
        n_out = int(kr["_nccl"].sum()) - int(in_steps["nccl_kernels"].sum())
        if out_comm > 0 or n_out > 0 or in_steps.empty:
            rows.append(
                {
                    "rank": _int(rank), "phase": OUTSIDE, "steps": 0, "time_ns": 0, "comm_ns": out_comm,
                    "exposed_comm_ns": total_exposed - int(in_steps["exposed_comm_ns"].sum()),
                    "nccl_kernels": n_out,
                }
            )  # fmt: skip
    cols = ["rank", "phase", "steps", "time_ns", "comm_ns", "exposed_comm_ns", "overlapped_comm_ns", "comm_share",
            "exposed_share", "nccl_kernels", *_SPLIT_COLS]  # fmt: skip
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
    out = pd.DataFrame(rows)
    out["overlapped_comm_ns"] = out["comm_ns"] - out["exposed_comm_ns"]
    t = out["time_ns"].where(out["time_ns"] > 0)
    out["comm_share"] = out["comm_ns"] / t
    out["exposed_share"] = out["exposed_comm_ns"] / t
    split = comm_split_per_phase(comm_instances(steps, gpu_activity))
    out = out.merge(split, on=["rank", "phase"], how="left")
    for c in _SPLIT_COLS:
        if c != "wait_share":
            out[c] = out[c].fillna(0).astype("int64")
    return out.sort_values(["rank", "phase"], kind="stable").reset_index(drop=True)[cols]


def _phase_row(rank: int, kind: str, n: int, g: pd.DataFrame) -> dict[str, object]:
    return {
        "rank": rank,
        "phase": kind,
        "steps": n,
        "time_ns": int(g["window_ns"].sum()),
        "comm_ns": int(g["comm_ns"].sum()),
        "exposed_comm_ns": int(g["exposed_comm_ns"].sum()),
        "nccl_kernels": int(g["nccl_kernels"].sum()),
    }


# --- transfer vs wait ------------------------------------------------------------

_INSTANCE_COLS = [
    "rank", "step_id", "kind", "seq", "collective", "name", "ts_ns", "dur_ns", "matched", "min_dur_ns",
    "transfer_ns", "wait_ns", "unmatched_ns", "last_arrival", "end_spread_ns",
]  # fmt: skip


def comm_instances(steps: pa.Table | pd.DataFrame, gpu_activity: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """One row per (rank, NCCL kernel), matched across ranks into collective instances.

    A kernel belongs to the step of its rank whose window holds its start
    (``step_id`` -1 and kind ``outside`` if none); ``seq`` is its order among
    that rank's NCCL kernels of the step. Instance key: (step_id, seq). An
    instance is matched when every rank of the run has the same number of NCCL
    kernels in that step and the same collective at that position. Matched:
    ``transfer_ns`` = the instance's shortest duration across ranks,
    ``wait_ns`` = dur_ns - transfer_ns; unmatched: ``unmatched_ns`` = dur_ns.
    ``last_arrival`` marks the rank that started the instance last (the one
    the others waited for; ties: lowest rank); ``end_spread_ns`` = latest -
    earliest end across ranks, which should be small if the model holds.
    """
    k = _kernels(gpu_activity)
    k = k[k["_nccl"]]
    if k.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in _INSTANCE_COLS})
    st = _step_frame(steps, None)
    if not st.empty:
        st = st.dropna(subset=["start_ns", "end_ns"])
    all_ranks = set(k["rank"].unique()) | (set(st["rank"].unique()) if not st.empty else set())
    parts = []
    for rank, kr in k.groupby("rank", sort=True):
        kr = kr.sort_values(["ts_ns", "dur_ns"], kind="stable")
        ts = kr["ts_ns"].to_numpy(dtype=np.int64)
        sid = np.full(len(kr), -1, dtype=np.int64)
        kind = np.full(len(kr), OUTSIDE, dtype=object)
        sr = st[st["rank"] == rank].sort_values("start_ns") if not st.empty else st
        if len(sr):
            lo = sr["start_ns"].to_numpy(dtype=np.int64)
            hi = sr["end_ns"].to_numpy(dtype=np.int64)
            i = np.searchsorted(lo, ts, side="right") - 1
            ok = (i >= 0) & (ts < hi[np.clip(i, 0, None)])
            sid[ok] = sr["step_id"].to_numpy(dtype=np.int64)[i[ok]]
            kind[ok] = sr["kind"].astype(object).to_numpy()[i[ok]]
        names = kr["name"].astype(str)
        cols = {
            "rank": _int(rank), "step_id": sid, "kind": kind, "collective": names.map(collective).to_numpy(),
            "name": names.to_numpy(), "ts_ns": ts, "dur_ns": kr["dur_ns"].to_numpy(dtype=np.int64),
        }  # fmt: skip
        parts.append(pd.DataFrame(cols))
    df = pd.concat(parts, ignore_index=True)
    df["seq"] = df.groupby(["rank", "step_id"], sort=False).cumcount().astype("int64")
    df["_end"] = df["ts_ns"] + df["dur_ns"]
    # A step is matchable only if every rank issued the same number of NCCL kernels in it.
    counts = df.groupby(["step_id", "rank"]).size().unstack(fill_value=0)
    counts = counts.reindex(columns=sorted(all_ranks), fill_value=0)
    same = (counts.nunique(axis=1) == 1) & (counts.min(axis=1) > 0) & (len(all_ranks) > 1)
    g = df.groupby(["step_id", "seq"], sort=False)
    df["_coll_same"] = g["collective"].transform("nunique") == 1
    df["matched"] = df["step_id"].map(same).fillna(False).astype(bool) & df["_coll_same"]
    df["min_dur_ns"] = g["dur_ns"].transform("min").astype("int64")
    df["end_spread_ns"] = (g["_end"].transform("max") - g["_end"].transform("min")).astype("int64")
    last_ts = g["ts_ns"].transform("max")
    first_late = df[df["ts_ns"] == last_ts].sort_values("rank").drop_duplicates(["step_id", "seq"])
    df["last_arrival"] = False
    df.loc[first_late.index, "last_arrival"] = True
    m = df["matched"]
    df["transfer_ns"] = np.where(m, df["min_dur_ns"], 0).astype("int64")
    df["wait_ns"] = np.where(m, df["dur_ns"] - df["min_dur_ns"], 0).astype("int64")
    df["unmatched_ns"] = np.where(m, 0, df["dur_ns"]).astype("int64")
    df["last_arrival"] = df["last_arrival"] & m
    df["kind"] = df["kind"].astype("string")
    return df.sort_values(["rank", "ts_ns"], kind="stable").reset_index(drop=True)[_INSTANCE_COLS]


_SPLIT_COLS = ["nccl_kernel_ns", "transfer_ns", "wait_ns", "unmatched_ns", "wait_share", "last_arrivals"]


def comm_split_per_phase(instances: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, phase): NCCL kernel time split into transfer, wait and unmatched.

    Columns: rank, phase, nccl_kernel_ns (sum of NCCL kernel durations, by
    start), transfer_ns, wait_ns, unmatched_ns, wait_share (wait / kernel
    time), last_arrivals (instances this rank reached last: it made the
    others wait).
    """
    cols = ["rank", "phase", *_SPLIT_COLS]
    if instances.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
    g = instances.assign(phase=instances["kind"].astype(str)).groupby(["rank", "phase"], sort=True)
    out = pd.DataFrame(
        {
            "nccl_kernel_ns": g["dur_ns"].sum(),
            "transfer_ns": g["transfer_ns"].sum(),
            "wait_ns": g["wait_ns"].sum(),
            "unmatched_ns": g["unmatched_ns"].sum(),
            "last_arrivals": g["last_arrival"].sum().astype("int64"),
        }
    ).reset_index()
    out["wait_share"] = out["wait_ns"] / out["nccl_kernel_ns"].where(out["nccl_kernel_ns"] > 0)
    return out[cols]


def comm_by_collective(gpu_activity: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """NCCL kernels per (rank, collective): count, total, mean and max duration."""
    k = _kernels(gpu_activity)
    k = k[k["_nccl"]]
    cols = ["rank", "collective", "kernels", "total_ns", "mean_ns", "max_ns"]
    if k.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
    k = k.assign(collective=k["name"].astype(str).map(collective))
    g = k.groupby(["rank", "collective"], sort=True)["dur_ns"]
    out = pd.DataFrame({"kernels": g.size(), "total_ns": g.sum(), "mean_ns": g.mean(), "max_ns": g.max()})
    return out.reset_index()[cols]


def clock_offsets_from_collectives(
    gpu_activity: pa.Table | pd.DataFrame, *, reference_rank: int = 0
) -> dict[int, int]:
    """Per-rank clock offsets (ns) from matched NCCL kernel ends, for traces of several hosts.

    A collective completes at (nearly) the same instant on every rank, so the
    i-th NCCL kernel end on rank r minus the i-th on the reference rank is that
    rank's clock offset; the median over collectives resists outliers. Ranks
    whose NCCL kernel count differs from the reference get no offset (0).
    """
    k = _kernels(gpu_activity)
    k = k[k["_nccl"]]
    ends = {
        _int(r): np.sort((g["ts_ns"] + g["dur_ns"]).to_numpy(dtype=np.int64)) for r, g in k.groupby("rank")
    }
    ref = ends.get(reference_rank)
    out: dict[int, int] = {}
    for r, e in ends.items():
        if ref is None or len(e) != len(ref) or len(e) == 0:
            out[r] = 0
        else:
            out[r] = int(np.median(e - ref))
    return out


@dataclass(frozen=True)
class RankAnalysis:
    """Everything the cross-rank pass computes, as plain DataFrames."""

    aligned_steps: pd.DataFrame
    skew: pd.DataFrame
    comm_steps: pd.DataFrame
    comm_phases: pd.DataFrame
    collectives: pd.DataFrame
    comm_instances: pd.DataFrame


def analyze_ranks(
    steps: pa.Table | pd.DataFrame,
    gpu_activity: pa.Table | pd.DataFrame,
    *,
    clock_offsets_ns: Mapping[int, int] | None = None,
) -> RankAnalysis:
    """Run every cross-rank pass over one multi-rank run's tables."""
    aligned = align_steps(steps, clock_offsets_ns=clock_offsets_ns)
    return RankAnalysis(
        aligned_steps=aligned,
        skew=skew_summary(aligned),
        comm_steps=comm_per_step(steps, gpu_activity),
        comm_phases=comm_per_phase(steps, gpu_activity),
        collectives=comm_by_collective(gpu_activity),
        comm_instances=comm_instances(steps, gpu_activity),
    )
