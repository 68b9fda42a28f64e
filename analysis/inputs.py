"""What the analysis passes read and what they return, as two frozen values.

``AnalysisInput``: the raw tables (Arrow tables from the store; a pandas frame is accepted where a
caller builds tables in code), run.json as read, the ceilings decided by the caller
(tracekit.model.ceilings.Ceilings: the one decision, made before the passes) and the options. It is
built once per analysis (tracekit.app.analyze.load_input) and never changed.

``AnalysisOutput``: the tables the passes made, every warning they gave (in pass order), the workload,
the warm-up decision and the check verdict. It reads as a mapping too (``out["steps"]``,
``out["warnings"]``, ``out.get("check")``). A table is an Arrow table or a pandas frame, as its pass
made it (the passes on arrays make Arrow: tracekit.analysis.arrays reads either); the store writes
both, and the Python API (tracekit.open) hands out frames read back from the run's Parquet.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tracekit.analysis.options import BoundOptions
from tracekit.model import schema as _schema
from tracekit.model.ceilings import Ceiling, Ceilings

# The passes run_passes (tracekit.analysis.pipeline) runs, in their order.
PASSES = ("steps", "requests", "phases", "bound", "energy", "cost", "warmup", "opclass", "check")
# The raw tables every pass may read: one absent from a run is supplied empty (every table is valid empty).
RAW = ("gpu_activity", "cpu_ops", "runtime", "annotations", "counters", "other_events", "ncu_counters")
# Tables a run may hold besides the raw ones: the recorder's own steps and requests, and the requests
# each step served (record --serve / --assistant). Absent: None.
EXTRA = ("recorded_steps", "recorded_requests", "step_requests")


@dataclass(frozen=True)
class AnalysisInput:
    """One run's analysis input (see the module doc). ``table(name)`` gives a raw table (empty where
    the run has none) or an EXTRA one (None where absent)."""

    tables: Mapping[str, Any]
    manifest: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    ceilings: Ceilings = field(default_factory=Ceilings)
    warmup_first: int | None = None  # the first N requests are warm-ups (``--warmup-requests N``)
    bound: BoundOptions = field(default_factory=BoundOptions)

    def __post_init__(self) -> None:
        unknown = set(self.tables) - set(RAW) - set(EXTRA)
        if unknown:
            raise ValueError(f"not analysis input tables: {sorted(unknown)}")
        object.__setattr__(self, "tables", MappingProxyType(dict(self.tables)))
        object.__setattr__(self, "manifest", MappingProxyType(dict(self.manifest or {})))

    @property
    def ceiling(self) -> Ceiling | None:
        return self.ceilings.ceiling

    def table(self, name: str) -> Any:
        t = self.tables.get(name)
        if t is None and name in RAW:
            return _schema.empty(name)
        return t

    @classmethod
    def of(cls, tables: Mapping[str, Any], *, ceilings: Ceilings | None = None) -> AnalysisInput:
        """The input from a dict of tables with the options beside them (``manifest``, ``ceiling``,
        ``warmup_first``, ``bound_options``): the form tests and scripts build in code. Tables the
        passes do not read (ingest's ``memory``, say) are left out; ``ceiling`` is used as given, the
        latency line on the same peaks."""
        ceiling = tables.get("ceiling")
        opts = tables.get("bound_options")
        first = tables.get("warmup_first")
        return cls(
            tables={k: v for k, v in tables.items() if k in (*RAW, *EXTRA) and v is not None},
            manifest=tables.get("manifest") or {},
            ceilings=ceilings if ceilings is not None else Ceilings(ceiling, ceiling),
            warmup_first=first if isinstance(first, int) else None,
            bound=opts if isinstance(opts, BoundOptions) else BoundOptions(),
        )


@dataclass(frozen=True)
class AnalysisOutput(Mapping[str, Any]):
    """The passes' result (see the module doc). As a mapping: every table made, then ``warnings``,
    ``workload``, ``warmup``, ``check``, ``ceiling`` and ``manifest`` (those present)."""

    tables: Mapping[str, Any]
    warnings: tuple[str, ...] = ()
    workload: Mapping[str, Any] | None = None
    warmup: Mapping[str, Any] | None = None
    check: Any = None  # tracekit.analysis.health.Verdict
    ceiling: Ceiling | None = None
    manifest: Mapping[str, Any] | None = None  # run.json as the analysis read it

    def _fields(self) -> dict[str, Any]:
        extra = {"warnings": list(self.warnings), "workload": self.workload, "warmup": self.warmup,
                 "check": self.check, "ceiling": self.ceiling, "manifest": self.manifest}
        return {**self.tables, **{k: v for k, v in extra.items() if v is not None or k == "warnings"}}

    def __getitem__(self, key: str) -> Any:
        return self._fields()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields())

    def __len__(self) -> int:
        return len(self._fields())
