"""Markdown renderings: the sweep report's text and tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from tracekit.analysis import sweep as sweep_analysis
from tracekit.model.pricing import Pricing
from tracekit.store.reference import seed_study


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v) or v is pd.NA:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v == 0:
            return "0"
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def _md_table(df: pd.DataFrame, cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c]).replace("|", "/") for c in cols) + " |")
    return "\n".join(lines)


SUMMARY_VIEW = ["point_id", "status", "repeats", "ttft_ms", "tpot_ms", "tpot_ms_min", "tpot_ms_max", "e2e_ms",
                "prefill_share", "prefill_tok_s", "decode_tok_s", "read_write_asymmetry", "decode_idle_share",
                "decode_latency_share", "decode_idle_profiler_share", "cost_vs_chat"]  # fmt: skip
SEED_VIEW = ["claim", "unit", "seed_t4", "measured", "measured_vs_seed", "verdict"]
LOAD_VIEW = ["point_id", "rate_rps", "requests", "throughput_tok_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms",
             "tpot_p99_ms", "queue_p99_ms", "step_ms_per_request", "gpu_ms_per_request", "j_per_request",
             "usd_per_request"]  # fmt: skip
AGENT_VIEW = ["agent_mode", "mode", "step", "prompt_tokens", "prefilled_tokens", "output_tokens", "prefill_ms",
              "e2e_ms", "cumulative_ms"]  # fmt: skip


def agent_saving(agent: pd.DataFrame) -> dict[str, float] | None:
    """kv-reuse against resend: prefilled tokens and prefill time, summed over the loop (measured)."""
    if agent.empty:
        return None
    g = agent.groupby("agent_mode")[["prefilled_tokens", "prefill_ms", "e2e_ms"]].sum()
    if not {"resend", "kv-reuse"} <= set(g.index):
        return None
    r: Any = g.loc["resend"]
    k: Any = g.loc["kv-reuse"]
    return {
        "resend_prefilled_tokens": float(r["prefilled_tokens"]),
        "kv_reuse_prefilled_tokens": float(k["prefilled_tokens"]),
        "resend_prefill_ms": float(r["prefill_ms"]),
        "kv_reuse_prefill_ms": float(k["prefill_ms"]),
        "resend_e2e_ms": float(r["e2e_ms"]),
        "kv_reuse_e2e_ms": float(k["e2e_ms"]),
    }


def agent_saving_text(save: dict[str, float]) -> str:
    """The saving kv-reuse measured against resend, in words, or why there was none, with the numbers."""
    rt, kt = save["resend_prefilled_tokens"], save["kv_reuse_prefilled_tokens"]
    rp, kp = save["resend_prefill_ms"], save["kv_reuse_prefill_ms"]
    re_, ke = save["resend_e2e_ms"], save["kv_reuse_e2e_ms"]
    text = (
        f"Per step the median over the timed repetitions, after a warm-up of the whole loop in each mode. "
        f"Input tokens prefilled: {rt:.0f} (resend) vs {kt:.0f} (kv-reuse), "
        f"{rt - kt:.0f} fewer ({_pct(rt - kt, rt)}). "
    )
    if kp < rp:
        text += f"Prefill time: {rp:.1f} ms vs {kp:.1f} ms, {rp - kp:.1f} ms saved ({_pct(rp - kp, rp)}). "
    else:
        text += (
            f"Prefill time: {rp:.1f} ms vs {kp:.1f} ms: NO saving measured; per step the kv-reuse prefill "
            "runs fewer tokens but its time is dominated by per-forward host cost (see the table). "
        )
    text += (
        f"Loop latency: {re_:.1f} ms vs {ke:.1f} ms ({_pct(re_ - ke, re_)} {'less' if ke < re_ else 'more'})."
    )
    return text


def _b(v: float) -> str:
    return f"{v:,.0f} B"


def _span(x: pd.Series) -> str:
    lo, hi = float(x.min()), float(x.max())
    return _b(lo) if round(lo) == round(hi) else f"{lo:,.0f}-{hi:,.0f} B"


# A transient within this factor of the config's activation size is explained by it.
ACTIVATION_MATCH = 1.25


def kv_text(summary: pd.DataFrame, config: dict[str, Any], dtype: str) -> list[str]:
    """What the KV-cache memory measurements say, computed from them and from the model config.

    Peak growth over a request divided by cached tokens is not a per-token cost:
    the peak is inside the prefill. Peak minus the cache at that moment, per prompt
    token, is compared with the config's per-token activation size and with
    full-prompt fp32 logits (vocab x 4 B), so the explanation follows the numbers.
    """
    d = summary[summary["status"] == "complete"]
    f = d["kv_formula_bytes_per_token"].dropna()
    if f.empty:
        return []
    formula = float(f.iloc[0])
    text = [f"Formula (2 x layers x KV heads x head dim x bytes): {_b(formula)} per token."]
    dyn = d[d["prefill_transient_bytes_per_prompt_token"].notna()]
    if dyn.empty:
        return text
    text[0] += (
        f" Points with a dynamic cache ({len(dyn)}): the cache's own tensors {_span(dyn['kv_cache_bytes_per_token'])} "
        f"per cached token; memory after the request {_span(dyn['kv_allocated_bytes_per_token'].dropna())} per cached "
        "token above its start."
    )
    act = sweep_analysis.activation_bytes_per_token(config, dtype)
    peak = dyn["kv_peak_bytes_per_token"]
    para = (
        f"Peak growth / cached tokens is {_span(peak)} ({float(peak.median()) / 1e6:.4f} MB median): not a per-token "
        "cost. "
    )
    final_cache = dyn["kv_cache_tokens"] * dyn["kv_cache_bytes_per_token"]
    prompt_tok = dyn["input_tokens"].astype(float) * dyn["batch"].astype(float)
    late = pd.Series(False, index=dyn.index)
    if act:
        # Where the whole cache outweighs the prefill's cache + activations, the peak is at the end of decode.
        late = final_cache > prompt_tok * (dyn["kv_cache_bytes_per_token"] + act["total"])
    if late.any():
        extra = (dyn["kv_peak_bytes_per_token"] - dyn["kv_cache_bytes_per_token"]) * dyn["kv_cache_tokens"]
        para += (
            f"Where the final cache outweighs the prefill ({', '.join(dyn.loc[late, 'point_id'].astype(str))}) the "
            f"peak is at the end of decode: peak minus the final cache is {_span(extra[late])} in all, not per prompt token. "
        )
    early = dyn[~late]
    if early.empty:
        return [*text, "", para.strip()]
    tr = early["prefill_transient_bytes_per_prompt_token"]
    prompts = early["input_tokens"].astype(float)
    para += (
        "Elsewhere the peak is inside the prefill: peak minus the cache at that moment (prompt tokens x "
        f"the cache's bytes per token) is {_span(tr)} per prompt token, for prompts of {prompts.min():,.0f} to "
        f"{prompts.max():,.0f} tokens and batch up to {int(early['batch'].max())}: a prefill transient proportional "
        "to the prompt."
    )
    if act:
        lo, hi = float(tr.min()) / act["total"], float(tr.max()) / act["total"]
        para += (
            f" The config's activations of one layer per token are {_b(act['total'])}: the MLP's gate, up, act(gate) "
            f"and product 4 x {act['intermediate_size']:,.0f} x {act['elem']:.0f} B = {_b(act['mlp'])}, plus hidden "
            f"states and norm output 2 x {act['hidden_size']:,.0f} x {act['elem']:.0f} B = {_b(act['hidden'])}. "
            f"The measured transient is {lo:.2f}-{hi:.2f}x that: "
            + ("the prefill's activations explain it."
               if lo >= 1 / ACTIVATION_MATCH and hi <= ACTIVATION_MATCH
               else "it does NOT match the activation size; the difference is unexplained here.")
        )  # fmt: skip
    lg = early["logits_fp32_bytes_per_token"].dropna()
    if len(lg):
        logits = float(lg.iloc[0])
        if float(tr.max()) < logits:
            para += (
                f" fp32 logits over the whole prompt would be {_b(logits)} per prompt token (vocab x 4 B), more than "
                "the whole measured transient: they are not the cause (generate computes logits for the last "
                f"position only, {_b(logits)} once)."
            )
        else:
            para += (
                f" The transient is at least the size of fp32 logits over the prompt ({_b(logits)} per token): "
                "full-prompt logits could account for it."
            )
    para += (
        f" A total-memory measurement divided by tokens (the seed's ~{seed_study().kv_measured_bytes_per_token / 1e6:g} MB against a {formula / 1e6:.4f} MB formula) "
        "therefore counts the prefill's transients beside the cache, and depends on the prompt / answer ratio."
    )
    return [*text, "", para]


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "–"


def render_markdown(meta: dict[str, Any], summary: pd.DataFrame, seed: pd.DataFrame, agent: pd.DataFrame,
                    plots: dict[str, Path], pricing: Pricing, rel: Path) -> str:  # fmt: skip
    n_ok = int((summary["status"] == "complete").sum())
    study = seed_study()
    out = [
        f"# tracekit sweep `{meta.get('name', '')}`",
        "",
        f"Model `{meta.get('model', '')}` ({meta.get('dtype', '')}) on {meta.get('device_name', meta.get('device', ''))}; "
        f"{n_ok} of {len(summary)} points complete; {meta.get('elapsed_s', 0):.0f} s.",
        "Timings are host timers without the profiler (TTFT: start to first token on the host; "
        "TPOT: (e2e - TTFT) / (output tokens - 1)); the three-way split comes from a short profiled window per point.",
        f"Each point: {meta.get('warmup_runs', 1)} warm-up run(s) of the whole point, then "
        f"{meta.get('repeats') or 1} timed repetition(s); timings are medians, `*_min`/`*_max` the spread.",
        *_override_lines(meta),
        "",
        "## The seed's claims here",
        "",
        f"Seed: {study.gpu}, {study.model} {study.dtype}. A ratio or share *holds* when the measured value is within "
        f"{study.hold_factor:g}x of the seed's; absolute numbers are hardware-specific and only compared.",
        "",
        _md_table(seed, SEED_VIEW),
        "",
    ]
    kv_lines = kv_text(
        summary, (meta.get("model_info") or {}).get("config") or {}, str(meta.get("dtype", ""))
    )
    if kv_lines:
        out += ["### KV cache bytes per token", "", *kv_lines, ""]
    out += load_section(summary, pricing)
    save = agent_saving(agent)
    if save:
        out += ["## Agent loop: resend vs kv-reuse (measured)", "", agent_saving_text(save), "",
                _md_table(agent, AGENT_VIEW), ""]  # fmt: skip
    out += [
        f"## Cost (pricing: {pricing.name}, ${pricing.input_per_mtok:g} in / ${pricing.output_per_mtok:g} out per 1M "
        f"tokens; {pricing.source}{', ' + pricing.as_of if pricing.as_of else ''})",
        "",
        _md_table(summary[summary["cost_usd"].notna()], ["point_id", "sent_input_tokens", "generated_tokens", "cost_usd", "cost_vs_chat"]),
        "",
        "## Plots",
        "",
    ]  # fmt: skip
    if not plots:
        out += ["(no plots: no study had complete points)", ""]
    for name, p in plots.items():
        out.append(f"![{name}]({(rel / p.name).as_posix()})")
        out.append("")
    out += ["## All points", "", _md_table(summary, SUMMARY_VIEW), ""]
    failed = summary[summary["status"] != "complete"]
    if not failed.empty:
        out += ["## Failed points", "", _md_table(failed, ["point_id", "status", "reason"]), ""]
    return "\n".join(out)


def load_section(summary: pd.DataFrame, pricing: Pricing) -> list[str]:
    """The load study: latency against throughput, and what one request costs at each load."""
    d = summary[(summary["group"] == "load") & (summary["status"] == "complete")] if "group" in summary else summary
    if d.empty:
        return []
    return [
        "## Load: latency against throughput, and the cost of one request",
        "",
        "Each point serves its requests through Transformers' continuous batching at one arrival rate "
        "(Poisson; `all`: at once). Throughput and latency percentiles come from the engine's own token "
        "timestamps without the profiler; the cost per request is its share of the steps it shared with others "
        "(docs/metrics.md), from the recorded pass: step time (the GPU held), GPU busy time, NVML energy, and "
        f"the step time at ${pricing.gpu_per_hour:g} per GPU-hour ({pricing.gpu_source or 'given'}).",
        "",
        _md_table(d, LOAD_VIEW),
        "",
    ]


def _override_lines(meta: dict[str, Any]) -> list[str]:
    o = (meta.get("model_info") or {}).get("max_position_embeddings_override")
    if not o:
        return []
    return [
        f"max_position_embeddings raised from {o.get('preset_value')} to {o.get('used')} "
        f"(random-weight preset; timing does not depend on it)."
    ]
