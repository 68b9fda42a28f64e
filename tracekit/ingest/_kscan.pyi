"""Typed interface of the native scanner (tracekit/ingest/_kscan.c); tracekit.ingest.native drives it."""

from typing import Any

NEED: int
END: int
ERROR: int
VERSION: int
R_SKIP_NOTOBJ: int
R_SKIP_NOTS: int
R_GPU: int
R_RUNTIME: int
R_CPU: int
R_ANNOT: int
R_MEMORY: int
R_COUNTERS: int
R_OTHER: int
N_ROUTES: int
C_NONE: int
C_GPU: int
C_RUNTIME: int
C_CPU: int
C_ANNOT: int
C_AC2G: int
F_TS_OK: int
F_TS_OVF: int
F_DUR_OK: int
F_DUR_OVF: int
F_PID_OK: int
F_TID_OK: int
F_COERCED: int

class Scanner:
    """Scans a traceEvents array into columns; ``cat_classes`` maps a lower-cased cat to a C_* class."""

    def __init__(self, cat_classes: dict[str, int]) -> None: ...
    def feed(self, buffer: bytes | bytearray | memoryview) -> tuple[int, int]:
        """Scan whole elements: (bytes consumed, status NEED | END | ERROR)."""
    def result(self) -> dict[str, Any]:
        """Columns, stores and dictionaries as read-only buffers (ints for counts), moved out of the scanner."""
    def take(self) -> dict[str, Any]:
        """``result()`` of the elements since the last ``take()``, and the scanner goes on: dictionaries
        are copies (their codes stay valid in later chunks), each chunk's row positions start at 0."""
    @property
    def error(self) -> tuple[str, int] | None: ...
    @property
    def rows(self) -> int: ...
