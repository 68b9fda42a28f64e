"""``tracekit whatif RUN``: a run's prefill and decode projected under a change, beside the run as measured."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tracekit.model.quant import MODES


@click.command("whatif")
@click.argument("run", metavar="RUN", type=click.Path(path_type=Path))
@click.option("--graphs", is_flag=True, help="Decode under CUDA graphs (torch.compile): launch gaps gone, elementwise chains fused.")
@click.option("--batch", type=click.IntRange(min=1), default=None, help="Sequences per step.")
@click.option("--input-tokens", type=click.IntRange(min=1), default=None, help="Prompt tokens per sequence.")
@click.option("--output-tokens", type=click.IntRange(min=2), default=None, help="Answer tokens per sequence.")
@click.option("--gpu", "gpu", default=None, metavar="NAME",
              help="Another GPU of tracekit's ceilings table (e.g. 'H100 SXM', 'A100-SXM4-80GB').")
@click.option("--quant", type=click.Choice([m for m in MODES if m in ("int8", "int4", "fp8")]), default=None,
              help="Quantized weights (torchao), with their measured dequantization cost.")
@click.option("--cache-len", type=click.IntRange(min=1), default=None, metavar="SLOTS",
              help="The static KV cache's slots per sequence under CUDA graphs (default: prompt + answer, as "
                   "tracekit record --compile sizes it; a compiled run: its own).")
@click.option("--no-profiler", is_flag=True, help="Without the profiler: the run's own unprofiled timers, else a per-op model.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: measured and projected, per phase, and the assumptions.")
def command(run: Path, graphs: bool, batch: int | None, input_tokens: int | None, output_tokens: int | None,
            gpu: str | None, quant: str | None, cache_len: int | None, no_profiler: bool, as_json: bool) -> None:
    """Project a run's TTFT, TPOT and step time under a change (changes combine)."""
    from tracekit.analysis.whatif import Change
    from tracekit.app.whatif_load import whatif
    from tracekit.report.whatif import render

    change = Change(graphs=graphs, batch=batch, input_tokens=input_tokens, output_tokens=output_tokens, gpu=gpu,
                    quant=quant, no_profiler=no_profiler, cache_len=cache_len)
    p = whatif(run, change)
    click.echo(json.dumps(p.to_dict(), indent=1) if as_json else render(p))
