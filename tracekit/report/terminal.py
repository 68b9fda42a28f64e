"""Terminal renderings: the lines ``tracekit analyze`` prints, the report's rich tables, the diff table.

Formatting of what tracekit.app and tracekit.report.view return; the caller says where it goes.
Every string that came from a trace or run.json goes through tracekit.report.text: control
characters shown as escapes, never parsed as rich markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
import pyarrow as pa

from tracekit.report.memory_summary import memory_text
from tracekit.report.text import cell, markup_safe, visible
from tracekit.report.view import (
    NO_ROOFLINE,
    OUTSIDE,
    advice_lines,
    assisted_rows,
    ceiling_of,
    ceiling_source_line,
    cost_rows,
    cpu_split_lines,
    cpu_split_rows,
    is_cpu_view,
    op_rows,
    outside_line,
    over_peak_line,
    over_peak_text,
    phase_rows,
    request_rows,
    verdicts,
    warmup_line,
    workload_kind,
    workload_text,
)


def _ms(v: Any) -> str:
    return "-" if v is None or pd.isna(v) else f"{float(v) / 1e6:.2f} ms"


def analyze_lines(result: dict[str, Any]) -> list[str]:
    lines = []
    steps: pd.DataFrame = result["steps"]
    work = result.get("workload")
    if isinstance(work, dict) and work.get("kind"):
        lines.append(f"workload: {work['kind']} (decided by {work.get('rule', '?')})")
    kind = work.get("kind") if isinstance(work, dict) else None
    if steps.empty:
        lines.append("steps: none found (the whole trace is one outside row)")
    else:
        by = steps.groupby(["kind", "source"]).size().reset_index(name="n")
        parts = [f"{n} {k} ({s})" for k, s, n in zip(by["kind"], by["source"], by["n"], strict=True)]
        line = "steps: " + ", ".join(parts)
        if "captured" in steps and not steps["captured"].all():
            line += (f"; {int(steps['captured'].sum())} with kernel capture (the GPU columns cover only"
                     " these; the others have none, which is not idle time)")
        ran = (result.get("manifest") or {}).get("steps")
        if isinstance(ran, int) and ran > len(steps):
            line += f"; the run had {ran} steps, the trace and the recorder's tables here hold {len(steps)}"
        lines.append(line)
    for r in result["requests"].to_dict("records"):
        if kind == "diffusion":  # no tokens: its denoising steps and end-to-end time
            n = int(((steps["request_id"] == r["request_id"]).fillna(False)).sum()) if "request_id" in steps else 0
            lines.append(f"request {r['request_id']} {r['name']} [{r['source']}]: batch "
                         f"{'-' if r['batch'] is None or pd.isna(r['batch']) else r['batch']}, {n} denoising steps, "
                         f"e2e {_ms(r['e2e_ns'])}")
            continue
        share = r["prefill_share"]
        host = r.get("host_ttft_ns") is not None and not pd.isna(r["host_ttft_ns"])
        label = "without the profiler" if r["source"] == "tracekit_host" else "host"
        lines.append(
            f"request {r['request_id']} {r['name']} [{r['source']}]: batch {r['batch']}, "
            f"{r['input_tokens']} in / {r['output_tokens']} out, TTFT {_ms(r['ttft_ns'])}, "
            f"TPOT {_ms(r['tpot_ns'])}, ITL p50 {_ms(r['itl_p50_ns'])} p99 {_ms(r['itl_p99_ns'])}, "
            f"e2e {_ms(r['e2e_ns'])}, prefill share "
            + ("-" if share is None or pd.isna(share) else f"{100 * share:.1f}%")
            + (f" ({label}: TTFT {_ms(r['host_ttft_ns'])}, TPOT {_ms(r['host_tpot_ns'])})" if host else "")
        )
    ceiling = result.get("ceiling")
    if ceiling is not None:
        lines.append(f"ceiling: {ceiling.describe()}")
    ph = result["phases"]
    ph = ph.to_pandas() if isinstance(ph, pa.Table) else ph  # the warm-up pass's phases are an Arrow table
    for r in ph[ph["request_id"].isna()].to_dict("records"):
        if r["phase"] == OUTSIDE:  # not a phase: the time outside every step
            lines.append(f"outside every step: time {_ms(r['time_ns'])}, GPU busy {_ms(r['gpu_busy_ns'])}, "
                         f"idle {_ms(r['idle_ns'])}, memcpy {_ms(r['memcpy_ns'])}, comm {_ms(r['comm_ns'])}")
            continue
        lines.append(
            f"phase {r['phase']}: {r['steps']} steps ({r['steps_captured']} captured), time {_ms(r['time_ns'])}, GPU busy {_ms(r['gpu_busy_ns'])}, "
            f"idle {_ms(r['idle_ns'])}, memcpy {_ms(r['memcpy_ns'])}, comm {_ms(r['comm_ns'])}"
            + _bound_text(r)
        )
    lines += [f"what would help: {a}" for a in advice_lines(ph)]
    warm = (result.get("warmup") or {}).get("requests") or []
    if warm:
        lines.append(f"warm-up requests {', '.join(map(str, warm))}: left out of the phase totals above")
    kb = result.get("kernel_bound")
    over = int(kb["over_peak"].sum()) if kb is not None and "over_peak" in kb else 0
    if over:
        lines.append(over_peak_text(over))
    ks = result["kernel_steps"]
    if len(ks):
        lines.append(f"GPU activities: {len(ks)}, outside every step: {int(ks['step_id'].isna().sum())}")
    replays = replay_line((result.get("manifest") or {}).get("ingest") or {})
    if replays:
        lines.append(replays)
    verdict = result.get("check")
    if verdict is not None:
        lines.append(f"check: {verdict.headline} (`tracekit check` gives each finding and its fix)")
    for w in result["warnings"]:
        lines.append(f"warning: {w}")
    return [visible(line) for line in lines]




def replay_line(ingest: Mapping[str, Any]) -> str | None:
    """"graph replays: ..." from run.json ``ingest.captures``: launches matched, by what, and the replayed
    kernel time left without its ops' shapes (no FLOP or byte model) and the commonest reason; None without replays."""
    reps = [r for r in ingest.get("captures") or [] if isinstance(r, Mapping) and r.get("graph_launches")]
    if not reps:
        return None
    total = sum(int(r.get("graph_launches") or 0) for r in reps)
    got = sum(int(r.get("graph_launches_matched") or 0) for r in reps)
    by: dict[str, int] = {}
    why: dict[str, int] = {}
    for r in reps:
        for k, n in (r.get("matched_by") or {}).items():
            by[str(k)] = by.get(str(k), 0) + int(n or 0)
        for k, n in (r.get("unmatched") or {}).items():
            why[str(k)] = why.get(str(k), 0) + int(n or 0)
    how = ", ".join(f"{n} by {k}" for k, n in by.items() if n)
    line = f"graph replays: {got} of {total} launches matched to their ops" + (f" ({how})" if how else "")
    left = sum(int(r.get("unmatched_ns") or 0) for r in reps)
    if got < total or left:
        kernel = sum(int(r.get("kernel_ns") or 0) for r in reps)
        share = f" ({100 * left / kernel:.0f}% of all GPU activity time)" if kernel else ""
        line += f"; {_ms(left)} of replayed kernel time{share} left without op shapes (no FLOP or byte model)"
        if why:
            line += f": {max(why, key=lambda k: why[k])}"
    return line


def _bound_text(r: Mapping[Any, Any]) -> str:
    """"; compute .. memory .. latency ..; idle: host .., waiting .., [before window ..,] profiler .." where the
    bound pass ran (before window: only where some idle is behind work the trace does not show)."""
    if r.get("latency_bound_ns") is None or pd.isna(r.get("latency_bound_ns")):
        return ""
    text = (f"; compute {_ms(r.get('compute_bound_ns'))}, memory {_ms(r.get('memory_bound_ns'))}, "
            f"latency {_ms(r.get('latency_bound_ns'))}")
    if r.get("idle_host_ns") is not None and not pd.isna(r.get("idle_host_ns")):
        prof = r.get("idle_profiler_ns")
        ptxt = "unknown" if prof is None or pd.isna(prof) else _ms(prof)
        before = r.get("idle_before_window_ns")
        btxt = f"before window {_ms(before)}, " if before is not None and not pd.isna(before) and before > 0 else ""
        text += (f"; idle: host {_ms(r['idle_host_ns'])}, waiting {_ms(r.get('idle_wait_ns'))}, {btxt}"
                 f"profiler {ptxt}")
    return text


def multirank_lines(result: Any) -> list[str]:
    """A few lines for the terminal: NCCL and exposed NCCL per rank and phase, skew per phase."""
    lines = [f"ranks: {', '.join(str(r) for r in result.ranks)}"]
    for r in result.tables["comm_phases"].to_dict("records"):
        share = r.get("exposed_share")
        lines.append(
            f"rank {r['rank']} {r['phase']}: {r['steps']} steps, time {r['time_ns'] / 1e6:.2f} ms, "
            f"NCCL {r['comm_ns'] / 1e6:.2f} ms, exposed {r['exposed_comm_ns'] / 1e6:.2f} ms"
            + ("" if share is None or pd.isna(share) else f" ({100 * share:.1f}% of the phase)")
            + _split_text(r)
        )
    for r in result.tables["rank_skew"].to_dict("records"):
        lines.append(
            f"skew {r['phase']}: {r['steps']} steps, p50 {r['skew_p50_ns'] / 1e3:.1f} us, "
            f"max {r['skew_max_ns'] / 1e3:.1f} us, stragglers {r['straggler_counts']}"
        )
    for rank in result.ranks:
        verdict = (result.per_rank.get(rank) or {}).get("check")
        if verdict is not None:
            lines.append(f"rank {rank} check: {verdict.headline}")
    return [visible(line) for line in lines]


def _split_text(r: Mapping[Any, Any]) -> str:
    kernel = r.get("nccl_kernel_ns")
    if kernel is None or pd.isna(kernel) or not kernel:
        return ""
    text = f"; NCCL kernels: transfer {r['transfer_ns'] / 1e6:.2f} ms, wait {r['wait_ns'] / 1e6:.2f} ms"
    if r.get("unmatched_ns"):
        text += f", unmatched {r['unmatched_ns'] / 1e6:.2f} ms"
    return text


def _fmt_metric(v: Any, metric: str) -> str:
    if v is None or pd.isna(v):
        return "—"
    if metric.endswith("_ns"):
        return f"{v / 1e6:,.2f} ms"
    return f"{v:,.0f}"


def _pct(v: Any) -> str:
    return "—" if v is None or pd.isna(v) else f"{100 * v:.1f}%"


def render_diff(df: pd.DataFrame, name_a: str, name_b: str, out: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, width=console_width())
    cpu = bool((df["scope"] == "op_class").any())
    for scope, title in (("phase", "per phase"), ("op_class", "per operator class (CPU host time)"),
                         ("kernel_class", "per kernel class (GPU kernel time)"),
                         ("bound", "per bound class (GPU kernel time)")):
        part = df[df["scope"] == scope]
        if scope in ("bound", "op_class") and part.empty:
            continue  # neither run went through the bound pass: the phase rows already say so
        if scope == "kernel_class" and part.empty and cpu:
            continue  # CPU runs: no kernels; the operator classes above say where the time went
        if scope in ("kernel_class", "bound", "op_class"):
            part = part[part["metric"] == "time_ns"]
        table = Table(title=cell(f"{title}: A = {name_a}, B = {name_b}"), header_style="bold")
        keyed = scope in ("kernel_class", "bound", "op_class")
        for col in ("phase", "class" if keyed else "", "metric", "A", "B", "Δ (B−A)", "B/A", "share A", "share B"):
            if col:
                table.add_column(col, justify="right" if col not in ("phase", "class", "metric") else "left")
        if part.empty:
            console.print(f"{title}: not recorded in either run")
            continue
        for r in part.to_dict("records"):
            m = str(r["metric"])
            ratio = r["ratio"]
            cells = [str(r["phase"])] + ([str(r["key"])] if keyed else []) + [
                m, _fmt_metric(r["a"], m), _fmt_metric(r["b"], m), _fmt_metric(r["delta"], m),
                "—" if ratio is None or pd.isna(ratio) else f"{ratio:.2f}×", _pct(r["share_a"]), _pct(r["share_b"])]
            table.add_row(*(cell(c) for c in cells))
        console.print(table)


def _cell(v: Any) -> str:
    return "—" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)


def console_width() -> int:
    """The terminal's width (COLUMNS where set), at least 100: tables fold their headers to fit it."""
    import shutil

    return max(100, shutil.get_terminal_size((160, 24)).columns)


def table_of(console: Any, title: str, headers: list[str], rows: list[list[str]]) -> None:
    """A rich table whose headers wrap at spaces and are never cut: each column is at least as wide
    as the longest word of its header, and cells fold rather than end in an ellipsis."""
    from rich.table import Table

    table = Table(title=cell(title), header_style="bold")
    for h in headers:
        table.add_column(cell(h), justify="left" if h in ("phase", "request", "op") else "right",
                         min_width=max(len(w) for w in str(h).split()) if str(h).strip() else None,
                         overflow="fold")
    for r in rows:
        table.add_row(*(cell(x) for x in r))
    console.print(table)


def render_terminal(views: list[Any], out: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, width=console_width())
    for v in views:
        status = v.manifest.get("status", "unknown")
        console.print(f"[bold]run {markup_safe(v.run_id)}[/bold] ({markup_safe(status)})")
        console.print(f"  {visible(workload_text(v.manifest))}", markup=False)
        cpu = is_cpu_view(v)
        if cpu:  # the answer on a CPU: where each phase's time went, by operator class
            console.print(f"  {visible(NO_ROOFLINE)}", markup=False)
            for line in cpu_split_lines(v.df("op_class_split")):
                console.print(f"  - {visible(line)}", markup=False)
            table_of(console, "where the time went (CPU, share of each phase by operator class)",
                     *cpu_split_rows(v.df("op_class_split")))
        elif "phases" in v.tables:
            console.print(f"  {visible(ceiling_of(v.df('phases')).text())}", markup=False)
        for line in [] if cpu else verdicts(v.df("phases")):
            console.print(f"  - {visible(line)}", markup=False)
        for line in advice_lines(v.df("phases")):
            console.print(f"  what would help: {visible(line)}", markup=False)
        for line in v.projected:
            console.print(f"  projected: {visible(line)}", markup=False)
        for line in memory_text(v.manifest, v.tables.get("step_memory")):
            console.print(f"  {visible(line.strip())}", markup=False)
        for w in v.manifest.get("warnings") or []:
            console.print(f"  warning: {visible(w)}", markup=False)
        for note in (outside_line(v.df("phases")), warmup_line(v), ceiling_source_line(v), over_peak_line(v)):
            if note:
                console.print(f"  {visible(note)}", markup=False)
        for title, (headers, rows) in (("phases: three-way split", ([], []) if cpu else phase_rows(v.df("phases"))),
                                       ("largest ops by kernel time", op_rows(v.df("kernel_ops"))),
                                       ("requests", request_rows(v.df("requests"), v.warmups, workload_kind(v.manifest)[0])),
                                       ("each request's cost inside the batch", cost_rows(v.df("requests"))),
                                       ("speculative decoding", assisted_rows(v.df("requests"), v.df("steps")))):
            if not rows:
                if title in ("phases: three-way split", "requests") and not (cpu and title.startswith("phases")):
                    console.print(f"  {title}: not recorded")
                continue
            table_of(console, title, headers, rows)
        c = v.df("counters")
        if c.empty or "metric" not in c:
            console.print("  counters: not recorded")
        else:
            keys = [k for k in ("device", "source", "metric", "unit") if k in c]
            g = c.groupby(keys, dropna=False, observed=True)["value"].agg(["count", "mean", "max"]).reset_index()
            table = Table(title="counters", header_style="bold")
            for h in [*keys, "samples", "mean", "max"]:
                table.add_column(h)
            for r in g.itertuples(index=False):
                table.add_row(*[cell(_cell(x)) for x in r[: len(keys)]], str(r[-3]), f"{r[-2]:.4g}", f"{r[-1]:.4g}")
            console.print(table)


CHECK_MARK = {"ok": "ok    ", "caveat": "caveat", "wrong": "WRONG "}


def check_lines(label: str, verdict: Any) -> list[str]:
    """``tracekit check``'s screen: the target and its verdict, then a line per check and the fix of
    each finding (tracekit.analysis.health.Verdict)."""
    lines = [f"{label}: {verdict.headline}"]
    for f in verdict.findings:
        lines.append(f"  {CHECK_MARK.get(f.severity, f.severity)}  {f.code:<13}  {f.what}")
        if f.fix and f.severity != "ok":
            lines.append(f"  {'':6}  {'':<13}  fix: {f.fix}")
    return [visible(line) for line in lines]


def noise_rows(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """tracekit.analysis.noise's phase changes as table rows: means, B/A, its interval, the verdict."""
    headers = ["phase", "runs A/B", "steps A/B", "A ms/step", "B ms/step", "B/A", "95% interval", "verdict"]
    rows = []
    for r in df.to_dict("records"):
        lo, hi = r["ratio_lo"], r["ratio_hi"]
        ci = "—" if pd.isna(lo) or pd.isna(hi) else f"{lo:.2f}× to {hi:.2f}×"
        rows.append([str(r["phase"]), f"{r['runs_a']}/{r['runs_b']}", f"{r['steps_a']}/{r['steps_b']}",
                     f"{r['mean_a_ns'] / 1e6:,.2f}", f"{r['mean_b_ns'] / 1e6:,.2f}", f"{r['ratio']:.2f}×", ci,
                     str(r["verdict"])])
    return headers, rows


def render_noise(df: pd.DataFrame, name_a: str, name_b: str, out: Any) -> None:
    """The phase changes with their noise, and what the interval covers."""
    from rich.console import Console

    console = Console(file=out, width=console_width())
    title = f"per phase, with its noise: A = {name_a}, B = {name_b}"
    if df.empty:
        console.print(cell(f"{title}: no phase with steps on both sides"))
        return
    table_of(console, title, *noise_rows(df))
    single = bool(((df["runs_a"] < 2) | (df["runs_b"] < 2)).any())
    text = ("mean step time (host wall clock); 95% bootstrap interval over the runs and the steps of each side; "
            "\"within noise\" where it holds 1.00×")
    if single:
        text += (". One run on a side: the interval covers step-to-step noise only, not run-to-run noise "
                 "(record --repeat 5 on each side measures it)")
    console.print(cell(text))
