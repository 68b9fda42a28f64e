"""Check on the GPU the sweep's noise diagnosis: eager decode pays extra the first time a KV length is seen.

Usage: python3 scripts/device/sweep_firstuse.py OUTDIR   (needs tracekit installed; ~1 min on an H200)
TinyLlama-1.1B shape, fp16, eager. A: a 4-token warm-up (the old sweep's), then 32 tokens: per-token times
should jump after the 4th forward. B: the same 32 tokens again: no jump. C: per-token cost of record's
GenerationTracker with forward hooks (record's eager path) vs the sweep's timed_generate (the same tracker in
streamer mode since 2026-11-29 22:40; its own streamer before), annotations on / off, 3 runs each, after warm-up.
Writes OUTDIR/sweep_firstuse.json and prints a summary.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    import torch

    from tracekit.collectors import presets, workload
    from tracekit.collectors.agent import timed_generate
    from tracekit.collectors.hooks import GenerationTracker, patch_generate

    cfg = workload.WorkloadConfig(model=presets.resolve_model(os.environ.get("FIRSTUSE_MODEL", "tinyllama-1.1b")),
        device=os.environ.get("FIRSTUSE_DEVICE", "cuda"), dtype=os.environ.get("FIRSTUSE_DTYPE", "fp16"),
                                  shape="x", input_tokens=1, output_tokens=1)  # fmt: skip
    model, _ = workload.build_model(cfg)
    gen = torch.Generator().manual_seed(0)
    vocab = int(model.config.vocab_size)
    ids = torch.randint(10, vocab, (1, 128), generator=gen).to(cfg.device)
    gpu = torch.cuda.get_device_name(0) if cfg.device.startswith("cuda") else "cpu"
    res: dict = {"gpu": gpu, "torch": torch.__version__}

    def step_ms(r) -> list[float]:
        return [round((s.end_ns - s.start_ns) / 1e6, 2) for s in r.steps]

    timed_generate(model, ids, 4, annotate=False)  # the old sweep's warm-up
    res["a_first_32"] = step_ms(timed_generate(model, ids, 32, annotate=False))
    res["b_again_32"] = step_ms(timed_generate(model, ids, 32, annotate=False))
    ids2 = torch.randint(10, vocab, (1, 300), generator=gen).to(cfg.device)  # unseen lengths again
    res["c_new_prompt_first"] = step_ms(timed_generate(model, ids2, 16, annotate=False))
    res["c_new_prompt_again"] = step_ms(timed_generate(model, ids2, 16, annotate=False))

    kw = dict(
        attention_mask=torch.ones_like(ids),
        min_new_tokens=32,
        max_new_tokens=32,
        do_sample=False,
        pad_token_id=0,
    )
    arms: dict[str, list[float]] = {"record_tracker": [], "record_tracker_annotated": [], "timed_generate": [],
                                    "timed_generate_annotated": []}  # fmt: skip
    for _ in range(3):
        for annotate, key in ((False, "record_tracker"), (True, "record_tracker_annotated")):
            tr = GenerationTracker(annotate=annotate, clock=time.perf_counter_ns)
            with patch_generate(tr):
                model.generate(ids, **kw)
            arms[key].append(tr.requests[0].metrics()["tpot_ns"] / 1e6)
        arms["timed_generate"].append(timed_generate(model, ids, 32, annotate=False).tpot_ns / 1e6)
        arms["timed_generate_annotated"].append(timed_generate(model, ids, 32).tpot_ns / 1e6)
    res["tpot_ms"] = {k: {"median": statistics.median(v), "all": v} for k, v in arms.items()}
    (out / "sweep_firstuse.json").write_text(json.dumps(res, indent=1))
    med = statistics.median
    print(
        f"A first 32 after 4-token warm-up: first 4 forwards {res['a_first_32'][:4]} ms, "
        f"median after {med(res['a_first_32'][4:]):.1f} ms"
    )
    print(f"B same 32 again: median {med(res['b_again_32'][1:]):.1f} ms/forward")
    print(
        f"C unseen prompt 300: first {med(res['c_new_prompt_first'][1:]):.1f}, again {med(res['c_new_prompt_again'][1:]):.1f} ms"
    )
    for k, v in res["tpot_ms"].items():
        print(f"TPOT {k:26s} median {v['median']:.2f} ms  all {[round(x, 2) for x in v['all']]}")


if __name__ == "__main__":
    main()
