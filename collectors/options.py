"""What one recording is asked to do (``RecordOptions``), where it goes by default, and this process's rank."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tracekit.collectors.profiler import StepWindow
from tracekit.store.rundir import default_run_id


@dataclass(frozen=True)
class RecordOptions:
    out: Path
    force: bool = False
    nvml: bool = True
    sample_hz: float = 100.0
    trace_steps: StepWindow | None = None
    cuda: bool | None = None  # None: profile CUDA activity where CUDA is available
    device_index: int = 0  # torch's cuda:<i>; NvmlSampler.for_torch_device maps it to NVML's index
    quiet: bool = True
    command: tuple[str, ...] = field(default_factory=tuple)
    nvml_off_reason: str = "disabled with --no-nvml"
    all_threads: bool = False  # profile every thread (an engine stepping in a background thread)
    memory: bool = False  # --memory: the profiler's memory events (profile_memory) on


def process_rank() -> int:
    """This process's rank: torch.distributed's ``RANK`` (set by torchrun and ``--tp``), else 0."""
    try:
        return max(int(os.environ.get("RANK", "0")), 0)
    except ValueError:
        return 0


def default_out(label: str) -> Path:
    return Path("runs") / default_run_id(label)
