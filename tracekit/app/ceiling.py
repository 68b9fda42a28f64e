"""The ceilings an analysis uses, decided in this one place before the passes run.

``decide(manifest, override)`` gives a tracekit.model.ceilings.Ceilings: the ceiling (``--ceiling``,
else the GPU run.json or the trace names: measured calibration, then achievable rates, then the
datasheet; a generic or unknown name identified from the trace's deviceProperties), the peaks the
latency line is drawn against, and a note saying how it was found or why there is none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracekit.errors import TracekitError
from tracekit.model.ceilings import GENERIC_NAMES, Ceiling, Ceilings, datasheet, gpu_name, identify
from tracekit.store.calibration import resolve

LATENCY_PEAKS = ("ceiling", "datasheet")


def decide(manifest: dict[str, Any], override: str | None = None, latency_peaks: str = "ceiling") -> Ceilings:
    """The run's Ceilings (see the module doc). ``latency_peaks``: "ceiling" (the line on the ceiling in
    use, each rate at its own fraction) or "datasheet" (the GPU's datasheet peaks, as Nsight Compute's %
    of peak are; the ceiling in use where the GPU has no datasheet entry)."""
    if latency_peaks not in LATENCY_PEAKS:
        raise ValueError(f"latency_peaks: {latency_peaks!r} is not one of {LATENCY_PEAKS}")
    ceiling, note = resolve_ceiling(manifest, override)
    return Ceilings(ceiling, latency_line_peaks(ceiling, latency_peaks), note)


def latency_line_peaks(ceiling: Ceiling | None, latency_peaks: str = "ceiling") -> Ceiling | None:
    """The peaks the latency line is drawn against (see ``decide``)."""
    if ceiling is not None and latency_peaks == "datasheet":
        return datasheet(ceiling.gpu) or ceiling
    return ceiling


CEILING_KINDS = ("measured", "achievable", "datasheet")


def resolve_ceiling(manifest: dict[str, Any], override: str | None = None) -> tuple[Any, str | None]:
    """(Ceiling or None, why not / how found) for the run's GPU.

    ``override`` (``--ceiling``): a ceiling JSON file, a GPU name (its measured calibration, else its
    achievable rates, else its datasheet; unknown is an error), or one of CEILING_KINDS (that kind of
    ceiling for the run's GPU). Otherwise the GPU run.json or the trace names (measured calibration
    first, then achievable rates, then the datasheet); where that name is empty, generic ("AMD Radeon Graphics") or unknown, the
    GPU the trace's deviceProperties identify (tracekit.model.ceilings.identify), said in the note.
    """
    name = gpu_name(manifest)
    if override in CEILING_KINDS:  # that kind of ceiling for the GPU the run names or identifies
        found, why = resolve_ceiling(manifest)
        if found is None:
            return None, why
        return resolve(found.gpu, kind=override), why
    if override:
        path = Path(override)
        return (resolve(override, path=path) if path.is_file() else resolve(override)), None
    why = f"the trace names the GPU only {name!r}" if name else "no GPU named in run.json or the trace"
    if name and not GENERIC_NAMES.match(name):
        try:
            return resolve(name), None
        except TracekitError as exc:
            why = str(exc)
    props = device_properties(manifest)
    if props:
        ident, note = identify(props)
        if ident is not None:
            try:
                c = resolve(ident)
            except TracekitError as exc:
                return None, f"{why}; deviceProperties identify {ident} ({note}), which has no ceiling: {exc}"
            how = f"GPU {name or 'unnamed'!r} identified from the trace's deviceProperties as {ident}"
            return c, how + (f" ({note})" if note else "")
        why = f"{why}; deviceProperties: {note}"
    return None, why


def device_properties(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The first device's Kineto deviceProperties from run.json's trace_meta (one trace or per file)."""
    meta = manifest.get("trace_meta") or {}
    metas = [meta] if isinstance(meta, dict) and "deviceProperties" in meta else (
        [m for m in meta.values() if isinstance(m, dict)] if isinstance(meta, dict) else [])
    for m in metas:
        props = m.get("deviceProperties")
        if isinstance(props, list) and props and isinstance(props[0], dict):
            return props[0]
    return None
