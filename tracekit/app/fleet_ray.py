"""A Ray session for a fleet's tasks: a local runtime, or the cluster at an address.

``ray_session(address, num_cpus, runtime_env)`` yields the ``ray`` module, initialised: joined to
``address`` (e.g. ``ray://head:10001``), else to the cluster RAY_ADDRESS names (set by ``ray job
submit``), else a local runtime of ``num_cpus`` CPUs (default: all). A session it started is shut down
on exit; one already initialised by the caller is used as it is. Ray is optional and imported only here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tracekit.errors import TracekitError, UsageError, visible


@contextmanager
def ray_session(address: str | None = None, *, num_cpus: int | None = None,
                runtime_env: dict[str, Any] | None = None) -> Iterator[Any]:
    try:
        import ray
    except ImportError:
        raise UsageError("--engine ray needs Ray: pip install 'tracekit-llm[ray]'") from None
    if ray.is_initialized():
        yield ray
        return
    init: dict[str, Any] = {"include_dashboard": False, "logging_level": "WARNING", "log_to_driver": False}
    joining = address or os.environ.get("RAY_ADDRESS")
    if joining:
        init["address"] = joining
    else:
        init["num_cpus"] = num_cpus or os.cpu_count() or 1
        # A local runtime's raylet may take minutes to come up on a loaded small machine (a value the
        # user set wins).
        os.environ.setdefault("RAY_raylet_start_wait_time_s", "300")
    if runtime_env:
        init["runtime_env"] = runtime_env
    try:
        ray.init(**init)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = visible(joining) if joining else "a local Ray runtime"
        raise TracekitError(f"cannot start or reach {where}: {str(exc).strip().splitlines()[0]}") from None
    try:
        yield ray
    finally:
        ray.shutdown()
