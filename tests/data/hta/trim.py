"""Copy the HTA corpus traces the tests read into tests/data/hta/, the large ones trimmed.

    python tests/data/hta/trim.py /path/to/corpus/hta

Trimming keeps a time slice of the trace: every event without a timestamp (metadata) and every
timed event whose ``ts`` falls in [first ts, the ts of the ``keep``-th earliest event]. Events are
copied as their original text, byte for byte (numbers such as ``"ts": 1712195495519689.047``
keep every digit), and everything around the ``traceEvents`` array (device properties,
distributedInfo, a ``baseTimeNanoseconds`` written after the array) is kept as it is. Output is
gzip with a zero mtime, so a re-run writes the same bytes.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# file -> events to keep (None: copied whole). Sizes as committed are in README.md.
FILES: dict[str, int | None] = {
    "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz": None,
    "cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz": None,
    "df_index_resolver__df_index_resolver.json.gz": 6000,
    "mtia_inference_trace__mtia_inference_rank_0.json.gz": 4000,
    "ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": 8000,
    "trace_file_list__inference_rank_1.json.gz": None,
    "trace_filter__sampled_rank-0.json.gz": None,
    "trace_filter__sampled_rank-1.json.gz": None,
    "triton_example__triton_example.json.gz": None,
}

_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]]')


def split_events(text: bytes) -> tuple[bytes, list[bytes], bytes]:
    """(text before the first event, each event's text, text after the last event)."""
    start = text.index(b"[", text.index(b'"traceEvents"')) + 1
    events: list[bytes] = []
    depth = 0
    ev_start = -1
    for m in _TOKEN.finditer(text, start):
        tok = m.group()
        if tok[:1] == b'"':
            continue
        if tok in (b"{", b"["):
            if depth == 0:
                ev_start = m.start()
            depth += 1
        elif depth == 0:  # the array's closing bracket
            return text[:start], events, text[m.start():]
        else:
            depth -= 1
            if depth == 0:
                events.append(text[ev_start:m.end()])
    raise ValueError("traceEvents array never closes")


def trim(src: Path, dst: Path, keep: int | None) -> tuple[int, int]:
    """Write ``src`` to ``dst`` (trimmed to about ``keep`` timed events); (events in, events out)."""
    if keep is None:
        shutil.copyfile(src, dst)
        doc = json.loads(gzip.decompress(src.read_bytes()))
        n = len(doc["traceEvents"] if isinstance(doc, dict) else doc)
        return n, n
    head, events, tail = split_events(gzip.decompress(src.read_bytes()))
    ts = [json.loads(e).get("ts") for e in events]
    timed = sorted(float(str(t).lstrip("~")) for t in ts if t is not None)
    hi = timed[min(keep, len(timed)) - 1]
    kept = [e for e, t in zip(events, ts, strict=True) if t is None or float(str(t).lstrip("~")) <= hi]
    body = head + b"\n  " + b",\n  ".join(kept) + b"\n" + tail
    json.loads(body)  # still one valid JSON document
    with open(dst, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        gz.write(body)
    return len(events), len(kept)


def main(corpus: Path) -> None:
    for name, keep in FILES.items():
        n_in, n_out = trim(corpus / name, HERE / name, keep)
        print(f"{name}: {n_in} -> {n_out} events, {(HERE / name).stat().st_size / 1e3:.0f} kB")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
