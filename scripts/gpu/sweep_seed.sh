#!/usr/bin/env bash
# The seed sweep on the H200: TinyLlama-1.1B shape, fp16, eager and compiled.
# Needs tracekit installed (the `tracekit` console script on PATH, e.g. from
# `pip install --target /tmp/site .` with /tmp/site/bin on PATH): running
# `python3 -m tracekit` from the checkout does not resolve the mapped packages
# tracekit.collectors / tracekit.analysis.
# Usage: bash scripts/gpu/sweep_seed.sh OUTDIR [extra tracekit sweep flags, e.g. --repeats 2]
# Writes OUTDIR/sweep/ (points with traces, kept there) and packs the report,
# plots, summary and per-point run.json (no traces) into OUTDIR/sweep-report/.
# Takes ~5 min on one H200 (the estimate is printed first).
set -euo pipefail
OUT=${1:?usage: sweep_seed.sh OUTDIR [flags]}
shift
command -v tracekit >/dev/null || { echo "sweep_seed: no tracekit console script on PATH" >&2; exit 2; }
mkdir -p "$OUT"
START=$(date +%s)
tracekit sweep --preset seed --out "$OUT/sweep" --force "$@" 2>&1 | grep -v '^USDT' | tee "$OUT/sweep.log" || true
END=$(date +%s)
R="$OUT/sweep-report"
mkdir -p "$R/points"
cp "$OUT/sweep/"{report.md,report.html,summary.parquet,agent_steps.parquet,seed_comparison.parquet,sweep.json} "$R/" 2>/dev/null || true
cp -r "$OUT/sweep/plots" "$R/" 2>/dev/null || true
for d in "$OUT"/sweep/points/*/; do
  n=$(basename "$d"); mkdir -p "$R/points/$n"; cp "$d/run.json" "$R/points/$n/" 2>/dev/null || true
done
echo "sweep_seed: $((END - START)) s wall; report in $R"
python3 - "$R" <<'PY'
import sys, pandas as pd
s = pd.read_parquet(f"{sys.argv[1]}/summary.parquet")
print(s["status"].value_counts().to_string())
cols = [c for c in ["point_id", "repeats", "ttft_ms", "tpot_ms", "tpot_ms_min", "tpot_ms_max", "prefill_share",
                    "decode_idle_share", "compile_s"] if c in s]
print(s[cols].to_string(max_colwidth=48))
PY
