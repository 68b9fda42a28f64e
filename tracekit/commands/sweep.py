"""``tracekit sweep``: the latency study over request shapes, batch sizes, prompt lengths, agent loops and modes."""

from __future__ import annotations

import datetime as _dt
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from tracekit.errors import UsageError, visible
from tracekit.model import pricing as _pricing
from tracekit.model import sweepspec
from tracekit.report.text import say


def _csv_ints(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"expected comma-separated integers, got {text!r}") from None
    if any(v <= 0 for v in vals):
        raise UsageError(f"expected positive integers, got {text!r}")
    return vals


def _csv(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def build_spec(
    preset: str | None,
    config: str | None,
    quick: bool,
    flags: dict[str, Any],
) -> sweepspec.SweepSpec:
    """--quick, --preset, --config and the point flags: exactly one source of points."""
    point_flags = {k: v for k, v in flags.items() if k in _POINT_FLAGS and v}
    if (flags.get("load_shape") or flags.get("load_requests")) and not flags.get("rates"):
        raise UsageError("--load-shape and --load-requests go with --rates")
    given = [text for text, on in (("--quick", quick), (f"--preset {preset}", preset is not None),
                                   (f"--config {config}", config is not None)) if on]
    given += [f"--{k.replace('_', '-')} {v}" for k, v in point_flags.items()]
    if sum((quick, preset is not None, config is not None, bool(point_flags))) > 1:
        raise UsageError(
            f"{_and(given)} conflict: the points come from one of --quick, --preset, --config "
            "or the point flags (--shapes, --batch, --prompt-lengths, --output-lengths, --agent-steps)"
        )
    if quick:
        spec = sweepspec.from_preset("quick", model=flags.get("model"), device=flags.get("device") or "auto")
    elif preset is not None:
        spec = sweepspec.from_preset(preset, model=flags.get("model"), device=flags.get("device") or "auto")
    elif config is not None:
        from tracekit.store.fsops import decode_text, read_input

        where = f"sweep config {visible(config)}"
        spec = sweepspec.from_toml_text(decode_text(read_input(config, "--config"), where), name=Path(config).stem,
                                        where=config)
    elif point_flags:
        data: dict[str, Any] = {}
        if flags.get("shapes"):
            data["shapes"] = _csv(flags["shapes"])
        if flags.get("batch"):
            data["batch"] = _csv_ints(flags["batch"])
        if flags.get("prompt_lengths"):
            data["prompt_lengths"] = _csv_ints(flags["prompt_lengths"])
        if flags.get("output_lengths"):
            data["output_lengths"] = _csv_ints(flags["output_lengths"])
        if flags.get("agent_steps"):
            data["agent"] = {
                "steps": flags["agent_steps"],
                "tool_tokens": 64 if flags.get("agent_tool_tokens") is None else flags["agent_tool_tokens"],
            }
        if flags.get("rates"):
            data["load"] = {"rates": _csv_rates(flags["rates"]), "shape": flags.get("load_shape") or "chat",
                            "requests": 16 if flags.get("load_requests") is None else flags["load_requests"]}
        spec = sweepspec.from_mapping(data, name="flags")
    else:
        raise UsageError(
            "nothing to sweep: give --preset seed, --quick, --config FILE or --shapes/--batch/..."
        )
    over: dict[str, Any] = {}
    if flags.get("model") and not (quick or preset):
        over["model"] = flags["model"]
    if flags.get("device") and not (quick or preset):
        over["device"] = flags["device"]
    if flags.get("modes"):
        modes = _csv(flags["modes"]) or []
        bad = [m for m in modes if m not in sweepspec.MODES]
        if bad:
            raise UsageError(f"--modes: unknown {bad}; known: {', '.join(sweepspec.MODES)}")
        pts = [replace(p, mode=m) for p in spec.points for m in modes]
        spec = spec.with_points(pts)
    if flags.get("quant"):
        spec = spec.with_points(sweepspec.with_quant(spec.points, _csv(flags["quant"]) or []))
    if flags.get("trace_steps") is not None:
        if not 1 <= flags["trace_steps"] <= 2**31:
            raise UsageError("--trace-steps must be at least 1")
        over["trace_steps"] = int(flags["trace_steps"])
    if flags.get("repeats") is not None:
        if flags["repeats"] < 1:
            raise UsageError("--repeats must be at least 1")
        over["repeats"] = int(flags["repeats"])
    if flags.get("warmup_runs") is not None:
        if flags["warmup_runs"] < 0:
            raise UsageError("--warmup-runs must be 0 or more")
        over["warmup_runs"] = int(flags["warmup_runs"])
    return replace(spec, **over) if over else spec


_POINT_FLAGS = ("shapes", "batch", "prompt_lengths", "output_lengths", "agent_steps", "rates")


def _csv_rates(text: str) -> list[float]:
    """Requests per second, comma-separated; 0 or ``all``: every request at once."""
    out = []
    for x in text.split(","):
        x = x.strip()
        if not x:
            continue
        try:
            v = 0.0 if x == "all" else float(x)
        except ValueError:
            raise UsageError(f"--rates: expected requests per second (or all), got {x!r}") from None
        if v < 0:
            raise UsageError(f"--rates: {x} is negative")
        out.append(v)
    return out


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


@click.command("sweep")
@click.option(
    "--preset",
    type=click.Choice(sorted(sweepspec.PRESETS)),
    help="A predefined study (seed: the TinyLlama study).",
)
@click.option("--quick", is_flag=True, help="The quick study: tiny model on CPU, seconds (the CI variant).")
@click.option("--config", "config", type=click.Path(dir_okay=False), help="A TOML file describing the sweep.")
@click.option("--shapes", help="Comma-separated shapes: smoke, chat, rag, creative, agentic or IN/OUT.")
@click.option("--batch", help="Comma-separated batch sizes for the chat shape, e.g. 1,4,8,32.")
@click.option("--prompt-lengths", help="Comma-separated prompt lengths (prefill throughput study).")
@click.option("--output-lengths", help="Comma-separated output lengths.")
@click.option(
    "--agent-steps", type=int, help="Add the agent loop (resend and kv-reuse) with this many steps."
)
@click.option(
    "--agent-tool-tokens", type=int, help="Tool-result tokens appended each agent step (default 64)."
)
@click.option(
    "--rates",
    help="The load study: requests per second, comma-separated (all: at once), each a point served "
    "through continuous batching.",
)
@click.option("--load-shape", help="Load study: a shape or a mix of them, e.g. chat,rag (default chat).")
@click.option("--load-requests", type=int, help="Load study: requests per point (default 16).")
@click.option("--modes", help="Execution modes to cross with every point: eager, compiled.")
@click.option("--quant", help="Quantizations to cross with every point: none, int8, int8-dyn, int4, fp8 (torchao).")
@click.option("--model", help="Model preset or local directory (default: the preset's model).")
@click.option("--device", help="auto, cpu, cuda or cuda:N.")
@click.option(
    "--trace-steps", type=int, help="Forward passes captured by the profiler per point (default 6)."
)
@click.option(
    "--repeats",
    type=int,
    help="Timed repetitions per point; medians reported (default 3 on a GPU, 1 on a CPU).",
)
@click.option("--warmup-runs", type=int, help="Warm-up runs of the whole point before timing (default 1).")
@click.option("--input-price", type=float, help="$ per 1M input tokens (default: see docs/sweep.md).")
@click.option("--output-price", type=float, help="$ per 1M output tokens.")
@click.option("--gpu-price", type=float, help="$ per GPU-hour, for the cost of one request (default: docs/sweep.md).")
@click.option(
    "--out", "out", type=click.Path(file_okay=False), help="Sweep directory (default runs/sweep-<timestamp>)."
)
@click.option("--resume", is_flag=True, help="Skip points whose run.json says complete.")
@click.option("--force", is_flag=True, help="Overwrite an existing sweep directory.")
@click.option("--dry-run", is_flag=True, help="List the points and the time estimate, run nothing.")
def command(preset: str | None, quick: bool, config: str | None, out: str | None, resume: bool, force: bool,
            dry_run: bool, input_price: float | None, output_price: float | None, gpu_price: float | None,
            **flags: Any) -> int:  # fmt: skip
    """Run a latency study: every point is its own run directory; a summary table and a report at the end."""
    if resume and force:
        raise UsageError("--resume and --force conflict: --resume continues the sweep in --out, "
                         "--force starts it over")
    spec = build_spec(preset, config, quick, flags)
    price = _pricing.from_mapping(spec.pricing) if spec.pricing else _pricing.DEFAULT
    price = _pricing.from_mapping({"input_per_mtok": input_price, "output_per_mtok": output_price}, base=price) \
        if input_price is not None or output_price is not None else price  # fmt: skip
    if gpu_price is not None:
        price = _pricing.from_mapping({"gpu_per_hour": gpu_price, "gpu_source": "--gpu-price"}, base=price)
    out_dir = Path(out) if out else Path("runs") / f"sweep-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    if not dry_run:
        from tracekit.store.fsops import resolved
        from tracekit.store.sweepdir import check_target

        out_dir = resolved(out_dir)  # a link to a sweep stays a link
        check_target(out_dir, resume=resume, force=force)
    cuda = _cuda(spec.device)
    est = sweepspec.estimate_seconds(spec, cuda=cuda)
    say(f"sweep {visible(spec.name)}: {len(spec.points)} points, model {visible(spec.model)}, "
               f"{'GPU' if cuda else 'CPU'}, {spec.warmup_runs} warm-up + {spec.repeats_for(cuda)} timed run(s) "
               f"per point; estimated {est / 60:.1f} min -> {visible(out_dir)}")  # fmt: skip
    if dry_run:
        for p in spec.points:
            say(f"  {visible(p.id)}")
        return 0
    target, staging = out_dir, None
    if force and out_dir.exists() and not resume:
        # The new sweep is written beside the old one, which stays until the new one is complete.
        from tracekit.store.fsops import make_dir_beside

        staging = out_dir = make_dir_beside(target, "sweep")
    try:
        return _run(spec, out_dir, target, staging, resume, price)
    except BaseException:
        if staging is not None:
            import shutil

            shutil.rmtree(staging, ignore_errors=True)
        raise


def _run(spec: Any, out_dir: Path, target: Path, staging: Path | None, resume: bool, price: Any) -> int:
    """Run every point into ``out_dir`` and write the reports; a ``staging`` directory then replaces
    ``target``."""
    from tracekit.collectors import sweep_runner
    from tracekit.report import sweep as sweep_report

    failed: list[str] = []
    with click.progressbar(length=len(spec.points), label="points", show_pos=True,
                           item_show_func=lambda s: s) as bar:  # fmt: skip
        current: dict[str, str] = {}

        def on_start(point: Any) -> None:
            current["id"] = point.id
            bar.current_item = visible(point.id)
            bar.render_progress()

        def on_point(res: Any) -> None:
            if res.status == sweep_runner.STATUS_FAILED:
                failed.append(f"{res.point_id}: {res.reason}")
            bar.update(1)

        sweep_runner.run_sweep(spec, out_dir, resume=resume, on_point=on_point, on_start=on_start)
    files = sweep_report.write_all(out_dir, price)
    if staging is not None:
        from tracekit.store.fsops import replace_dir

        replace_dir(staging, target, "sweep")
        files = {k: target / Path(v).relative_to(staging) for k, v in files.items()}
    for line in failed:
        say(f"failed: {visible(line)}", err=True)
    say(f"summary: {visible(files['summary'])}\nreport: {visible(files['report_md'])} and "
               f"{visible(files['report_html'])}")
    return 0 if not failed or len(failed) < len(spec.points) else 1


def _cuda(device: str) -> bool:
    if device == "cpu":
        return False
    from tracekit.collectors.workload import cuda_available

    try:  # torch is touched only in collectors/ (and may be absent on an analysis-only install)
        return cuda_available()
    except ImportError:
        return False
