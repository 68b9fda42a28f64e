"""Does sampling NVML at 100 Hz slow generation down? Interleaved blocks, paired TPOT ratios, bootstrap CI.

    python3 benchmarks/overhead.py [--out DIR] [--compiled] [--no-eager]   # GPU: TinyLlama-1.1B shape, fp16
    python3 benchmarks/overhead.py --arms off_a,on,null,off_b --pin-main 0-5 --pin-sampler 15
    python3 benchmarks/overhead.py --tiny                                # CPU smoke run, a few-MB Llama
    python3 benchmarks/overhead.py --compiled --no-eager --segment-tokens 32 --new-tokens 960 \
        --blocks 100000 --max-seconds 300 --pin-main 0-5 --pin-sampler 15   # the H200 run of docs/nvml.md

The design has to resolve 1% while eager decode on the H200 varies by tens of
percent between runs of one arm (the runs behind it:
docs/measurements/2026-11-29-sampler-overhead.md). So:

* arms in many short blocks (default 24 per arm of 32 tokens each), one block
  of every arm per round, the order changing round by round as a Williams
  design (every arm in every position, and after every other arm, equally
  often), so slow drift, position and carry-over effects hit every arm alike. The default arms are
  ``off_a`` (no sampler), ``on`` (tracekit's NvmlSampler at 100 Hz, as
  ``tracekit record`` starts it) and ``off_b`` (no sampler again). Optional
  control arms: ``null`` (the same sampler process and loops with an NVML
  stand-in that never calls the driver: is a cost the process's or NVML's?)
  and ``fast`` (the sampler without GPM, energy and PCIe: the cheap reads only);
* no gap only the sampled blocks have: by default (``--sampler-mode pause``)
  each sampler arm's process starts once and is resumed for its blocks only;
  with ``--sampler-mode restart`` every block starts ``--settle`` seconds after
  the previous one ended, in every arm, and the sampler's start (~0.2 s on the
  H200, GPU idle) falls inside that pause, never inside a sampled block;
* the statistic is paired by round: each block's TPOT (the mean of its
  inter-token times; a block's first token, which includes prefill, is left
  out), the ratio arm/off_a within each round, and the geometric mean of those
  ratios over rounds, with a 95% CI from a bootstrap that resamples rounds
  (``paired_tpot_ratio``). The blocks of one round ran within a second or two
  of each other, so drift between rounds cancels in the ratio. Also reported:
  the ratio of each arm's pooled median inter-token time (``pooled_median``),
  which decode that switches between two speeds for seconds at a time throws
  off (see ``paired_tpot_ratio``);
* ``--segment-tokens K``: the arms' blocks are instead adjacent K-token
  segments of one long generation (``SegmentClock`` pauses and resumes the
  sampler between them), so a round's blocks share the generation's state;
* an A/A comparison, off_b/off_a, with the same method: the noise floor. If
  the A/A interval is wider than the limit, the benchmark cannot resolve it on
  this machine, and the verdict says so instead of claiming a result.

Verdict (limit L, default 1%): "within" if the on/off_a CI lies inside
[1 - L, 1 + L]; "exceeded" if it lies wholly above 1 + L and above the A/A
CI; otherwise "not resolved". ``--compiled`` adds the same experiment on
decode with a static KV cache and torch.compile (reduce-overhead: CUDA
graphs), as ``tracekit.collectors.compiled`` sets it up, where host noise is
lower; ``--no-eager`` runs only that one.

Host noise: ``--pin-main CPUS`` pins this process (before torch starts any
thread, so all inherit it) and ``--pin-sampler CPUS`` the sampler's child
process, e.g. ``--pin-main 0-5 --pin-sampler 15``. For each block the main
thread's CPU time, its run-queue wait (/proc/thread-self/schedstat) and its
context switches and page faults are recorded, per token, so a slowdown can be
told apart: more CPU per token (the thread itself does more or waits spinning),
more run-queue wait (it lost its core), more faults (memory).

The sampler runs in its own process (tracekit.collectors.nvml), started before
and stopped after each sampled block; the token clock is a streamer noting when
Transformers hands each token to the host (after its device-to-host copy).
``--max-seconds`` ends an experiment after the round that passes it (the
result says how many rounds ran). --out DIR writes DIR/overhead.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ARMS = ("off_a", "on", "off_b")  # the default arms
# arm -> how its sampler is made (None: no sampler). "on" is what `tracekit record` starts.
ARM_SAMPLERS: dict[str, dict[str, Any] | None] = {
    "off_a": None,
    "off_b": None,
    "on": {},
    "null": {"nvml": "tracekit.collectors.nvml_sampling:NullNvml", "gpm": False},
    "fast": {"exclude": ("energy", "pcie_tx", "pcie_rx"), "gpm": False},
}


def model_config(tiny: bool) -> dict[str, Any]:
    """The model recorded by ``tracekit record``: its tinyllama-1.1b preset (or tiny, on CPU)."""
    from tracekit.collectors.presets import MODEL_PRESETS

    return dict(MODEL_PRESETS["tiny" if tiny else "tinyllama-1.1b"].config)


def import_tracekit() -> None:
    """Make tracekit.collectors importable: installed, or mapped from this checkout by hand."""
    try:
        import tracekit.collectors.nvml
    except ImportError:
        sys.path.insert(0, str(REPO))
        import tracekit

        # pyproject maps collectors/ to tracekit.collectors; without an install, do the same by hand.
        tracekit.__path__.append(str(REPO))


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
        self.on_token(now)

    def on_token(self, now: int) -> None:
        """Called after each new token's time is noted (subclasses act on it)."""

    def end(self) -> None:
        pass


def build_model(tiny: bool, device: str, dtype_name: str) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    config = LlamaConfig(**model_config(tiny))
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        # Initialise on the device, in the target dtype: 1.1B parameters on the host would take long.
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(prev)
    return model.eval()


class HostStats:
    """The main thread's CPU time, run-queue wait, context switches and page faults, as a snapshot."""

    FIELDS = ("cpu_ns", "runq_wait_ns", "invol_switches", "vol_switches", "minor_faults")

    @staticmethod
    def snapshot() -> dict[str, int | None]:
        import resource

        out: dict[str, int | None] = {"cpu_ns": time.thread_time_ns(), "runq_wait_ns": None}
        try:  # "time on CPU, time waiting on a run queue, timeslices" in ns (Linux, schedstats)
            with open("/proc/thread-self/schedstat") as f:
                out["runq_wait_ns"] = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass
        who = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
        ru = resource.getrusage(who)
        out.update(invol_switches=ru.ru_nivcsw, vol_switches=ru.ru_nvcsw, minor_faults=ru.ru_minflt)
        return out

    @staticmethod
    def delta(a: dict[str, int | None], b: dict[str, int | None]) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for k in HostStats.FIELDS:
            x, y = a.get(k), b.get(k)
            out[k] = None if x is None or y is None else y - x
        return out


def generate_block(model: Any, input_ids: Any, new_tokens: int) -> list[float]:
    """One forced-length generation; the inter-token times in seconds (first token excluded)."""
    return generate_block_stats(model, input_ids, new_tokens)[0]


def generate_block_stats(
    model: Any, input_ids: Any, new_tokens: int
) -> tuple[list[float], dict[str, int | None]]:
    """``generate_block`` plus the main thread's host statistics over the decode tokens."""
    import torch

    clock = TokenClock()
    # The statistics cover the same span as the inter-token times: first token to last.
    marks: list[dict[str, int | None]] = []
    put = clock.put

    def put_and_mark(value: Any) -> None:
        put(value)
        if len(clock.times) == 1 and not marks:
            marks.append(HostStats.snapshot())

    clock.put = put_and_mark  # type: ignore[method-assign]
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
    end = HostStats.snapshot()
    if len(clock.times) != new_tokens:
        raise RuntimeError(f"expected {new_tokens} tokens, streamer saw {len(clock.times)}")
    t = clock.times
    return [(b - a) / 1e9 for a, b in itertools.pairwise(t)], HostStats.delta(marks[0], end)


def williams_rows(n: int) -> list[list[int]]:
    """A Williams design: orders of n arms where each arm takes every position equally often and
    follows every other arm equally often (n rows for even n, 2n for odd n)."""
    first = [0]
    lo, hi = 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(x + i) % n for x in first] for i in range(n)]
    if n % 2:
        rows += [list(reversed(r)) for r in rows]
    return rows


def block_order(rounds: int, arms: tuple[str, ...] = ARMS) -> list[str]:
    """Each round runs every arm once; round r takes row r of a Williams design, cyclically.

    Why not plain rotation: with arms (off_a, on, off_b) rotated round by round, off_b always ran
    right after on and off_a right after off_b, so anything "on" leaves behind for the next block
    landed on one control arm only.
    """
    rows = williams_rows(len(arms))
    out: list[str] = []
    for r in range(rounds):
        out.extend(arms[i] for i in rows[r % len(rows)])
    return out


def bootstrap_ratio(
    num: list[list[float]], den: list[list[float]], reps: int, seed: int, *, paired: bool = False
) -> tuple[float, float, float]:
    """Ratio of pooled medians num/den and its 95% cluster-bootstrap CI.

    ``paired=False`` resamples each side's blocks independently; ``paired=True`` resamples rounds:
    block i of ``num`` and block i of ``den`` (same round) stay together, so drift between rounds,
    which both share, does not widen the interval.
    """
    import numpy as np

    if paired and len(num) != len(den):
        raise ValueError(f"paired bootstrap needs one block per round on each side: {len(num)} vs {len(den)}")
    rng = np.random.default_rng(seed)
    a = [np.asarray(b, dtype=float) for b in num]
    b = [np.asarray(x, dtype=float) for x in den]
    point = float(np.median(np.concatenate(a)) / np.median(np.concatenate(b)))
    ratios = np.empty(reps)
    for i in range(reps):
        ia = rng.integers(0, len(a), len(a))
        ib = ia if paired else rng.integers(0, len(b), len(b))
        ratios[i] = np.median(np.concatenate([a[j] for j in ia])) / np.median(
            np.concatenate([b[j] for j in ib])
        )
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return point, float(lo), float(hi)


def paired_tpot_ratio(
    num: list[list[float]], den: list[list[float]], reps: int, seed: int
) -> tuple[float, float, float]:
    """Geometric mean over rounds of TPOT(num) / TPOT(den), and its 95% bootstrap CI over rounds.

    A block's TPOT is the mean of its inter-token times (what the claim is about: a sampler that
    stalls one token in ten moves the mean, not the median). Each round gives one paired ratio, its
    two blocks having run next to each other; the estimate is exp(mean(log ratio)).

    Why not the ratio of pooled medians (``bootstrap_ratio``): when decode switches between two
    speeds for seconds at a time (the H200's compiled decode: 3.2 ms per token for 13 rounds, then
    2.8 ms), an arm's pooled median lands in one mode or the other depending on how
    many of its blocks fell in each, and two identical arms differed by 6% (A/A CI [0.995, 1.071]
    over 30 rounds) while every round's own blocks agreed within about 1%.
    """
    import numpy as np

    if len(num) != len(den) or not num:
        raise ValueError(f"paired ratio needs one block per round on each side: {len(num)} vs {len(den)}")
    logs = np.log(np.array([np.mean(a) for a in num]) / np.array([np.mean(b) for b in den]))
    rng = np.random.default_rng(seed)
    boot = logs[rng.integers(0, len(logs), (reps, len(logs)))].mean(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return float(np.exp(logs.mean())), float(np.exp(lo)), float(np.exp(hi))


def verdict(lo: float, hi: float, limit_pct: float) -> str:
    lim = limit_pct / 100
    if 1 - lim <= lo and hi <= 1 + lim:
        return "within"
    if lo > 1 + lim:
        return "exceeded"
    return "not resolved"


def final_verdict(on_ci: tuple[float, float], aa_ci: tuple[float, float], limit_pct: float) -> str:
    """The on/off verdict, held against the A/A noise floor.

    An on/off CI wholly above the limit is not enough: on the H200 one eager run gave
    on/off CI [1.014, 1.384] ("exceeded") while its A/A CI reached 1.088 and a repeat of the same
    configuration gave [0.892, 1.305]. An effect counts only where on/off's lower bound is also
    above the A/A CI's upper bound (two identical arms never differed that much).
    """
    v = verdict(on_ci[0], on_ci[1], limit_pct)
    if v == "exceeded" and on_ci[0] <= aa_ci[1]:
        return "not resolved"
    return v


def parse_cpus(text: str) -> tuple[int, ...]:
    """'0-5,8' -> (0, 1, 2, 3, 4, 5, 8)."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    if not cpus:
        raise ValueError(f"no CPUs in {text!r}")
    return tuple(sorted(cpus))


def make_sampler(arm: str, args: argparse.Namespace, device_index: int) -> Any:
    from tracekit.collectors.nvml import NvmlSampler

    spec = dict(ARM_SAMPLERS[arm] or {})
    if arm == "on":  # --no-gpm / --exclude shape the main arm only; the controls are fixed
        spec = {"gpm": not args.no_gpm, "exclude": tuple(args.exclude)}
    # for_torch_device: the NVML index of torch's device, through CUDA_VISIBLE_DEVICES.
    return NvmlSampler.for_torch_device(
        device_index, interval_s=args.interval, cpu_affinity=args.pin_sampler, **spec
    )


def _per_token(stats: list[dict[str, int | None]], tokens: int) -> dict[str, float | None]:
    """Median over blocks of each host statistic per inter-token interval."""
    out: dict[str, float | None] = {}
    for k in HostStats.FIELDS:
        vals = [s[k] for s in stats if s.get(k) is not None]
        out[k] = statistics.median(v / tokens for v in vals if v is not None) if vals else None
    return out


def _run_rounds(
    model: Any,
    input_ids: Any,
    args: argparse.Namespace,
    device_index: int,
    arms: tuple[str, ...],
    res: dict[str, Any],
    kept: dict[str, Any],
) -> int:
    """Rounds until --blocks or --max-seconds, filling ``res``'s lists; returns the rounds run."""
    blocks, host, statuses, order, settle_late = (
        res["blocks"],
        res["host"],
        res["statuses"],
        res["order"],
        res["settle_late"],
    )
    t0 = time.perf_counter()
    rounds = 0
    for rnd in range(args.blocks):
        if args.max_seconds is not None and time.perf_counter() - t0 > args.max_seconds and rounds >= 2:
            break
        for arm in block_order(rnd + 1, arms)[rnd * len(arms) :]:
            order.append(arm)
            # --settle: every block starts the same time after the previous one ended, sampler or not.
            t_ready = time.perf_counter() + args.settle
            sampler = None
            if ARM_SAMPLERS[arm] is not None and arm in kept:
                kept[arm].resume()  # a pipe round trip (~0.1 ms); the first tick runs at once
            elif ARM_SAMPLERS[arm] is not None:
                sampler = make_sampler(arm, args, device_index)
                sampler.start()  # returns once the child samples: its start-up is outside the block
            late = time.perf_counter() - t_ready
            if late < 0:
                time.sleep(-late)
            elif args.settle > 0:
                settle_late[arm] = settle_late.get(arm, 0) + 1
            try:
                times, hs = generate_block_stats(model, input_ids, args.new_tokens)
            finally:
                if sampler is not None:
                    sampler.stop()
                elif arm in kept:
                    kept[arm].pause()  # returns once no tick runs: nothing spills into the next block
            if sampler is not None:
                statuses[arm].append(sampler.status())
            blocks[arm].append(times)
            host[arm].append(hs)
        rounds += 1
        if rounds % 50 == 0:  # progress, so a run cut by a time limit still shows how far it got
            print(f"  ... {rounds} rounds, {time.perf_counter() - t0:.0f} s", flush=True)
    return rounds


class SegmentClock(TokenClock):
    """A streamer that notes each token's arrival and switches arms every ``k`` tokens inside one
    generation: the sampler is resumed for "on" segments and paused for the others.

    Why: between separate generate() calls the H200 ran whole blocks fast or slow (eager 13 vs
    19-24 ms per token, compiled 2.55 vs 3.05 ms), which kept block-level CIs at +-1.5% or wider
    after hundreds of blocks. Segments of one generation share that state, so a round of adjacent
    segments (one per arm, Williams order) is a tight pair. The interval that spans a switch (the
    pause/resume round trip lands in it) belongs to no segment: each segment keeps only the
    intervals between its own tokens.
    """

    def __init__(self, order: list[str], k: int, sampler: Any) -> None:
        super().__init__()
        self.order, self.k, self.sampler = order, k, sampler
        self.segments: list[list[int]] = [[]]  # token arrival times (ns) per segment, in order

    def on_token(self, now: int) -> None:
        seg = self.segments[-1]
        seg.append(now)
        if len(seg) == self.k and len(self.segments) < len(self.order):
            cur, nxt = self.order[len(self.segments) - 1], self.order[len(self.segments)]
            if self.sampler is not None and (cur == "on") != (nxt == "on"):
                (self.sampler.resume if nxt == "on" else self.sampler.pause)()
            self.segments.append([])

    def end(self) -> None:
        if self.sampler is not None and self.order[len(self.segments) - 1] == "on":
            self.sampler.pause()


def _run_segments(
    model: Any,
    input_ids: Any,
    args: argparse.Namespace,
    arms: tuple[str, ...],
    res: dict[str, Any],
    kept: dict[str, Any],
) -> int:
    """--segment-tokens K: rounds of adjacent K-token segments inside long generations."""
    import torch

    k = args.segment_tokens
    per_gen = args.new_tokens // (k * len(arms))  # whole rounds per generation
    t0 = time.perf_counter()
    rounds = 0
    while rounds < args.blocks:
        if args.max_seconds is not None and time.perf_counter() - t0 > args.max_seconds and rounds >= 2:
            break
        order = block_order(rounds + per_gen, arms)[rounds * len(arms) :]
        clock = SegmentClock(order, k, kept.get("on"))
        if order[0] == "on" and "on" in kept:
            kept["on"].resume()
        with torch.inference_mode():
            model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=per_gen * len(arms) * k,
                min_new_tokens=per_gen * len(arms) * k,
                do_sample=False,
                pad_token_id=0,
                streamer=clock,
            )
        segs = clock.segments
        if len(segs) != len(order) or any(len(x) != k for x in segs):
            raise RuntimeError(f"expected {len(order)} segments of {k} tokens, got {[len(x) for x in segs]}")
        for arm, times in zip(order, segs, strict=True):
            res["order"].append(arm)
            res["blocks"][arm].append([(b - a) / 1e9 for a, b in itertools.pairwise(times)])
            res["host"][arm].append(dict.fromkeys(HostStats.FIELDS))
        rounds += per_gen
        print(f"  ... {rounds} rounds, {time.perf_counter() - t0:.0f} s", flush=True)
    return rounds


def run_experiment(
    model: Any, input_ids: Any, args: argparse.Namespace, device_index: int, label: str
) -> dict[str, Any]:
    arms: tuple[str, ...] = tuple(args.arms)
    blocks: dict[str, list[list[float]]] = {arm: [] for arm in arms}
    host: dict[str, list[dict[str, int | None]]] = {arm: [] for arm in arms}
    statuses: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms if ARM_SAMPLERS[arm] is not None}
    order: list[str] = []
    settle_late: dict[str, int] = {}  # blocks whose sampler took longer to start than --settle
    res = {"blocks": blocks, "host": host, "statuses": statuses, "order": order, "settle_late": settle_late}
    kept: dict[str, Any] = {}  # --sampler-mode pause: one sampler per arm, paused outside its blocks
    if args.sampler_mode == "pause":
        for arm in statuses:
            kept[arm] = make_sampler(arm, args, device_index)
            kept[arm].start()
            kept[arm].pause()
    t0 = time.perf_counter()
    try:
        if args.segment_tokens:
            rounds = _run_segments(model, input_ids, args, arms, res, kept)
        else:
            rounds = _run_rounds(model, input_ids, args, device_index, arms, res, kept)
    finally:
        for arm, smp in kept.items():
            smp.stop()
            statuses[arm].append(smp.status())
    seconds = time.perf_counter() - t0

    med = {arm: statistics.median([x for b in blocks[arm] for x in b]) for arm in arms}
    ratios: dict[str, dict[str, Any]] = {}
    for i, arm in enumerate(a for a in arms if a != "off_a"):
        p, lo, hi = paired_tpot_ratio(blocks[arm], blocks["off_a"], args.bootstrap, 1 + i)
        mp, mlo, mhi = bootstrap_ratio(blocks[arm], blocks["off_a"], args.bootstrap, 1 + i, paired=True)
        _, ulo, uhi = bootstrap_ratio(blocks[arm], blocks["off_a"], args.bootstrap, 101 + i)
        ratios[arm] = {
            "point": p,
            "ci95": [lo, hi],
            "pooled_median": {"point": mp, "ci95": [mlo, mhi], "ci95_unpaired": [ulo, uhi]},
        }
    r_on, (lo_on, hi_on) = ratios["on"]["point"], ratios["on"]["ci95"]
    aa = ratios.get("off_b")
    lo_aa, hi_aa = aa["ci95"] if aa else (float("nan"), float("nan"))
    v_aa = verdict(lo_aa, hi_aa, args.limit_pct) if aa else "no A/A arm"
    v_on = final_verdict((lo_on, hi_on), (lo_aa, hi_aa), args.limit_pct) if aa else "not resolved"
    for arm, r in ratios.items():
        r["verdict"] = v_on if arm == "on" else verdict(r["ci95"][0], r["ci95"][1], args.limit_pct)
    if v_on == "within":
        text = f"sampling moves TPOT by at most {args.limit_pct}% (95% CI inside the limit)"
    elif v_on == "exceeded":
        text = f"sampling slows TPOT by more than {args.limit_pct}% (95% CI above the limit and the A/A CI)"
    elif not aa:
        text = "not resolved: no A/A arm (off_b) to tell the noise floor"
    elif lo_on > 1 + args.limit_pct / 100:
        text = (
            f"not resolved: the on/off CI is above +{args.limit_pct}% but overlaps the A/A noise floor "
            f"(A/A CI up to {(hi_aa - 1) * 100:+.1f}%)"
        )
    elif v_aa != "within":
        text = f"not resolved: the A/A noise floor (off_b/off_a CI) is wider than ±{args.limit_pct}% here"
    else:
        text = f"not resolved: the on/off CI straddles ±{args.limit_pct}% although A/A is within it"
    on_status = statuses.get("on", [])
    st = on_status[-1] if on_status else {}

    def mean_of(key: str, arm: str = "on") -> float | None:
        vals = [s[key] for s in statuses.get(arm, []) if s.get(key) is not None]
        return statistics.fmean(vals) if vals else None

    tokens = (args.segment_tokens or args.new_tokens) - 1
    return {
        "label": label,
        "design": f"segments of {args.segment_tokens} tokens inside generations of {args.new_tokens}"
        if args.segment_tokens else "one generation per block",
        "arms": list(arms),
        "blocks_per_arm": rounds,
        "blocks_requested": args.blocks,
        "tokens_per_block": args.segment_tokens or args.new_tokens,
        "seconds": seconds,
        "sampler_lifecycle": args.sampler_mode,
        "settle_s": args.settle,
        "settle_exceeded_blocks": settle_late,
        "pin_main": sorted(os.sched_getaffinity(0)) if args.pin_main else None,
        "pin_sampler": list(args.pin_sampler) if args.pin_sampler else None,
        "order": order,
        "median_token_s": med,
        "per_block_median_s": {arm: [statistics.median(b) for b in blocks[arm]] for arm in arms},
        "per_block_tpot_s": {arm: [statistics.fmean(b) for b in blocks[arm]] for arm in arms},
        "blocks_s": blocks,  # every inter-token time, by arm and round: the analysis can be redone offline
        "host_per_token": {arm: _per_token(host[arm], tokens) for arm in arms},
        "host_per_block": host,
        "ratios": ratios,
        "ratio_on_off": {"point": r_on, "ci95": [lo_on, hi_on], "verdict": v_on},
        "ratio_aa": (
            {"point": aa["point"], "ci95": [lo_aa, hi_aa], "verdict": v_aa} if aa else {"verdict": v_aa}
        ),
        "ci_method": "geometric mean over rounds of the paired TPOT ratio (a block's TPOT: mean inter-token "
        "time), 95% percentile bootstrap over rounds; pooled_median: ratio of pooled medians, bootstrap "
        "over rounds (paired) and over blocks (unpaired)",
        "verdict": v_on,
        "verdict_text": text,
        "nvml_available": st.get("available"),
        "nvml_reason": st.get("reason"),
        "sampler_mode": st.get("mode"),
        "gpm_supported": st.get("gpm_supported"),
        "sampler_cpu_affinity": st.get("cpu_affinity"),
        "sampler_rate_hz_mean": mean_of("rate_hz"),
        "sampler_tick_us_mean": mean_of("tick_us_mean"),
        "sampler_tick_cpu_us_mean": mean_of("tick_cpu_us_mean"),
        "sampler_slow_tick_us_mean": mean_of("slow_tick_us_mean"),
        "sampler_process_start_ms_mean": mean_of("process_start_ms"),
        "sampler_status_last": st,
        "control_status_last": {arm: sts[-1] for arm, sts in statuses.items() if arm != "on" and sts},
    }


def _num(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def print_experiment(res: dict[str, Any], limit_pct: float) -> None:
    med = res["median_token_s"]
    arms = res.get("arms", list(ARMS))
    pins = f", main on CPUs {res['pin_main']}" if res.get("pin_main") else ""
    pins += f", sampler on CPUs {res['pin_sampler']}" if res.get("pin_sampler") else ""
    print(
        f"[{res['label']}] {res['blocks_per_arm']} blocks x {res['tokens_per_block']} tokens per arm "
        f"({res.get('design', 'one generation per block')}), {res['seconds']:.1f} s{pins}"
    )
    print("  median time per token: " + "  ".join(f"{arm} {med[arm] * 1e3:.3f} ms" for arm in arms))
    print("  TPOT ratio, paired by round (the verdict's statistic); pooled medians in brackets:")
    for arm, r in res["ratios"].items():
        lo, hi = r["ci95"]
        pm = r["pooled_median"]
        name = "A/A off_b/off_a" if arm == "off_b" else f"{arm}/off_a"
        print(
            f"  {name:16s} {r['point']:.4f}  95% CI [{lo:.4f}, {hi:.4f}]  "
            f"({(r['point'] - 1) * 100:+.2f}%; ±{limit_pct}%: {r['verdict']})  "
            f"[median {pm['point']:.4f}, CI {pm['ci95'][0]:.4f}-{pm['ci95'][1]:.4f}]"
        )
    print(f"  verdict: {res['verdict_text']}")
    hp = res["host_per_token"]
    print(
        "  main thread per token (median over blocks): CPU µs / run-queue wait µs / invol. switches / faults"
    )
    for arm in arms:
        h = hp[arm]
        print(
            f"    {arm:6s} {_num(h['cpu_ns'] and h['cpu_ns'] / 1e3, '.0f')} / "
            f"{_num(h['runq_wait_ns'] and h['runq_wait_ns'] / 1e3, '.1f')} / "
            f"{_num(h['invol_switches'], '.3f')} / {_num(h['minor_faults'], '.2f')}"
        )
    if res["nvml_available"]:
        print(
            f"  sampler ({res['sampler_mode']}, CPUs {res['sampler_cpu_affinity']}): "
            f"{_num(res['sampler_rate_hz_mean'], '.1f')} Hz, fast tick "
            f"{_num(res['sampler_tick_us_mean'], '.1f')} µs wall / {_num(res['sampler_tick_cpu_us_mean'], '.1f')} µs CPU, "
            f"slow tick {_num(res['sampler_slow_tick_us_mean'], '.0f')} µs (-: no slow loop), "
            f"start {_num(res['sampler_process_start_ms_mean'], '.0f')} ms"
        )
    else:
        print(f"  sampler: NVML unavailable here ({res['nvml_reason']}): the 'on' arm sampled nothing")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="a few-MB model on CPU (smoke test)")
    ap.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    ap.add_argument(
        "--dtype", default=None, choices=["fp16", "bf16", "fp32"], help="default: fp16 on GPU, fp32 on CPU"
    )
    ap.add_argument("--blocks", type=int, default=24, help="blocks per arm (rounds)")
    ap.add_argument("--max-seconds", type=float, default=None, help="end an experiment after this much")
    ap.add_argument("--warmup", type=int, default=2, help="untimed blocks before each experiment")
    ap.add_argument(
        "--sampler-mode",
        choices=["pause", "restart"],
        default="pause",
        help="pause: one sampler per arm for the whole experiment, resumed for its blocks only (no gap "
        "between blocks); restart: a new sampler process before each of its blocks (~0.2 s start)",
    )
    ap.add_argument(
        "--settle",
        type=float,
        default=0.0,
        help="seconds from one block's end to the next block's start, in every arm (covers the sampler's start)",
    )
    ap.add_argument("--new-tokens", type=int, default=32, help="tokens per block (per generation with --segment-tokens)")
    ap.add_argument(
        "--segment-tokens",
        type=int,
        default=0,
        help="switch arms every K tokens inside each generation (rounds of adjacent segments; "
        "arms off_a, on, off_b only; --sampler-mode pause); 0: one generation per block",
    )
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--interval", type=float, default=0.01, help="sampler interval, s (0.01 = 100 Hz)")
    ap.add_argument("--limit-pct", type=float, default=1.0, help="the claim: TPOT moves by at most this much")
    ap.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples")
    ap.add_argument("--compiled", action="store_true", help="also run on static cache + torch.compile decode")
    ap.add_argument("--no-eager", action="store_true", help="skip the eager experiment (with --compiled)")
    ap.add_argument(
        "--arms",
        type=lambda s: [a for a in s.split(",") if a],
        default=list(ARMS),
        help=f"comma-separated arms among {', '.join(ARM_SAMPLERS)}; off_a and on are required",
    )
    ap.add_argument("--pin-main", type=parse_cpus, default=None, help="CPUs for this process, e.g. 0-5")
    ap.add_argument("--pin-sampler", type=parse_cpus, default=None, help="CPUs for the sampler process")
    ap.add_argument("--out", type=Path, default=None, help="directory for overhead.json")
    ap.add_argument("--no-gpm", action="store_true", help="'on' arm without GPM (isolates its cost)")
    ap.add_argument(
        "--exclude",
        type=lambda s: [m for m in s.split(",") if m],
        default=[],
        help="comma-separated metrics the 'on' arm leaves out, e.g. pcie_tx,pcie_rx,energy",
    )
    args = ap.parse_args(argv)
    if args.new_tokens < 3:
        ap.error("--new-tokens must be at least 3 (two inter-token times per block)")
    if args.blocks < 2:
        ap.error("--blocks must be at least 2 (the bootstrap resamples blocks)")
    unknown = [a for a in args.arms if a not in ARM_SAMPLERS]
    if unknown or "off_a" not in args.arms or "on" not in args.arms or len(set(args.arms)) != len(args.arms):
        ap.error(f"--arms: each of {', '.join(ARM_SAMPLERS)} at most once, off_a and on required")
    if args.segment_tokens:
        if args.segment_tokens < 3 or set(args.arms) - {"off_a", "on", "off_b"} or args.sampler_mode != "pause":
            ap.error("--segment-tokens: K >= 3, arms among off_a, on, off_b, --sampler-mode pause")
        if args.new_tokens < args.segment_tokens * len(args.arms):
            ap.error("--segment-tokens: --new-tokens must hold at least one round (K x arms)")
    if args.no_eager and not args.compiled:
        ap.error("--no-eager leaves nothing to run without --compiled")
    if args.pin_main:
        # Before torch starts its threads: every thread created later inherits the mask.
        os.sched_setaffinity(0, args.pin_main)

    import torch
    import transformers

    import_tracekit()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = args.dtype or ("fp32" if device == "cpu" else "fp16")
    t_start = time.perf_counter()
    model = build_model(args.tiny, device, dtype)
    build_s = time.perf_counter() - t_start
    gen = torch.Generator().manual_seed(0)
    vocab = model_config(args.tiny)["vocab_size"]
    input_ids = torch.randint(3, int(vocab), (1, args.prompt_tokens), generator=gen).to(device)
    device_index = torch.device(device).index or 0

    experiments: list[dict[str, Any]] = []
    if not args.no_eager:
        for _ in range(args.warmup):
            generate_block(model, input_ids, args.new_tokens)
        experiments.append(run_experiment(model, input_ids, args, device_index, "eager"))
        print_experiment(experiments[-1], args.limit_pct)

    compiled: dict[str, Any] = {"requested": args.compiled}
    if args.compiled:
        try:
            from tracekit.collectors import compiled as comp

            setup = comp.enable(model, max_cache_len=args.prompt_tokens + args.new_tokens + 8)
            compiled["setup"] = setup.manifest()
            t0 = time.perf_counter()
            for _ in range(max(args.warmup, 3)):  # compilation and CUDA-graph capture happen here
                generate_block(model, input_ids, args.new_tokens)
            compiled["warmup_s"] = time.perf_counter() - t0
            experiments.append(run_experiment(model, input_ids, args, device_index, "compiled"))
            print_experiment(experiments[-1], args.limit_pct)
        except Exception as exc:  # the eager result stands; say why this one is missing
            compiled["error"] = f"{type(exc).__name__}: {exc}"
            print(f"[compiled] FAILED: {compiled['error']}")

    result = {
        "argv": sys.argv[1:] if argv is None else list(argv),
        "started": time.strftime(
            "%Y-%m-%d %H:%M:%S %Z", time.localtime(time.time() - (time.perf_counter() - t_start))
        ),
        "device": torch.cuda.get_device_name(device_index) if device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpus": os.cpu_count(),
        "model": "tiny" if args.tiny else "tinyllama-1.1b-shape",
        "dtype": dtype,
        "prompt_tokens": args.prompt_tokens,
        "interval_s": args.interval,
        "limit_pct": args.limit_pct,
        "bootstrap": args.bootstrap,
        "model_build_s": build_s,
        "total_s": time.perf_counter() - t_start,
        "experiments": experiments,
        "compiled": compiled,
    }
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "overhead.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"total {result['total_s']:.1f} s on {result['device']} ({result['model']}, {dtype})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
