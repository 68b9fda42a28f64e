"""Energy per phase and per token from the counters table (NVML energy counter, else integrated power).

Metric names are the NVML sampler's (collectors/nvml.py METRICS); they are
named here once, for every analysis pass that reads counters.

- ``energy`` (J) is NVML's total energy since the driver loaded: the energy of a
  window is the difference of the counter, linearly interpolated at the window's ends
  between the samples where the counter CHANGED. The driver updates it more slowly
  than we sample (on an H200: a ~13 J jump every 100 ms, sampled every
  10 ms); interpolating between every sample put a whole jump into a 29 ms prefill
  (12.9 J, i.e. 445 W on a 134 W GPU). Between change points the slope is the mean
  power of the last update period, the best the counter can say about a short window.
- ``power`` (W) is an average over NVML's own short window: integrated with the
  trapezoid rule over the window (samples interpolated at the window's ends).
Windows that reach outside the sampled interval get NaN, never an extrapolation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from tracekit.analysis import arrays
from tracekit.analysis.intervals import union, window_arrays
from tracekit.model.ceilings import Ceiling

METRIC_ENERGY = "energy"  # J, cumulative
METRIC_POWER = "power"  # W
METRIC_DRAM_BW_UTIL = "dram_bw_util"  # %, GPM, over the interval starting at the sample
METRIC_MEM_USED = "mem_used"  # bytes


def series(counters: Any, metric: str, device: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(ts_ns, value) of one metric, sorted by time, NaNs dropped. ``counters``: Arrow or pandas."""
    if counters is None or arrays.rows(counters) == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    keep = np.array([str(m) == metric for m in arrays.objects(counters, "metric").tolist()], dtype=bool)
    if device is not None and arrays.has(counters, "device"):
        keep &= arrays.floats(counters, "device") == device
    ts, value = arrays.floats(counters, "ts_ns"), arrays.floats(counters, "value")
    keep &= ~np.isnan(ts) & ~np.isnan(value)
    rows = np.flatnonzero(keep)
    exact, _ = arrays.ints_or_null(counters, "ts_ns")
    order = rows[np.argsort(exact[rows], kind="stable")]
    return exact[order], value[order]


def _integral(ts: np.ndarray, v: np.ndarray, lo: int, hi: int) -> float:
    """∫ v dt over [lo, hi] (seconds × value) by the trapezoid rule; NaN outside the samples."""
    if len(ts) < 2 or lo < ts[0] or hi > ts[-1] or hi < lo:
        return float("nan")
    inner = (ts > lo) & (ts < hi)
    t = np.concatenate([[lo], ts[inner], [hi]]).astype(float)
    y = np.concatenate([[np.interp(lo, ts, v)], v[inner], [np.interp(hi, ts, v)]])
    return float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(t)) / 1e9)


def _change_points(ts: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The samples of a cumulative counter where its value changed: its update instants.

    The first sample is not one (the counter's last update before it is unknown), so
    a window before the second update falls back to integrated power.
    """
    if len(ts) < 2:
        return ts[:0], v[:0]
    keep = np.r_[False, v[1:] != v[:-1]]
    return ts[keep], v[keep]


def window_energy_j(counters: Any, windows: np.ndarray, device: int | None = None) -> np.ndarray:
    """Energy (J) in each [start, end) window: from the energy counter where it covers it, else from power."""
    return _energy(_energy_series(counters, device), windows)


def _energy_series(counters: Any, device: int | None) -> tuple[np.ndarray, ...]:
    """(energy change points ts, values, power ts, values): what window_energy_j reads, read once."""
    ets, ev = _change_points(*series(counters, METRIC_ENERGY, device))
    pts, pv = series(counters, METRIC_POWER, device)
    return ets, ev, pts, pv


def _energy(s: tuple[np.ndarray, ...], windows: np.ndarray) -> np.ndarray:
    ets, ev, pts, pv = s
    out = np.full(len(windows), np.nan)
    for i, (lo, hi) in enumerate(windows):
        if len(ets) >= 2 and ets[0] <= lo and hi <= ets[-1]:
            out[i] = float(np.interp(hi, ets, ev) - np.interp(lo, ets, ev))
        else:
            out[i] = _integral(pts, pv, int(lo), int(hi))
    return out


def window_mean(counters: Any, metric: str, windows: np.ndarray, device: int | None = None) -> float:
    """Time-weighted mean of a metric over the union of windows (step-hold between samples); NaN if unsampled."""
    return _mean(*series(counters, metric, device), windows)


def _mean(ts: np.ndarray, v: np.ndarray, windows: np.ndarray) -> float:
    if len(ts) == 0 or len(windows) == 0:
        return float("nan")
    total, weight = 0.0, 0.0
    for lo, hi in windows:
        # each sample holds until the next (GPM: "over the interval starting at the sample")
        idx = np.searchsorted(ts, [lo, hi], side="right") - 1
        if idx[0] < 0 or lo > ts[-1] + (ts[-1] - ts[-2] if len(ts) > 1 else 0):
            continue
        edges = np.concatenate([[lo], ts[(ts > lo) & (ts < hi)], [hi]])
        vals = v[np.clip(np.searchsorted(ts, edges[:-1], side="right") - 1, 0, None)]
        d = np.diff(edges).astype(float)
        total += float((vals * d).sum())
        weight += float(d.sum())
    return total / weight if weight > 0 else float("nan")


class StepGroups:
    """The step windows of each (request, phase) as arrays, made once per pass: the steps whose kind
    is the phase (and whose request is the request, where one is given), in the steps' order.
    ``steps``: Arrow or pandas."""

    def __init__(self, steps: Any) -> None:
        rows, self.start, self.end = window_arrays(steps)
        self.kind = np.array([str(k) for k in arrays.objects(steps, "kind")[rows].tolist()], dtype=object)
        self.request = arrays.floats(steps, "request_id")[rows] if arrays.has(steps, "request_id") else None
        self.tokens = arrays.floats(steps, "tokens")[rows] if arrays.has(steps, "tokens") else None

    def rows(self, phase: Any, request: Any) -> np.ndarray:
        """The steps of ``phase`` (and of ``request`` where it is not null)."""
        mask = self.kind == str(phase)
        if request is not None and request == request:
            if self.request is None:
                raise KeyError("request_id")
            mask &= self.request == float(request)
        return np.flatnonzero(mask)

    def windows(self, rows: np.ndarray) -> np.ndarray:
        return union(self.start[rows], self.end[rows])


def _with(table: pa.Table, columns: dict[str, np.ndarray]) -> pa.Table:
    """``table`` with float64 columns set (replaced or added at the end), NaN as null."""
    for name, values in columns.items():
        col = arrays.column(values, pa.float64())
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, col) if i >= 0 else table.append_column(name, col)
    return table


def _keys(phases: pa.Table) -> tuple[list[Any], list[Any]]:
    """Each phase row's (phase, request_id); request_id None where the table has none."""
    n = phases.num_rows
    rids = phases.column("request_id").to_pylist() if "request_id" in phases.column_names else [None] * n
    return phases.column("phase").to_pylist(), rids


def phase_energy(phases: Any, steps: Any, counters: Any, device: int | None = None, groups: StepGroups | None = None
                 ) -> pa.Table:
    """phases (Arrow or pandas) plus energy_j and energy_j_per_token, from the steps of each (request,
    phase), as an Arrow table.

    A step's window is [cpu_start, max(cpu_end, gpu_end)) (the bound pass's). Tokens:
    the steps table's ``tokens`` (query tokens; for decode, tokens generated). ``groups``:
    StepGroups(steps) where the caller has it.
    """
    out = arrays.table(phases)
    n = out.num_rows
    energy_j, per_token = np.full(n, np.nan), np.full(n, np.nan)
    if n and arrays.rows(steps) and counters is not None and arrays.rows(counters):
        g = groups if groups is not None else StepGroups(steps)
        energy = _energy_series(counters, device)
        for i, (phase, rid) in enumerate(zip(*_keys(out), strict=True)):
            rows = g.rows(phase, rid if g.request is not None else None)
            if not len(rows):
                continue
            e = float(np.sum(_energy(energy, g.windows(rows))))
            energy_j[i] = e
            tokens = np.nansum(g.tokens[rows]) if g.tokens is not None else np.nan
            if tokens and tokens > 0:
                per_token[i] = e / tokens
    return _with(out, {"energy_j": energy_j, "energy_j_per_token": per_token})


def gpm_dram_columns(phases: Any, steps: Any, counters: Any, device: int | None, peak_bytes_per_s: float,
                     groups: StepGroups | None = None) -> pa.Table:
    """phases (Arrow or pandas) plus gpm_dram_bw_util_pct (GPM's DRAM bandwidth utilisation,
    time-weighted over each (request, phase)'s step windows) and gpm_dram_tbps (that share of
    ``peak_bytes_per_s``), as an Arrow table. ``groups``: StepGroups(steps) where the caller has it."""
    out = arrays.table(phases)
    g = groups if groups is not None else StepGroups(steps)
    util, tbps = [], []
    dram = series(counters, METRIC_DRAM_BW_UTIL, device)
    for phase, rid in zip(*_keys(out), strict=True):
        u = _mean(*dram, g.windows(g.rows(phase, rid)))
        util.append(u)
        tbps.append(u / 100.0 * peak_bytes_per_s / 1e12)
    return _with(out, {"gpm_dram_bw_util_pct": np.array(util, dtype=np.float64),
                       "gpm_dram_tbps": np.array(tbps, dtype=np.float64)})


def energy_pass(gpu_activity: Any, steps: Any, phases: Any, counters: Any, *, bound_ran: bool,
                ceiling: Ceiling | None) -> pa.Table | None:
    """The energy pass, after the bound pass: the phases with energy and GPM DRAM columns, from the
    counters, as an Arrow table. None (the phases unchanged) unless the bound pass classed kernels
    (``bound_ran``), there are counters and a ceiling. ``steps``: the captured steps; the device is
    the one most GPU activities ran on. Every table: Arrow or pandas.
    """
    if not bound_ran or counters is None or not arrays.rows(counters) or ceiling is None:
        return None
    devs = arrays.floats(gpu_activity, "device") if arrays.has(gpu_activity, "device") else np.zeros(0)
    devs = devs[~np.isnan(devs)]
    dev = None
    if len(devs):
        values, counts = np.unique(devs, return_counts=True)
        dev = int(values[np.argmax(counts)])  # the most frequent; the least of a tie (Series.mode)
    groups = StepGroups(steps) if arrays.rows(steps) else None
    ph = phase_energy(phases, steps, counters, dev, groups)
    return gpm_dram_columns(ph, steps, counters, dev, ceiling.peak_bytes_per_s, groups)
