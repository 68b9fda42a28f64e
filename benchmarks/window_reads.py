"""CPU time of windowed analysis' reads alone: ``cut_times``, then every window of ``windows()`` read
and dropped (no passes), and the other_events rows the windows were handed against the table's.

    PYTHONPATH=. python benchmarks/window_reads.py RUN_DIR
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tracekit.app import windowed
from tracekit.app.analyze import RAW_COLUMNS
from tracekit.store.rundir import RunDir


def main(argv: list[str]) -> int:
    run = RunDir.open(Path(argv[0]))
    c0 = time.process_time()
    cuts = windowed.cut_times(run, windowed.WINDOW_EVENTS)
    c1 = time.process_time()
    handed = 0
    for w in windowed.windows(run, cuts, RAW_COLUMNS["other_events"]):
        handed += w.tables["other_events"].num_rows
    c2 = time.process_time()
    rows = run.read_columns("other_events", ["ts_ns"]).num_rows
    print(f"windows {len(cuts.cuts) + 1}, cut_times CPU {c1 - c0:.2f} s, windows() CPU {c2 - c1:.2f} s, "
          f"other_events rows handed {handed:,} of {rows:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
