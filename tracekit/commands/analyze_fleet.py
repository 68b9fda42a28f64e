"""``tracekit analyze DATASET|DIR``: a fleet of runs, one task per run (tracekit.app.fleet); not a verb."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tracekit.errors import UsageError, visible
from tracekit.report.text import say

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from ``2GB``, ``512MiB``, ``1.5g`` or a plain byte count (k, m, g, t are powers of 1024)."""
    m = _SIZE.fullmatch(text)
    if not m:
        raise UsageError(f"--task-memory {visible(text)}: give a size such as 2GB or 512MB")
    unit = (m.group(2) or "b").lower()[0]
    return int(float(m.group(1)) * 1024 ** "bkmgt".index(unit))


def parse_runtime_env(text: str | None) -> dict[str, Any] | None:
    """A Ray runtime_env from JSON text or a JSON file's path."""
    if not text:
        return None
    p = Path(text)
    src = p.read_text() if not text.lstrip().startswith("{") and p.is_file() else text
    try:
        env = json.loads(src)
    except ValueError as exc:
        raise UsageError(f"--runtime-env: not JSON ({exc})") from None
    if not isinstance(env, dict):
        raise UsageError("--runtime-env: give a JSON object, e.g. '{\"pip\": [\"tracekit-llm\"]}'")
    return env


def run(target: Path, out: Path | None, *, engine: str, address: str | None, jobs: int | None,
        task_memory: str | None, runtime_env: str | None, warmup_requests: int | None, ceiling: str | None) -> int:
    """Analyse the fleet, print one line per failed run and a summary; 1 when any run failed."""
    from tracekit.app.fleet import FleetOptions, analyze_fleet

    if jobs is not None and jobs < 1:
        raise UsageError("--jobs must be at least 1")
    s = analyze_fleet(target, out, engine=engine, address=address, jobs=jobs,
                      task_memory=parse_size(task_memory) if task_memory else None,
                      runtime_env=parse_runtime_env(runtime_env),
                      options=FleetOptions(warmup_requests=warmup_requests, ceiling=ceiling))
    peaks = [o.peak_rss_bytes for o in s.outcomes if o.peak_rss_bytes]
    done = len(s.outcomes) - len(s.failed)
    say(f"{done}/{len(s.outcomes)} runs analysed -> {visible(s.root)} ({s.seconds:.1f} s, engine {s.engine}"
        + (f", peak RSS per task {max(peaks) / 2**20:.0f} MiB" if peaks else "") + ")")
    for o in s.failed:
        say(f"warning: run {visible(o.run_id)}: {visible(o.error or 'failed')}", err=True)
    if s.failed:
        say(f"tracekit: error: {len(s.failed)} of {len(s.outcomes)} runs could not be analysed (listed above; "
            "each run's status is in the dataset's _tracekit_dataset.json)", err=True)
        return 1
    return 0
