"""Shared test helpers: the repository's paths, and synthetic run directories for the view tests.

Paths: REPO, FIXTURES (committed real recordings), DATA (tests/data: real traces other projects wrote,
with their origin and license in tests/data/*/README.md), CORPUS (where the corpus tests read those
traces: $TRACEKIT_CORPUS when set, e.g. to a directory of the full-size originals, else DATA, whose
large traces are trimmed copies: a clone runs every corpus test, and a TRACEKIT_CORPUS that names no
directory makes them skip with "corpus absent").

Synthetic run directories (export, report, query, diff):

Shapes and times follow what DESIGN.md measured on an H200 (TinyLlama-1.1B,
fp16, eager): a ~26 ms prefill with the GPU busy ~6.5 ms, ~30 ms decode steps
with the GPU busy ~2.4 ms. ``batch`` and ``scale`` let two runs differ the way
a batch-1 and a batch-8 run would.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tracekit.model.schema import from_columns
from tracekit.store.rundir import RunDir

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
DATA = Path(__file__).resolve().parent / "data"
# $TRACEKIT_CORPUS, when set, is the corpus: where it names no directory the corpus tests skip with
# "corpus absent" (conftest's corpus_dir), never silently reading tests/data instead.
_corpus_env = os.environ.get("TRACEKIT_CORPUS")
CORPUS = Path(_corpus_env) if _corpus_env else DATA
CORPUS_ABSENT = f"corpus absent: TRACEKIT_CORPUS={CORPUS} is not a directory"


# CI (CI=true) installs every tool the suite uses (scripts/setup.sh: torch, transformers, NVML's bindings,
# import-linter; .ci/run: chromium): there a missing tool fails the test instead of skipping it.
IN_CI = os.environ.get("CI", "").lower() == "true"


def need(tool: str, present: bool) -> None:
    """Skip the calling test when ``tool`` is absent here; fail it in CI, which installs every tool."""
    if present:
        return
    if IN_CI:
        pytest.fail(f"{tool} is not installed, and CI installs it (scripts/setup.sh, .ci/run)")
    pytest.skip(f"{tool} not installed", allow_module_level=True)


def need_module(name: str) -> ModuleType:
    """``pytest.importorskip`` that fails in CI: the module, or a skip here and a failure there."""
    try:
        return importlib.import_module(name)
    except ImportError:
        need(name, False)
        raise


def corpus_traces(root: Path) -> list[Path]:
    """Every trace file (.json, .json.gz) anywhere under the corpus ``root``: a file whose first 64 KiB
    hold trace events (a "traceEvents" key or an event's "ph"); an engine's index of its capture
    traces beside them (SGLang's execution_details.json) is not one."""
    return sorted(p for p in root.rglob("*") if p.name.endswith((".json", ".json.gz")) and p.is_file()
                  and _holds_events(p))


def _holds_events(path: Path) -> bool:
    import gzip

    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            head = f.read(1 << 16)
    except (OSError, EOFError):
        return True  # a damaged trace is still a corpus trace: its test says how it fails
    return b'"traceEvents"' in head or b'"ph"' in head

T0 = 1_732_900_000_000_000_000  # epoch-scale ns, as Kineto writes them
MS = 1_000_000

KERNELS = [
    # (name, class, share of the step's busy time)
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn", "gemm", 0.45),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::Half>>", "elementwise", 0.35),
    ("flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false>>", "attention", 0.10),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "reduction", 0.10),
]


def make_run(
    root: Path,
    name: str = "run-a",
    *,
    batch: int = 1,
    scale: float = 1.0,
    requests: int = 2,
    decode_steps: int = 4,
    with_counters: bool = True,
    bound_column: bool = False,
) -> RunDir:
    run = RunDir.create(root / name, workload={"batch": batch, "dtype": "float16"}, model="tinyllama-shape")
    t = T0
    steps: dict[str, list] = {k: [] for k in ("step_id", "request_id", "kind", "batch", "q_len", "kv_len", "tokens",
                                                "source", "cpu_start_ns", "cpu_end_ns", "gpu_start_ns", "gpu_end_ns",
                                                "gpu_busy_ns")}
    reqs: dict[str, list] = {k: [] for k in ("request_id", "name", "batch", "input_tokens", "output_tokens", "start_ns",
                                               "end_ns", "ttft_ns", "tpot_ns", "e2e_ns", "prefill_share", "source")}
    gpu: dict[str, list] = {k: [] for k in ("ts_ns", "dur_ns", "kind", "name", "device", "stream", "correlation")}
    sid = 0
    corr = 0
    for rid in range(requests):
        start = t
        prompt = 128 + 64 * rid
        for i in range(decode_steps + 1):
            kind = "prefill" if i == 0 else "decode"
            dur = int((26 if kind == "prefill" else 30) * MS * scale)
            busy = int((6.5 if kind == "prefill" else 2.4) * MS * scale * (1 + 0.1 * (batch - 1)))
            q = prompt if kind == "prefill" else 1
            steps["step_id"].append(sid)
            steps["request_id"].append(rid)
            steps["kind"].append(kind)
            steps["batch"].append(batch)
            steps["q_len"].append(q)
            steps["kv_len"].append(prompt + i)
            steps["tokens"].append(q * batch)
            steps["source"].append("tracekit")
            steps["cpu_start_ns"].append(t)
            steps["cpu_end_ns"].append(t + dur - MS)
            steps["gpu_start_ns"].append(t + 200_000)
            steps["gpu_end_ns"].append(t + dur)
            steps["gpu_busy_ns"].append(busy)
            # Kernels: back to back from the GPU start, shares of the busy time.
            k_t = t + 200_000
            for kname, _cls, share in KERNELS:
                kd = int(busy * share)
                gpu["ts_ns"].append(k_t)
                gpu["dur_ns"].append(kd)
                gpu["kind"].append("kernel")
                gpu["name"].append(kname)
                gpu["device"].append(0)
                gpu["stream"].append(7)
                gpu["correlation"].append(corr)
                corr += 1
                k_t += kd + 50_000
            t += dur
            sid += 1
        e2e = t - start
        ttft = int(26 * MS * scale)
        reqs["request_id"].append(rid)
        reqs["name"].append(f"chat-{rid}")
        reqs["batch"].append(batch)
        reqs["input_tokens"].append(prompt)
        reqs["output_tokens"].append(decode_steps + 1)
        reqs["start_ns"].append(start)
        reqs["end_ns"].append(t)
        reqs["ttft_ns"].append(ttft)
        reqs["tpot_ns"].append((e2e - ttft) / decode_steps)
        reqs["e2e_ns"].append(e2e)
        reqs["prefill_share"].append(ttft / e2e)
        reqs["source"].append("tracekit")
        t += 5 * MS
    if bound_column:
        steps["bound"] = ["memory-bound" if k == "decode" else "compute-bound" for k in steps["kind"]]
    steps_table = from_columns("steps", {k: v for k, v in steps.items() if k != "bound"})
    if bound_column:
        import pyarrow as pa

        steps_table = steps_table.append_column("bound", pa.array(steps["bound"]))
        from tracekit.store.rundir import write_parquet

        # a steps file with a column tracekit's schema lacks (the store would refuse it): written raw
        write_parquet(steps_table, run.table_path("steps"))
    else:
        run.write_table("steps", steps_table)
    run.write_table("requests", from_columns("requests", reqs))
    run.write_table("gpu_activity", from_columns("gpu_activity", gpu))
    if with_counters:
        cts: dict[str, list] = {k: [] for k in ("ts_ns", "device", "metric", "value", "unit", "source")}
        n = int((t - T0) // (10 * MS))
        for i in range(n):
            for metric, unit, src, val in (("gpu_util", "%", "nvml", 8 + (i % 7)), ("power", "W", "nvml", 180.0 + i % 13)):
                cts["ts_ns"].append(T0 + i * 10 * MS)
                cts["device"].append(0)
                cts["metric"].append(metric)
                cts["value"].append(float(val))
                cts["unit"].append(unit)
                cts["source"].append(src)
            if i % 10 == 0:  # GPM needs >= 100 ms between samples
                cts["ts_ns"].append(T0 + i * 10 * MS)
                cts["device"].append(0)
                cts["metric"].append("dram_bw_util")
                cts["value"].append(float(20 + i % 30))
                cts["unit"].append("%")
                cts["source"].append("gpm")
        run.write_table("counters", from_columns("counters", cts))
    # Phases: whole-run rows, the three-way split of each phase's time.
    ph: dict[str, list] = {k: [] for k in ("phase", "steps", "time_ns", "gpu_busy_ns", "compute_bound_ns",
                                             "memory_bound_ns", "idle_ns", "other_ns", "comm_ns", "memcpy_ns", "flops",
                                             "bytes", "achieved_tflops", "achieved_tbps", "pct_peak_flops",
                                             "pct_peak_bandwidth", "energy_j")}
    for kind in ("prefill", "decode"):
        idx = [i for i, k in enumerate(steps["kind"]) if k == kind]
        time_ns = sum(steps["gpu_end_ns"][i] - steps["cpu_start_ns"][i] for i in idx)
        busy = sum(steps["gpu_busy_ns"][i] for i in idx)
        cb = int(busy * (0.55 if kind == "prefill" else 0.2))
        mb = int(busy * (0.35 if kind == "prefill" else 0.7))
        flops = 2.2e9 * 2 * (128 * batch if kind == "prefill" else batch) * len(idx)
        byts = 2.2e9 * len(idx)
        ph["phase"].append(kind)
        ph["steps"].append(len(idx))
        ph["time_ns"].append(time_ns)
        ph["gpu_busy_ns"].append(busy)
        ph["compute_bound_ns"].append(cb)
        ph["memory_bound_ns"].append(mb)
        ph["idle_ns"].append(time_ns - busy)
        ph["other_ns"].append(busy - cb - mb)
        ph["comm_ns"].append(0)
        ph["memcpy_ns"].append(0)
        ph["flops"].append(flops)
        ph["bytes"].append(byts)
        ph["achieved_tflops"].append(flops / time_ns / 1e3)
        ph["achieved_tbps"].append(byts / time_ns / 1e3)
        ph["pct_peak_flops"].append(100 * flops / time_ns / 1e3 / 989)
        ph["pct_peak_bandwidth"].append(100 * byts / time_ns / 1e3 / 4.8)
        ph["energy_j"].append(180.0 * time_ns / 1e9)
    run.write_table("phases", from_columns("phases", ph))
    run.mark_complete()
    return run


def undeclared_tables(root: Path) -> tuple[list[str], set[str]]:
    """(problems, table names seen) for every Parquet file tracekit wrote under ``root``.

    A file is a run table (``.../tables/<name>.parquet``), a dataset part
    (``<table>/run_id=<id>/rank=<k>/part-<p>.parquet``: the partition columns live in the path) or a
    sweep file (``<name>.parquet`` beside sweep.json). A problem is a file of none of these places, a
    table tracekit.model.schema does not declare, or columns / types other than the declared ones.
    """
    import pyarrow.parquet as pq

    from tracekit.model import schema as sch
    from tracekit.store.dataset import PARTITION_COLUMNS

    problems: list[str] = []
    seen: set[str] = set()
    for path in sorted(root.rglob("*.parquet")):
        if path.name.startswith("."):
            continue
        drop: tuple[str, ...] = ()
        if path.parent.name == "tables":
            name, declared = path.stem, sch.SCHEMAS.get(path.stem)
        elif path.name.startswith("part-") and path.parent.name.startswith("rank="):
            name, declared, drop = path.parents[2].name, sch.SCHEMAS.get(path.parents[2].name), PARTITION_COLUMNS
        elif (path.parent / "sweep.json").is_file():
            name, declared = path.stem, sch.SWEEP_SCHEMAS.get(path.stem)
        else:
            problems.append(f"{path}: not a run table, a dataset part or a sweep file")
            continue
        seen.add(name)
        if declared is None:
            problems.append(f"{path}: table {name} is not declared in tracekit.model.schema")
            continue
        want = [(f.name, f.type) for f in declared if f.name not in drop]
        got = [(f.name, f.type) for f in pq.read_schema(path)]
        if [n for n, _ in got] != [n for n, _ in want]:
            problems.append(f"{path}: columns {[n for n, _ in got]} != declared {[n for n, _ in want]}")
        else:
            problems += [f"{path}: {n} is {t}, declared {w}" for (n, t), (_, w) in zip(got, want, strict=True) if t != w]
    return problems, seen


def op_tables(ops: list[dict[str, Any]], ann: list[dict[str, Any]]) -> dict[str, Any]:
    """Raw tables of CPU ops and annotations (row dicts), with empty runtime and GPU activity tables."""

    def cols(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, list[Any]]:
        return {k: [r.get(k) for r in rows] for k in keys}

    return {
        "cpu_ops": from_columns("cpu_ops", cols(ops, ("op_id", "ts_ns", "dur_ns", "name", "cat", "input_dims"))),
        "annotations": from_columns("annotations", cols(ann, ("ts_ns", "dur_ns", "name", "cat"))),
        "runtime": from_columns("runtime", cols([], ("ts_ns", "dur_ns", "name", "correlation"))),
        "gpu_activity": from_columns("gpu_activity", cols([], ("ts_ns", "dur_ns", "name", "kind", "device"))),
    }


def bound_pass_of(t: dict[str, Any]) -> dict[str, Any]:
    """tracekit.analysis.bound.bound_pass on a dict of tables (gpu_activity, cpu_ops, steps; kernel_steps,
    phases, runtime, ncu_counters where given) with ``ceiling`` (None: the GPU has none), ``manifest``
    and ``bound_options`` beside them; no trace span (no outside row)."""
    from tracekit.analysis import bound
    from tracekit.model.ceilings import Ceilings

    c = t.get("ceiling")
    return bound.bound_pass(t["gpu_activity"], t["cpu_ops"], t["steps"], t.get("kernel_steps"), t.get("phases"),
                            t.get("runtime"), t.get("ncu_counters"), ceilings=Ceilings(c, c),
                            manifest=t.get("manifest") or {}, span=None, options=t.get("bound_options"))
