"""Run one sweep point into its own run directory: warm up, time, trace, analyse.

Order of a point, and why:
1. warm-up: for ``compiled`` first the one-off compilation (timed and written
   to run.json as ``compile_s``, never inside a timed region); then
   ``warmup_runs`` runs of the whole point (same batch, prompt and answer
   length; the whole agent loop in its mode), as record warms up with whole
   requests: eager decode pays extra the first time a KV length is seen, so a
   warm-up shorter than the point leaves that cost inside the timed run
   (docs/sweep.md);
2. ``repeats`` timed runs without the profiler and without annotations (host
   timers on every token); the summary reports their median and min/max;
3. the kernel-capture window: the same prompt again with only a few output
   tokens under torch.profiler (prefill + a few decode steps), so traces stay
   small however long the answer is;
4. analysis of that trace into phases (compute / memory / idle), when the
   ingest and analysis passes are installed.

One clock, as for a recorded run: the host tables (perf_counter_ns) are shifted
onto the trace's raw Kineto clock by the ``tracekit.clock_sync`` markers the
capture emits, then ``tracekit.ingest.ingest_into`` reads the trace
(adding its baseTimeNanoseconds to every table, keeping any counters), the
same code path ``tracekit analyze`` takes for a run ``tracekit record`` made.

A ``load`` point is a ``record --serve`` run into its directory (collectors/serve.py: the
requests through the continuous-batching engine at the point's arrival rate, once without the
profiler, once recorded with NVML counters) analysed by every pass: latency under load from
the engine's own timestamps without the profiler (run.json ``timings.unprofiled.load``),
each request's cost (GPU time, energy) from the recorded pass (analysis/cost.py).

A failing point (CUDA out of memory at batch 32, a bad shape) is recorded as
failed with its one-line reason, and the sweep goes on. A model built from a
preset (random weights) gets its ``max_position_embeddings`` raised to fit the
longest point (timing does not depend on it; run.json says so); a real local
model keeps its limit and a point beyond it fails with that reason.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tracekit.collectors.memory import cache_tensor_bytes
from tracekit.model import schema
from tracekit.model.sweepspec import Point, SweepSpec
from tracekit.store.rundir import RunDir

STATUS_COMPLETE = "complete"
STATUS_FAILED = "failed"
STATUS_SKIPPED = "skipped"


@dataclass(frozen=True)
class PointOutcome:
    point_id: str
    status: str  # complete | failed | skipped
    reason: str = ""
    seconds: float = 0.0


@dataclass
class SweepContext:
    """What every point of a sweep shares: the model (built once), its device and dtype."""

    model: Any
    model_info: dict[str, Any]
    device: str
    dtype: str
    compiled_batches: set[int]
    max_cache_len: int
    current_mode: str = "eager"
    compile_setup: dict[str, Any] | None = None
    repeats: int = 1
    # record's environment(): the bound pass finds the GPU's ceiling by its name
    environment: dict[str, Any] | None = None
    # How the model was built, and the quantization it has now: a point of another quant rebuilds it.
    build: Any = None
    current_quant: str = "none"


def resolve_model_name(name: str) -> str:
    # The sweep calls the TinyLlama shape "tinyllama"; the record presets spell it out.
    return {"tinyllama": "tinyllama-1.1b"}.get(name, name)


def load(spec: SweepSpec) -> SweepContext:
    """Build the sweep's model once (random weights from a preset, or a local directory)."""
    from tracekit.collectors import presets, workload

    device = workload.resolve_device(spec.device)
    dtype = workload.resolve_dtype(
        {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(spec.dtype, spec.dtype), device
    )
    model_spec = presets.resolve_model(resolve_model_name(spec.model))
    model_spec, override = _fit_positions(model_spec, spec)
    cfg = workload.WorkloadConfig(
        model=model_spec,
        device=device,
        dtype=dtype,
        shape="sweep",
        input_tokens=1,
        output_tokens=1,
    )
    model, info = workload.build_model(cfg)
    if override:
        info["max_position_embeddings_override"] = override
    compiled = [p for p in spec.points if p.mode == "compiled" and p.group != "load"]
    max_len = max((max(p.prompt_lengths()) + p.output_tokens for p in compiled), default=0)
    from tracekit.collectors.environment import environment

    cuda = device.startswith("cuda")
    return SweepContext(
        model, info, device, dtype, set(), max_len, repeats=spec.repeats_for(cuda), environment=environment(),
        build=(cfg, override),
    )


def _set_quant(ctx: SweepContext, point: Point) -> None:
    """Rebuild the sweep's model at the point's quantization (collectors/quant.py) when it changes."""
    if point.quant == ctx.current_quant:
        return
    from dataclasses import replace

    from tracekit.collectors import workload

    if ctx.current_mode == "compiled":
        _set_mode(ctx, replace(point, mode="eager"))
    cfg, override = ctx.build
    ctx.model = None
    _empty_cache(ctx)
    ctx.current_quant = "unbuilt"  # a failed build leaves no model of the old quant posing as the new
    ctx.model, info = workload.build_model(replace(cfg, quant=point.quant))
    if override:
        info["max_position_embeddings_override"] = override
    ctx.model_info = info
    ctx.current_quant = point.quant
    ctx.compiled_batches = set()


def point_length(point: Point) -> int:
    """Positions the point needs: its longest prompt plus its answer."""
    return max(point.prompt_lengths()) + point.output_tokens


def _fit_positions(model_spec: Any, spec: SweepSpec) -> tuple[Any, dict[str, Any] | None]:
    """Raise a preset's max_position_embeddings to the sweep's longest point.

    Only for presets: their weights are random, and the cost of a forward pass
    depends on shapes, not on the position limit (RoPE computes its angles from
    the positions it is given). A real model's limit is what it was trained
    for: those points fail instead (see ``_run``).
    """
    from dataclasses import replace

    preset = getattr(model_spec, "preset", None)
    if preset is None or not spec.points:
        return model_spec, None
    limit = preset.config.get("max_position_embeddings")
    need = max(point_length(p) for p in spec.points)
    if limit is None or need <= int(limit):
        return model_spec, None
    new_preset = replace(preset, config={**preset.config, "max_position_embeddings": need})
    return replace(model_spec, preset=new_preset), {
        "preset_value": int(limit),
        "used": need,
        "reason": "random-weight preset: max_position_embeddings raised to fit the longest sweep point; "
        "timing does not depend on it",
    }


def kv_bytes_per_token_formula(config: dict[str, Any], dtype: str) -> float:
    """2 (K and V) x layers x KV heads x head dim x bytes per element."""
    heads = int(config.get("num_attention_heads", 1))
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    elem = {"fp32": 4, "fp16": 2, "bf16": 2}.get(dtype, 4)
    return float(2 * int(config["num_hidden_layers"]) * kv_heads * head_dim * elem)


def _set_mode(ctx: SweepContext, point: Point) -> None:
    from tracekit.collectors import compiled

    if point.mode == ctx.current_mode:
        return
    if point.mode == "compiled":
        setup = compiled.enable(ctx.model, max_cache_len=max(ctx.max_cache_len, 64))
        ctx.compile_setup = setup.manifest()
    else:
        compiled.disable(ctx.model)
    ctx.current_mode = point.mode


def _prompt(ctx: SweepContext, batch: int, n: int, seed: int) -> Any:
    import torch

    vocab = int(ctx.model.config.vocab_size)
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab, (batch, n), generator=gen).to(ctx.device)


def _empty_cache(ctx: SweepContext) -> None:
    import torch

    if ctx.device.startswith("cuda"):
        torch.cuda.empty_cache()


def _host_tables(point: Point, calls: list[Any], offset_ns: int = 0) -> tuple[Any, Any]:
    """requests and steps tables from host timers (source ``host``), times + ``offset_ns``."""
    req: dict[str, list[Any]] = {k: [] for k in (
        "request_id", "name", "batch", "input_tokens", "output_tokens", "start_ns", "end_ns",
        "ttft_ns", "tpot_ns", "e2e_ns", "prefill_share", "source")}  # fmt: skip
    st: dict[str, list[Any]] = {k: [] for k in (
        "step_id", "request_id", "kind", "batch", "q_len", "kv_len", "tokens", "source",
        "cpu_start_ns", "cpu_end_ns")}  # fmt: skip
    sid = 0
    for rid, r in enumerate(calls):
        req["request_id"].append(rid)
        req["name"].append(point.id if len(calls) == 1 else f"{point.id}#{rid}")  # rid: repetition x call
        req["batch"].append(r.batch)
        req["input_tokens"].append(r.prompt_tokens)
        req["output_tokens"].append(r.output_tokens)
        req["start_ns"].append(r.start_ns + offset_ns)
        req["end_ns"].append(r.end_ns + offset_ns)
        req["ttft_ns"].append(r.ttft_ns)
        req["tpot_ns"].append(r.tpot_ns)
        req["e2e_ns"].append(r.e2e_ns)
        req["prefill_share"].append(r.ttft_ns / r.e2e_ns if r.e2e_ns else None)
        req["source"].append("host")
        for s in r.steps:
            st["step_id"].append(sid)
            st["request_id"].append(rid)
            st["kind"].append(s.kind)
            st["batch"].append(r.batch)
            st["q_len"].append(s.q_len)
            st["kv_len"].append(s.kv_len)
            st["tokens"].append(s.q_len * r.batch)
            st["source"].append("host")
            st["cpu_start_ns"].append(s.start_ns + offset_ns)
            st["cpu_end_ns"].append(s.end_ns + offset_ns)
            sid += 1
    return schema.from_columns("requests", req), schema.from_columns("steps", st)


def _analyse_trace(run: RunDir, warn: list[str]) -> None:
    """Ingest the captured window and run the analysis passes into the phases table.

    The trace is read by ``ingest_into`` (tracekit analyze's own path for a
    recorded run): every table on one clock, the host tables shifted by the
    trace's base once, counters kept. The phases table (three-way split) comes
    from the trace; the steps and requests the passes derive from it are kept as
    ``trace_steps`` and ``trace_requests``: the host tables stay the source of
    the latency numbers, because the window covers only a few tokens.
    """
    from tracekit.app.analyze import analyse_trace_window

    result = analyse_trace_window(run)
    warn.extend(f"analyze: {w}" for w in result.get("warnings", []))


def _clock_sync() -> None:
    """One ``tracekit.clock_sync`` marker carrying the host tables' clock (perf_counter_ns).

    The host is read just before the annotation opens, so each pair can only
    overstate the offset; chrome_trace.clock_offset takes the minimum.
    """
    import torch

    from tracekit.trace.chrome import CLOCK_SYNC

    t = time.perf_counter_ns()
    with torch.profiler.record_function(f"{CLOCK_SYNC} host_ns={t}"):
        pass


def _host_clock(run: RunDir, warn: list[str]) -> int | None:
    """trace ns (raw Kineto ts) − host perf_counter_ns from the capture's markers; run.json ``clock``."""
    from tracekit.trace import chrome as chrome_trace

    syncs = chrome_trace.find_clock_syncs(run.trace_path)
    offset = chrome_trace.clock_offset(syncs)
    clock: dict[str, Any] = {"trace_clock": "Kineto ts converted to int64 ns", "host_clock": "time.perf_counter_ns",
                             "clock_syncs": len(syncs)}  # fmt: skip
    if offset is None:
        # Without offset_ns ingest_into shifts nothing: the host tables stay on their own clock.
        clock["source"] = "none: host tables on perf_counter_ns, not the trace clock"
        warn.append("no tracekit.clock_sync in the capture: host tables are not on the trace clock")
    else:
        clock["source"] = "tracekit.clock_sync (minimum offset)"
        clock["offset_ns"] = offset  # trace_ns = host_ns + offset_ns
        clock["sync_excess_ns_max"] = max(c.offset_ns for c in syncs) - offset
    run.update_manifest(clock=clock)
    return offset


def _capture(
    ctx: SweepContext, run: RunDir, point: Point, prompt: Any, new_tokens: int, warn: list[str]
) -> float:
    """The kernel-capture window: prompt + a few tokens under torch.profiler, saved as trace.json.gz."""
    import torch

    from tracekit.collectors.agent import timed_generate

    acts = [torch.profiler.ProfilerActivity.CPU]
    if ctx.device.startswith("cuda"):
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        for _ in range(3):  # several pairs: the first after the profiler starts is often late
            _clock_sync()
        timed_generate(ctx.model, prompt, new_tokens, request_name=point.id)
        _clock_sync()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        tmp_gz = run.path / ".trace.json.gz.tmp"
        with open(raw, "rb") as src, gzip.open(tmp_gz, "wb", compresslevel=3) as dst:
            shutil.copyfileobj(src, dst)
        tmp_gz.replace(run.trace_path)
    return time.perf_counter() - t0


def run_point(ctx: SweepContext, spec: SweepSpec, point: Point, path: Path) -> PointOutcome:
    """Run one point into ``path``; never raises for a failure of the point itself."""
    t_start = time.perf_counter()
    run = RunDir.create(
        path,
        force=True,
        command=["tracekit", "sweep", spec.name],
        kind="sweep-point",
        sweep=spec.name,
        point=_point_manifest(point),
        model=ctx.model_info,
        environment=ctx.environment or {},
        workload={"device": ctx.device, "dtype": ctx.dtype, "batch": point.batch, "mode": point.mode,
                  "quant": point.quant},
    )
    try:
        if point.quant != ctx.current_quant:
            _set_quant(ctx, point)
            run.update_manifest(model=ctx.model_info)
        data = _run(ctx, spec, point, run)
        run.update_manifest(**data)
        run.mark_complete()
        return PointOutcome(point.id, STATUS_COMPLETE, seconds=time.perf_counter() - t_start)
    except KeyboardInterrupt:
        run.mark_incomplete("interrupted")
        raise
    except Exception as exc:
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:300]
        run.update_manifest(status="incomplete", failed=True, error=reason)
        _empty_cache(ctx)
        return PointOutcome(point.id, STATUS_FAILED, reason, time.perf_counter() - t_start)


def _point_manifest(point: Point) -> dict[str, Any]:
    d = asdict(point)
    d["id"] = point.id
    return d


def _run_load(ctx: SweepContext, spec: SweepSpec, point: Point, run: RunDir) -> dict[str, Any]:
    """A load point: serve its requests at its rate on the sweep's model, then analyse the run."""
    from dataclasses import replace

    from tracekit.app.analyze import analyze
    from tracekit.collectors import presets, workload
    from tracekit.collectors import serve as sv
    from tracekit.collectors.options import RecordOptions

    _set_mode(ctx, replace(point, mode="eager"))  # the engine runs its own forward; no generate compile
    cuda = ctx.device.startswith("cuda")
    plan = sv.plan([x for x in point.shape.split(",") if x], point.requests, point.rate, seed=0)
    serve = sv.ServeConfig(requests=plan, rate=point.rate, max_batch_tokens=spec.max_batch_tokens,
                           cuda_graphs=point.mode == "compiled")
    cfg = workload.WorkloadConfig(model=presets.ModelSpec(), device=ctx.device, dtype=ctx.dtype, shape=point.shape,
                                  input_tokens=point.input_tokens, output_tokens=point.output_tokens,
                                  requests=point.requests, warmup=max(1, spec.warmup_runs), seed=0)
    device_index = int(ctx.device.split(":", 1)[1]) if ":" in ctx.device else 0
    opts = RecordOptions(out=run.path, nvml=cuda, cuda=cuda, device_index=device_index, quiet=True,
                         nvml_off_reason="device is cpu: no GPU to sample")
    sv.check_fits(plan, ctx.model)
    sv.serve_into(run, ctx.model, cfg, serve, opts)
    data: dict[str, Any] = {"repeats": {"n": 1, "calls_per_repeat": point.requests}}
    warn: list[str] = []
    try:
        analyze(run.path)
    except Exception as exc:
        warn.append(f"trace analysis failed: {type(exc).__name__}: {exc}")
    data["warnings"] = run.read_manifest().get("warnings", []) + warn
    return data


def _run(ctx: SweepContext, spec: SweepSpec, point: Point, run: RunDir) -> dict[str, Any]:
    import torch

    from tracekit.collectors import compiled
    from tracekit.collectors.agent import median_steps, run_agent_loop, timed_generate

    warn: list[str] = []
    limit = getattr(ctx.model.config, "max_position_embeddings", None)
    need = point_length(point)
    if limit is not None and need > int(limit):
        raise ValueError(f"{need} tokens exceed the model's max_position_embeddings ({limit})")
    if point.group == "load":
        return _run_load(ctx, spec, point, run)
    _set_mode(ctx, point)
    cuda = ctx.device.startswith("cuda")
    data: dict[str, Any] = {}
    first_prompt = _prompt(ctx, point.batch, point.prompt_lengths()[0], seed=1)
    a = point.agent

    def agent_loop(annotate: bool) -> Any:
        assert a is not None
        return run_agent_loop(ctx.model, steps=a.steps, system_tokens=a.system_tokens, output_tokens=a.output_tokens,
                              tool_tokens=a.tool_tokens, mode=a.mode, batch=point.batch, annotate=annotate)  # fmt: skip

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # past_key_values rename in Transformers 5.2x
        # 1. warm-up (compilation lands here, timed apart), then the whole point.
        compile_s = 0.0
        if point.mode == "compiled" and point.batch not in ctx.compiled_batches:
            warm_new = max(2, min(point.output_tokens, 4))
            compile_s = compiled.warm_up(
                lambda b: timed_generate(ctx.model, _prompt(ctx, b, point.prompt_lengths()[0], 2), warm_new),
                [point.batch],
            )
            ctx.compiled_batches.add(point.batch)
        t0 = time.perf_counter()
        for _ in range(max(0, spec.warmup_runs)):
            if a is None:
                timed_generate(
                    ctx.model, first_prompt, point.output_tokens, request_name="warmup", annotate=False
                )
            else:
                agent_loop(annotate=False)
        data["warmup"] = {
            "runs": max(0, spec.warmup_runs),
            "what": "the whole point",
            "seconds": round(time.perf_counter() - t0, 3),
        }
        if point.mode == "compiled":
            data["compiled"] = {**(ctx.compile_setup or {}), "compile_s": round(compile_s, 3),
                                "compiled_by_earlier_point": compile_s == 0.0}  # fmt: skip
        # 2. the timed repetitions, without the profiler or annotations.
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            mem0 = torch.cuda.memory_allocated()
        calls: list[Any] = []
        cache = None
        if a is None:
            for _ in range(ctx.repeats):
                if cache is not None:  # keep one cache alive (the last one), for the KV measurement
                    del cache
                    calls[-1].cache = None
                r = timed_generate(ctx.model, _prompt(ctx, point.batch, point.input_tokens, 3), point.output_tokens,
                                   request_name=point.id, annotate=False)  # fmt: skip
                r.sequences = None
                calls.append(r)
                cache = r.cache
            data["timings"] = _repeat_timings(calls)
            data["timings"]["prefilled_tokens"] = calls[0].prefilled_tokens
        else:
            loops = [agent_loop(annotate=False) for _ in range(ctx.repeats)]
            calls = [c for lp in loops for c in lp.calls]
            data["agent"] = {
                "mode": a.mode,
                "steps": [asdict(s) for s in median_steps(loops)],
                "step_values": "median over the repetitions",
                "repetitions": [[asdict(s) for s in lp.steps] for lp in loops],
            }
        data["repeats"] = {"n": ctx.repeats, "calls_per_repeat": len(calls) // max(1, ctx.repeats),
                           "note": "requests table: repetition r holds request_ids [r*k, (r+1)*k)"}  # fmt: skip
        # KV bytes per token: the formula, the cache's own tensors, and (CUDA) the
        # allocator's growth, which also counts activations and fp32 logits.
        cfg = ctx.model_info.get("config", {})
        kv: dict[str, Any] = {"formula_bytes_per_token": kv_bytes_per_token_formula(cfg, ctx.dtype)}
        if cache is not None:
            from tracekit.collectors.agent import cache_length

            n = cache_length(cache) * point.batch
            if n:
                kv["cache_tensor_bytes_per_token"] = cache_tensor_bytes(cache) / n
                kv["cache_tokens"] = n
            if cuda:
                kv["allocated_growth_bytes_per_token"] = (
                    (torch.cuda.memory_allocated() - mem0) / n if n else None
                )
                kv["peak_growth_bytes_per_token"] = (
                    (torch.cuda.max_memory_allocated() - mem0) / n if n else None
                )
        kv["logits_fp32_bytes_per_token"] = 4.0 * int(cfg.get("vocab_size", 0))
        data["kv"] = kv
        for c in calls:
            c.cache = None
            c.sequences = None
        del cache
        _empty_cache(ctx)
        req, steps = _host_tables(point, calls)
        run.write_table("requests", req)
        run.write_table("steps", steps)
        # 3. kernel-capture window.
        window = max(1, min(point.output_tokens, spec.trace_steps - 1))
        data["trace_window"] = {"forwards": window, "prompt_tokens": point.prompt_lengths()[0]}
        data["trace_s"] = round(_capture(ctx, run, point, first_prompt, window, warn), 3)
        offset = _host_clock(run, warn)
        if offset is not None:  # the same rows on the raw trace clock; ingest_into adds the base
            req, steps = _host_tables(point, calls, offset)
            run.write_table("requests", req)
            run.write_table("steps", steps)
    # 4. analysis of the window.
    try:
        _analyse_trace(run, warn)
    except Exception as exc:
        warn.append(f"trace analysis failed: {type(exc).__name__}: {exc}")
    data["warnings"] = run.read_manifest().get("warnings", []) + warn
    return data


def _repeat_timings(calls: list[Any]) -> dict[str, Any]:
    """Median and min/max of TTFT, TPOT and e2e over the timed repetitions (ns)."""
    import statistics

    out: dict[str, Any] = {"source": "host timers, no profiler", "repeats": len(calls)}
    for key in ("ttft_ns", "tpot_ns", "e2e_ns"):
        vals = [float(v) for v in (getattr(c, key) for c in calls) if v is not None]
        out[key] = statistics.median(vals) if vals else None
        out[f"{key}_all"] = vals
    return out


def run_sweep(
    spec: SweepSpec,
    out: Path,
    *,
    resume: bool = False,
    on_point: Any = None,
    on_start: Any = None,
) -> list[PointOutcome]:
    """Run every point of ``spec`` under ``out/points/<id>``; write ``out/sweep.json`` as it goes.

    ``resume`` skips a point whose run.json says complete. ``on_start(point)``
    and ``on_point(outcome)`` drive the progress display.
    """
    from tracekit.store import sweepdir as sweep_report

    out.mkdir(parents=True, exist_ok=True)
    meta = sweep_report.read_sweep(out) if resume else {}
    meta.update(
        name=spec.name,
        model=spec.model,
        device=spec.device,
        dtype=spec.dtype,
        trace_steps=spec.trace_steps,
        warmup_runs=spec.warmup_runs,
        repeats=spec.repeats or meta.get("repeats", 0),
        point_ids=[p.id for p in spec.points],
        points={p.id: _point_manifest(p) for p in spec.points},
    )
    outcomes: dict[str, Any] = dict(meta.get("outcomes", {}))
    meta["outcomes"] = outcomes
    sweep_report.write_sweep(out, meta)
    ctx: SweepContext | None = None
    results: list[PointOutcome] = []
    t0 = time.perf_counter()
    for point in spec.points:
        path = out / sweep_report.POINTS_DIR / point.id
        if on_start is not None:
            on_start(point)
        if resume and RunDir(path).status == STATUS_COMPLETE and RunDir(path).manifest_path.is_file():
            res = PointOutcome(point.id, STATUS_SKIPPED, "already complete")
        else:
            if ctx is None:
                ctx = load(spec)
                meta.update(device=ctx.device, dtype=ctx.dtype, model_info=ctx.model_info, repeats=ctx.repeats,
                            device_name=_device_name(ctx.device))  # fmt: skip
            res = run_point(ctx, spec, point, path)
        results.append(res)
        outcomes[point.id] = {"status": res.status, "reason": res.reason, "seconds": round(res.seconds, 3)}
        meta["elapsed_s"] = round(time.perf_counter() - t0 + float(meta.get("previous_elapsed_s", 0.0)), 3)
        sweep_report.write_sweep(out, meta)
        if on_point is not None:
            on_point(res)
    meta["previous_elapsed_s"] = meta["elapsed_s"]
    sweep_report.write_sweep(out, meta)
    return results


def _device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return str(torch.cuda.get_device_name(torch.device(device)))
    return "CPU"
