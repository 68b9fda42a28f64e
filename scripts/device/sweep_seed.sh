#!/usr/bin/env bash
# The seed sweep on the H200: TinyLlama-1.1B shape, fp16, eager and compiled.
# Installs nothing: run from the repository root on a machine where tracekit's
# dependencies are importable (python3). Usage: bash scripts/device/sweep_seed.sh OUTDIR
# Writes OUTDIR/sweep/ (points with traces, kept there) and packs the report,
# plots, summary and per-point run.json (no traces) into OUTDIR/sweep-report/.
set -euo pipefail
OUT=${1:?usage: sweep_seed.sh OUTDIR}
cd "$(dirname "$0")/../.."
mkdir -p "$OUT"
export PYTHONPATH="$PWD/.sweep_pkg${PYTHONPATH:+:$PYTHONPATH}"
# Map the three folders into the tracekit namespace without installing (symlinks in a scratch dir).
mkdir -p .sweep_pkg/tracekit
rm -rf .sweep_pkg/tracekit
cp -r tracekit .sweep_pkg/tracekit
ln -sfn "$PWD/collectors" .sweep_pkg/tracekit/collectors
ln -sfn "$PWD/analysis" .sweep_pkg/tracekit/analysis
START=$(date +%s)
python3 -m tracekit sweep --preset seed --out "$OUT/sweep" --force 2>&1 | grep -v '^USDT' | tee "$OUT/sweep.log" || true
END=$(date +%s)
R="$OUT/sweep-report"
mkdir -p "$R/points"
cp "$OUT/sweep/"{report.md,report.html,summary.parquet,agent_steps.parquet,seed_comparison.parquet,sweep.json} "$R/" 2>/dev/null || true
cp -r "$OUT/sweep/plots" "$R/" 2>/dev/null || true
for d in "$OUT"/sweep/points/*/; do
  n=$(basename "$d"); mkdir -p "$R/points/$n"; cp "$d/run.json" "$R/points/$n/" 2>/dev/null || true
done
rm -rf .sweep_pkg
echo "sweep_seed: $((END - START)) s wall; report in $R"
python3 - "$R" <<'PY'
import sys, pandas as pd
s = pd.read_parquet(f"{sys.argv[1]}/summary.parquet")
print(s["status"].value_counts().to_string())
cols = ["point_id", "ttft_ms", "tpot_ms", "prefill_share", "decode_idle_share", "compile_s"]
print(s[cols].to_string(max_colwidth=48))
PY
