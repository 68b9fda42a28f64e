"""``tracekit record``: the built-in generation workload, or your own script, into a run directory."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tracekit.errors import UsageError
from tracekit.model.quant import CHOICES as QUANT_CHOICES
from tracekit.report.text import say

if TYPE_CHECKING:
    from tracekit.collectors.session import RecordOptions
    from tracekit.store.rundir import RunDir


@click.command(
    "record",
    context_settings={"ignore_unknown_options": False, "help_option_names": ["-h", "--help"]},
)
@click.option(
    "--model",
    "model",
    default=None,
    metavar="NAME_OR_PATH",
    help="A preset (tiny, tinyllama-1.1b, llama-3.2-1b, qwen2.5-0.5b, llama-3.1-8b; random weights) "
    "or a local Hugging Face model directory (only a config.json: its architecture with random weights). "
    "Default: tinyllama-1.1b with CUDA, else tiny.",
)
@click.option(
    "--model-preset", "model_preset", default=None, hidden=True, help="Alias of --model for a preset name."
)
@click.option("--trust-remote-code", is_flag=True, help="Allow a local model's own code to run.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option(
    "--dtype", default="auto", show_default=True, help="auto (fp16 on GPU, fp32 on CPU), fp32, fp16, bf16."
)
@click.option(
    "--shape",
    default=None,
    help="smoke (22/8), chat (128/128), rag (1205/60), creative (25/500) [smoke]. With --serve a "
    "comma-separated mix, requests taking the shapes in turn; agentic there is one step of a 5-step agent loop.",
)
@click.option(
    "--input-tokens", type=click.IntRange(min=1), default=None, help="Override the shape's prompt length."
)
@click.option(
    "--output-tokens", type=click.IntRange(min=1), default=None, help="Override the shape's output length."
)
@click.option("--batch", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--requests", "n_requests", type=click.IntRange(min=1), default=None, help="Requests to run [1; --serve: 16, or the --lengths file's]."
)
@click.option(
    "--serve",
    is_flag=True,
    help="Serve the requests through Transformers' continuous batching engine, under load: every "
    "scheduler step recorded with the requests it served.",
)
@click.option(
    "--rate",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="--serve: requests per second, Poisson arrivals seeded by --seed [all arrive at once].",
)
@click.option(
    "--lengths",
    "lengths_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="--serve: a file of 'PROMPT OUTPUT' token counts, one request per line (instead of --shape).",
)
@click.option(
    "--max-batch-tokens",
    type=click.IntRange(min=1),
    default=512,
    show_default=True,
    help="--serve: tokens per engine step; longer prompts are prefilled in chunks beside the decodes.",
)
@click.option(
    "--kv-blocks",
    type=click.IntRange(min=1),
    default=None,
    help="--serve: KV cache pages of 64 tokens [enough for every request at once].",
)
@click.option("--cuda-graphs", is_flag=True, help="--serve: the engine's CUDA graphs (captured in warm-up).")
@click.option(
    "--assistant",
    default=None,
    metavar="PRESET|PATH|layers:N",
    help="Speculative decoding: each request plainly and with this draft model (assisted generation); "
    "layers:N is the target's first N layers, weights shared.",
)
@click.option(
    "--assistant-tokens",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="--assistant: draft tokens proposed per round.",
)
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="Untimed, unrecorded requests first.",
)
@click.option(
    "--out", type=click.Path(path_type=Path), default=None, help="Run directory [runs/<timestamp>-<shape>]."
)
@click.option("--force", is_flag=True, help="Overwrite an existing run directory.")
@click.option(
    "--trace-steps",
    default=None,
    metavar="N|START:STOP",
    help="Capture kernels only for these forward passes.",
)
@click.option(
    "--compile",
    "use_compile",
    is_flag=True,
    help="Static KV cache + torch.compile (CUDA graphs on a GPU); compilation runs in warm-up, untimed.",
)
@click.option(
    "--tp",
    "tp",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Tensor parallel over N processes (one GPU each; gloo on CPU): one run per rank under ranks/.",
)
@click.option(
    "--counters",
    "with_counters",
    is_flag=True,
    help="Then measure the recorded steps (--trace-steps, else 0:2) with Nsight Compute (tracekit counters).",
)
@click.option(
    "--memory",
    "with_memory",
    is_flag=True,
    help="Memory at every step: the profiler's memory events and the step_memory table (allocated, "
    "reserved, peak; weights / KV cache / transient); the summary adds a KV capacity line.",
)
@click.option(
    "--quant",
    type=click.Choice(list(QUANT_CHOICES)),
    default="none",
    show_default=True,
    help="Quantize the model's linear layers with torchao first: int8 / int4 weight-only, int8-dyn and "
    "fp8 with dynamic activations.",
)
@click.option("--no-nvml", is_flag=True, help="Do not sample NVML counters.")
@click.option("--sample-hz", type=click.FloatRange(min=0.1, max=1000), default=100.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Record the built-in workload N times, as OUT/repeat-1 ... OUT/repeat-N: tracekit diff takes "
              "the directory as one side and tells a change from the run-to-run noise.")
@click.option("--quiet", "-q", is_flag=True, help="No progress display and no summary.")
@click.argument("script", nargs=-1, type=click.UNPROCESSED)
def command(
    model: str | None,
    model_preset: str | None,
    trust_remote_code: bool,
    device: str,
    dtype: str,
    shape: str,
    input_tokens: int | None,
    output_tokens: int | None,
    batch: int,
    n_requests: int,
    warmup: int,
    out: Path | None,
    force: bool,
    trace_steps: str | None,
    use_compile: bool,
    tp: int | None,
    with_counters: bool,
    no_nvml: bool,
    sample_hz: float,
    seed: int,
    repeat: int,
    quiet: bool,
    script: tuple[str, ...],
    serve: bool = False,
    rate: float | None = None,
    lengths_file: Path | None = None,
    max_batch_tokens: int = 512,
    kv_blocks: int | None = None,
    cuda_graphs: bool = False,
    assistant: str | None = None,
    assistant_tokens: int = 4,
    with_memory: bool = False,
    quant: str = "none",
) -> int:
    """Record a generation workload (or your script) into a run directory.

    \b
    tracekit record                                  # built-in workload, default model and shape
    tracekit record --model tinyllama-1.1b --shape chat
    tracekit record --model ./my-hf-model --shape rag --batch 4
    tracekit record --serve --shape chat,rag,creative,agentic --requests 16 --rate 4
    tracekit record --assistant layers:8 --shape chat
    tracekit record --quant int8 --memory --shape chat
    tracekit record --out runs/mine -- python my_script.py ARGS
    """
    import importlib.util

    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"tracekit record needs {' and '.join(missing)}: pip install 'tracekit-llm[record]'")

    from tracekit.collectors import presets
    from tracekit.collectors.profiler import parse_trace_steps
    from tracekit.collectors.session import RecordOptions, default_out, run_script, run_workload
    from tracekit.store.rundir import RunDir

    window = parse_trace_steps(trace_steps)
    _check_modes(serve=serve, assistant=assistant, script=script, tp=tp, use_compile=use_compile,
                 trace_steps=trace_steps, batch=batch, rate=rate, lengths_file=lengths_file,
                 max_batch_tokens=max_batch_tokens, kv_blocks=kv_blocks, cuda_graphs=cuda_graphs,
                 assistant_tokens=assistant_tokens)
    command_line = (
        ("tracekit", "record", *sys.argv[2:]) if sys.argv[1:2] == ["record"] else ("tracekit", "record")
    )

    for flag, on in (("--memory", with_memory), (f"--quant {quant}", quant != "none")):
        bad = [k for k, v in (("--tp", tp is not None), ("a script", bool(script)),
                              ("--assistant", assistant is not None)) if v]
        if on and bad:
            raise UsageError(f"{flag} does not combine with {bad[0]} yet")
    if with_memory and serve:
        raise UsageError("--memory does not combine with --serve yet (the profiler's memory events and "
                         "profile_all_threads exclude each other)")
    if tp is not None and with_counters:
        raise UsageError("--counters does not combine with --tp yet: run tracekit counters on a rank's run")
    if tp is not None:
        shape = shape or "smoke"
        n_requests = n_requests or 1
        return _record_tp(
            tp,
            script=script,
            use_compile=use_compile,
            trace_steps=trace_steps,
            model=model or model_preset,
            device=device,
            dtype=dtype,
            shape=shape,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            batch=batch,
            n_requests=n_requests,
            warmup=warmup,
            out=out,
            force=force,
            no_nvml=no_nvml,
            seed=seed,
            quiet=quiet,
        )
    if script and use_compile:
        raise UsageError(
            "--compile applies to the built-in workload, not to a script (compile in your script)"
        )
    if no_nvml and given_options("sample_hz"):
        raise UsageError(f"--sample-hz {sample_hz:g} and --no-nvml conflict: there is nothing to sample")
    if script:
        workload_only = given_options(*WORKLOAD_ONLY)
        if workload_only:
            raise UsageError(
                f"{', '.join(workload_only)} and the script {' '.join(script)!r} conflict: "
                "these options shape the built-in workload; a script builds its own model and requests"
            )
        opts = RecordOptions(
            out=out or default_out(Path(script[-1] if len(script) == 1 else script[1]).stem or "script"),
            force=force,
            nvml=not no_nvml,
            sample_hz=sample_hz,
            trace_steps=window,
            quiet=quiet,
            command=command_line,
        )
        run, code = run_script(list(script), opts)
        if not quiet:
            print_summary(RunDir.open(run.path).read_manifest(), run.path)
        if with_counters and code == 0:
            _counters(run.path, window, quiet)
        return code

    from tracekit.collectors import workload as wl

    if model_preset is not None:
        if model is not None:
            raise UsageError(
                f"--model {model} and --model-preset {model_preset} conflict: give one (--model takes presets too)"
            )
        if model_preset not in presets.MODEL_PRESETS:
            raise UsageError(
                f"--model-preset {model_preset!r}: known presets: {', '.join(presets.MODEL_PRESETS)}"
            )
        model = model_preset
    dev = wl.resolve_device(device)
    name = model or (presets.GPU_DEFAULT_MODEL if dev.startswith("cuda") else presets.CPU_DEFAULT_MODEL)
    spec = presets.resolve_model(name)
    shape = shape or "smoke"
    mix = [x.strip() for x in shape.split(",") if x.strip()]
    if serve:
        from tracekit.collectors import serve as sv

        for m in mix:
            sv.serve_shape(m)  # an unknown name fails here, in one line
        lengths = sv.read_lengths(lengths_file) if lengths_file is not None else None
        n_requests = n_requests or (len(lengths) if lengths else 16)
        if lengths is not None:
            mix = ["lengths"]
        shape = ",".join(mix)
    elif len(mix) != 1 or mix[0] == "agentic":
        raise UsageError(f"--shape {shape}: a mix of shapes and the agentic shape need --serve")
    n_requests = n_requests or 1
    # With --serve each request has its own shape (serve.plan); the config's lengths are a placeholder.
    sp = presets.SHAPES.get(mix[0], presets.SHAPES["chat"]) if serve else presets.resolve_shape(mix[0])
    custom = input_tokens is not None or output_tokens is not None
    cfg = wl.WorkloadConfig(
        model=spec,
        device=dev,
        dtype=wl.resolve_dtype(dtype, dev),
        shape=(shape if serve else sp.name) + ("-custom" if custom else ""),
        input_tokens=input_tokens or sp.input_tokens,
        output_tokens=output_tokens or sp.output_tokens,
        batch=batch,
        requests=n_requests,
        warmup=warmup,
        seed=seed,
        trust_remote_code=trust_remote_code,
        compile=use_compile,
        quant=quant,
        memory=with_memory,
    )
    if cfg.output_tokens < 1:
        raise UsageError("--output-tokens must be at least 1")
    device_index = int(dev.split(":", 1)[1]) if ":" in dev else 0
    opts = RecordOptions(
        out=out or default_out("serve" if serve else f"{cfg.shape}-assisted" if assistant else cfg.shape),
        force=force,
        nvml=not no_nvml and dev.startswith("cuda"),
        sample_hz=sample_hz,
        trace_steps=window,
        cuda=dev.startswith("cuda"),
        device_index=device_index,
        quiet=quiet,
        command=command_line,
        nvml_off_reason="disabled with --no-nvml" if no_nvml else "device is cpu: no GPU to sample",
        memory=with_memory,
    )
    def one(opts: RecordOptions) -> RunDir:
        if serve:
            plan = sv.plan(mix, n_requests, rate, seed, lengths=lengths, input_tokens=input_tokens,
                           output_tokens=output_tokens)
            return sv.run_serve(
                cfg,
                sv.ServeConfig(requests=plan, rate=rate, max_batch_tokens=max_batch_tokens, num_blocks=kv_blocks,
                               cuda_graphs=cuda_graphs),
                opts,
            )
        if assistant is not None:
            from tracekit.collectors.assisted import run_assisted

            return run_assisted(cfg, assistant, assistant_tokens, opts)
        return run_workload(cfg, opts)

    if repeat > 1:
        if with_counters:
            raise UsageError("--repeat and --counters conflict: measure counters on one run")
        return _repeat(one, opts, repeat, quiet)
    run = one(opts)
    if not quiet:
        print_summary(run.read_manifest(), run.path)
    if with_counters:
        _counters(run.path, window, quiet)
    return 0


def _repeat(one: Callable[[RecordOptions], RunDir], opts: RecordOptions, n: int, quiet: bool) -> int:
    """The same recording n times under opts.out (repeat-1 ... repeat-n); the first run's summary and
    the spread of TTFT and TPOT over the repeats (host timers without the profiler)."""
    import dataclasses

    from tracekit.report.record_summary import repeat_lines

    if opts.out.exists() and not opts.force and any(opts.out.iterdir()):
        raise UsageError(f"--out {opts.out}: exists and is not empty (--force replaces it)")
    opts.out.mkdir(parents=True, exist_ok=True)
    manifests = []
    for i in range(1, n + 1):
        run = one(dataclasses.replace(opts, out=opts.out / f"repeat-{i}"))
        manifests.append(run.read_manifest())
        if not quiet and i == 1:
            print_summary(manifests[0], run.path)
    if not quiet:
        click.echo("\n".join(repeat_lines(manifests, opts.out)))
    return 0


def print_summary(manifest: dict[str, object], path: Path) -> None:
    """The summary on stdout (``tracekit record > out.txt`` keeps it); its warnings on stderr."""
    from tracekit.report.record_summary import render, warning_lines

    for line in warning_lines(manifest):
        say(line, err=True)
    say(render(manifest, path, with_warnings=False))


def _counters(path: Path, window: object, quiet: bool) -> None:
    """``--counters``: the recorded run's steps under Nsight Compute; a failure is one line, the run kept."""
    from tracekit.collectors.ncu import CountersError, CountersOptions, collect

    try:
        res = collect(path, CountersOptions(steps=window))  # type: ignore[arg-type]
    except CountersError as exc:
        raise CountersError(f"run kept at {path}; counters: {exc.message}") from None
    if not quiet:
        say(f"counters: {res.kernels:,} kernels, {res.matched:,} joined (steps {res.steps}) in "
                   f"{res.elapsed_s:,.1f} s", err=True)
        for line in res.lines:
            say(line, err=True)


# Options of the built-in workload: meaningless for a script (``tracekit record -- python my.py``).
WORKLOAD_ONLY = ("model", "model_preset", "trust_remote_code", "device", "dtype", "shape", "input_tokens",
                 "output_tokens", "batch", "n_requests", "warmup", "seed", "with_memory", "quant")


def given_options(*names: str) -> list[str]:
    """The options among ``names`` (parameter names) the user gave on the command line, as
    ``--flag VALUE`` (a flag alone for on/off options), in the command's order."""
    ctx = click.get_current_context()
    out = []
    for p in ctx.command.params:
        if p.name not in names or not isinstance(p, click.Option):
            continue
        if ctx.get_parameter_source(p.name) not in (click.core.ParameterSource.COMMANDLINE,
                                                    click.core.ParameterSource.ENVIRONMENT):
            continue
        value = ctx.params.get(p.name)
        out.append(p.opts[0] if p.is_flag else f"{p.opts[0]} {value}")
    return out


def _check_modes(*, serve: bool, assistant: str | None, script: tuple[str, ...], tp: int | None, use_compile: bool,
                 trace_steps: str | None, batch: int, rate: float | None, lengths_file: Path | None,
                 max_batch_tokens: int, kv_blocks: int | None, cuda_graphs: bool, assistant_tokens: int) -> None:
    """--serve and --assistant are workloads of their own: what they do not combine with, one line each."""
    serve_only = {"--rate": rate is not None, "--lengths": lengths_file is not None,
                  "--max-batch-tokens": max_batch_tokens != 512, "--kv-blocks": kv_blocks is not None,
                  "--cuda-graphs": cuda_graphs}
    for mode, on in (("--serve", serve), ("--assistant", assistant is not None)):
        if not on:
            continue
        others = {"a script": bool(script), "--tp": tp is not None, "--compile": use_compile,
                  "--trace-steps": trace_steps is not None, "--batch": batch != 1,
                  "--assistant": serve and assistant is not None}
        bad = [k for k, v in others.items() if v]
        if bad:
            raise UsageError(f"{mode} does not combine with {bad[0]}"
                             + (" (the engine batches the requests itself)" if mode == "--serve" and bad[0] == "--batch"
                                else ""))
    if not serve:
        given = [k for k, v in serve_only.items() if v]
        if given:
            raise UsageError(f"{given[0]} applies to --serve only")
    if assistant is None and assistant_tokens != 4:
        raise UsageError("--assistant-tokens applies to --assistant only")


def _record_tp(
    world: int,
    *,
    script: tuple[str, ...],
    use_compile: bool,
    trace_steps: str | None,
    model: str | None,
    device: str,
    dtype: str,
    shape: str,
    input_tokens: int | None,
    output_tokens: int | None,
    batch: int,
    n_requests: int,
    warmup: int,
    out: Path | None,
    force: bool,
    no_nvml: bool,
    seed: int,
    quiet: bool,
) -> int:
    """``--tp N``: the built-in workload sharded over N ranks by tracekit.collectors.tp."""
    for given, flag in ((script, "a script"), (use_compile, "--compile"), (trace_steps, "--trace-steps")):
        if given:
            raise UsageError(f"--tp does not combine with {flag} yet")
    if device not in ("auto", "cpu", "cuda"):
        # Ranks take GPUs 0..N-1 (LOCAL_RANK); choose them with CUDA_VISIBLE_DEVICES instead.
        raise UsageError(
            f"--tp with --device {device}: use auto, cpu or cuda (CUDA_VISIBLE_DEVICES picks GPUs)"
        )
    from tracekit.collectors import presets
    from tracekit.collectors import workload as wl
    from tracekit.collectors.session import default_out
    from tracekit.collectors.tp import TPOptions, launch, rank_dir
    from tracekit.store.rundir import RunDir

    dev = wl.resolve_device(device)
    name = model or (presets.GPU_DEFAULT_MODEL if dev.startswith("cuda") else presets.CPU_DEFAULT_MODEL)
    presets.resolve_model(name)  # a bad name or path fails here, before N processes start
    sp = presets.resolve_shape(shape)
    label = f"{sp.name}-tp{world}"
    run = launch(
        TPOptions(
            out=out or default_out(label),
            world_size=world,
            model=name,
            shape=sp.name,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            dtype=dtype,
            device=dev,
            batch=batch,
            requests=n_requests,
            warmup=warmup,
            seed=seed,
            nvml=not no_nvml,
            force=force,
        )
    )
    if not quiet:
        say(
            f"tracekit record --tp {world}: {run.path} (ranks under {run.path / 'ranks'}); rank 0:", err=True
        )
        r0 = rank_dir(run.path, 0)
        print_summary(RunDir.open(r0).read_manifest(), r0)
    return 0
