"""Many traces into one hive-partitioned dataset: one task per trace file, on Ray or locally.

``ingest_dataset(paths, root, engine="ray")`` plans one job per trace file
(its run id and rank), runs ``ingest_file`` for each -- as Ray tasks on a
local Ray runtime (default) or an existing cluster (``address``), in a local
process pool, or serially -- and records what was written in the dataset's
marker. Each task reads its trace with ``tracekit.ingest.read_file`` and
writes its own ``<table>/run_id=<id>/rank=<k>/part-<p>.parquet`` files
(tracekit.store.dataset), so tasks share nothing but the file system. On a
cluster the traces and the dataset root must be on storage every node sees
(NFS, a mounted bucket), and tracekit must be installed on every node.

Ray is optional (``pip install tracekit-llm[ray]``) and imported only here,
inside functions.

Run id and rank of a file, in order: ``run_id`` given by the caller; a
tracekit TP run (``<run>/ranks/<k>/trace.json.gz``: run id ``<run>``, rank
k); a tracekit run directory (``<run>/trace.json.gz``); else the file name
without its extensions and rank token (``job_rank-3.json.gz`` -> ``job``,
rank 3). A trace's own ``distributedInfo.rank`` wins over the name.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tracekit.errors import TraceFormatError, TracekitError, UsageError, say, visible
from tracekit.ingest.result import not_a_trace
from tracekit.store import dataset as _ds
from tracekit.store.dataset_runs import write_run_meta
from tracekit.store.fsops import check_distinct

ENGINES = ("ray", "process", "serial")
_RANK_RE = re.compile(r"(?:^|[^a-z0-9])rank[-_.]?(\d+)", re.IGNORECASE)
_EXTS = (".pt.trace.json.gz", ".pt.trace.json", ".trace.json.gz", ".trace.json", ".json.gz", ".json")


@dataclass(frozen=True)
class FileJob:
    path: str
    run_id: str
    rank: int | None  # from the path; None: the trace (or 0) decides
    part: str = "0"


@dataclass
class FileOutcome:
    path: str
    run_id: str
    rank: int | None
    rows: dict[str, int] = field(default_factory=dict)
    events: int = 0
    seconds: float = 0.0
    error: str | None = None
    parts: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class DatasetSummary:
    root: str
    engine: str
    files: int
    failed: list[tuple[str, str]]
    runs: dict[str, list[int]]
    events: int
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.failed


def _strip_ext(name: str) -> str:
    for ext in _EXTS:
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def plan(paths: Sequence[str | os.PathLike[str]], *, run_id: str | None = None,
         given: dict[str, set[str]] | None = None) -> list[FileJob]:
    """One job per trace file, with its run id, rank and a part name unique within its run; ``given``
    (if passed) receives, per stored run id, the run ids it was made from."""
    given = {} if given is None else given
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.is_file() and q.name.endswith((".json", ".json.gz")))
            found = [q for q in found if q.name != "run.json"]
            if not found:
                raise UsageError(f"{p}: no .json or .json.gz traces under this directory")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise UsageError(f"{p}: no such file")
    if not files:
        raise UsageError("no trace given")
    check_distinct(files)
    jobs: list[FileJob] = []
    # The part name is unique per run, not per (run, rank): the rank is final only once the
    # trace is read (its distributedInfo wins), and two files must never write one path.
    seen: dict[str, int] = {}
    for f in files:
        rid, rank = _identify(f)
        given.setdefault(_ds.safe_run_id(run_id or rid), set()).add(run_id or rid)
        rid = _ds.safe_run_id(run_id or rid)
        n = seen.get(rid, 0)
        seen[rid] = n + 1
        jobs.append(FileJob(str(f), rid, rank, part=str(n)))
    return jobs


def _identify(f: Path) -> tuple[str, int | None]:
    parent = f.parent
    if parent.parent.name == "ranks" and parent.name.isdigit():
        return parent.parent.parent.name, int(parent.name)
    if (parent / "run.json").is_file():
        return parent.name, None
    stem = _strip_ext(f.name)
    m = _RANK_RE.search(stem)
    if m:
        rest = (stem[: m.start()] + stem[m.end() :]).strip("-_.")
        return rest or stem, int(m.group(1))
    return stem, None


def ingest_file(job: FileJob, root: str) -> FileOutcome:
    """Read one trace and write its partition of the dataset. Errors come back, never raise."""
    from tracekit.ingest.reader import read_file, trace_rank

    t0 = time.perf_counter()
    out = FileOutcome(job.path, job.run_id, job.rank)
    try:
        res = read_file(job.path, rank=None)
        why = not_a_trace(res)
        if why:
            raise TraceFormatError(why)
        traced_rank = trace_rank(res.meta)
        rank = traced_rank if traced_rank is not None else (job.rank if job.rank is not None else 0)
        tables = {k: _with_rank(v, rank) for k, v in res.tables.items()}
        parts = _ds.write_run_tables(root, job.run_id, tables, rank=rank, part=job.part)
        # the trace's own fields (deviceProperties: the GPU and its ceiling), for an analysis of the dataset
        write_run_meta(root, job.run_id, f"trace-{job.part}",
                       {"trace_meta": {k: v for k, v in res.meta.items() if k != "traceEvents"}})
        out.rank = rank
        out.rows = {p.table: p.rows for p in parts}
        out.parts = [asdict(p) for p in parts]
        out.events = int(res.counts.events_read)
    except TracekitError as exc:
        out.error = exc.message
    except Exception as exc:  # one bad file must not lose the others' work
        out.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    out.seconds = time.perf_counter() - t0
    return out


def _with_rank(t: Any, rank: int) -> Any:
    import pyarrow as pa

    if "rank" not in t.column_names:
        return t
    i = t.schema.get_field_index("rank")
    return t.set_column(i, t.schema.field(i), pa.array([rank] * t.num_rows, pa.int32()))


# --- engines -------------------------------------------------------------------------


def _run_serial(jobs: list[FileJob], root: str, **_: Any) -> list[FileOutcome]:
    return [ingest_file(j, root) for j in jobs]


def _run_process(jobs: list[FileJob], root: str, *, jobs_n: int | None = None, **_: Any) -> list[FileOutcome]:
    n = jobs_n or min(len(jobs), os.cpu_count() or 1)
    if n <= 1:
        return _run_serial(jobs, root)
    with ProcessPoolExecutor(max_workers=n) as pool:
        return list(pool.map(ingest_file, jobs, [root] * len(jobs)))


def _run_ray(
    jobs: list[FileJob], root: str, *, address: str | None = None, num_cpus: int | None = None, **_: Any
) -> list[FileOutcome]:
    try:
        import ray
    except ImportError:
        raise UsageError("--engine ray needs Ray: pip install 'tracekit-llm[ray]'") from None
    started = False
    if not ray.is_initialized():
        init: dict[str, Any] = {
            "include_dashboard": False,
            "logging_level": "WARNING",
            "log_to_driver": False,
        }
        if address:
            init["address"] = address
        else:
            init["num_cpus"] = num_cpus or os.cpu_count() or 1
            # A local runtime's raylet may take minutes to come up on a loaded small machine: give it
            # the time (Ray reads this when it starts the node; a value the user set wins).
            os.environ.setdefault("RAY_raylet_start_wait_time_s", "300")
        try:
            ray.init(**init)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            with contextlib.suppress(Exception):  # a half-started local runtime (GCS up, raylet not): stop it
                ray.shutdown()
            where = address or "a local Ray runtime"
            raise TracekitError(f"cannot start or reach {where}: {str(exc).splitlines()[0]}") from None
        started = True
    try:
        task = ray.remote(num_cpus=1, max_retries=1)(ingest_file)
        refs = [task.remote(j, root) for j in jobs]
        return list(ray.get(refs))
    finally:
        if started:
            ray.shutdown()


_ENGINES: dict[str, Callable[..., list[FileOutcome]]] = {
    "serial": _run_serial,
    "process": _run_process,
    "ray": _run_ray,
}


def ingest_dataset(
    paths: Sequence[str | os.PathLike[str]],
    root: str | os.PathLike[str],
    *,
    engine: str = "ray",
    address: str | None = None,
    jobs: int | None = None,
    num_cpus: int | None = None,
    run_id: str | None = None,
    force: bool = False,
) -> DatasetSummary:
    """Ingest trace files into the dataset at ``root``; failures are listed, the rest is kept."""
    if engine not in ENGINES:
        raise UsageError(f"--engine {engine!r}: use {', '.join(ENGINES)}")
    if address and engine != "ray":
        raise UsageError("--address is for --engine ray")
    given: dict[str, set[str]] = {}
    todo = plan(paths, run_id=run_id, given=given)
    _ds.check_run_ids(given, None if force else root)
    root_p = _ds.init_dataset(root, force=force)
    t0 = time.perf_counter()
    outcomes = _ENGINES[engine](todo, str(root_p.resolve()), address=address, jobs_n=jobs, num_cpus=num_cpus)
    seconds = time.perf_counter() - t0
    written = [_ds.PartWritten(**p) for o in outcomes for p in o.parts]
    failed = [(o.path, o.error) for o in outcomes if o.error]
    _ds.record_parts(
        root_p, written, given={k: min(v) for k, v in given.items()}, last_ingest={"engine": engine, "files": len(todo), "failed": len(failed)}
    )
    # --force: the new dataset replaces the old one only if every trace was read
    root_p = _ds.finish_dataset(root_p, keep=not failed)
    runs: dict[str, set[int]] = {}
    for o in outcomes:
        if not o.error and o.rank is not None:
            runs.setdefault(o.run_id, set()).add(o.rank)
    return DatasetSummary(
        root=str(root_p),
        engine=engine,
        files=len(todo),
        failed=[(p, e or "") for p, e in failed],
        runs={k: sorted(v) for k, v in sorted(runs.items())},
        events=sum(o.events for o in outcomes),
        seconds=seconds,
    )


def ingest_command(
    paths: Sequence[str], out: str, *, engine: str, address: str | None, jobs: int | None, force: bool,
    run_id: str | None = None,
) -> int:  # fmt: skip
    """What ``tracekit ingest --engine ray|process|serial --dataset`` runs: prints a summary, returns the exit code."""
    s = ingest_dataset(paths, out, engine=engine, address=address, jobs=jobs, force=force, run_id=run_id)
    ranks = sum(len(v) for v in s.runs.values())
    say(
        f"{s.files - len(s.failed)}/{s.files} traces -> {visible(s.root)} ({len(s.runs)} runs, {ranks} ranks, "
        f"{s.events:,} events, {s.seconds:.1f} s, engine {s.engine})"
    )
    for path, err in s.failed:
        say(f"warning: {visible(path)}: {visible(err)}", err=True)
    if s.failed:  # one error line, after a warning per file
        unwritten = sum(1 for _, err in s.failed if err.startswith("cannot write"))
        what = ("could not be written" if unwritten == len(s.failed) else
                "could not be read" if not unwritten else "could not be read or written")
        say(f"tracekit: error: {len(s.failed)} of {s.files} traces {what} (listed above)", err=True)
        return 1
    return 0
