"""The machine a run was recorded on, for run.json ``environment``: Python, host, torch, CUDA, GPU, driver.

Each library is probed only if installed; a missing one leaves its keys out (the driver: None).
"""

from __future__ import annotations

import platform
import socket
from typing import Any


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
    }
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name(0)
            env["gpu_count"] = torch.cuda.device_count()
            cap = torch.cuda.get_device_capability(0)
            env["compute_capability"] = f"{cap[0]}.{cap[1]}"
    except ImportError:
        pass
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        pass
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            drv = pynvml.nvmlSystemGetDriverVersion()
            env["driver"] = drv.decode() if isinstance(drv, bytes) else str(drv)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML on this machine: the driver stays unknown
        env.setdefault("driver", None)
    return env
