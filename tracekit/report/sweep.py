"""The sweep's files: summary.parquet, agent_steps.parquet, report.md, report.html and plots/*.png.

A sweep directory holds one run directory per point (``points/<point-id>/``),
``sweep.json`` (the spec, the point order, the outcome of every point) and
what this module writes from them. Plots use matplotlib's Agg backend (no
display needed); the HTML embeds them, so it is one self-contained file.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from tracekit.analysis import sweep as sweep_analysis
from tracekit.model.pricing import Pricing
from tracekit.store.rundir import RunDir, atomic_open, write_json, write_table

SWEEP_MANIFEST = "sweep.json"
POINTS_DIR = "points"
SUMMARY = "summary.parquet"
AGENT_STEPS = "agent_steps.parquet"
SEED_TABLE = "seed_comparison.parquet"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
PLOTS_DIR = "plots"


def read_sweep(sweep_dir: Path) -> dict[str, Any]:
    path = sweep_dir / SWEEP_MANIFEST
    if not path.is_file():
        return {}
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def write_sweep(sweep_dir: Path, data: dict[str, Any]) -> None:
    write_json(sweep_dir / SWEEP_MANIFEST, data)


def load_points(sweep_dir: Path, point_ids: list[str]) -> list[sweep_analysis.PointData]:
    out = []
    for pid in point_ids:
        run = RunDir(sweep_dir / POINTS_DIR / pid)
        m = run.read_manifest()
        status = (
            "complete" if m.get("status") == "complete" else ("failed" if m.get("failed") else "incomplete")
        )
        if not m:
            status, m = "failed", {"error": "not run"}
        out.append(
            sweep_analysis.PointData(
                point=m.get("point", {"id": pid}),
                status=status,
                manifest=m,
                requests=run.read_df("requests") if status == "complete" else None,
                phases=run.read_df("phases") if status == "complete" else None,
                run_dir=str(Path(POINTS_DIR) / pid),
            )
        )
    return out


# --- plots --------------------------------------------------------------------


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _ok(df: pd.DataFrame, **eq: Any) -> pd.DataFrame:
    m = df["status"] == "complete"
    for k, v in eq.items():
        m &= df[k] == v
    return df[m]


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def plot_prefill_share(s: pd.DataFrame, path: Path) -> Path | None:
    d = _ok(s, group="shapes")
    d = pd.concat([d, _ok(s, group="agent", agent_mode="resend")])
    if d.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    modes = sorted(d["mode"].unique())
    labels = list(dict.fromkeys(d["shape"]))
    w = 0.8 / len(modes)
    for i, mode in enumerate(modes):
        dm = d[d["mode"] == mode].set_index("shape")
        ys = [100 * float(dm["prefill_share"].get(lbl, float("nan"))) for lbl in labels]
        ax.bar([x + i * w for x in range(len(labels))], ys, width=w, label=mode)
    ax.set_xticks([x + w * (len(modes) - 1) / 2 for x in range(len(labels))], labels)
    ax.set_ylabel("prefill share of latency (%)")
    ax.set_title("Prefill share per request shape (batch 1)")
    ax.legend()
    return _save(fig, path)


def _line(s: pd.DataFrame, group: str, x: str, y: str, path: Path, title: str, xlabel: str, ylabel: str,
          logx: bool = False, scale: float = 1.0) -> Path | None:  # fmt: skip
    d = _ok(s, group=group)
    if d.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for mode, dm in d.groupby("mode"):
        dm = dm.sort_values(x)
        ax.plot(dm[x].astype(float), dm[y].astype(float) * scale, marker="o", label=str(mode))
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_asymmetry(s: pd.DataFrame, path: Path) -> Path | None:
    d = s[(s["status"] == "complete") & s["ms_per_input_token"].notna() & s["ms_per_output_token"].notna()]
    d = d[d["agent_mode"].isna()]
    if d.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.8))
    x = range(len(d))
    ax.bar([i - 0.2 for i in x], d["ms_per_input_token"], width=0.4, label="ms per input token (prefill)")
    ax.bar([i + 0.2 for i in x], d["ms_per_output_token"], width=0.4, label="ms per output token (decode)")
    ax.set_yscale("log")
    ax.set_xticks(list(x), d["point_id"], rotation=75, fontsize=6)
    ax.set_ylabel("ms per token (log)")
    ax.set_title("Read/write asymmetry: cost of an input token vs an output token")
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_kv(s: pd.DataFrame, path: Path) -> Path | None:
    d = s[s["status"] == "complete"]
    # dynamic cache (eager): its tensors are the formula
    dyn = d[d["prefill_transient_bytes_per_prompt_token"].notna()]
    cols = [
        (d, "kv_formula_bytes_per_token", "formula"),
        (dyn, "kv_cache_bytes_per_token", "cache tensors"),
        (dyn, "kv_allocated_bytes_per_token", "allocator growth\n/ cached token"),
        (dyn, "kv_peak_bytes_per_token", "peak growth\n/ cached token"),
        (dyn, "prefill_transient_bytes_per_prompt_token", "prefill transient\n/ prompt token"),
    ]
    vals = [(label, float(x[c].dropna().median())) for x, c, label in cols if x[c].notna().any()]
    if not vals:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar([v[0] for v in vals], [v[1] / 1e6 for v in vals])
    ax.set_ylabel("MB (median over dynamic-cache points)")
    ax.set_title("KV cache bytes per token: formula vs measured")
    ax.tick_params(axis="x", labelsize=7)
    return _save(fig, path)


def plot_agent(a: pd.DataFrame, path: Path) -> Path | None:
    if a.empty:
        return None
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    for (mode, am), d in a.groupby(["mode", "agent_mode"]):
        lbl = f"{am} ({mode})"
        ax1.plot(d["step"] + 1, d["cumulative_ms"], marker="o", label=lbl)
        ax2.plot(d["step"] + 1, d["prefilled_tokens"], marker="o", label=f"{lbl} prefilled")
        ax2.plot(d["step"] + 1, d["output_tokens"], linestyle="--", label=f"{lbl} output")
    ax1.set_xlabel("agent step")
    ax1.set_ylabel("cumulative latency (ms)")
    ax1.set_title("Agent loop: cumulative latency")
    ax2.set_xlabel("agent step")
    ax2.set_ylabel("tokens per sequence")
    ax2.set_title("Tokens per step")
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=7)
    return _save(fig, path)


def plot_cost(s: pd.DataFrame, path: Path) -> Path | None:
    d = s[(s["status"] == "complete") & s["cost_vs_chat"].notna() & s["group"].isin(["shapes", "agent"])]
    d = d[d["mode"] == "eager"] if (d["mode"] == "eager").any() else d
    if d.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar([str(x) if a is None or pd.isna(a) else f"agent {a}" for x, a in zip(d["shape"], d["agent_mode"], strict=False)],
           d["cost_vs_chat"])  # fmt: skip
    ax.axhline(1.0, color="grey", linestyle=":")
    ax.set_ylabel("cost / one chat request (128/128)")
    ax.set_title("Cost at API prices, relative to one chat request")
    ax.tick_params(axis="x", labelsize=8)
    return _save(fig, path)


def plot_split(s: pd.DataFrame, path: Path) -> Path | None:
    d = s[(s["status"] == "complete") & s["decode_idle_share"].notna()]
    d = d[d["group"].isin(["shapes", "batch"])]
    if d.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.8))
    labels, comp, mem, idle = [], [], [], []
    for _, r in d.iterrows():
        for ph in ("prefill", "decode"):
            labels.append(f"{r['shape']} b{r['batch']} {r['mode']} {ph}")
            comp.append(_num(r[f"{ph}_compute_share"]))
            mem.append(_num(r[f"{ph}_memory_share"]))
            idle.append(_num(r[f"{ph}_idle_share"]))
    x = range(len(labels))
    ax.bar(x, comp, label="compute-bound")
    ax.bar(x, mem, bottom=comp, label="memory-bound")
    ax.bar(x, idle, bottom=[a + b for a, b in zip(comp, mem, strict=False)], label="idle (host-bound)")
    ax.set_xticks(list(x), labels, rotation=75, fontsize=6)
    ax.set_ylabel("share of phase time")
    ax.set_title("Three-way split of prefill and decode, by mode and batch")
    ax.legend(fontsize=7)
    return _save(fig, path)


def _num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if f != f else f


PlotFn = Callable[[pd.DataFrame, Path], "Path | None"]


def make_plots(summary: pd.DataFrame, agent: pd.DataFrame, plots_dir: Path) -> dict[str, Path]:
    """Every plot the data allows; a study with no points yields no plot, never an empty one."""
    s = summary
    try:
        _plt()
    except ImportError:  # a GPU box without matplotlib: tables and text still get written
        return {}
    made: dict[str, Path | None] = {
        "prefill_share": plot_prefill_share(s, plots_dir / "prefill_share.png"),
        "ttft_vs_prompt": _line(s, "prompt", "input_tokens", "ttft_ms", plots_dir / "ttft_vs_prompt.png",
                                "TTFT against prompt length", "prompt tokens", "TTFT (ms)", logx=True),
        "prefill_tps_vs_prompt": _line(s, "prompt", "input_tokens", "prefill_tok_s",
                                       plots_dir / "prefill_tps_vs_prompt.png", "Prefill throughput against prompt length",
                                       "prompt tokens", "prefill tok/s", logx=True),
        "tpot_vs_batch": _line(s, "batch", "batch", "tpot_ms", plots_dir / "tpot_vs_batch.png",
                               "TPOT against batch size", "batch", "TPOT (ms)", logx=True),
        "decode_tps_vs_batch": _line(s, "batch", "batch", "decode_tok_s", plots_dir / "decode_tps_vs_batch.png",
                                     "Decode throughput against batch size", "batch", "decode tok/s", logx=True),
        "tpot_vs_output": _line(s, "output", "output_tokens", "tpot_ms", plots_dir / "tpot_vs_output.png",
                                "TPOT against output length", "output tokens", "TPOT (ms)", logx=True),
        "read_write_asymmetry": plot_asymmetry(s, plots_dir / "read_write_asymmetry.png"),
        "kv_bytes_per_token": plot_kv(s, plots_dir / "kv_bytes_per_token.png"),
        "agent_loop": plot_agent(agent, plots_dir / "agent_loop.png"),
        "cost_vs_chat": plot_cost(s, plots_dir / "cost_vs_chat.png"),
        "three_way_split": plot_split(s, plots_dir / "three_way_split.png"),
    }  # fmt: skip
    return {k: v for k, v in made.items() if v is not None}


# --- text ---------------------------------------------------------------------


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
                "cost_vs_chat"]  # fmt: skip
SEED_VIEW = ["claim", "unit", "seed_t4", "measured", "measured_vs_seed", "verdict"]
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
        f" A total-memory measurement divided by tokens (the seed's ~0.17 MB against a {formula / 1e6:.4f} MB formula) "
        "therefore counts the prefill's transients beside the cache, and depends on the prompt / answer ratio."
    )
    return [*text, "", para]


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "–"


def render_markdown(meta: dict[str, Any], summary: pd.DataFrame, seed: pd.DataFrame, agent: pd.DataFrame,
                    plots: dict[str, Path], pricing: Pricing, rel: Path) -> str:  # fmt: skip
    n_ok = int((summary["status"] == "complete").sum())
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
        f"Seed: T4, TinyLlama-1.1B fp16. A ratio or share *holds* when the measured value is within "
        f"{sweep_analysis.HOLD_FACTOR:g}x of the seed's; absolute numbers are hardware-specific and only compared.",
        "",
        _md_table(seed, SEED_VIEW),
        "",
    ]
    kv_lines = kv_text(
        summary, (meta.get("model_info") or {}).get("config") or {}, str(meta.get("dtype", ""))
    )
    if kv_lines:
        out += ["### KV cache bytes per token", "", *kv_lines, ""]
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
        out += ["(no plots: matplotlib is not installed here, or no study had complete points)", ""]
    for name, p in plots.items():
        out.append(f"![{name}]({(rel / p.name).as_posix()})")
        out.append("")
    out += ["## All points", "", _md_table(summary, SUMMARY_VIEW), ""]
    failed = summary[summary["status"] != "complete"]
    if not failed.empty:
        out += ["## Failed points", "", _md_table(failed, ["point_id", "status", "reason"]), ""]
    return "\n".join(out)


def _override_lines(meta: dict[str, Any]) -> list[str]:
    o = (meta.get("model_info") or {}).get("max_position_embeddings_override")
    if not o:
        return []
    return [
        f"max_position_embeddings raised from {o.get('preset_value')} to {o.get('used')} "
        f"(random-weight preset; timing does not depend on it)."
    ]


def render_html(markdown_text: str, plots: dict[str, Path]) -> str:
    """A self-contained page: the Markdown as preformatted sections, plots embedded as data URIs."""
    body: list[str] = []
    table: list[str] = []

    def flush() -> None:
        if not table:
            return
        rows = [r for r in table if not set(r.replace("|", "").strip()) <= {"-", " "}]
        cells = [[html.escape(c.strip()) for c in r.strip().strip("|").split("|")] for r in rows]
        h = "".join(f"<th>{c}</th>" for c in cells[0])
        b = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in cells[1:])
        body.append(f"<table><thead><tr>{h}</tr></thead><tbody>{b}</tbody></table>")
        table.clear()

    by_name = {p.name: p for p in plots.values()}
    for line in markdown_text.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        flush()
        if line.startswith("!["):
            name = line[line.index("(") + 1 : -1].rsplit("/", 1)[-1]
            p = by_name.get(name)
            if p is not None:
                data = base64.b64encode(p.read_bytes()).decode()
                body.append(
                    f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,{data}"></figure>'
                )
        elif line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")), 4)
            body.append(f"<h{level}>{html.escape(line.lstrip('#').strip())}</h{level}>")
        elif line.strip():
            body.append(f"<p>{html.escape(line)}</p>")
    flush()
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:12px;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 6px}"
        "img{max-width:100%}"
    )
    return f"<!doctype html><html><head><meta charset='utf-8'><title>tracekit sweep</title><style>{style}</style></head><body>{''.join(body)}</body></html>\n"


def write_all(sweep_dir: Path, pricing: Pricing) -> dict[str, Path]:
    """Summary, agent steps, seed comparison, plots and both reports, from the point run directories."""
    meta = read_sweep(sweep_dir)
    points = load_points(sweep_dir, list(meta.get("point_ids", [])))
    summary = sweep_analysis.summarize(
        points, input_price=pricing.input_per_mtok, output_price=pricing.output_per_mtok
    )
    agent = sweep_analysis.agent_steps(points)
    seed = sweep_analysis.seed_comparison(summary)
    import pyarrow as pa

    write_table(sweep_dir / SUMMARY, pa.Table.from_pandas(summary, preserve_index=False))
    write_table(sweep_dir / AGENT_STEPS, pa.Table.from_pandas(agent, preserve_index=False))
    write_table(sweep_dir / SEED_TABLE, pa.Table.from_pandas(seed, preserve_index=False))
    plots = make_plots(summary, agent, sweep_dir / PLOTS_DIR)
    md = render_markdown(meta, summary, seed, agent, plots, pricing, Path(PLOTS_DIR))
    with atomic_open(sweep_dir / REPORT_MD) as fh:
        fh.write(md)
    with atomic_open(sweep_dir / REPORT_HTML) as fh:
        fh.write(render_html(md, plots))
    return {"summary": sweep_dir / SUMMARY, "report_md": sweep_dir / REPORT_MD, "report_html": sweep_dir / REPORT_HTML,
            **{f"plot:{k}": v for k, v in plots.items()}}  # fmt: skip
