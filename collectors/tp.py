"""Tensor-parallel recording: the built-in workload sharded over N processes, one trace per rank.

``launch(TPOptions(...))`` starts one subprocess per rank (``python -m
tracekit.collectors.tp --worker SPEC`` with RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT set, as torchrun would), waits for them and merges
their tables. Layout of the run directory:

    <run>/run.json                 the TP run: workload, tp {world_size, backend, impl, ranks}
    <run>/ranks/<k>/run.json       rank k's own recording (a complete run directory)
    <run>/ranks/<k>/trace.json.gz  rank k's Kineto trace, merged with tracekit's tracks
    <run>/ranks/<k>/tables/        rank k's steps, requests, counters (NVML device = local rank k)
    <run>/tables/*.parquet         every rank's rows in one table, ``rank`` column set

Each rank records with the same ``Recording`` the single-GPU path uses, so a
rank's directory is an ordinary run (``tracekit analyze ranks/1`` works).

Sharding: Transformers' own tensor parallelism (``tp_plan="auto"``) when it
can run here (it needs ``accelerate``); otherwise the model's published TP
plan (``config.base_model_tp_plan``: colwise / rowwise per projection) is
applied with ``torch.distributed.tensor.parallel``, the same DTensor
machinery Transformers uses underneath. run.json says which (``tp.impl``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from tracekit.errors import TracekitError, UsageError
from tracekit.store.rundir import RunDir

RANKS_DIR = "ranks"
MODEL_TMP = "_tp_checkpoint"
IMPLS = ("auto", "transformers", "torch")


@dataclass(frozen=True)
class TPOptions:
    out: Path
    world_size: int = 2
    model: str = "tiny"  # preset name or local model directory
    # An architecture not in the presets, built with random weights: {"model_type": ..., **config fields}.
    model_config: dict[str, Any] | None = None
    shape: str = "smoke"
    input_tokens: int | None = None
    output_tokens: int | None = None
    dtype: str = "auto"
    device: str = "auto"  # auto | cuda | cpu
    batch: int = 1
    requests: int = 1
    warmup: int = 1
    seed: int = 0
    impl: str = "auto"  # auto | transformers | torch
    nvml: bool = True
    force: bool = False
    timeout_s: float = 600.0
    master_port: int | None = None


def rank_dir(run: Path, rank: int) -> Path:
    return Path(run) / RANKS_DIR / str(rank)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(opts: TPOptions) -> RunDir:
    """Record a TP run; return the merged run directory (complete only if every rank completed)."""
    if opts.world_size < 1:
        raise UsageError(f"--tp {opts.world_size}: needs at least 1 rank")
    if opts.impl not in IMPLS:
        raise UsageError(f"tp impl {opts.impl!r}: use {', '.join(IMPLS)}")
    run = RunDir.create(
        opts.out,
        force=opts.force,
        command=sys.argv,
        workload={"kind": "tensor-parallel", "model": opts.model, "shape": opts.shape, "batch": opts.batch},
        tp={"world_size": opts.world_size, "layout": f"{RANKS_DIR}/<rank>/", "requested_impl": opts.impl},
    )
    port = opts.master_port or _free_port()
    model = opts.model
    if Path(model).exists():  # a local model directory: the workers run elsewhere (cwd below)
        model = str(Path(model).resolve())
    spec = json.dumps({**asdict(opts), "out": str(run.path.resolve()), "model": model})
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    for rank in range(opts.world_size):
        env = dict(os.environ)
        env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(opts.world_size),
            LOCAL_WORLD_SIZE=str(opts.world_size),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        log_path = run.path / f"rank{rank}.log"
        log = open(log_path, "wb")  # noqa: SIM115 -- closed below, after the process ends
        logs.append(log)
        cmd = [sys.executable, "-m", "tracekit.collectors.tp", "--worker", spec]
        # cwd: the run directory, never a source checkout: `python -m` puts cwd first on sys.path, and a
        # checkout's tracekit/ (without the package-dir mapped collectors/, analysis/) would shadow the
        # installed package.
        procs.append(
            subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(run.path.resolve()))
        )
    codes = _wait(procs, opts.timeout_s)
    for log in logs:
        log.close()
    failed = {r: c for r, c in enumerate(codes) if c != 0}
    merge_ranks(run, opts.world_size)
    if failed:
        first = min(failed)
        tail = _tail(run.path / f"rank{first}.log")
        run.mark_incomplete(f"rank(s) {sorted(failed)} failed (exit {failed[first]}): {tail}")
        raise TracekitError(
            f"tensor-parallel run failed on rank {first}: {tail} (log: {run.path}/rank{first}.log)"
        )
    statuses = [RunDir(rank_dir(run.path, r)).status for r in range(opts.world_size)]
    if all(s == "complete" for s in statuses):
        run.mark_complete()
    else:
        run.mark_incomplete(f"rank statuses: {statuses}")
    return run


def _wait(procs: list[subprocess.Popen[bytes]], timeout_s: float) -> list[int]:
    """Wait for every rank; if one fails or time runs out, stop the others (they would hang in a collective)."""
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return [int(c) for c in codes if c is not None]
        if any(c not in (None, 0) for c in codes) or time.monotonic() > deadline:
            time.sleep(2.0)  # let a peer that is finishing write its files
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            return [int(p.returncode if p.returncode is not None else -9) for p in procs]
        time.sleep(0.1)


def _tail(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return lines[-1].strip()[:300] if lines else "no output"


def merge_ranks(run: RunDir, world_size: int) -> dict[str, int]:
    """Concatenate every rank's tables into the run's tables with ``rank`` set; returns rows per table."""
    from tracekit.app.analyze import merge_tables

    rows = merge_tables(
        run,
        [rank_dir(run.path, r) for r in range(world_size) if (rank_dir(run.path, r) / "run.json").is_file()],
    )
    ranks = []
    for rank in range(world_size):
        m = RunDir(rank_dir(run.path, rank)).read_manifest()
        ranks.append(
            {"rank": rank, "status": m.get("status", "missing"), "tp": m.get("tp"), "nvml": m.get("nvml")}
        )
    tp = run.read_manifest().get("tp", {})
    tp["ranks"] = ranks
    impls = {r["tp"].get("impl") for r in ranks if r.get("tp")}
    if impls:
        tp["impl"] = ",".join(sorted(i for i in impls if i))
    run.update_manifest(tp=tp, tables_rows=rows)
    return rows


# --- inside one rank -----------------------------------------------------------------


def _accelerate_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("accelerate") is not None


def choose_impl(requested: str) -> str:
    if requested == "auto":
        return "transformers" if _accelerate_available() else "torch"
    if requested == "transformers" and not _accelerate_available():
        raise UsageError("tp impl 'transformers' needs the accelerate package (pip install accelerate)")
    return requested


def apply_tp_plan(model: Any, mesh: Any) -> int:
    """Shard ``model`` by its config's ``base_model_tp_plan`` with torch's DTensor TP; returns modules sharded.

    colwise: the projection's output features are split (q/k/v, gate/up);
    rowwise: its input features are split and the partial results all-reduced
    (o_proj, down_proj): one all-reduce after attention and one after the MLP
    per layer, as in Megatron-LM.
    """
    import fnmatch

    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = dict(getattr(model.config, "base_model_tp_plan", None) or {})
    if not plan:
        raise UsageError(f"{type(model).__name__}: no base_model_tp_plan in its config; cannot shard it")
    base = model.base_model
    styles: dict[str, Any] = {}
    for name, _ in base.named_modules():
        for pattern, style in plan.items():
            if fnmatch.fnmatchcase(name, pattern):
                if style.startswith("colwise"):
                    styles[name] = ColwiseParallel()
                elif style.startswith("rowwise"):
                    styles[name] = RowwiseParallel()
                break
    if not styles:
        raise UsageError(f"{type(model).__name__}: its TP plan matched no module")
    parallelize_module(base, mesh, styles)
    return len(styles)


def _worker(spec: dict[str, Any]) -> int:
    import torch
    import torch.distributed as dist

    from tracekit.collectors import presets
    from tracekit.collectors import workload as wl
    from tracekit.collectors.options import RecordOptions
    from tracekit.collectors.recording import Recording, create_run

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    run_path = Path(spec["out"])
    device = spec["device"]
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(local_rank)
        dev = f"cuda:{local_rank}"
    else:
        dev = "cpu"
    backend = "nccl" if cuda else "gloo"
    # A peer that dies or hangs must not hold this rank in a collective forever (the launcher also kills).
    dist.init_process_group(
        backend=backend, rank=rank, world_size=world, timeout=timedelta(seconds=float(spec["timeout_s"]))
    )
    impl = choose_impl(spec["impl"])
    shape = presets.resolve_shape(spec["shape"])
    if spec.get("model_config"):
        mc = dict(spec["model_config"])
        mtype = mc.pop("model_type")
        spec_model = presets.ModelSpec(
            preset=presets.ModelPreset(spec["model"], mtype, mc, "tp model_config")
        )
    else:
        spec_model = presets.resolve_model(spec["model"])
    cfg = wl.WorkloadConfig(
        model=spec_model,
        device=dev,
        dtype=wl.resolve_dtype(spec["dtype"], dev),
        shape=spec["shape"],
        input_tokens=spec["input_tokens"] or shape.input_tokens,
        output_tokens=spec["output_tokens"] or shape.output_tokens,
        batch=spec["batch"],
        requests=spec["requests"],
        warmup=spec["warmup"],
        seed=spec["seed"],
    )
    t0 = time.perf_counter()
    if impl == "torch":
        # Same seed on every rank: identical full weights before sharding.
        model, info = wl.build_model(cfg)
        from torch.distributed.device_mesh import init_device_mesh

        _check_heads(model, world)  # before sharding: DTensor would split uneven heads silently
        mesh = init_device_mesh("cuda" if cuda else "cpu", (world,))
        info["tp_modules"] = apply_tp_plan(model, mesh)
    else:
        model, info = _load_with_transformers_tp(cfg, rank, run_path)
    info["tp_build_s"] = round(time.perf_counter() - t0, 3)
    _check_heads(model, world)
    opts = RecordOptions(
        out=rank_dir(run_path, rank),
        force=True,
        nvml=bool(spec["nvml"]) and cuda,
        device_index=local_rank,
        cuda=cuda,
        command=tuple(sys.argv),
    )
    run = create_run(
        opts,
        workload=cfg.manifest(),
        model=info,
        tp={"rank": rank, "world_size": world, "backend": backend, "impl": impl, "local_rank": local_rank},
    )
    vocab = int(model.config.vocab_size)
    prompts = wl.make_prompts(cfg, vocab, cfg.requests)
    warm = wl.make_prompts(cfg, vocab, cfg.warmup, seed_offset=10_000)
    with torch.inference_mode():
        for p in warm:
            model.generate(**wl.generate_kwargs(cfg, p))
        dist.barrier()  # every rank enters the recorded requests together
        with Recording(run, opts) as rec:
            for i, p in enumerate(prompts):
                rec.name_next(f"{cfg.shape}-{i}")
                model.generate(**wl.generate_kwargs(cfg, p))
            if cuda:
                torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _check_heads(model: Any, world: int) -> None:
    c = model.config
    for key in ("num_attention_heads", "num_key_value_heads"):
        n = getattr(c, key, None)
        if n is not None and int(n) % world:
            raise UsageError(f"{key}={n} is not divisible by --tp {world}")


def _load_with_transformers_tp(cfg: Any, rank: int, run_path: Path) -> tuple[Any, dict[str, Any]]:
    """Transformers' tp_plan="auto" loads from a checkpoint: rank 0 saves the random model once."""
    import shutil

    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from tracekit.collectors import workload as wl

    ckpt = run_path / MODEL_TMP
    info: dict[str, Any] = {}
    if cfg.model.path is not None:
        ckpt = Path(cfg.model.path)
    elif rank == 0:
        model, info = wl.build_model(cfg)
        model.save_pretrained(ckpt)
        del model
    dist.barrier()
    dt = wl.torch_dtype(cfg.dtype)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(ckpt), tp_plan="auto", dtype=dt)
    except TypeError:
        model = AutoModelForCausalLM.from_pretrained(str(ckpt), tp_plan="auto", torch_dtype=dt)
    model.eval()
    dist.barrier()
    if rank == 0 and cfg.model.path is None:
        shutil.rmtree(ckpt, ignore_errors=True)
    info.setdefault("weights", "random" if cfg.model.path is None else "pretrained")
    return model, info


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "--worker":
        print("usage: python -m tracekit.collectors.tp --worker SPEC_JSON (started by tracekit record --tp)")
        return 2
    try:
        return _worker(json.loads(args[1]))
    except TracekitError as exc:
        print(f"tracekit: error: {exc.message}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
