"""Chrome trace JSON (.json / .json.gz): loading, merging, trimming Kineto traces.

Kineto's trace is kept as written; ``merge`` splices in tracekit's own events
(built by ``tracekit.trace.tracks``: requests, steps by kind, NVML/GPM counters), so
Perfetto shows kernels, requests, prefill/decode steps and GPU counters on one
timeline.

Clock: Kineto writes ``ts`` in microseconds relative to ``baseTimeNanoseconds``
(torch >= 2.4); tracekit's tables use that ``ts`` converted to int64 ns (the
"trace clock"). Host timestamps map onto it by the offset measured from the
``tracekit.clock_sync host_ns=<t>`` annotations.

Merging streams the Kineto text (a 500-token trace is over 1 GB; parsing it
whole just to add a few thousand events would be wasteful).
"""

from __future__ import annotations

import gzip
import io
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from tracekit.errors import TraceFormatError
from tracekit.ingest.framing import is_gzip
from tracekit.ingest.own import Annotation, find_annotations
from tracekit.model.stepnames import REQUEST_PREFIX, STEP_PREFIX, parse_step
from tracekit.store.rundir import atomic_path

CLOCK_SYNC = "tracekit.clock_sync"

_CHUNK = 1 << 22


def open_text(path: Path) -> IO[str]:
    """A trace file as text, gzip or not (decided by magic bytes, not the name)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if is_gzip(path):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def load(path: str | Path) -> dict[str, Any]:
    """Parse a whole trace (small traces, fixtures, tests)."""
    path = Path(path)
    try:
        with open_text(path) as fh:
            data = json.load(fh)
    except (OSError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceFormatError(f"{path}: not a readable Chrome trace ({exc})") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceFormatError(f"{path}: no traceEvents array")
    return data


def write(path: str | Path, data: dict[str, Any]) -> None:
    """Write a trace atomically; gzip if the name ends in .gz."""
    path = Path(path)
    with atomic_path(path) as tmp:
        if path.name.endswith(".gz"):
            with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=6) as fh:
                json.dump(data, fh, separators=(",", ":"))
        else:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(data, fh, separators=(",", ":"))


# --- clock sync ------------------------------------------------------------------


@dataclass(frozen=True)
class ClockSync:
    trace_ns: int
    host_ns: int

    @property
    def offset_ns(self) -> int:
        return self.trace_ns - self.host_ns


def find_clock_syncs(path: str | Path) -> list[ClockSync]:
    """Every ``tracekit.clock_sync host_ns=<t>`` annotation as a (trace, host) time pair."""
    return clock_syncs(find_annotations(path))


def clock_syncs(annotations: Sequence[Annotation]) -> list[ClockSync]:
    """The ``tracekit.clock_sync host_ns=<t>`` annotations among ``annotations`` as (trace, host) time pairs."""
    out = []
    for a in annotations:
        if a.name.startswith(CLOCK_SYNC + " host_ns="):
            out.append(ClockSync(a.ts_ns, int(a.name.split("host_ns=", 1)[1])))
    return out


def clock_offset(syncs: Sequence[ClockSync]) -> int | None:
    """trace_ns - host_ns; None where the trace has none.

    Each pair reads the host clock just before the annotation opens, so a
    pair can only overstate the offset (by whatever ran in between, e.g. the
    profiler's own start-up before its first annotation). The minimum over the pairs is the best estimate, as in NTP's
    minimum-delay filter.
    """
    if not syncs:
        return None
    return min(s.offset_ns for s in syncs)


# --- merging tracekit's events into a Kineto trace ----------------------------------


_EVENTS_KEY = re.compile(r'"traceEvents"\s*:\s*\[')


def merge(kineto: str | Path | None, out: str | Path, events: Sequence[dict[str, Any]]) -> Path:
    """Write ``out`` (gzip): the Kineto trace with ``events`` spliced into its traceEvents.

    Streams the Kineto bytes; never parses them (a 500-token trace is over 1 GB). Without a Kineto trace
    (no profiler, or a window never reached) the result holds tracekit's events only. Compressed with
    ISA-L where installed (several times faster than zlib, a slightly larger file).
    """
    out = Path(out)
    extra = ",\n".join(json.dumps(e, separators=(",", ":")) for e in events).encode()
    with atomic_path(out) as tmp, _gzip_out(tmp) as dst:
        if kineto is None or not Path(kineto).is_file() or Path(kineto).stat().st_size == 0:
            dst.write(b'{"displayTimeUnit":"ms","traceEvents":[\n' + extra + b"\n]}\n")
            return out
        with _open_bytes(Path(kineto)) as src:
            head = b""
            blocks = _byte_chunks(src)
            for block in blocks:
                head += block
                m = _EVENTS_KEY_B.search(head)
                if m:
                    dst.write(head[: m.end()])
                    rest = head[m.end() :]
                    while not rest.strip():  # whether the array is empty is decided by what follows
                        more = next(blocks, b"")
                        if not more:
                            break
                        rest += more
                    # An empty traceEvents array must not get a dangling comma.
                    if extra:
                        dst.write(b"\n" + extra + (b"," if rest.lstrip()[:1] != b"]" else b"") + b"\n")
                    dst.write(rest)
                    break
                if len(head) > 64 * _CHUNK:
                    raise TraceFormatError(f"{kineto}: no traceEvents array near the start")
            else:
                raise TraceFormatError(f"{kineto}: no traceEvents array")
            for block in blocks:
                dst.write(block)
    return out


_EVENTS_KEY_B = re.compile(rb'"traceEvents"\s*:\s*\[')


def _byte_chunks(fh: IO[bytes]) -> Iterator[bytes]:
    while True:
        block = fh.read(_CHUNK)
        if not block:
            return
        yield block


def _open_bytes(path: Path) -> IO[bytes]:
    """A trace file's bytes, inflated if gzip (by magic bytes); UTF-8 is checked on the way (as reading
    it as text did), so a non-UTF-8 trace is an error here too."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    raw = gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")  # noqa: SIM115 (closed by the wrapper)
    return cast(IO[bytes], _Utf8Checked(cast(IO[bytes], raw)))


class _Utf8Checked(io.RawIOBase):
    """The bytes a text read (UTF-8, universal newlines) gives, re-encoded: invalid UTF-8 raises, and
    CR LF or a lone CR becomes LF. Only validated, never decoded into the output."""

    def __init__(self, raw: IO[bytes]) -> None:
        import codecs

        self._raw = raw
        self._dec = codecs.getincrementaldecoder("utf-8")()
        self._cr = False  # the last block ended in CR: a LF starting the next one is its pair

    def read(self, n: int = -1) -> bytes:
        b = self._raw.read(n)
        self._dec.decode(b, final=not b)
        if self._cr and b[:1] == b"\n":
            b = b[1:]
            if not b:  # the block was that LF alone: not the end of the file
                self._cr = False
                return self.read(n)
        self._cr = b[-1:] == b"\r"
        if b"\r" in b:
            b = b.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        return b

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._raw.close()
        super().close()


def _gzip_out(path: Path) -> IO[bytes]:
    try:
        from isal import igzip

        return cast(IO[bytes], igzip.open(path, "wb", compresslevel=2))
    except ImportError:
        return cast(IO[bytes], gzip.open(path, "wb", compresslevel=3))


# --- trimming (test fixtures) ----------------------------------------------------


def _step_window(events: list[dict[str, Any]], first: int, last: int) -> tuple[float, float]:
    spans: list[tuple[float, float]] = []
    for e in events:
        if e.get("ph") != "X" or not str(e.get("name", "")).startswith(STEP_PREFIX):
            continue
        if e.get("cat") == "gpu_user_annotation":
            continue
        label = parse_step(e["name"])
        if label is not None and first <= label.step_id <= last:
            spans.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
    if not spans:
        raise TraceFormatError(f"no tracekit.step events with ids {first}..{last} in the trace")
    return min(s for s, _ in spans), max(e for _, e in spans)


def trim(data: dict[str, Any], first_step: int, last_step: int) -> dict[str, Any]:
    """A consistent sub-trace holding steps ``first_step..last_step`` (inclusive).

    Kept: metadata; host events inside the steps' time window; the enclosing
    request and profiler-step annotations; GPU work (kernels, memcpys, GPU
    annotations) whose launching runtime call was kept; flow events whose both
    ends were kept; counter samples inside the window extended to the last kept
    GPU activity. Never a kernel without its launch, never half a flow.
    """
    events: list[dict[str, Any]] = data["traceEvents"]
    t0, t1 = _step_window(events, first_step, last_step)

    def inside(e: dict[str, Any]) -> bool:
        ts = float(e.get("ts", 0))
        return t0 <= ts and ts + float(e.get("dur", 0)) <= t1

    def encloses(e: dict[str, Any]) -> bool:
        ts = float(e.get("ts", 0))
        return ts <= t0 and ts + float(e.get("dur", 0)) >= t1

    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset"}
    kept: list[dict[str, Any]] = []
    correlations: set[Any] = set()
    gpu: list[dict[str, Any]] = []
    gpu_annotations: list[dict[str, Any]] = []
    counters: list[dict[str, Any]] = []
    flows: list[dict[str, Any]] = []
    for e in events:
        ph, cat, name = e.get("ph"), e.get("cat"), str(e.get("name", ""))
        if ph == "M":
            kept.append(e)
        elif ph in ("s", "f", "t"):
            flows.append(e)
        elif ph == "C":
            counters.append(e)
        elif cat in gpu_cats:
            gpu.append(e)
        elif cat == "gpu_user_annotation":
            gpu_annotations.append(e)
        elif ph == "X":
            enclosing = name.startswith(REQUEST_PREFIX) or name.startswith("ProfilerStep")
            if inside(e) or (enclosing and encloses(e)):
                kept.append(e)
                corr = (e.get("args") or {}).get("correlation")
                if corr is not None and cat in ("cuda_runtime", "cuda_driver"):
                    correlations.add(corr)
        elif ph in ("i", "I") and t0 <= float(e.get("ts", 0)) <= t1:
            kept.append(e)
    gpu_end = t1
    for e in gpu:
        if (e.get("args") or {}).get("correlation") in correlations:
            kept.append(e)
            gpu_end = max(gpu_end, float(e["ts"]) + float(e.get("dur", 0)))
    for e in gpu_annotations:
        ts = float(e.get("ts", 0))
        if t0 <= ts and ts + float(e.get("dur", 0)) <= gpu_end:
            kept.append(e)
    for e in counters:
        if t0 <= float(e.get("ts", 0)) <= gpu_end:
            kept.append(e)
    # Flows pair by (cat, id): keep a pair only when both of its anchors survived.
    anchors = {(e.get("pid"), e.get("tid"), float(e.get("ts", 0))) for e in kept if e.get("ph") == "X"}
    by_id: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in flows:
        by_id.setdefault((e.get("cat"), e.get("id")), []).append(e)
    for group in by_id.values():
        if all((e.get("pid"), e.get("tid"), float(e.get("ts", 0))) in anchors for e in group):
            kept.extend(group)
    out = {k: v for k, v in data.items() if k != "traceEvents"}
    out["traceEvents"] = kept
    out["tracekitTrim"] = {"first_step": first_step, "last_step": last_step}
    return out


def trim_file(src: str | Path, dst: str | Path, first_step: int, last_step: int) -> Path:
    """Trim a trace file to a window of steps and write it (gzip if ``dst`` ends in .gz)."""
    write(dst, trim(load(src), first_step, last_step))
    return Path(dst)
