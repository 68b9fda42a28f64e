"""Does sampling NVML at 100 Hz slow generation down? Interleaved A/B on TPOT.

    python3 benchmarks/overhead.py [--out DIR]          # GPU: TinyLlama-1.1B shape, fp16
    python3 benchmarks/overhead.py --tiny               # CPU smoke run, a few-MB Llama

Builds a LlamaForCausalLM of TinyLlama-1.1B's shape (22 layers, hidden 2048,
intermediate 5632, 32 heads, 4 KV heads, vocab 32000) with random weights,
then generates a forced number of tokens (min_new_tokens = max_new_tokens)
with model.generate, alternately without and with tracekit's NvmlSampler
running (ABBA order, so drift cancels). TPOT is (last token time - first token
time) / (tokens - 1), with token times taken on the host when Transformers
hands each token to the streamer (after its device-to-host copy, so the GPU
work is done). Prints the median TPOT of each arm, their ratio, and the
sampler's own cost per tick; with --out, writes DIR/overhead.json.

The claim it checks: sampling at 100 Hz moves TPOT by at most 1%.
On the H200 it should take about a minute (estimate) (model build, 2 warm-ups, 2 x 7 runs of 64 tokens).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

TINYLLAMA: dict[str, Any] = dict(
    hidden_size=2048,
    intermediate_size=5632,
    num_hidden_layers=22,
    num_attention_heads=32,
    num_key_value_heads=4,
    vocab_size=32000,
    max_position_embeddings=2048,
)
TINY: dict[str, Any] = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=1000,
    max_position_embeddings=512,
)


def import_sampler() -> Any:
    """NvmlSampler from an installed tracekit, or straight from this checkout."""
    try:
        from tracekit.collectors.nvml import NvmlSampler
    except ImportError:
        sys.path.insert(0, str(REPO))
        import tracekit

        # pyproject maps collectors/ to tracekit.collectors; without an install, do the same by hand.
        tracekit.__path__.append(str(REPO))
        from tracekit.collectors.nvml import NvmlSampler
    return NvmlSampler


class TokenClock:
    """A Transformers streamer that only notes when each new token reaches the host."""

    def __init__(self) -> None:
        self.times: list[int] = []
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        now = time.perf_counter_ns()
        if not self._prompt_seen:  # generate() first hands over the prompt
            self._prompt_seen = True
            return
        self.times.append(now)

    def end(self) -> None:
        pass


def build_model(tiny: bool, device: str, dtype_name: str) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    config = LlamaConfig(**(TINY if tiny else TINYLLAMA))
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        # Initialise on the device, in the target dtype: 1.1B parameters on the host would take long.
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(prev)
    return model.eval()


def generate_once(model: Any, input_ids: Any, new_tokens: int) -> float:
    """TPOT in seconds for one forced-length generation."""
    import torch

    clock = TokenClock()
    with torch.inference_mode():
        model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
            streamer=clock,
        )
    if len(clock.times) != new_tokens:
        raise RuntimeError(f"expected {new_tokens} tokens, streamer saw {len(clock.times)}")
    return (clock.times[-1] - clock.times[0]) / 1e9 / (new_tokens - 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="a few-MB model on CPU (smoke test)")
    ap.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    ap.add_argument(
        "--dtype", default=None, choices=["fp16", "bf16", "fp32"], help="default: fp16 on GPU, fp32 on CPU"
    )
    ap.add_argument("--runs", type=int, default=7, help="runs per arm (with and without the sampler)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--interval", type=float, default=0.01, help="sampler interval, s (0.01 = 100 Hz)")
    ap.add_argument("--limit-pct", type=float, default=1.0, help="the claim: TPOT moves by at most this much")
    ap.add_argument("--out", type=Path, default=None, help="directory for overhead.json")
    args = ap.parse_args(argv)
    if args.new_tokens < 2:
        ap.error("--new-tokens must be at least 2 (TPOT needs two tokens)")

    import torch
    import transformers

    NvmlSampler = import_sampler()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = args.dtype or ("fp32" if device == "cpu" else "fp16")
    t_build = time.perf_counter()
    model = build_model(args.tiny, device, dtype)
    build_s = time.perf_counter() - t_build
    gen = torch.Generator().manual_seed(0)
    vocab = (TINY if args.tiny else TINYLLAMA)["vocab_size"]
    input_ids = torch.randint(3, int(vocab), (1, args.prompt_tokens), generator=gen).to(device)
    device_index = torch.device(device).index or 0

    for _ in range(args.warmup):
        generate_once(model, input_ids, args.new_tokens)

    tpot: dict[str, list[float]] = {"off": [], "on": []}
    statuses: list[dict[str, Any]] = []
    for i in range(args.runs):
        for arm in ("off", "on") if i % 2 == 0 else ("on", "off"):  # ABBA: drift hits both arms alike
            if arm == "off":
                tpot["off"].append(generate_once(model, input_ids, args.new_tokens))
                continue
            sampler = NvmlSampler(device_index=device_index, interval_s=args.interval)
            sampler.start()
            try:
                tpot["on"].append(generate_once(model, input_ids, args.new_tokens))
            finally:
                sampler.stop()
            statuses.append(sampler.status())

    med_off, med_on = statistics.median(tpot["off"]), statistics.median(tpot["on"])
    ratio = med_on / med_off
    st = statuses[-1]
    ticks = [s["ticks"] for s in statuses]
    means = [s["tick_us_mean"] for s in statuses if s.get("tick_us_mean") is not None]
    p99s = [s["tick_us_p99"] for s in statuses if s.get("tick_us_p99") is not None]
    rates = [s["rate_hz"] for s in statuses if s.get("rate_hz") is not None]
    cpu = [s["tick_cpu_us_mean"] for s in statuses if s.get("tick_cpu_us_mean") is not None]
    spread = {arm: (max(v) - min(v)) / statistics.median(v) * 100 for arm, v in tpot.items()}
    within = abs(ratio - 1) * 100 <= args.limit_pct
    result = {
        "device": torch.cuda.get_device_name(device_index) if device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "model": "tiny" if args.tiny else "tinyllama-1.1b-shape",
        "dtype": dtype,
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
        "runs_per_arm": args.runs,
        "model_build_s": build_s,
        "interval_s": args.interval,
        "tpot_s": tpot,
        "median_tpot_off_s": med_off,
        "median_tpot_on_s": med_on,
        "ratio_on_off": ratio,
        "delta_pct": (ratio - 1) * 100,
        "spread_pct": spread,
        "within_limit": within,
        "limit_pct": args.limit_pct,
        "nvml_available": st["available"],
        "nvml_reason": st["reason"],
        "gpm_supported": st["gpm_supported"],
        "sampler_ticks_per_run": ticks,
        "sampler_tick_us_mean": statistics.fmean(means) if means else None,
        "sampler_tick_us_p99_max": max(p99s) if p99s else None,
        "sampler_tick_cpu_us_mean": statistics.fmean(cpu) if cpu else None,
        "sampler_rate_hz_mean": statistics.fmean(rates) if rates else None,
        "sampler_status_last": st,
    }
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "overhead.json").write_text(json.dumps(result, indent=1, default=str))

    print(
        f"model {result['model']} {dtype} on {result['device']}; {args.new_tokens} tokens, {args.runs} runs per arm"
    )
    print(f"median TPOT without sampler: {med_off * 1e3:9.3f} ms  (spread {spread['off']:.1f}%)")
    print(f"median TPOT with sampler:    {med_on * 1e3:9.3f} ms  (spread {spread['on']:.1f}%)")
    print(
        f"ratio on/off: {ratio:.4f}  ({result['delta_pct']:+.2f}%; limit ±{args.limit_pct}%: {'OK' if within else 'EXCEEDED'})"
    )
    if st["available"]:
        print(
            f"sampler: {result['sampler_rate_hz_mean']:.1f} Hz achieved (target {1 / args.interval:.0f}), "
            f"tick mean {result['sampler_tick_us_mean']:.1f} µs wall / {result['sampler_tick_cpu_us_mean']:.1f} µs CPU, "
            f"worst p99 {result['sampler_tick_us_p99_max']:.1f} µs; GPM {'on' if st['gpm_supported'] else 'off'}"
        )
    else:
        print(f"sampler: NVML unavailable here ({st['reason']}): the 'on' arm sampled nothing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
