#!/usr/bin/env python3
"""Record traces the way users and engines write them, with plain torch.profiler (not tracekit's recorder).

Usage (GPU machine):  python3 scripts/gpu/foreign_traces.py OUT_DIR [--only NAME,...]
Dry run (CPU):        python3 scripts/gpu/foreign_traces.py OUT_DIR --cpu

Each case writes OUT_DIR/NAME.json.gz (record_shapes on) and OUT_DIR/NAME.truth.json: what the case did
(requests, steps, shapes), written by the script itself so that tests can check tracekit against it.

Cases (random weights, models built from configs, a few layers so the traces stay small):
  reduce_overhead  Transformers generate with a static cache (auto-compiled, mode reduce-overhead): the
                   CUDA graphs are recorded by a warm-up generate inside the trace, then replayed
  manual_graph     torch.cuda.graph by hand: one decode forward captured inside the trace, replayed 12 times
  diffusion        a denoising loop of a small UNet (diffusers when importable, else a conv + attention
                   stand-in) with prof.step() per denoising step
  train_loop       a small Llama trained for 6 iterations under schedule(wait=1, warmup=1, active=3)
  hand_decode      a Mistral-shaped model, record_function("request_i") around each request, a prefill
                   forward then decode forwards in a Python loop
  engine_format    one forward per engine step under the engines' own annotations: vLLM's detailed
                   execute_..._context_..._generation_... around SGLang's step[EXTEND|DECODE bs=..]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any


def _profile(out: Path, name: str, body: Any, truth: dict[str, Any], *, schedule: Any = None) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    kw: dict[str, Any] = {"activities": acts, "record_shapes": True}
    if schedule is not None:
        kw["schedule"] = schedule
    t0 = time.perf_counter()
    with profile(**kw) as prof:
        body(prof)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    raw = out / f"{name}.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(out / f"{name}.json.gz", "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    truth["wall_s"] = round(time.perf_counter() - t0, 3)
    (out / f"{name}.truth.json").write_text(json.dumps(truth, indent=1))
    print(f"{name}: {(out / f'{name}.json.gz').stat().st_size / 1e6:.2f} MB, {truth['wall_s']} s", flush=True)


def _device() -> tuple[Any, Any]:
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda"), torch.float16
    return torch.device("cpu"), torch.float32


def _llama(layers: int, hidden: int = 1024, inter: int = 2816, heads: int = 16, kv: int = 4, arch: str = "llama") -> Any:
    import torch
    import transformers

    dev, dt = _device()
    cfg_cls = transformers.MistralConfig if arch == "mistral" else transformers.LlamaConfig
    model_cls = transformers.MistralForCausalLM if arch == "mistral" else transformers.LlamaForCausalLM
    cfg = cfg_cls(vocab_size=32000, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=4096)
    torch.manual_seed(0)
    return model_cls(cfg).to(device=dev, dtype=dt).eval()


def case_reduce_overhead(out: Path) -> None:
    import torch

    dev, _ = _device()
    model = _llama(4)
    model.generation_config.cache_implementation = "static"
    model.generation_config.pad_token_id = 0
    ids = torch.randint(5, 30000, (1, 64), device=dev)
    kw = {"do_sample": False, "min_new_tokens": 16, "max_new_tokens": 16}
    with torch.no_grad():
        model.generate(ids, **kw)  # compiles (inductor) outside the trace
    # Dynamo's caches and the CUDA-graph trees are dropped: the generate calls below trace again (Inductor's
    # compiled code comes from its on-disk cache) and record the graphs again, inside the trace.
    torch._dynamo.reset()

    def body(prof: Any) -> None:
        with torch.no_grad():
            for i in range(2):
                with torch.profiler.record_function(f"generate_{i}"):
                    model.generate(ids, **kw)

    _profile(out, "reduce_overhead", body, {"generates": 2, "prompt": 64, "new_tokens": 16, "layers": 4,
                                             "compile": "static cache, transformers auto-compile (reduce-overhead)"})


def case_manual_graph(out: Path) -> None:
    import torch
    from transformers import StaticCache

    dev, _ = _device()
    model = _llama(4)
    if dev.type != "cuda":
        print("manual_graph: needs CUDA, skipped")
        return
    cache = StaticCache(config=model.config, max_cache_len=256)
    ids = torch.randint(5, 30000, (1, 32), device=dev)
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True, cache_position=torch.arange(32, device=dev))
    tok = torch.zeros((1, 1), dtype=torch.long, device=dev)
    pos = torch.tensor([32], device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(2):
            model(tok, past_key_values=cache, use_cache=True, cache_position=pos)
    torch.cuda.current_stream().wait_stream(s)

    def body(prof: Any) -> None:
        g = torch.cuda.CUDAGraph()
        with torch.no_grad():
            with torch.profiler.record_function("capture"), torch.cuda.graph(g):
                logits = model(tok, past_key_values=cache, use_cache=True, cache_position=pos).logits
            for i in range(12):
                with torch.profiler.record_function(f"decode_{i}"):
                    g.replay()
                    tok.copy_(logits[:, -1:].argmax(-1))
                    pos.add_(1)

    _profile(out, "manual_graph", body, {"captures": 1, "replays": 12, "layers": 4})


def case_diffusion(out: Path) -> None:
    import torch

    dev, dt = _device()
    torch.manual_seed(0)
    kind = "diffusers"
    try:
        from diffusers import DDIMScheduler, UNet2DModel

        unet = UNet2DModel(sample_size=64, in_channels=4, out_channels=4, layers_per_block=1,
                           block_out_channels=(128, 256, 256),
                           down_block_types=("DownBlock2D", "AttnDownBlock2D", "AttnDownBlock2D"),
                           up_block_types=("AttnUpBlock2D", "AttnUpBlock2D", "UpBlock2D")).to(dev, dt).eval()
        sched = DDIMScheduler(num_train_timesteps=1000)
        sched.set_timesteps(8)
        timesteps = list(sched.timesteps)

        def denoise(x: Any, t: Any) -> Any:
            eps = unet(x, t).sample
            return sched.step(eps, t, x).prev_sample
    except Exception as e:
        print("diffusers unavailable:", e)
        kind = "stand-in"
        conv = torch.nn.Sequential(torch.nn.Conv2d(4, 128, 3, padding=1), torch.nn.SiLU(),
                                   torch.nn.Conv2d(128, 4, 3, padding=1)).to(dev, dt)
        attn = torch.nn.MultiheadAttention(128, 8, batch_first=True).to(dev, dt)
        timesteps = list(range(8))

        def denoise(x: Any, t: Any) -> Any:
            h = conv[0](x).flatten(2).transpose(1, 2)
            h = attn(h, h, h, need_weights=False)[0]
            return x - 0.1 * conv[2](h.transpose(1, 2).reshape(x.shape[0], 128, *x.shape[2:]))

    x = torch.randn(2, 4, 64, 64, device=dev, dtype=dt)
    with torch.no_grad():
        denoise(x, timesteps[0])  # warm-up

    def body(prof: Any) -> None:
        y = x
        with torch.no_grad(), torch.profiler.record_function("denoise_2x64x64"):
            for t in timesteps:
                y = denoise(y, t)
                prof.step()

    _profile(out, "diffusion", body, {"model": kind, "batch": 2, "latent": [4, 64, 64],
                                       "denoising_steps": len(timesteps)})


def case_train_loop(out: Path) -> None:
    import torch
    from torch.profiler import schedule

    dev, _ = _device()
    model = _llama(2, hidden=512, inter=1408, heads=8, kv=8).float().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(5, 30000, (4, 128), device=dev)

    def body(prof: Any) -> None:
        for _ in range(6):
            loss = model(ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            prof.step()

    _profile(out, "train_loop", body, {"iterations": 6, "profiled": [2, 3, 4], "batch": 4, "seq": 128},
             schedule=schedule(wait=1, warmup=1, active=3, repeat=1))


def case_hand_decode(out: Path) -> None:
    import torch
    from transformers import DynamicCache

    dev, _ = _device()
    model = _llama(4, hidden=1024, inter=3584, heads=16, kv=4, arch="mistral")
    prompts = [48, 96]
    new = 8
    with torch.no_grad():
        model(torch.randint(5, 30000, (1, 16), device=dev))

    def body(prof: Any) -> None:
        with torch.no_grad():
            for r, n in enumerate(prompts):
                with torch.profiler.record_function(f"request_{r}"):
                    cache = DynamicCache()
                    ids = torch.randint(5, 30000, (1, n), device=dev)
                    logits = model(ids, past_key_values=cache, use_cache=True).logits
                    tok = logits[:, -1:].argmax(-1)
                    for _ in range(new - 1):
                        logits = model(tok, past_key_values=cache, use_cache=True).logits
                        tok = logits[:, -1:].argmax(-1)
                    tok.item()

    _profile(out, "hand_decode", body, {"requests": [{"name": f"request_{r}", "input_tokens": n, "output_tokens": new,
                                                      "prefill_steps": 1, "decode_steps": new - 1}
                                                     for r, n in enumerate(prompts)]})


def case_engine_format(out: Path) -> None:
    """Three requests: one batched prefill step (prompts 40, 24, 56), then 4 batched decode steps."""
    import torch

    dev, _ = _device()
    model = _llama(4)
    prompts = [40, 24, 56]
    with torch.no_grad():
        model(torch.randint(5, 30000, (1, 16), device=dev))
    steps: list[dict[str, Any]] = []

    def name_of(q: list[int], kv: list[int], ctx: bool) -> tuple[str, str]:
        n = len(q)
        sq, sk = sum(q), sum(kv)
        sqsq, sqsk = sum(a * a for a in q), sum(a * b for a, b in zip(q, kv, strict=False))
        part = f"(sq{sq}sk{sk}sqsq{sqsq}sqsk{sqsk})"
        zero = "(sq0sk0sqsq0sqsk0)"
        if ctx:
            outer = f"execute_{sq}_context_{n}{part}_generation_0{zero}"
            inner = f"step[EXTEND bs={n} toks={sq}]"
        else:
            outer = f"execute_{sq}_context_0{zero}_generation_{n}{part}"
            inner = f"step[DECODE bs={n}]"
        return outer, inner

    def body(prof: Any) -> None:
        from transformers import DynamicCache

        with torch.no_grad():
            caches = [DynamicCache() for _ in prompts]
            toks = []
            outer, inner = name_of(prompts, prompts, True)
            with torch.profiler.record_function(outer), torch.profiler.record_function(inner):
                for c, n in zip(caches, prompts, strict=False):
                    lg = model(torch.randint(5, 30000, (1, n), device=dev), past_key_values=c, use_cache=True).logits
                    toks.append(lg[:, -1:].argmax(-1))
            steps.append({"kind": "prefill", "batch": 3, "tokens": sum(prompts), "outer": outer, "inner": inner})
            kv = list(prompts)
            for _ in range(4):
                kv = [k + 1 for k in kv]
                outer, inner = name_of([1, 1, 1], kv, False)
                with torch.profiler.record_function(outer), torch.profiler.record_function(inner):
                    toks = [model(t, past_key_values=c, use_cache=True).logits[:, -1:].argmax(-1)
                            for t, c in zip(toks, caches, strict=False)]
                steps.append({"kind": "decode", "batch": 3, "tokens": 3, "outer": outer, "inner": inner})
            torch.stack([t.view(-1) for t in toks]).cpu()

    truth: dict[str, Any] = {"requests": len(prompts), "prompts": prompts, "steps": steps}
    _profile(out, "engine_format", body, truth)


CASES = {"engine_format": case_engine_format, "hand_decode": case_hand_decode, "train_loop": case_train_loop,
         "diffusion": case_diffusion, "manual_graph": case_manual_graph, "reduce_overhead": case_reduce_overhead}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", default=None)
    ap.add_argument("--cpu", action="store_true")
    a = ap.parse_args()
    if a.cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    a.out.mkdir(parents=True, exist_ok=True)
    names = a.only.split(",") if a.only else list(CASES)
    rc = 0
    for n in names:
        try:
            CASES[n](a.out)
        except Exception as e:
            import traceback

            traceback.print_exc()
            print(f"{n}: FAILED {type(e).__name__}: {e}", flush=True)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
