"""The process ids of tracekit's own tracks in a merged trace.

Far above real pids, so they never collide with the Kineto trace's processes: the trace writers use
them, and ingest uses them to tell tracekit's counter tracks from the trace's own counters.
"""

from __future__ import annotations

TRACEKIT_PID = 0x7FFF0000  # requests, steps and bound tracks
COUNTER_PID_BASE = 0x7FFF0100  # + device + 1: one counter process per GPU
MEMORY_PID = 0x7FFF00F0  # the step_memory counter tracks (record --memory)
