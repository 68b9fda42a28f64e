"""Both ingest readers on the same traces, on whatever machine this runs (the GPU host's stack).

    python3 scripts/gpu/ingest_readers.py TRACE...

Prints, per trace: whether the native scanner is built here, each reader's read_file time (median of
3), and whether counts, metadata and every table row are the same. Exit 1 if they differ.
"""

from __future__ import annotations

import os
import statistics
import sys
import time


def main(paths: list[str]) -> int:
    from tracekit.ingest import TABLES_OUT, read_file
    from tracekit.ingest import native as ingest_native

    print(f"python {sys.version.split()[0]}, native scanner built: {ingest_native._kscan is not None}")
    bad = 0
    for p in paths:
        res = {}
        for engine in ("native", "duckdb"):
            if engine == "native" and ingest_native._kscan is None:
                continue
            os.environ["TRACEKIT_INGEST_ENGINE"] = engine
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                r = read_file(p)
                times.append(time.perf_counter() - t0)
            res[engine] = (r, statistics.median(times))
        line = ", ".join(f"{e} {t:.3f} s" for e, (_, t) in res.items())
        same = "only one reader"
        if len(res) == 2:
            a, b = res["native"][0], res["duckdb"][0]
            ok = a.counts.as_dict() == b.counts.as_dict() and a.meta == b.meta
            for t in TABLES_OUT:
                ok &= a.tables[t].schema == b.tables[t].schema
                ok &= sorted(map(repr, a.tables[t].to_pylist())) == sorted(map(repr, b.tables[t].to_pylist()))
            same = "same tables" if ok else "TABLES DIFFER"
            bad += not ok
        print(f"{os.path.basename(p)}: {res[next(iter(res))][0].counts.events_read} events; {line}; {same}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
