"""``tracekit record``: the built-in generation workload, or your own script, into a run directory.

Click only: the options become a tracekit.collectors.plan.RecordPlan (checked, resolved, run there);
``TerminalDisplay`` shows its progress, summary and counters with tracekit.report's renderers."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from tracekit.model.quant import CHOICES as QUANT_CHOICES
from tracekit.report.text import say

if TYPE_CHECKING:
    from tracekit.collectors.ncu import CountersResult
    from tracekit.model.progress import Listener


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
def command(**params: Any) -> int:
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
    from tracekit.collectors.plan import RecordPlan

    plan = RecordPlan(**params, command=_command_line(), given=_given(click.get_current_context()))
    return plan.run(None if plan.quiet else TerminalDisplay())


def _command_line() -> tuple[str, ...]:
    return ("tracekit", "record", *sys.argv[2:]) if sys.argv[1:2] == ["record"] else ("tracekit", "record")


def _given(ctx: click.Context) -> tuple[tuple[str, str], ...]:
    """The options the user gave on the command line: (parameter name, ``--flag VALUE`` or the flag
    alone for on/off options), in the command's order."""
    out = []
    for p in ctx.command.params:
        if not isinstance(p, click.Option) or p.name is None:
            continue
        if ctx.get_parameter_source(p.name) not in (click.core.ParameterSource.COMMANDLINE,
                                                    click.core.ParameterSource.ENVIRONMENT):
            continue
        value = ctx.params.get(p.name)
        out.append((p.name, p.opts[0] if p.is_flag else f"{p.opts[0]} {value}"))
    return tuple(out)


class TerminalDisplay:
    """What ``tracekit record`` shows (tracekit.collectors.plan.RecordDisplay): the progress line and
    counters on stderr, the summary on stdout (``tracekit record > out.txt`` keeps it), its warnings on stderr."""

    def progress(self, terminal: IO[str]) -> Listener:
        from tracekit.report.record_progress import TokenLine

        return TokenLine(terminal)

    def recorded(self, path: Path) -> None:
        from tracekit.store.rundir import RunDir

        print_summary(RunDir.open(path).read_manifest(), path)

    def sharded(self, path: Path, world: int, rank0: Path) -> None:
        say(f"tracekit record --tp {world}: {path} (ranks under {path / 'ranks'}); rank 0:", err=True)
        self.recorded(rank0)

    def counted(self, result: CountersResult) -> None:
        say(f"counters: {result.kernels:,} kernels, {result.matched:,} joined (steps {result.steps}) in "
            f"{result.elapsed_s:,.1f} s", err=True)
        for line in result.lines:
            say(line, err=True)

    def repeated(self, manifests: list[dict[str, Any]], out: Path) -> None:
        from tracekit.report.record_summary import repeat_lines

        click.echo("\n".join(repeat_lines(manifests, out)))


def print_summary(manifest: dict[str, object], path: Path) -> None:
    """The summary on stdout (``tracekit record > out.txt`` keeps it); its warnings on stderr."""
    from tracekit.report.record_summary import render, warning_lines

    for line in warning_lines(manifest):
        say(line, err=True)
    say(render(manifest, path, with_warnings=False))
