"""A fleet of runs analysed into one dataset: one task per run, locally or on Ray.

``analyze_fleet(target, out)`` takes a dataset (tracekit ingest --dataset / --engine ray: its runs are
analysed in place) or a directory of traces and run directories (each run ingested and analysed, every
table written into the dataset ``out``). A run is what tracekit.ingest.ray_engine.plan names one: the
files of one run id (its ranks); graph-capture traces are not runs, they are found beside their trace.

Each task (``analyze_run_task``) owns one run: it builds the run in a scratch directory (the run's
traces ingested, or its raw tables read from the dataset), runs ``tracekit.app.analyze.analyze`` on it,
writes the run's tables into ``<table>/run_id=<id>/rank=<k>/`` (tracekit.store.dataset_runs, replacing
that run's earlier parts) and removes the scratch directory. Tasks share nothing but the file system, so
on a cluster the traces, the dataset and the scratch directory's parent must be on storage every node
sees or, for scratch, local to it. A task never raises: a run that fails comes back with its one-line
error, the other runs' tables are kept, and the driver records every run's status in the marker.

Memory: a task holds one run at a time; ``peak_rss_bytes`` is the task's own peak resident set (the
process's high-water mark, reset when the task starts where Linux allows it, else the process's peak).
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tracekit.errors import TracekitError, UsageError, visible
from tracekit.store import dataset as _ds
from tracekit.store import dataset_runs as _runs

SOURCE_TRACES = "traces"
SOURCE_DATASET = "dataset"


@dataclass(frozen=True)
class RunJob:
    """One run of the fleet: its id and either its trace files or the dataset holding its raw tables."""

    run_id: str
    source: str  # SOURCE_TRACES or SOURCE_DATASET
    files: tuple[str, ...] = ()
    ranks: tuple[int | None, ...] = ()  # each file's rank from its path (None: the trace says, else its order)


@dataclass(frozen=True)
class FleetOptions:
    """What every task gets: the analysis' options and where it may write scratch runs."""

    warmup_requests: int | None = None
    ceiling: str | None = None
    scratch: str | None = None  # parent of each task's scratch run (default: the system's temp dir)


@dataclass
class RunOutcome:
    run_id: str
    status: str = "failed"  # "complete" or "failed"
    error: str | None = None
    seconds: float = 0.0
    peak_rss_bytes: int | None = None
    pid: int | None = None
    worker: str | None = None  # the node that ran the task (worker_name) and its process id
    parts: list[dict[str, Any]] = field(default_factory=list)

    def status_entry(self) -> dict[str, Any]:
        return {"status": self.status, "error": self.error, "seconds": round(self.seconds, 3),
                "peak_rss_bytes": self.peak_rss_bytes}


@dataclass(frozen=True)
class FleetSummary:
    root: str
    engine: str
    outcomes: list[RunOutcome]
    seconds: float

    @property
    def failed(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if o.status != "complete"]

    @property
    def ok(self) -> bool:
        return not self.failed


# --- planning ------------------------------------------------------------------------


def is_fleet_target(target: Path) -> bool:
    """True for a dataset, or a directory that is not itself a run directory (a folder of traces/runs):
    one with run.json, tables/, trace.json.gz or ranks/ is a run (a damaged one gets the run's errors)."""
    from tracekit.store.ranks import RANKS_DIR
    from tracekit.store.rundir import MANIFEST, TABLES_DIR, TRACE

    if _ds.is_dataset(target):
        return True
    return target.is_dir() and not any((target / n).exists() for n in (MANIFEST, TABLES_DIR, TRACE, RANKS_DIR))


def plan_traces(paths: Sequence[str | os.PathLike[str]]) -> tuple[list[RunJob], dict[str, str]]:
    """One job per run id among the traces under ``paths`` (capture traces and run.json files left out),
    and each stored run id's given id."""
    from tracekit.ingest.capture import EXECUTION_DETAILS, is_capture_file
    from tracekit.ingest.ray_engine import plan

    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(q for q in p.rglob("*") if q.is_file() and q.name.endswith((".json", ".json.gz"))
                            and q.name not in ("run.json", EXECUTION_DETAILS) and not is_capture_file(q)
                            and not any(part.startswith(".") for part in q.relative_to(p).parts))
        else:
            files.append(p)
    if not files:
        raise UsageError(f"no .json or .json.gz traces under {', '.join(visible(str(p)) for p in paths)}")
    given: dict[str, set[str]] = {}
    by_run: dict[str, list[tuple[str, int | None]]] = {}
    for job in plan(files, given=given):
        by_run.setdefault(job.run_id, []).append((job.path, job.rank))
    by_run, given = _split_unranked(by_run, given)
    _ds.check_run_ids(given)
    return ([RunJob(rid, SOURCE_TRACES, tuple(f for f, _ in fs), tuple(r for _, r in fs))
             for rid, fs in sorted(by_run.items())],
            {k: min(v) for k, v in given.items()})


def _split_unranked(by_run: dict[str, list[tuple[str, int | None]]], given: dict[str, set[str]]
                    ) -> tuple[dict[str, list[tuple[str, int | None]]], dict[str, set[str]]]:
    """Files of one run id are its ranks only where each path names a rank of its own (``job_rank-1``,
    ``ranks/1/``); same-named files in different folders are runs of their own, ``<folder>-<id>``."""
    out: dict[str, list[tuple[str, int | None]]] = {}
    names: dict[str, set[str]] = {}
    for rid, fs in by_run.items():
        ranks = [r for _, r in fs]
        if len(fs) == 1 or (None not in ranks and len(set(ranks)) == len(ranks)):
            out[rid], names[rid] = fs, given.get(rid, {rid})
            continue
        for f, r in fs:
            own = _ds.safe_run_id(f"{Path(f).parent.name}-{rid}")
            out.setdefault(own, []).append((f, r))
            names.setdefault(own, set()).add(own)
    clash = [k for k, v in out.items() if len(v) > 1 and len({r for _, r in v}) < len(v)]
    if clash:
        raise UsageError(f"run {visible(clash[0])}: {visible(out[clash[0]][0][0])} and {visible(out[clash[0]][1][0])} "
                         "cannot be told apart; give each trace a file name of its own")
    return out, names


def plan_dataset(root: str | os.PathLike[str], run_ids: Sequence[str] | None = None) -> list[RunJob]:
    """One job per run the dataset's marker lists (or per run of ``run_ids``)."""
    runs = sorted(_ds.read_marker(root).get("runs", {}))
    if run_ids:
        want = {_ds.safe_run_id(r) for r in run_ids}
        missing = sorted(want - set(runs))
        if missing:
            raise UsageError(f"{visible(str(root))}: no run {visible(missing[0])} in the dataset")
        runs = [r for r in runs if r in want]
    if not runs:
        raise UsageError(f"{visible(str(root))}: the dataset holds no runs; ingest traces into it first")
    return [RunJob(r, SOURCE_DATASET) for r in runs]


# --- one task --------------------------------------------------------------------------


def _reset_peak_rss() -> bool:
    try:  # Linux: "5" resets the process's resident high-water mark (VmHWM)
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _peak_rss(reset: bool) -> int:
    if reset:
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB


def analyze_run_task(job: RunJob, root: str, options: FleetOptions) -> RunOutcome:
    """Analyse one run into the dataset at ``root``; errors come back in the outcome, never raised.

    Every table of the run is written with its fleet_runs rows (a failed run: its fleet_runs row only)."""
    from tracekit.store import heap

    t0 = time.perf_counter()
    reset = _reset_peak_rss()
    out = RunOutcome(job.run_id, pid=os.getpid(), worker=f"{worker_name()}:{os.getpid()}")
    scratch = Path(tempfile.mkdtemp(prefix="tracekit-fleet-", dir=options.scratch))
    tables: dict[str, Any] = {}
    manifest: dict[str, Any] = {}
    try:
        tables, manifest = _analysed_tables(job, root, scratch / _ds.safe_run_id(job.run_id), options)
        out.status = "complete"
    except TracekitError as exc:
        out.error = exc.message.strip().splitlines()[0] if exc.message.strip() else type(exc).__name__
    except Exception as exc:  # one bad run must not lose the others' work
        out.error = _one_line(exc)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    heap.trim()
    out.peak_rss_bytes = _peak_rss(reset)
    out.seconds = time.perf_counter() - t0
    try:
        tables["fleet_runs"] = _fleet_rows(job, out, tables, manifest)
        out.parts = [asdict(p) for p in _runs.replace_run_tables(root, job.run_id, tables)]
    except TracekitError as exc:
        out.status, out.error = "failed", f"cannot write its tables: {exc.message.strip().splitlines()[0]}"
    except Exception as exc:
        out.status, out.error = "failed", f"cannot write its tables: {_one_line(exc)}"
    return out


def worker_name() -> str:
    """The node a task runs on: its Ray node id inside a Ray worker (one per raylet, so two nodes of a
    cluster on one host differ), else the host name."""
    ray = sys.modules.get("ray")
    try:
        if ray is not None and ray.is_initialized():
            return f"ray-node-{ray.get_runtime_context().get_node_id()[:12]}"
    except Exception:  # a Ray that cannot say: the host name is still true
        pass
    return socket.gethostname()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def _fleet_rows(job: RunJob, out: RunOutcome, tables: dict[str, Any], manifest: dict[str, Any]) -> Any:
    """The run's fleet_runs rows: one per rank its tables hold (rank 0 when none)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from tracekit.analysis.bound import gpu_name

    ranks: set[int] = set()
    for t in tables.values():
        if "rank" in t.column_names and t.num_rows:
            ranks.update(int(r) for r in pc.unique(pc.drop_null(t.column("rank"))).to_pylist())
    ranks = ranks or {0}
    analysis = manifest.get("analysis") if isinstance(manifest.get("analysis"), dict) else {}
    workload = analysis.get("workload") if isinstance(analysis, dict) else None
    workload = workload.get("kind") if isinstance(workload, dict) else workload
    n = len(ranks)
    return pa.table({
        "rank": pa.array(sorted(ranks), pa.int32()),
        "status": [out.status] * n,
        "error": pa.array([out.error] * n, pa.string()),
        "gpu": pa.array([gpu_name(manifest)] * n, pa.string()),
        "workload": pa.array([workload if isinstance(workload, str) else None] * n, pa.string()),
        "source": [job.files[0] if job.files else SOURCE_DATASET] * n,
        "analysis_s": [out.seconds] * n,
        "peak_rss_bytes": pa.array([out.peak_rss_bytes] * n, pa.int64()),
        "worker": pa.array([out.worker] * n, pa.string()),
    })


def _analysed_tables(job: RunJob, root: str, dest: Path, options: FleetOptions
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run built at ``dest`` (a run directory, or ranks/<k>/ ones for several ranks), analysed: the
    tables to write into the dataset (all of a traces job's, the analysis' own for a dataset job: its raw
    tables are already there; every rank's, with its rank) and its run.json."""
    from tracekit.analysis.inputs import RAW
    from tracekit.app.analyze import analyze
    from tracekit.store.rundir import RunDir

    meta = _runs.run_meta(root, job.run_id) if job.source == SOURCE_DATASET else {}
    given = set(_ds.tables_in(root)) & set(RAW) if job.source == SOURCE_DATASET else set()
    by_rank = _build_traces(job, dest) if job.source == SOURCE_TRACES else _build_dataset(job, root, dest, given, meta)
    top = RunDir.open(dest)
    analyze(dest, warmup_requests=options.warmup_requests, ceiling=options.ceiling)
    if by_rank is None:
        tables = {name: top.read_table(name) for name in top.tables() if name not in given}
        manifest = top.read_manifest()
    else:
        tables = _rank_tables(by_rank, given)
        top_tables = set(top.tables())
        tables.update({n: top.read_table(n) for n in top_tables - set(tables) - given})
        manifest = {**RunDir.open(by_rank[min(by_rank)]).read_manifest(), **top.read_manifest()}
    if job.source == SOURCE_TRACES:
        _runs.write_run_meta(root, job.run_id, "run", manifest)
    return tables, manifest


def _build_traces(job: RunJob, dest: Path) -> dict[int, Path] | None:
    """The job's traces ingested at ``dest``: one run directory, or (several files) a multi-rank run whose
    ranks/<k>/ are the files, k from the path, else the trace's distributedInfo, else the file's order."""
    from tracekit.ingest import ingest
    from tracekit.ingest.reader import trace_rank
    from tracekit.store.ranks import RANKS_DIR
    from tracekit.store.rundir import RunDir

    if len(job.files) == 1:
        ingest(list(job.files), dest, use_cache=False)
        return None
    RunDir.create(dest, source="fleet", inputs=list(job.files)).mark_complete()
    by_rank: dict[int, Path] = {}
    for i, (f, r) in enumerate(zip(job.files, job.ranks or (None,) * len(job.files), strict=True)):
        staging = dest / f"_file{i}"
        run = ingest([f], staging, use_cache=False)
        meta = run.read_manifest().get("trace_meta")
        traced = trace_rank(meta) if isinstance(meta, dict) else None
        k = traced if traced is not None else (r if r is not None else i)
        if k in by_rank:
            raise UsageError(f"{visible(f)} and {visible(str(by_rank[k]))} are both rank {k} of run "
                             f"{visible(job.run_id)}")
        final = dest / RANKS_DIR / str(k)
        final.parent.mkdir(exist_ok=True)
        staging.rename(final)
        by_rank[k] = final
    return by_rank


def _build_dataset(job: RunJob, root: str, dest: Path, given: set[str], meta: dict[str, Any]
                   ) -> dict[int, Path] | None:
    """The run's raw tables from the dataset at ``dest``: one run directory, or ranks/<k>/ ones."""
    import pyarrow.compute as pc

    from tracekit.store.ranks import RANKS_DIR
    from tracekit.store.rundir import RunDir

    raw = _runs.run_tables(root, job.run_id, sorted(given))
    if not any(t.num_rows for t in raw.values()):
        raise UsageError(f"run {visible(job.run_id)} has no raw tables in the dataset")
    ranks = sorted({int(r) for t in raw.values() if "rank" in t.column_names
                    for r in pc.unique(pc.drop_null(t.column("rank"))).to_pylist()}) or [0]
    if len(ranks) == 1:
        run = RunDir.create(dest, source="dataset", **meta)
        for name, t in raw.items():
            run.write_table(name, t)
        run.mark_complete()
        return None
    RunDir.create(dest, source="dataset", **meta).mark_complete()
    by_rank: dict[int, Path] = {}
    for k in ranks:
        run = RunDir.create(dest / RANKS_DIR / str(k), source="dataset", **meta)
        for name, t in raw.items():
            run.write_table(name, t.filter(pc.equal(t.column("rank"), k)) if "rank" in t.column_names else t)
        run.mark_complete()
        by_rank[k] = run.final_path
    return by_rank


def _rank_tables(by_rank: dict[int, Path], given: set[str]) -> dict[str, Any]:
    """Every rank's tables (those not ``given``) concatenated per table, with the rank set to its folder's."""
    import pyarrow as pa

    from tracekit.model import schema as _schema
    from tracekit.store.rundir import RunDir

    parts: dict[str, list[Any]] = {}
    for k, path in sorted(by_rank.items()):
        run = RunDir.open(path)
        for name in run.tables():
            if name in given:
                continue
            t = run.read_table(name)
            if "rank" in t.column_names:
                i = t.schema.get_field_index("rank")
                t = t.set_column(i, t.schema.field(i), pa.array([k] * t.num_rows, t.schema.field(i).type))
            parts.setdefault(name, []).append(_schema.check(name, t))
    return {name: pa.concat_tables(ts, promote_options="permissive") for name, ts in parts.items()}


# --- engines ---------------------------------------------------------------------------

Engine = Callable[..., list[RunOutcome]]
# A worker process runs this many tasks, then a fresh one takes its place: memory a task leaves behind
# (allocator pages, caches) cannot pile up over a fleet of any size (process pool and Ray alike).
TASKS_PER_WORKER = 8


def run_serial(jobs: list[RunJob], root: str, options: FleetOptions, **_: Any) -> list[RunOutcome]:
    return [analyze_run_task(j, root, options) for j in jobs]


def run_process(jobs: list[RunJob], root: str, options: FleetOptions, *, jobs_n: int | None = None,
                **_: Any) -> list[RunOutcome]:
    """A local process pool, one run per task; each worker replaced after TASKS_PER_WORKER tasks (Python
    3.11 and later)."""
    from concurrent.futures import ProcessPoolExecutor

    n = min(jobs_n or os.cpu_count() or 1, len(jobs))
    if n <= 1:
        return run_serial(jobs, root, options)
    recycle: dict[str, Any] = {"max_tasks_per_child": TASKS_PER_WORKER} if sys.version_info >= (3, 11) else {}
    with ProcessPoolExecutor(max_workers=n, **recycle) as pool:
        futures = [pool.submit(analyze_run_task, j, root, options) for j in jobs]
        return [_result(f.result, j) for f, j in zip(futures, jobs, strict=True)]


def _result(get: Callable[[], RunOutcome], job: RunJob) -> RunOutcome:
    """A task's outcome; a worker that died (killed for memory, crashed) is that run's failure only."""
    try:
        return get()
    except Exception as exc:
        text = " ".join(str(exc).split())[:300]
        return RunOutcome(job.run_id, error=f"the task's worker failed: {type(exc).__name__}: {text}".rstrip(": "))


def run_ray(jobs: list[RunJob], root: str, options: FleetOptions, *, address: str | None = None,
            jobs_n: int | None = None, task_memory: int | None = None, runtime_env: dict[str, Any] | None = None,
            **_: Any) -> list[RunOutcome]:
    """One Ray task per run (``num_cpus=1``, ``memory=task_memory`` bytes reserved where given, no
    retry, a worker replaced after TASKS_PER_WORKER tasks), on a local runtime of ``jobs_n`` CPUs or
    the cluster at ``address`` / RAY_ADDRESS."""
    from tracekit.app.fleet_ray import ray_session

    with ray_session(address, num_cpus=jobs_n, runtime_env=runtime_env) as ray:
        opts: dict[str, Any] = {"num_cpus": 1, "max_retries": 0, "max_calls": TASKS_PER_WORKER}
        if task_memory:
            opts["memory"] = int(task_memory)
        task = ray.remote(**opts)(analyze_run_task)
        refs = [task.remote(j, root, options) for j in jobs]
        return [_result(partial(ray.get, r), j) for r, j in zip(refs, jobs, strict=True)]


ENGINES: dict[str, Engine] = {"serial": run_serial, "process": run_process, "ray": run_ray}


# --- the driver --------------------------------------------------------------------------


def analyze_fleet(target: str | os.PathLike[str], out: str | os.PathLike[str] | None = None, *,
                  engine: str = "process", address: str | None = None, jobs: int | None = None,
                  task_memory: int | None = None, runtime_env: dict[str, Any] | None = None,
                  options: FleetOptions | None = None, run_ids: Sequence[str] | None = None) -> FleetSummary:
    """Analyse every run of ``target`` (a dataset, analysed in place; or a directory of traces/runs,
    into the dataset ``out``), one task per run on ``engine``; every run's status goes to the marker."""
    if engine not in ENGINES:
        raise UsageError(f"--engine {engine!r}: use {', '.join(ENGINES)}")
    if address and engine != "ray":
        raise UsageError(f"--address {visible(address)} is for --engine ray")
    options = options or FleetOptions()
    target = Path(target)
    given: dict[str, str] = {}
    if _ds.is_dataset(target):
        if out is not None and Path(out).resolve() != target.resolve():
            raise UsageError(f"{visible(str(target))} is a dataset, analysed in place: --out names the dataset "
                             "to write when TARGET is a directory of traces")
        todo, root = plan_dataset(target, run_ids), target
    else:
        if out is None:
            raise UsageError(f"{visible(str(target))} is a directory of traces: pass --out DATASET, the "
                             "dataset to write their runs into")
        if run_ids:
            raise UsageError("--run is for a dataset's runs")
        todo, given = plan_traces([target])
        _ds.check_run_ids({k: {v} for k, v in given.items()}, out)
        root = _ds.init_dataset(out)
    root_s = str(root.resolve())
    t0 = time.perf_counter()
    outcomes = ENGINES[engine](todo, root_s, options, address=address, jobs_n=jobs, task_memory=task_memory,
                               runtime_env=runtime_env)
    seconds = time.perf_counter() - t0
    parts = [_ds.PartWritten(**p) for o in outcomes for p in o.parts]
    _runs.record_status(root, {o.run_id: o.status_entry() for o in outcomes}, parts=parts, given=given,
                        last_analyze={"engine": engine, "runs": len(outcomes),
                                      "failed": sum(o.status != "complete" for o in outcomes),
                                      "seconds": round(seconds, 3)})
    return FleetSummary(str(root), engine, outcomes, seconds)
