"""The memory lines of ``tracekit record --memory``'s summary: peak split, KV per token, capacity.

Reads run.json ``memory`` and ``tables/step_memory.parquet``; the numbers come from
tracekit.analysis.memory (split, measured KV per token, capacity, peaks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracekit.analysis import memory as am


def _mb(b: float | None) -> str:
    return "n/a" if b is None else f"{b / 1e6:,.1f} MB"


def memory_lines(manifest: dict[str, Any], run_path: str | Path) -> list[str]:
    """Lines for the record summary; [] when the run was recorded without --memory."""
    if not manifest.get("memory"):
        return []
    import pandas as pd

    path = Path(run_path) / "tables" / "step_memory.parquet"
    return memory_text(manifest, pd.read_parquet(path) if path.is_file() else None)


def memory_text(manifest: dict[str, Any], table: Any) -> list[str]:
    """The lines from run.json ``memory`` and the step_memory table (a DataFrame, or None / empty)."""
    info = manifest.get("memory")
    if not info:
        return []
    if table is not None and len(table) == 0:
        table = None
    formula = int(info.get("kv_bytes_per_token_formula") or 0)
    measured = am.measured_kv_per_token(table) if table is not None else {"cache_tensors": None, "allocator": None}
    lines = [f"  weights         {_mb(info.get('weights_bytes'))} ({info.get('source')})"]
    kv = [f"formula {formula:,} B"]
    for key, label in (("cache_tensors", "cache tensors"), ("allocator", "allocator growth")):
        v = measured.get(key)
        if v is not None:
            kv.append(f"{label} {v:,.0f} B")
    lines.append(f"  KV per token    {', '.join(kv)}")
    if table is not None and len(table):
        for r in am.peaks(table).to_dict("records"):
            lines.append(
                f"  peak {r['kind']:<10} {_mb(r['peak_allocated_bytes'])} at step {r['step_id']} (kv {r['kv_len']}): "
                f"weights {_mb(r['weights_bytes'])} + KV {_mb(r['kv_cache_bytes'])} + transient "
                f"{_mb(r['peak_transient_bytes'])}"
            )
    total = info.get("total_bytes")
    if total and formula and table is not None and len(table):
        working = table["peak_transient_bytes"].max()
        cap = am.capacity(int(total), int(info["weights_bytes"]), int(working if working == working else 0), formula)
        shapes = ", ".join(f"{n} {c:,}" for n, c in cap.requests.items())
        lines.append(
            f"  capacity        {cap.kv_tokens:,} tokens of KV in {_mb(total - cap.weights_bytes - cap.working_bytes)} "
            f"(HBM {_mb(total)} - weights - working set): concurrent requests {shapes}"
        )
    else:
        lines.append(f"  capacity        n/a ({info.get('reason') or 'no device total'})")
    return lines
