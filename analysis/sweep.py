"""The sweep's summary table and the comparison with the seed study. Pure: no I/O.

Inputs are each point's run.json fields and its requests / phases tables, as
DataFrames; nothing is mutated. Definitions (DESIGN.md, vLLM's benchmark):
TTFT is request start to the first token on the host; TPOT is
(e2e - TTFT) / (output tokens - 1); prefill share is TTFT / e2e (for an agent
loop: summed over its calls). Throughputs count every sequence of a batch.

A point runs ``repeats`` timed repetitions (run.json ``repeats``: repetition r
holds request_ids [r*k, (r+1)*k)); every timing column is the median over the
repetitions, and ``*_min`` / ``*_max`` give the spread of TTFT, TPOT and e2e.

A ``load`` point (many requests through the continuous-batching engine at one arrival
rate) has its own columns instead (``load_columns``): throughput and p50 / p99 latency
over its requests, and the mean request's cost inside the batches (``ttft_ms`` / ``tpot_ms``
/ ``e2e_ms`` hold the p50s there).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from tracekit.model.schema import SWEEP_SCHEMAS
from tracekit.model.seedstudy import SeedStudy

NS_PER_MS = 1e6

SUMMARY_COLUMNS: tuple[str, ...] = tuple(SWEEP_SCHEMAS["summary"].names)  # the stored order (model/schema.py)

# The seed: T4, TinyLlama-1.1B, fp16. One chat request is the cost unit.
CHAT_REFERENCE = (128, 128)


@dataclass(frozen=True)
class PointData:
    """One point as the report needs it: run.json fields and two tables."""

    point: Mapping[str, Any]  # run.json "point": group, shape, input_tokens, ..., agent, id
    status: str  # complete | failed | incomplete
    manifest: Mapping[str, Any] = field(default_factory=dict)
    requests: pd.DataFrame | None = None
    phases: pd.DataFrame | None = None
    run_dir: str = ""


def _f(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def _div(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _split(phases: pd.DataFrame | None, phase: str) -> tuple[float | None, float | None, float | None]:
    """compute / memory / idle shares of a phase's time (run-level rows if present)."""
    if phases is None or phases.empty or "phase" not in phases:
        return None, None, None
    rows = phases[phases["phase"].astype(str) == phase]
    if "request_id" in rows and rows["request_id"].isna().any():
        rows = rows[rows["request_id"].isna()]
    if rows.empty:
        return None, None, None
    cols = ("compute_bound_ns", "memory_bound_ns", "idle_ns")
    if not all(c in rows for c in cols) or rows[list(cols)].isna().all().all():
        return None, None, None  # no GPU activity in the trace (a CPU run): no split, not a zero split
    t = float(rows["time_ns"].sum())
    if t <= 0:
        return None, None, None
    idle = float(rows["idle_ns"].sum()) / t if rows["idle_ns"].notna().any() else None
    if rows[["compute_bound_ns", "memory_bound_ns"]].isna().all().all():
        # No ceiling, so no bound classification (the bound pass warned): unknown, not zero.
        return None, None, idle
    return float(rows["compute_bound_ns"].sum()) / t, float(rows["memory_bound_ns"].sum()) / t, idle


def _more_split(phases: pd.DataFrame | None, phase: str) -> dict[str, float | None]:
    """latency-bound and idle-by-cause shares of a phase's time; None where the table lacks them."""
    out: dict[str, float | None] = {f"{phase}_{k}_share": None
                                    for k in ("latency", "idle_host", "idle_wait", "idle_profiler")}
    if phases is None or phases.empty or "phase" not in phases:
        return out
    rows = phases[phases["phase"].astype(str) == phase]
    if "request_id" in rows and rows["request_id"].isna().any():
        rows = rows[rows["request_id"].isna()]
    t = float(rows["time_ns"].sum()) if "time_ns" in rows and len(rows) else 0.0
    if t <= 0:
        return out
    for key, col in (("latency", "latency_bound_ns"), ("idle_host", "idle_host_ns"), ("idle_wait", "idle_wait_ns"),
                     ("idle_profiler", "idle_profiler_ns")):
        if col in rows and rows[col].notna().any():
            out[f"{phase}_{key}_share"] = float(pd.to_numeric(rows[col], errors="coerce").sum()) / t
    return out


ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4, "float16": 2, "bfloat16": 2, "float32": 4}


def prefill_transient_per_prompt_token(kv: Mapping[str, Any], prompt_tokens: int) -> float | None:
    """Peak allocator growth minus the KV cache at the peak, per prompt token (bytes).

    The peak of a request is reached inside the prefill, when the cache holds the
    prompt's tokens: peak - prompt tokens x cache bytes per token is what the
    prefill holds besides the cache. Only for a dynamic cache (its tensors equal
    the formula; eager mode): a static cache (compiled mode) is allocated for its
    maximum length up front, before or inside the request.
    """
    peak, n = _f(kv.get("peak_growth_bytes_per_token")), _f(kv.get("cache_tokens"))
    cache, formula = _f(kv.get("cache_tensor_bytes_per_token")), _f(kv.get("formula_bytes_per_token"))
    if None in (peak, n, cache, formula) or prompt_tokens <= 0:
        return None
    assert peak is not None and n is not None and cache is not None and formula is not None
    if abs(cache - formula) > 0.01 * formula:
        return None
    return (peak * n - cache * prompt_tokens) / prompt_tokens


def activation_bytes_per_token(config: Mapping[str, Any], dtype: str) -> dict[str, float] | None:
    """Per-token activations one decoder layer holds at once in the prefill, from the config (bytes).

    MLP: gate, up, act(gate) and their product (4 x intermediate); hidden states
    and the norm's output (2 x hidden). Logits are not per prompt token: generate
    computes them for the last position only.
    """
    elem = ELEMENT_BYTES.get(dtype)
    try:
        inter, hidden = int(config["intermediate_size"]), int(config["hidden_size"])
    except (KeyError, TypeError, ValueError):
        return None
    if elem is None:
        return None
    mlp, hid = 4.0 * inter * elem, 2.0 * hidden * elem
    return {"mlp": mlp, "hidden": hid, "total": mlp + hid, "elem": float(elem),
            "intermediate_size": float(inter), "hidden_size": float(hidden)}  # fmt: skip


def load_columns(p: PointData, gpu_per_hour: float) -> dict[str, Any]:
    """A load point: throughput and latency percentiles from the engine's timestamps without the profiler
    (run.json timings.unprofiled.load, else the recorded pass's), and the mean request's cost from the
    analysed requests table (analysis/cost.py: its share of the steps it was in): step time, GPU time,
    energy, and the step time at ``gpu_per_hour`` in dollars."""
    t = p.manifest.get("timings") or {}
    load = (t.get("unprofiled") or {}).get("load") or (t.get("profiled") or {}).get("load") or {}
    pt = p.point
    rate = _f(pt.get("rate"))

    def ms(key: str) -> float | None:
        v = _f(load.get(key))
        return None if v is None else v / NS_PER_MS

    out: dict[str, Any] = {
        "rate_rps": rate, "requests": _f(pt.get("requests")), "throughput_tok_s": _f(load.get("output_tok_s")),
        "ttft_p50_ms": ms("ttft_ns_p50"), "ttft_p99_ms": ms("ttft_ns_p99"), "tpot_p50_ms": ms("tpot_ns_p50"),
        "tpot_p99_ms": ms("tpot_ns_p99"), "itl_p99_ms": ms("itl_ns_p99"), "queue_p99_ms": ms("queue_ns_p99"),
        "ttft_ms": ms("ttft_ns_p50"), "tpot_ms": ms("tpot_ns_p50"), "e2e_ms": ms("e2e_ns_p50"),
    }
    req = p.requests
    if req is not None and not req.empty:
        def mean(col: str) -> float | None:
            return _f(pd.to_numeric(req[col], errors="coerce").mean()) if col in req else None

        step = mean("step_time_ns")
        gpu = mean("gpu_time_ns")
        out.update(
            step_ms_per_request=None if step is None else step / NS_PER_MS,
            gpu_ms_per_request=None if gpu is None else gpu / NS_PER_MS,
            j_per_request=mean("energy_j"),
            usd_per_request=None if step is None else step / 3.6e12 * gpu_per_hour,
        )
    return out


def summarize_point(p: PointData, input_price: float, output_price: float, gpu_per_hour: float = 0.0
                    ) -> dict[str, Any]:
    pt = p.point
    agent = pt.get("agent") or None
    row: dict[str, Any] = dict.fromkeys(SUMMARY_COLUMNS)
    row.update(
        point_id=pt.get("id"),
        group=pt.get("group"),
        shape=pt.get("shape"),
        mode=pt.get("mode"),
        quant=pt.get("quant") or "none",
        agent_mode=agent.get("mode") if agent else None,
        batch=int(pt.get("batch", 1)),
        input_tokens=int(pt.get("input_tokens", 0)),
        output_tokens=int(pt.get("output_tokens", 0)),
        status=p.status,
        reason=p.manifest.get("error") or "",
        run_dir=p.run_dir,
    )
    kv = p.manifest.get("kv") or {}
    row.update(
        kv_formula_bytes_per_token=_f(kv.get("formula_bytes_per_token")),
        kv_cache_bytes_per_token=_f(kv.get("cache_tensor_bytes_per_token")),
        kv_allocated_bytes_per_token=_f(kv.get("allocated_growth_bytes_per_token")),
        kv_peak_bytes_per_token=_f(kv.get("peak_growth_bytes_per_token")),
        logits_fp32_bytes_per_token=_f(kv.get("logits_fp32_bytes_per_token")),
        kv_cache_tokens=_f(kv.get("cache_tokens")),
        prefill_transient_bytes_per_prompt_token=None
        if agent or pt.get("mode") != "eager"
        else prefill_transient_per_prompt_token(kv, int(pt.get("input_tokens", 0)) * int(pt.get("batch", 1))),
        compile_s=_f((p.manifest.get("compiled") or {}).get("compile_s")),
    )
    req = p.requests
    if p.status != "complete" or req is None or req.empty:
        return row
    if pt.get("group") == "load":
        row.update(load_columns(p, gpu_per_hour))
        return row
    req = req.sort_values("request_id").reset_index(drop=True)
    batch = row["batch"]
    prefilled = _prefilled(p, req)
    per_rep = [_timings(r, prefilled, batch) for r in _repetitions(p, req)]
    row["repeats"] = len(per_rep)
    for key in per_rep[0]:
        vals = [v[key] for v in per_rep if v[key] is not None]
        row[key] = _median(vals)
        if key in ("ttft_ms", "tpot_ms", "e2e_ms"):
            row[f"{key}_min"] = min(vals) if vals else None
            row[f"{key}_max"] = max(vals) if vals else None
    first = per_rep[0]
    row.update(
        calls=first["calls"],
        sent_input_tokens=first["sent"],
        prefilled_tokens=prefilled * batch,
        generated_tokens=first["generated"],
    )
    for k in ("sent", "generated"):  # not summary columns: the same in every repetition
        row.pop(k, None)
    sent, generated = float(first["sent"]), float(first["generated"])
    row["ms_per_input_token"] = _div(row["prefill_ms"], prefilled * batch)
    row["ms_per_output_token"] = _div(row["tpot_ms"], float(batch))
    row["read_write_asymmetry"] = _div(row["ms_per_output_token"], row["ms_per_input_token"])
    pc, pm, pi = _split(p.phases, "prefill")
    dc, dm, di = _split(p.phases, "decode")
    row.update(
        prefill_compute_share=pc, prefill_memory_share=pm, prefill_idle_share=pi,
        decode_compute_share=dc, decode_memory_share=dm, decode_idle_share=di,
        **_more_split(p.phases, "prefill"), **_more_split(p.phases, "decode"),
    )  # fmt: skip
    cost = (sent * input_price + generated * output_price) / 1e6
    chat = (CHAT_REFERENCE[0] * input_price + CHAT_REFERENCE[1] * output_price) / 1e6
    row["cost_usd"] = cost
    row["cost_vs_chat"] = _div(cost, chat)
    return row


def _median(vals: list[float]) -> float | None:
    if not vals:
        return None
    v = sorted(vals)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def _repetitions(p: PointData, req: pd.DataFrame) -> list[pd.DataFrame]:
    """The requests table split into its timed repetitions (one, for runs before repeats existed)."""
    rep = p.manifest.get("repeats") or {}
    n = int(rep.get("n") or 1)
    k = int(rep.get("calls_per_repeat") or 0)
    if n <= 1 or k <= 0 or n * k != len(req):
        return [req]
    return [req.iloc[r * k : (r + 1) * k] for r in range(n)]


def _timings(req: pd.DataFrame, prefilled: float, batch: int) -> dict[str, Any]:
    """One repetition's timing metrics (an agent loop: summed over its calls)."""
    ttft = req["ttft_ns"].astype(float)
    e2e = req["e2e_ns"].astype(float)
    out = req["output_tokens"].astype(float)
    decode_ns = float((e2e - ttft).sum())
    decode_tokens = float(((out - 1).clip(lower=0) * req["batch"].astype(float)).sum())
    return {
        "calls": len(req),
        "sent": float((req["input_tokens"].astype(float) * req["batch"].astype(float)).sum()),
        "generated": float((out * req["batch"].astype(float)).sum()),
        "ttft_ms": float(ttft.iloc[0]) / NS_PER_MS,
        "tpot_ms": _f(req["tpot_ns"].astype(float).mean() / NS_PER_MS),
        "e2e_ms": float(e2e.sum()) / NS_PER_MS,
        "prefill_ms": float(ttft.sum()) / NS_PER_MS,
        "prefill_share": _div(float(ttft.sum()), float(e2e.sum())),
        "prefill_tok_s": _div(prefilled * batch, float(ttft.sum()) / 1e9),
        "decode_tok_s": _div(decode_tokens, decode_ns / 1e9),
    }


def _prefilled(p: PointData, req: pd.DataFrame) -> float:
    """Tokens per sequence run through prefill: measured at the model input where recorded."""
    agent = p.manifest.get("agent") or {}
    if agent.get("steps"):
        return float(sum(int(s["prefilled_tokens"]) for s in agent["steps"]))
    t = p.manifest.get("timings") or {}
    if t.get("prefilled_tokens") is not None:
        return float(t["prefilled_tokens"])
    return float(req["input_tokens"].astype(float).sum())


def summarize(points: Sequence[PointData], *, input_price: float, output_price: float,
              gpu_per_hour: float = 0.0) -> pd.DataFrame:
    """One row per point, in SUMMARY_COLUMNS order; failed points keep their reason."""
    rows = [summarize_point(p, input_price, output_price, gpu_per_hour) for p in points]
    df = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    for c in ("batch", "input_tokens", "output_tokens"):
        df[c] = df[c].astype("Int64")
    return df


# --- the seed's claims against the measured numbers -------------------------




def _pick(df: pd.DataFrame, **eq: Any) -> pd.DataFrame:
    m = df["status"] == "complete"
    for k, v in eq.items():
        m &= df[k] == v
    return df[m]


def _first(df: pd.DataFrame, col: str) -> float | None:
    vals = df[col].dropna()
    return _f(vals.iloc[0]) if len(vals) else None


def measured_claims(summary: pd.DataFrame, mode: str = "eager") -> dict[str, float | None]:
    """The measured counterpart of every seed claim, from the summary table only."""
    s = summary
    shapes = _pick(s, group="shapes", mode=mode)
    smoke = shapes[shapes["shape"] == "smoke"]
    out: dict[str, float | None] = {
        "smoke_prefill_ms": _first(smoke, "ttft_ms"),
        "smoke_prefill_tok_s": _first(smoke, "prefill_tok_s"),
        "smoke_decode_tok_s": _first(smoke, "decode_tok_s"),
    }
    for name in ("chat", "rag", "creative"):
        out[f"{name}_prefill_share"] = _first(shapes[shapes["shape"] == name], "prefill_share")
    prompts = _pick(s, group="prompt", mode=mode, batch=1).sort_values("input_tokens")
    short = _first(prompts.head(1), "prefill_tok_s") if len(prompts) else None
    long_ = _first(prompts.tail(1), "prefill_tok_s") if len(prompts) > 1 else None
    out["short_prompt_tok_s"], out["long_prompt_tok_s"] = short, long_
    out["long_vs_short_prefill"] = _div(long_, short)
    best = _pick(s, mode=mode)["ms_per_input_token"].dropna()
    best_in = float(best.min()) if len(best) else None
    out["ms_per_input_token"] = best_in
    b1 = _pick(s, mode=mode, batch=1)
    b1 = b1[b1["agent_mode"].isna() & (b1["output_tokens"] > 1)]
    per_out = b1["ms_per_output_token"].dropna()
    out["output_vs_input_token"] = _div(float(per_out.median()) if len(per_out) else None, best_in)
    kv = _pick(s, mode=mode)
    measured_kv = kv["kv_peak_bytes_per_token"].dropna()
    if measured_kv.empty:
        measured_kv = kv["kv_cache_bytes_per_token"].dropna()
    formula = kv["kv_formula_bytes_per_token"].dropna()
    out["kv_measured_vs_formula"] = _div(
        float(measured_kv.median()) if len(measured_kv) else None,
        _f(formula.iloc[0]) if len(formula) else None,
    )
    agent = _pick(s, group="agent", mode=mode, agent_mode="resend")
    out["agent_cost_vs_chat"] = _first(agent, "cost_vs_chat")
    out["agent_prefill_share"] = _first(agent, "prefill_share")
    return out


def seed_comparison(summary: pd.DataFrame, study: SeedStudy, mode: str = "eager") -> pd.DataFrame:
    """The study's value beside the measured one, and whether each relative claim holds here (within
    ``study.hold_factor``)."""
    measured = measured_claims(summary, mode)
    rows = []
    for c in study.claims:
        m = measured.get(c.key)
        ratio = _div(m, c.seed)
        if m is None:
            holds: bool | None = None
            verdict = "not measured"
        elif not c.relative:
            holds = None
            verdict = f"hardware-specific: {ratio:.3g}x the {study.gpu}'s value"  # type: ignore[str-format]
        else:
            holds = bool(ratio is not None and 1 / study.hold_factor <= ratio <= study.hold_factor)
            verdict = "holds" if holds else ("higher here" if (ratio or 0) > 1 else "lower here")
        rows.append(
            {
                "claim": c.text,
                "key": c.key,
                "unit": c.unit,
                "seed_t4": c.seed,
                "measured": m,
                "measured_vs_seed": ratio,
                "holds": holds,
                "verdict": verdict,
            }
        )
    return pd.DataFrame(rows)


def agent_steps(points: Sequence[PointData]) -> pd.DataFrame:
    """Per agent step, per loop mode: tokens sent and prefilled, latency and its cumulative sum."""
    rows = []
    for p in points:
        agent = p.manifest.get("agent") or {}
        if p.status != "complete" or not agent.get("steps"):
            continue
        cum = 0.0
        for s in agent["steps"]:
            cum += s["e2e_ns"] / NS_PER_MS
            rows.append(
                {
                    "point_id": p.point.get("id"),
                    "mode": p.point.get("mode"),
                    "agent_mode": agent.get("mode"),
                    "step": s["step"],
                    "prompt_tokens": s["prompt_tokens"],
                    "prefilled_tokens": s["prefilled_tokens"],
                    "output_tokens": s["output_tokens"],
                    "prefill_ms": s["prefill_ns"] / NS_PER_MS,
                    "e2e_ms": s["e2e_ns"] / NS_PER_MS,
                    "cumulative_ms": cum,
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "point_id",
            "mode",
            "agent_mode",
            "step",
            "prompt_tokens",
            "prefilled_tokens",
            "output_tokens",
            "prefill_ms",
            "e2e_ms",
            "cumulative_ms",
        ],
    )
