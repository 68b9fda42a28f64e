"""Nsight Compute's CSV export -> the ``ncu_counters`` table (tracekit.model.schema).

The one reader of Nsight Compute output. The file is what

    ncu -i REPORT.ncu-rep --csv --page raw --print-units base --print-kernel-base mangled [--metrics ...]

writes: a header row, a units row, then one row per profiled kernel in launch order; or the details
page (``--csv`` alone, or ``--page details``: one row per kernel and metric, as its sections name them),
which is read as the raw page of the metrics it shows (Speed Of Light's duration, DRAM, memory and SM
throughput; metrics requested by id). Columns are
read by name, never by position (``--nvtx`` inserts two). Numbers may carry thousands separators;
units are scaled to ns and bytes whatever ``--print-units`` said; ``n/a`` is null, and a metric that
is n/a for every kernel is an error (ncu exits 0 on an unknown metric), as is any other value ncu does
not write in a column tracekit reads (a decimal comma, ``inf``, a negative count, an ID that is not a
whole number). A BOM and header rows repeated by appended exports are skipped. Mangled C++ names are
demangled (``__cxa_demangle``), which gives exactly Kineto's spelling of a kernel's name; ncu's own
demangled spelling does not. The step of each kernel comes from tracekit's NVTX step range
(``tracekit.step id=N``) in the push/pop or start/stop range columns.

Column meanings and the metric sets: docs/roofline.md, "Measured counters".
"""

from __future__ import annotations

import csv
import ctypes
import ctypes.util
import functools
import io
import math
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from tracekit.errors import TraceFormatError
from tracekit.model import schema as _schema

PCT = ".avg.pct_of_peak_sustained_elapsed"
DURATION = "gpu__time_duration.sum"
DRAM_READ, DRAM_WRITE = "dram__bytes_read.sum", "dram__bytes_write.sum"
DRAM_PCT = "dram__throughput" + PCT
DRAM_PCT_SOL = "gpu__dram_throughput" + PCT  # what the SpeedOfLight section shows as DRAM throughput
TENSOR_PCT = "sm__pipe_tensor_cycles_active" + PCT
TENSOR_PCT_ALT = "sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active" + PCT
SM_PCT = "sm__throughput" + PCT
MEMORY_PCT = "gpu__compute_memory_throughput" + PCT
WAVES = "launch__waves_per_multiprocessor"
FP32_OPS = ("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
            "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum")
FP16_OPS = ("smsp__sass_thread_inst_executed_op_hadd_pred_on.sum", "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum",
            "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum")

# One replay pass on Hopper (measured with ncu 2025.3.1 on an H200): no save/restore of device memory.
METRICS_ONE_PASS = (DURATION, DRAM_READ, DRAM_WRITE, DRAM_PCT, TENSOR_PCT)
# Nsight Compute's own Speed Of Light inputs: ~10 passes per kernel with save/restore (opt-in).
METRICS_SOL = (*METRICS_ONE_PASS, SM_PCT, MEMORY_PCT)
# SASS-patched instruction counters: FP32/FP16 FLOPs (2 more passes).
METRICS_FLOPS = (*METRICS_ONE_PASS, *FP32_OPS, *FP16_OPS)
METRIC_SETS = {"one-pass": METRICS_ONE_PASS, "sol": METRICS_SOL, "flops": METRICS_FLOPS}

STEP_RANGE = "tracekit.step id={}"  # the NVTX range tracekit pushes around each profiled step
STEP_PATTERN = re.compile(r"tracekit\.step id=(\d+)")
_TIME = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}
_BYTES = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12, "KB": 1e3, "MB": 1e6, "GB": 1e9}
_ID_COLUMNS = ("ID", "Kernel Name")
_FIELD_LIMIT = 64 << 20  # one CSV cell (a kernel name) may be this long
# The details page (``ncu --csv`` without ``--page raw``) has one row per kernel and metric, named as its
# sections show them: those tracekit reads, by (name, unit kind); a metric requested by id keeps its id.
_DETAILS = {("Duration", "time"): DURATION, ("DRAM Throughput", "%"): DRAM_PCT_SOL,
            ("Memory Throughput", "%"): MEMORY_PCT, ("Compute (SM) Throughput", "%"): SM_PCT,
            ("Waves Per SM", ""): WAVES}
_DETAIL_COLUMNS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value", "Rule Name", "Rule Type",
                   "Rule Description", "Estimated Speedup Type", "Estimated Speedup")


class CountersFormatError(TraceFormatError):
    """A counters file tracekit cannot read: not Nsight Compute's raw CSV, no kernels, metrics n/a."""


# --- demangling ---------------------------------------------------------------------


@functools.cache
def _cxa_demangle() -> Any:
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        libc = ctypes.CDLL(None)
        fn = lib.__cxa_demangle
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_int)]
    libc.free.argtypes = [ctypes.c_void_p]
    return fn, libc.free


def _cxxfilt(names: list[str]) -> list[str] | None:
    exe = shutil.which("c++filt")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe], input="\n".join(names) + "\n", capture_output=True, text=True, timeout=60,
                             check=True).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    return out if len(out) == len(names) else None


def demangle(names: Iterable[str]) -> list[str]:
    """Itanium-mangled names (``_Z...``) demangled as c++filt does; other names unchanged.

    Uses libstdc++'s ``__cxa_demangle``, else the ``c++filt`` program; a name neither can read is
    returned as it is.
    """
    names = [str(n) for n in names]
    todo = sorted({n for n in names if n.startswith("_Z")})
    if not todo:
        return names
    found: dict[str, str] = {}
    lib = _cxa_demangle()
    if lib is not None:
        fn, free = lib
        for n in todo:
            status = ctypes.c_int()
            ptr = fn(n.encode(), None, None, ctypes.byref(status))
            if status.value == 0 and ptr:
                try:
                    found[n] = ctypes.string_at(ptr).decode("utf-8", "replace")
                finally:
                    free(ptr)
    rest = [n for n in todo if n not in found]
    if rest:
        filt = _cxxfilt(rest)
        if filt is not None:
            found.update({a: b for a, b in zip(rest, filt, strict=True) if b != a})
    return [found.get(n, n) for n in names]


# --- the CSV ------------------------------------------------------------------------


# A number as ncu writes one: digits with an optional fraction and exponent, commas only as thousands
# separators in groups of three ("1,760", "12.50", "1.5e+06"). "1,5" or "1.830,5" (a decimal-comma
# locale), "inf", "nan" or "-3" are not: no counter tracekit reads is negative or infinite.
_NCU_NUMBER = re.compile(r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?")
_ID_LIMIT = 2**31  # an id, stream or dimension past this is no kernel's (and overflows the int32 columns)


def _number(text: str) -> float:
    """A counter value: NaN for ``n/a`` or an empty cell; ValueError for anything ncu does not write."""
    t = text.strip()
    if not t or "n/a" in t:
        return math.nan
    if _NCU_NUMBER.fullmatch(t) is None:
        raise ValueError(f"{t[:40]!r} is not a number as Nsight Compute writes one")
    v = float(t.replace(",", ""))
    if not math.isfinite(v):
        raise ValueError(f"{t[:40]!r} is out of range")
    return v


def _count(text: str, what: str, row: int) -> int | None:
    """A kernel's ID or stream: an integer in [0, 2**31), None for n/a; CountersFormatError otherwise."""
    try:
        v = _number(text)
    except ValueError:
        v = -1.0
    if math.isnan(v):
        return None
    if v != int(v) or not 0 <= v < _ID_LIMIT:
        raise CountersFormatError(f"the counters file's row {row}: {what} {text.strip()[:40]!r} is not a "
                                  "kernel's (a whole number from 0)")
    return int(v)


def _dims(text: str, row: int) -> list[int] | None:
    nums = [int(x) for x in re.findall(r"\d+", text or "")]
    if any(n >= _ID_LIMIT for n in nums):
        raise CountersFormatError(f"the counters file's row {row}: grid or block {text.strip()[:60]!r} is "
                                  "no kernel's launch size")
    return nums or None


def _scale(unit: str) -> float:
    """Factor to ns (times) or bytes (sizes); 1 for %, counts and unknown units."""
    return _TIME.get(unit) or _BYTES.get(unit) or 1.0


def _rows(text: str) -> tuple[list[str], list[str], list[list[str]]]:
    # Demangled C++ kernel names run past the csv module's default field limit (128 KiB).
    csv.field_size_limit(max(csv.field_size_limit(), _FIELD_LIMIT))
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        raise CountersFormatError(f"not an Nsight Compute CSV ({exc})") from None
    # ncu may print ==PROF== / ==WARNING== lines before the table when stdout was captured whole
    start = next((i for i, r in enumerate(rows) if all(c in r for c in _ID_COLUMNS)), None)
    if start is None:
        raise CountersFormatError("not an Nsight Compute CSV (no \"ID\" and \"Kernel Name\" columns): "
                                  "export with ncu -i REPORT --csv --page raw --print-units base")
    header = rows[start]
    if all(c in header for c in ("Metric Name", "Metric Value")):
        return _details_as_raw(header, rows[start + 1:])
    body = [r for r in rows[start + 1:] if len(r) == len(header) and r != header]
    units: list[str] = [""] * len(header)
    if body and body[0][header.index("ID")] == "":
        units = body[0]
        # exports appended to one file repeat the header and units rows: neither is a kernel
        body = [r for r in body[1:] if r != units]
    return header, units, body


def _details_as_raw(header: list[str], rows: list[list[str]]) -> tuple[list[str], list[str], list[list[str]]]:
    """The details page's rows (one per kernel and metric, each value in its own unit; rule rows and
    their extra columns beside) as the raw page's: one row per kernel (ID, in the order they come), a
    column per metric tracekit reads (``_DETAILS``, or a metric id as named) in base units."""
    ids = [i for i, h in enumerate(header) if h not in _DETAIL_COLUMNS]
    name_i, unit_i, value_i = (header.index(c) for c in ("Metric Name", "Metric Unit", "Metric Value"))
    id_i = header.index("ID")
    metrics: set[str] = set()
    kernels: dict[str, tuple[list[str], dict[str, str]]] = {}
    for r in rows:
        if len(r) <= value_i or not r[id_i].strip() or not r[name_i].strip():
            continue  # a rule's row, or a broken one
        name, unit = r[name_i].strip(), r[unit_i].strip()
        kind = "time" if unit in _TIME else ("%" if unit == "%" else "")
        metric = name if "__" in name else _DETAILS.get((name, kind))
        k = kernels.setdefault(r[id_i], ([r[i] for i in ids], {}))
        if metric is not None and metric not in k[1]:  # the first section that shows it (Speed Of Light)
            metrics.add(metric)
            try:
                v = _number(r[value_i]) * _scale(unit)
            except ValueError as exc:
                raise CountersFormatError(f"the counters file's metric {name[:80]!r}: {exc}") from None
            k[1][metric] = "n/a" if math.isnan(v) else repr(v)
    names = sorted(metrics)
    return ([header[i] for i in ids] + names, [""] * (len(ids) + len(names)),
            [cols + [vals.get(m, "n/a") for m in names] for cols, vals in kernels.values()])


def read_csv(source: str | Path, *, step_pattern: re.Pattern[str] = STEP_PATTERN,
             required: Iterable[str] = ()) -> pa.Table:
    """An Nsight Compute CSV, raw or details page (a path or its text), as an ``ncu_counters`` table.

    ``required``: metrics that must be present and not n/a for every kernel: a missing column, or
    one n/a everywhere, raises CountersFormatError naming them. ``step_pattern``: the regex whose
    first group is the step id in the NVTX range columns (kernels outside every such range get a
    null step_id; ``ordinal`` then counts within the null group).
    """
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and len(source) < 4096):
        path = Path(source)
        if not path.is_file():
            raise CountersFormatError(f"{path}: no such counters file")
        raw = path.read_bytes()
        # a BOM says the encoding (a file saved by a spreadsheet or on Windows); else UTF-8
        text = raw.decode("utf-16" if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig", errors="replace")
    else:
        text = str(source)
    header, units, body = _rows(text)
    if not body:
        raise CountersFormatError("the counters file has no kernels (ncu profiled nothing: "
                                  "was the step window reached?)")
    col = {name: i for i, name in enumerate(header)}
    if not any(m in col for m in _READ):
        raise CountersFormatError("the counters file has none of the metrics tracekit reads (duration, DRAM "
                                  "bytes or throughput, SM or tensor throughput): see docs/roofline.md, "
                                  "\"Measured counters\"")
    missing = [m for m in required if m not in col]
    if missing:
        raise CountersFormatError(f"metrics not in the counters file: {', '.join(missing)}")

    def metric(name: str) -> list[float]:
        if name not in col:
            return [math.nan] * len(body)
        i = col[name]
        s = _scale(units[i].strip())
        try:
            return [_number(r[i]) * s for r in body]
        except ValueError as exc:
            raise CountersFormatError(f"the counters file's column {name}: {exc}") from None

    def first(*names: str) -> list[float]:
        for n in names:
            if n in col:
                return metric(n)
        return [math.nan] * len(body)

    for m in required:
        if all(math.isnan(v) for v in metric(m)):
            raise CountersFormatError(f"metric {m} is n/a for every kernel: this GPU or ncu does not have it")
    nvtx = [i for i, h in enumerate(header) if "Push/Pop_Range" in h or "Start/Stop_Range" in h]

    def step_of(r: list[str]) -> int | None:
        found: list[str] = []
        for i in nvtx:
            found += step_pattern.findall(r[i])
        # a step id past 2**31 is no step tracekit numbered: the kernel is outside every step range
        return int(found[-1]) if found and len(found[-1]) < 11 and int(found[-1]) < _ID_LIMIT else None

    steps = [step_of(r) for r in body]
    ordinal: list[int] = []
    seen: dict[int | None, int] = {}
    for s in steps:
        ordinal.append(seen.get(s, 0))
        seen[s] = seen.get(s, 0) + 1
    reads, writes = metric(DRAM_READ), metric(DRAM_WRITE)
    dram = [a + (0.0 if math.isnan(b) else b) for a, b in zip(reads, writes, strict=True)]
    flops = _flops(metric)
    stream = [_count(r[col["Stream"]], "stream", n) for n, r in enumerate(body)] if "Stream" in col \
        else [None] * len(body)
    ids = [_count(r[col["ID"]], "kernel ID", n) for n, r in enumerate(body)]
    if None in ids:
        raise CountersFormatError(f"the counters file's row {ids.index(None)}: a kernel without an ID")
    return _schema.from_columns("ncu_counters", {
        "step_id": steps,
        "ordinal": ordinal,
        "ncu_id": ids,
        "name": demangle(r[col["Kernel Name"]] for r in body),
        "stream": stream,
        "grid": [_dims(r[col["Grid Size"]], n) for n, r in enumerate(body)] if "Grid Size" in col else None,
        "block": [_dims(r[col["Block Size"]], n) for n, r in enumerate(body)] if "Block Size" in col else None,
        "ncu_dur_ns": metric(DURATION),
        "dram_bytes": dram,
        "dram_pct": first(DRAM_PCT, DRAM_PCT_SOL),
        "sm_pct": metric(SM_PCT),
        "memory_pct": metric(MEMORY_PCT),
        "tensor_pct": first(TENSOR_PCT, TENSOR_PCT_ALT),
        "ncu_flops": flops,
        "waves": metric(WAVES),
    })


_READ = (DURATION, DRAM_READ, DRAM_WRITE, DRAM_PCT, DRAM_PCT_SOL, TENSOR_PCT, TENSOR_PCT_ALT, SM_PCT, MEMORY_PCT,
         WAVES, *FP32_OPS, *FP16_OPS)


def _flops(metric: Any) -> list[float]:
    """fadd + fmul + 2 x ffma (FP32) plus the same for FP16, where the instruction counters were collected."""
    total: list[float] | None = None
    for add, mul, fma in (FP32_OPS, FP16_OPS):
        a, m, f = metric(add), metric(mul), metric(fma)
        if all(math.isnan(x) for x in (*a, *m, *f)):
            continue
        part = [(0 if math.isnan(x) else x) + (0 if math.isnan(y) else y) + 2 * (0 if math.isnan(z) else z)
                for x, y, z in zip(a, m, f, strict=True)]
        total = part if total is None else [p + q for p, q in zip(total, part, strict=True)]
    return total if total is not None else [math.nan] * len(metric(DURATION))


# --- writing the same layout (dry runs and tests) ----------------------------------------

_PUSH_POP = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
_START_STOP = "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
_OUT = ((DRAM_READ, "dram_bytes", "byte"), (DRAM_WRITE, None, "byte"), (DRAM_PCT, "dram_pct", "%"),
        (DURATION, "ncu_dur_ns", "ns"), (TENSOR_PCT, "tensor_pct", "%"), (SM_PCT, "sm_pct", "%"),
        (MEMORY_PCT, "memory_pct", "%"))


def to_csv(counters: Any, metrics: Iterable[str] = METRICS_ONE_PASS) -> str:
    """An ncu_counters-like DataFrame written in the layout ``ncu -i ... --csv --page raw --print-units base
    --nvtx`` uses (thousands separators, NVTX columns, units row): what ``read_csv`` reads back.

    For dry runs and tests where ncu cannot run; names are written as given (mangled or not).
    """
    wanted = set(metrics)
    cols = [(m, c, u) for m, c, u in _OUT if m in wanted]
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    ids = ["ID", "Process ID", "Process Name", "Host Name", _PUSH_POP, _START_STOP, "Kernel Name", "Context",
           "Stream", "Block Size", "Grid Size", "Device", "CC"]
    w.writerow(ids + [m for m, _, _ in sorted(cols)])
    w.writerow([""] * len(ids) + [u for _, _, u in sorted(cols)])

    def dims(v: Any) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            vals: list[Any] = [1, 1, 1]
        else:
            vals = re.findall(r"\d+", v) if isinstance(v, str) else list(v)
        return "(" + ", ".join(str(int(x)) for x in vals) + ")"

    def num(v: Any, unit: str) -> str:
        f = float(v) if v is not None else math.nan
        if math.isnan(f):
            return "n/a"
        return f"{f:,.0f}" if unit in ("byte", "ns") else f"{f:,.2f}"

    for i, r in enumerate(counters.to_dict("records")):
        step = r.get("step_id")
        known = step is not None and not (isinstance(step, float) and math.isnan(step))
        nvtx = f'1  "<default domain>:{STEP_RANGE.format(int(step))}:none:none:none:none:none:none" ' if known else ""
        row = [str(i), "1", "python3", "127.0.0.1", nvtx, "", str(r["name"]), "1", str(int(r.get("stream") or 7)),
               dims(r.get("block")), dims(r.get("grid")), "0", "9.0"]
        for _m, c, u in sorted(cols):
            row.append(num(r.get(c) if c else 0.0, u))
        w.writerow(row)
    return buf.getvalue()
