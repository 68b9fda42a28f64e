"""Third-party output during a recording: captured, sorted, kept; never printed between tracekit's lines.

Two channels carry it:

* Python warnings (torch's profiler and inductor hints, transformers deprecations): while a
  ``ThirdPartyOutput`` is active, a warning whose frame lies in an installed package is collected
  instead of printed. A warning attributed to the user's own file still prints: it is about their code.
* Native code writing to file descriptor 2 (Kineto's ``USDT: ... profiler_start`` lines, CUDA and
  CUPTI messages): inside ``native()`` descriptor 2 points at a temporary file. ``native()`` wraps
  what only libraries run (profiler start, step and stop; the built-in workload's model, warm-up and
  requests), never a user's script, whose own stderr stays theirs.

``summary()`` sorts what was caught: known routine lines (``ROUTINE``) are counted, everything else is
kept as a warning. ``write_log`` keeps the full text (``third_party.log`` in the run directory);
``keep_third_party`` puts all of it into a run.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import sysconfig
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracekit.store.rundir import RunDir

LOG_NAME = "third_party.log"

# Lines libraries print on every run that say nothing about this one.
ROUTINE = (
    re.compile(r"^USDT:.*\] profiler_(start|stop)\s*$"),  # Kineto marking its own start and stop
    re.compile(r"Profiler clears events at the end of each cycle"),  # tracekit's schedule runs one cycle
    re.compile(r"^STAGE:\d{4}-\d\d-\d\d .*ActivityProfilerController"),  # Kineto's older stage lines
    # torchao (imported by transformers wherever it is installed): its optional compiled kernels for
    # another torch build, and its enums registered with torch.compile the deprecated way. A --quant
    # config that needs a missing kernel fails on its own, in one line (collectors/quant.py).
    re.compile(r"Failed to load .*torchao/_C\w*\.\S*so: Could not load this library"),
    re.compile(r"_pytree\.py:\d+\] <enum '\w+'> is an Enum subclass .* register_constant\(\) on Enum subclasses"),
    re.compile(r"Detected no triton, on systems without Triton certain kernels will not work"),
)


def _library_roots() -> tuple[str, ...]:
    roots = {sysconfig.get_paths()[k] for k in ("purelib", "platlib") if k in sysconfig.get_paths()}
    for p in sys.path:
        if p.rstrip("/").endswith(("site-packages", "dist-packages")):
            roots.add(p)
    for name in ("torch", "transformers", "matplotlib", "accelerate", "triton"):
        mod = sys.modules.get(name)
        f = getattr(mod, "__file__", None)
        if f:  # a source checkout of torch is still torch
            roots.add(str(Path(f).resolve().parent.parent))
    return tuple(sorted({str(Path(r).resolve()) + os.sep for r in roots if r}))


def _own_roots() -> tuple[str, ...]:
    """tracekit's folders, installed (site/tracekit/...) or in a checkout (collectors/, analysis/, tracekit/)."""
    here = Path(__file__).resolve().parent
    up = here.parent
    dirs = {here, up / "tracekit", up / "analysis"} | ({up} if up.name == "tracekit" else set())
    return tuple(str(d) + os.sep for d in dirs)


_OWN = _own_roots()


def is_third_party(filename: str, roots: tuple[str, ...] | None = None) -> bool:
    """A file inside an installed package, tracekit or a frozen/builtin module: not the user's own code."""
    if not filename or filename.startswith("<"):
        return True
    try:
        path = str(Path(filename).resolve())
    except OSError:
        return False
    # tracekit never warns through ``warnings``: one attributed to its files is a library's
    # (stacklevel pointing at the tracekit line that called it, e.g. torch's profiler schedule).
    if path.startswith(_OWN):
        return True
    return any(path.startswith(r) for r in (roots if roots is not None else _library_roots()))


def is_routine(line: str) -> bool:
    return any(p.search(line) for p in ROUTINE)


@dataclass(frozen=True)
class CaughtWarning:
    category: str
    message: str
    filename: str
    lineno: int

    @property
    def origin(self) -> str:
        """The package it came from (``torch``, ``transformers``), from its file's path."""
        parts = Path(self.filename).parts
        for marker in ("site-packages", "dist-packages"):
            if marker in parts:
                i = parts.index(marker)
                if i + 1 < len(parts):
                    return parts[i + 1].removesuffix(".py")
        for name in ("torch", "transformers", "matplotlib", "triton"):
            if name in parts:
                return name
        return Path(self.filename).stem or "python"

    def text(self) -> str:
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return f"{self.origin}: {self.category}: {first}"


class ThirdPartyOutput:
    """Collects third-party warnings and native stderr for one recording; see the module doc.

    ``with out:`` installs the warning hook (nestable re-entry is not supported); ``native()`` may be
    entered any number of times inside or outside it. ``terminal`` is the real stderr, for
    tracekit's own progress lines while descriptor 2 is redirected.
    """

    def __init__(self) -> None:
        self.caught: list[CaughtWarning] = []
        # Open for the recording's life, closed by close().
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="tracekit-stderr-")  # noqa: SIM115
        self._roots = _library_roots()
        self._cm: Any = None
        self._passthrough: Any = None
        self._depth = 0
        self._closed = False
        try:
            self.terminal: IO[str] = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
        except OSError:  # no descriptor 2 (a daemon): write where Python writes
            self.terminal = sys.stderr

    # --- Python warnings --------------------------------------------------------------

    def __enter__(self) -> ThirdPartyOutput:
        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        self._passthrough = warnings.showwarning
        # Warnings a filter would print once per location must reach the hook, not vanish.
        warnings.showwarning = self._show
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._cm is not None:
            cm, self._cm = self._cm, None
            cm.__exit__(*exc)

    def _show(self, message: Any, category: type[Warning], filename: str, lineno: int,
              file: Any = None, line: str | None = None) -> None:
        if is_third_party(filename, self._roots):
            self.caught.append(CaughtWarning(category.__name__, str(message), filename, lineno))
        else:
            self._passthrough(message, category, filename, lineno, file, line)

    # --- native stderr ----------------------------------------------------------------

    @contextlib.contextmanager
    def native(self) -> Iterator[None]:
        """Descriptor 2 into the capture file for the block (re-entrant: inner blocks do nothing)."""
        if self._depth or self._closed:
            yield
            return
        _flush()
        try:
            saved = os.dup(2)
        except OSError:
            yield
            return
        self._depth += 1
        try:
            os.dup2(self._file.fileno(), 2)
            yield
        finally:
            _flush()
            os.dup2(saved, 2)
            os.close(saved)
            self._depth -= 1

    def stderr_text(self) -> str:
        if self._closed:
            return ""
        self._file.flush()
        self._file.seek(0)
        data = self._file.read()
        self._file.seek(0, os.SEEK_END)
        return data.decode("utf-8", errors="replace")

    # --- what was caught --------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """{"lines", "routine", "warnings" (the kept messages, counted "(×N)"), "by_origin"}."""
        lines = [ln.rstrip() for ln in self.stderr_text().splitlines() if ln.strip()]
        kept: Counter[str] = Counter()
        by_origin: Counter[str] = Counter()
        routine = 0
        for w in self.caught:
            by_origin[w.origin] += 1
            if is_routine(w.message):
                routine += 1
            else:
                kept[w.text()] += 1
        for ln in lines:
            by_origin["native stderr"] += 1
            if is_routine(ln):
                routine += 1
            else:
                kept[f"stderr: {ln[:300]}"] += 1
        return {
            "messages": len(self.caught) + len(lines),
            "routine": routine,
            "warnings": [t if n == 1 else f"{t} (×{n})" for t, n in kept.items()],
            "by_origin": dict(by_origin),
        }

    def write_log(self, path: Path) -> bool:
        """The full text of everything caught; False (nothing written) when nothing was."""
        text = self.stderr_text()
        if not self.caught and not text.strip():
            return False
        with open(path, "w", encoding="utf-8") as fh:
            for w in self.caught:
                fh.write(f"{w.filename}:{w.lineno}: {w.category}: {w.message}\n")
            if text:
                fh.write(text if text.endswith("\n") else text + "\n")
        return True

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._file.close()
        if self.terminal is not sys.stderr:
            with contextlib.suppress(OSError):
                self.terminal.close()


def _flush() -> None:
    for s in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            s.flush()
    if _LIBC:
        with contextlib.suppress(Exception):
            _LIBC[0].fflush(None)  # C stdio buffers of native code


def _libc() -> list[Any]:
    try:
        import ctypes

        return [ctypes.CDLL(None)]
    except Exception:  # no C library to flush: Python's own flush is all there is
        return []


_LIBC = _libc()


def keep_third_party(run: RunDir, noise: ThirdPartyOutput) -> None:
    """What ``noise`` caught, into the run: third_party.log, run.json ``third_party`` and warnings."""
    info = noise.summary()
    if not info["messages"]:
        return
    try:
        noise.write_log(run.path / LOG_NAME)
    except OSError as exc:  # the counts and warnings below still say what happened
        info["log_error"] = str(exc)
    run.update_manifest(
        third_party={
            "messages": info["messages"],
            "routine": info["routine"],
            "kept": len(info["warnings"]),
            "by_origin": info["by_origin"],
            "log": LOG_NAME,
        }
    )
    for w in info["warnings"]:
        run.add_warning(f"third-party: {w}")
