"""The per-user cache of measured ceilings, and which ceiling a run uses.

``tracekit calibrate`` saves a measured Ceiling per GPU under $TRACEKIT_CACHE_DIR/ceilings (default
$XDG_CACHE_HOME/tracekit/ceilings); ``resolve`` prefers it to the published achievable rates
(tracekit.model.achievable), and those to the datasheet.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tracekit.errors import UsageError
from tracekit.model.achievable import achievable, with_published_bandwidth
from tracekit.model.ceilings import Ceiling, datasheet, slug
from tracekit.store.rundir import write_json


def cache_dir() -> Path:
    """Per-user cache of measured ceilings: $TRACEKIT_CACHE_DIR or $XDG_CACHE_HOME/tracekit/ceilings."""
    env = os.environ.get("TRACEKIT_CACHE_DIR")
    if env:
        return Path(env) / "ceilings"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tracekit" / "ceilings"


def cache_path(device_name: str) -> Path:
    return cache_dir() / f"{slug(device_name)}.json"


def save_measured(ceiling: Ceiling, path: Path | None = None) -> Path:
    target = path or cache_path(ceiling.gpu)
    write_json(target, ceiling.to_dict())
    return target


def load(path: Path) -> Ceiling:
    """The ceiling in a JSON file; UsageError (one line) for a file that is not one."""
    try:
        return Ceiling.from_dict(json.loads(Path(path).read_text()))
    except RecursionError:  # JSON nested past Python's recursion limit
        raise UsageError(f"cannot read ceiling file {path}: nested too deep") from None
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"cannot read ceiling file {path}: {exc}") from None


def resolve(device_name: str, *, prefer_measured: bool = True, path: Path | None = None,
            kind: str | None = None) -> Ceiling:
    """The ceiling to use for a device: an explicit file (as it is), else a measured one from the cache
    (its bandwidth raised to the published achievable one where that is higher: a calibration times a
    copy), else its achievable rates (tracekit.model.achievable), else the datasheet. ``kind`` ("measured", "achievable",
    "datasheet") asks for that one alone; UsageError where the device has none."""
    if path is not None:
        return load(path)
    if kind not in (None, "measured", "achievable", "datasheet"):
        raise UsageError(f"no ceiling kind {kind!r} (measured, achievable or datasheet)")
    if (prefer_measured and kind is None) or kind == "measured":
        p = cache_path(device_name)
        if p.is_file():
            return with_published_bandwidth(load(p))
        if kind == "measured":
            raise UsageError(f"no measured ceiling for GPU {device_name!r}: run `tracekit calibrate` on it")
    if kind in (None, "achievable"):
        ach = achievable(device_name)
        if ach is not None:
            return ach
        if kind == "achievable":
            raise UsageError(f"no achievable rates known for GPU {device_name!r} (docs/roofline.md §6)")
    ds = datasheet(device_name)
    if ds is None:
        raise UsageError(
            f"no ceiling known for GPU {device_name!r}: run `tracekit calibrate` on it or pass a ceiling file"
        )
    return ds
