"""A/B on the GPU: the agent loop through the old _Streamer vs record's tracker (streamer mode).

Usage: git show 2792401^:collectors/agent.py > scripts/device/agent_before_fold.py   (the old implementation)
       python3 scripts/device/agent_ab.py OUTDIR   (TinyLlama-1.1B shape, fp16; ~2.5 min on an H200)
Eager kv-reuse and resend loops alternate between the two implementations (ABBA), then the compiled
mode runs kv-reuse (static cache passed back) through the new one. Writes OUTDIR/agent_ab.json.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    from tracekit.collectors import agent as new
    from tracekit.collectors import compiled, presets, workload

    spec = importlib.util.spec_from_file_location("agent_old", Path(__file__).with_name("agent_before_fold.py"))
    old = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["agent_old"] = old  # dataclasses look their module up
    spec.loader.exec_module(old)  # type: ignore[union-attr]
    cfg = workload.WorkloadConfig(model=presets.resolve_model("tinyllama-1.1b"), device="cuda", dtype="fp16",
                                  shape="x", input_tokens=1, output_tokens=1)  # fmt: skip
    model, _ = workload.build_model(cfg)
    kw = dict(steps=5, system_tokens=128, output_tokens=64, tool_tokens=64, annotate=False)
    res: dict = {"eager": {}}

    def tpot(loop) -> float:
        return statistics.median(c.tpot_ns / 1e6 for c in loop.calls)

    for mode in ("kv-reuse", "resend"):
        for impl in (old, new):
            impl.run_agent_loop(model, mode=mode, **kw)  # warm-up
        arms: dict[str, list[float]] = {"old": [], "new": []}
        for order in (("old", "new"), ("new", "old")) * 2:
            for name in order:
                impl = old if name == "old" else new
                arms[name].append(tpot(impl.run_agent_loop(model, mode=mode, **kw)))
        res["eager"][mode] = {k: {"median": statistics.median(v), "all": v} for k, v in arms.items()}
        print(f"eager {mode}: TPOT old {statistics.median(arms['old']):.2f} ms {[round(x, 2) for x in arms['old']]}"
              f"  new {statistics.median(arms['new']):.2f} ms {[round(x, 2) for x in arms['new']]}", flush=True)
    setup = compiled.enable(model, max_cache_len=1024)
    t0 = time.perf_counter()
    try:
        new.run_agent_loop(model, mode="kv-reuse", **kw)  # compiles
        compile_s = time.perf_counter() - t0
        loops = [new.run_agent_loop(model, mode="kv-reuse", **kw) for _ in range(3)]
        res["compiled_kv_reuse"] = {
            "setup": setup.manifest(), "compile_s": compile_s,
            "tpot_ms": [tpot(lp) for lp in loops],
            "prefilled": [s.prefilled_tokens for s in loops[0].steps],
            "step_e2e_ms": [s.e2e_ns / 1e6 for s in loops[-1].steps],
        }  # fmt: skip
        print(f"compiled kv-reuse: TPOT {[round(x, 3) for x in res['compiled_kv_reuse']['tpot_ms']]} ms, prefilled "
              f"{res['compiled_kv_reuse']['prefilled']}, compile {compile_s:.1f} s", flush=True)
    except Exception as exc:
        res["compiled_kv_reuse"] = {"error": f"{type(exc).__name__}: {exc}"}
        print("compiled kv-reuse FAILED:", res["compiled_kv_reuse"]["error"])
    (out / "agent_ab.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
