"""Records the plain model.generate fixtures (tests/fixtures/gpu/[abcd]_*) on a GPU, with independent timers.

    python3 scripts/gpu/plain_generate_fixtures.py OUTDIR [--only abcd]

A random-weight LlamaForCausalLM of TinyLlama-1.1B's shape in fp16 (no weights
downloaded), profiled with plain torch.profiler (record_shapes=True) and *no*
tracekit annotations:

  a_batch2         batch 2, 24 prompt tokens, 8 new tokens
  b_two_requests   two requests back to back under record_function("chat-0"/"chat-1")
  c_profiler_steps a three-generate loop under a ProfilerStep schedule (wait 1, warmup 1, active 3)
  d_compiled       Transformers' own compiled path (static cache + CompileConfig(mode="reduce-overhead"),
                   CUDA graphs for decode, eager prefill), compiled in warm-up (~40 s); `--only d`
                   runs just this one (about a minute on an H200)

For each: OUTDIR/<name>.json.gz (the trace) and OUTDIR/<name>.timings.json: per
generate, host timers (torch.cuda.synchronize + perf_counter before and after,
and a streamer stamping each token as it reaches the host), CUDA-event elapsed
time, and the forward passes expected (kind, batch, q_len). Runs in ~1-3 min on
an H200; works with torch 2.11/transformers 5.17 and torch 2.13/transformers 5.24.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import sys
import time
from typing import Any

PROMPT, NEW, BATCH = 24, 8, 2


class Stamps:
    """A streamer: put() gets the prompt once, then each new token (already on the host)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value: Any) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def build_model() -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                      num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model: Any = LlamaForCausalLM(cfg)
        model = model.to(torch.float16).eval()
    return model


def timed_generate(model: Any, ids: Any, new: int, **kw: Any) -> tuple[Any, dict[str, Any]]:
    import torch

    stamps = Stamps()
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    ev0.record()
    out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0,
                         streamer=stamps, **kw)
    ev1.record()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    tokens = [(t - t0) * 1e9 for t in stamps.times[1:]]  # times[0]: the prompt
    e2e = (t1 - t0) * 1e9
    ttft = tokens[0] if tokens else None
    rec = {
        "batch": int(ids.shape[0]), "input_tokens": int(ids.shape[1]), "output_tokens": int(out.shape[1] - ids.shape[1]),
        "host_e2e_ns": e2e, "host_ttft_ns": ttft,
        "host_tpot_ns": (e2e - ttft) / (new - 1) if ttft is not None and new > 1 else None,
        "host_token_times_ns": tokens, "cuda_event_ms": ev0.elapsed_time(ev1),
        "expected_forward_passes": [{"kind": "prefill", "batch": int(ids.shape[0]), "q_len": int(ids.shape[1])}]
        + [{"kind": "decode", "batch": int(ids.shape[0]), "q_len": 1}] * (new - 1),
    }
    return out, rec


def write_json(out_dir: str, name: str, obj: Any) -> None:
    with open(os.path.join(out_dir, name), "w") as fh:
        json.dump(obj, fh, indent=1)


def save_trace(prof: Any, out_dir: str, name: str) -> str:
    raw = os.path.join(out_dir, f"{name}.json")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as src, gzip.open(raw + ".gz", "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(raw)
    return raw + ".gz"


def count_events(path: str, names: tuple[str, ...]) -> dict[str, int]:
    with gzip.open(path) as fh:
        ev = json.load(fh)["traceEvents"]
    return {n: sum(1 for e in ev if e.get("name") == n) for n in names}


def eager_cases(model: Any, ids1: Any, ids2: Any, out_dir: str, env: dict[str, str], only: str,
                summary: list[str]) -> None:
    """(a), (b), (c): eager generate with a dynamic cache under plain torch.profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with torch.inference_mode():
        # (a) batch 2, plain
        if "a" in only:
            with profile(activities=acts, record_shapes=True) as prof:
                _, rec = timed_generate(model, ids2, NEW)
            path = save_trace(prof, out_dir, "a_batch2")
            write_json(out_dir, "a_batch2.timings.json", {"env": env, "requests": [rec]})
            summary.append(f"a_batch2: TTFT {rec['host_ttft_ns'] / 1e6:.2f} ms TPOT {rec['host_tpot_ns'] / 1e6:.2f} ms "
                           f"{count_events(path, ('aten::embedding',))}")

        # (b) two requests under caller-named record_functions
        if "b" in only:
            recs = []
            with profile(activities=acts, record_shapes=True) as prof:
                for i, ids in enumerate((ids1, ids2)):
                    with record_function(f"chat-{i}"):
                        _, rec = timed_generate(model, ids, NEW)
                    rec["name"] = f"chat-{i}"
                    recs.append(rec)
            path = save_trace(prof, out_dir, "b_two_requests")
            write_json(out_dir, "b_two_requests.timings.json", {"env": env, "requests": recs})
            summary.append("b_two_requests: " + ", ".join(
                f"{r['name']} TTFT {r['host_ttft_ns'] / 1e6:.2f} ms TPOT {r['host_tpot_ns'] / 1e6:.2f} ms" for r in recs))

        # (c) a three-step loop under a ProfilerStep schedule; steps 0 (wait) and 1 (warmup) are not recorded
        if "c" in only:
            recs = []
            traces: list[str] = []
            with profile(activities=acts, record_shapes=True,
                         schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                         on_trace_ready=lambda p: traces.append(save_trace(p, out_dir, "c_profiler_steps"))) as prof:
                for i in range(5):
                    _, rec = timed_generate(model, ids1[:, : 12 + 2 * i], 4)
                    rec["profiler_step"] = i
                    if i >= 2:
                        recs.append(rec)
                    prof.step()
            write_json(out_dir, "c_profiler_steps.timings.json", {"env": env, "requests": recs})
            summary.append(f"c_profiler_steps: {len(recs)} recorded generates, input lens "
                           f"{[r['input_tokens'] for r in recs]}")


def compiled_case(model: Any, ids1: Any, out_dir: str, env: dict[str, str]) -> str:
    """(d): Transformers' own compiled path, as collectors/compiled.py uses it.

    A static cache plus ``generation_config.compile_config = CompileConfig(mode="reduce-overhead")``:
    generate() compiles the decode forward itself (CUDA graphs) and keeps the prefill eager.
    Wrapping ``model.forward`` in torch.compile by hand instead failed on the H200 with
    "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run":
    generate() keeps the logits of one step while the next replay overwrites them.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    gc = model.generation_config
    gc.cache_implementation = "static"
    try:
        from transformers import CompileConfig

        gc.compile_config = CompileConfig(mode="reduce-overhead")
    except ImportError:  # older Transformers: its default compile config is reduce-overhead too
        pass
    with contextlib.suppress(AttributeError):
        gc.max_cache_len = PROMPT + NEW + 8
    t0 = time.perf_counter()
    for _ in range(3):  # compile (tens of seconds) and record the graphs outside the profiled run
        model.generate(ids1, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, pad_token_id=0)
    compile_s = time.perf_counter() - t0
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=acts, record_shapes=True) as prof, record_function("compiled-0"):
        _, rec = timed_generate(model, ids1, NEW)
    rec["name"] = "compiled-0"
    rec["compile_s"] = compile_s
    path = save_trace(prof, out_dir, "d_compiled")
    counts = count_events(path, ("aten::embedding", "cudaGraphLaunch"))
    rec["trace_counts"] = counts
    write_json(out_dir, "d_compiled.timings.json", {"env": env, "requests": [rec]})
    return (f"d_compiled: compile+warm-up {compile_s:.1f} s, TTFT {rec['host_ttft_ns'] / 1e6:.2f} ms TPOT "
            f"{rec['host_tpot_ns'] / 1e6:.2f} ms {counts}")


def main(out_dir: str, only: str = "abcd") -> int:
    import torch
    import transformers

    os.makedirs(out_dir, exist_ok=True)
    model = build_model()
    g = torch.Generator(device="cuda").manual_seed(1)
    ids2 = torch.randint(3, 32000, (BATCH, PROMPT), device="cuda", generator=g)
    ids1 = ids2[:1]
    env = {"torch": torch.__version__, "transformers": transformers.__version__,
           "gpu": torch.cuda.get_device_name(0)}
    summary: list[str] = []
    t_start = time.perf_counter()

    with torch.inference_mode():
        for _ in range(2):  # warm-up: cuBLAS handles, allocator, kernels
            model.generate(ids2, max_new_tokens=2, do_sample=False, pad_token_id=0)

    if set(only) & set("abc"):
        eager_cases(model, ids1, ids2, out_dir, env, only, summary)
    compiled_ok = True
    if "d" in only:
        try:
            with torch.inference_mode():
                summary.append(compiled_case(model, ids1, out_dir, env))
        except Exception as exc:  # the other traces are still worth bringing back
            compiled_ok = False
            summary.append(f"d_compiled: FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")


    print(f"env: {env}")
    for line in summary:
        print(line)
    sizes = {f: os.path.getsize(os.path.join(out_dir, f)) for f in sorted(os.listdir(out_dir))}
    print(f"files: {sizes}")
    print(f"total {sum(sizes.values()) / 1e6:.1f} MB in {time.perf_counter() - t_start:.0f} s")
    return 0 if compiled_ok else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="plain model.generate traces with independent timers")
    ap.add_argument("out_dir")
    ap.add_argument("--only", default="abcd", help="which cases to run, e.g. 'd' (default: abcd)")
    args = ap.parse_args()
    if not args.only or set(args.only) - set("abcd"):
        sys.exit("--only takes letters from 'abcd'")
    sys.exit(main(args.out_dir, args.only))
