#!/usr/bin/env bash
# One call on the GPU machine: install tracekit into /tmp/site (no network there: carried wheels
# under .whl/), run a stage's validations with per-script time limits, and pack everything into a few
# files under $OUT (the device tool returns at most 8).
# Usage: OUT=... bash scripts/gpu/run.sh STAGE
#   validate  doctor, pytest -m gpu, graph capture merge, bound classes vs Nsight Compute, serving
#   recheck   a short subset of validate (doctor, the NVML test, graph capture, one bound cell)
#   finish    serving with the engine's CUDA graphs, compiled llama bound cells
#   record    record's timers against CUDA events, the GPM sampler against known loads, sampler overhead
#   sweep     the seed sweep (tracekit sweep --preset seed)
#   tp        2-rank tensor parallel (needs 2 GPUs)
#   quant     decode at fp16 / int8 / int8-dyn / int4 / fp8 with --memory, then Nsight Compute on the batch-1 GEMMs (<= 540 s)
#   quant_compiled  the same comparison compiled (CUDA graphs) (<= 240 s)
#   quant_dyn_ncu   Nsight Compute on dynamic int8's decode step at batch 1 (<= 560 s)
#   quant_intmm     Nsight Compute on dynamic int8's decode step at batch 32 (M > 16: aten::_int_mm) (<= 400 s)
#   intmm           torch._int_mm's modelled bytes vs Nsight Compute's DRAM bytes on contiguous operands (<= 200 s)
#   quant_int8_compiled  compiled int8 weight-only at batch 1 and 16 (<= 560 s)
#   models    record + analyze of benchmarks/configs' architectures (MoE, Gemma-2, Phi-3), and their bound classes vs ncu
#   whatif_quant  the what-if quantization runs (benchmarks/whatif/quant.toml: fp16/int8/int4/fp8, batch 1 and 8)
#   bound_rest  bound classes vs Nsight Compute: every eager cell, compiled Qwen2.5-0.5B, compiled batch 64
#               of the other shapes; each part packed into $OUT as it ends (a call cut short keeps what ran)
#   bound_cells bound classes vs Nsight Compute for CELLS (env; traces kept), packed per part; GROUPED=1 adds
#               scripts/gpu/grouped_mm.py (MoE grouped GEMM rates at three routings, and their counters),
#               QGEMM=1 scripts/gpu/quant_gemm.py (torchao linears per call at many row counts)
#   bound_data  bound classes vs Nsight Compute for MODES/SHAPES (env), every cell's trace kept (gzip)
#               with the counters, so that the comparison can be re-run offline (--analyse-only)
set -u
STAGE=${1:?stage}
OUT=${OUT:?OUT must be set}
W=/tmp/work; rm -rf "$W"; mkdir -p "$W/logs"
T0=$(date +%s)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
fi
# The carried setuptools (if any) builds tracekit: PYTHONPATH makes the build see it.
PYTHONPATH=/tmp/site python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target /tmp/site . \
  > "$W/logs/install.log" 2>&1 || { cat "$W/logs/install.log"; exit 1; }
rm -rf build
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 TRACEKIT_CORPUS=/nonexistent
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
export PATH=$PATH:$(dirname "${NCU:-/usr/bin/ncu}")
nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv > "$W/logs/nvidia-smi.csv" 2>&1
python3 -c "import torch, transformers; print(torch.__version__, torch.version.cuda, transformers.__version__, torch.cuda.device_count())" > "$W/logs/versions.txt" 2>&1
echo "install $(( $(date +%s) - T0 ))s; $(cat "$W/logs/versions.txt")"
run() { # run NAME LIMIT_S CMD...: log to $W/logs/NAME.log, print its tail
  local name=$1 lim=$2; shift 2
  local s=$(date +%s)
  timeout "$lim" "$@" > "$W/logs/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $(( $(date +%s) - s ))s"; grep -v '^USDT' "$W/logs/$name.log" | tail -n "${TAIL:-20}"
}
case "$STAGE" in
validate)  # one call of at most ~560 s: doctor, the gpu-marked tests, graph capture, serving, bound classes vs ncu
  DEADLINE=${DEADLINE:-555}
  run doctor 25 python3 scripts/gpu/doctor.py "$W/doctor"
  run pytest_gpu 85 pytest -m gpu -q -p no:cacheprovider tests/gpu tests/model/test_ceilings.py tests/record/test_tp.py
  run graphs 85 python3 scripts/gpu/graphs.py "$W/graphs"
  run serve 95 python3 scripts/gpu/serve.py "$W/serve"
  LEFT=$(( DEADLINE - ($(date +%s) - T0) ))
  TAIL=45 run bound_vs_ncu $(( LEFT - 5 )) python3 benchmarks/bound_vs_ncu.py "$W/bound_vs_ncu" --budget-s $(( LEFT - 20 ))
  ;;
recheck)  # a short call (~185 s): doctor, the NVML gpu test, graph capture, compiled llama-3.2-1b bound cells
  DEADLINE=${DEADLINE:-185}
  run doctor 20 python3 scripts/gpu/doctor.py "$W/doctor"
  run pytest_gpu 25 pytest -m gpu -q -p no:cacheprovider tests/gpu/test_gpu_real.py -k nvml
  run graphs 100 python3 scripts/gpu/graphs.py "$W/graphs"
  LEFT=$(( DEADLINE - ($(date +%s) - T0) ))
  [ "$LEFT" -gt 45 ] && TAIL=30 run bound_vs_ncu $(( LEFT - 5 )) python3 benchmarks/bound_vs_ncu.py "$W/bound_vs_ncu" \
    --modes compiled --shapes llama-3.2-1b --budget-s $(( LEFT - 15 ))
  ;;
finish)  # serving with the engine's CUDA graphs; compiled llama-3.2-1b and llama-3.1-8b bound cells
  run serve_graphs 200 python3 scripts/gpu/serve.py "$W/serve" --stages serve_graphs
  TAIL=45 run bound_vs_ncu 330 python3 benchmarks/bound_vs_ncu.py "$W/bound_vs_ncu" \
    --modes compiled --shapes llama-3.2-1b,llama-3.1-8b --budget-s 310
  ;;
record)
  run record_timers 230 python3 scripts/gpu/record_timers.py "$W/validate"
  run gpm 90 python3 scripts/gpu/gpm.py "$W/gpm"
  run overhead 140 python3 benchmarks/overhead.py --out "$W/overhead"
  ;;
sweep)
  run sweep 500 tracekit sweep --preset seed --out "$W/sweep" --force
  find "$W/sweep" -name 'trace.json.gz' -delete
  ;;
tp)
  run tp 500 python3 scripts/gpu/tp_record.py "$W/tp"
  ;;
quant)  # --quant / --memory: fp16 vs int8 vs int8-dyn vs int4 vs fp8 decode, then Nsight Compute's DRAM bytes
  # against the modelled GEMM bytes (torchao's wheel carried under .whl/); one call of ~560 s
  TAIL=20 run quant 240 python3 scripts/gpu/quant.py "$W/quant" --budget-s 230
  TAIL=12 run quant_ncu 290 python3 scripts/gpu/quant.py "$W/quant_ncu" --ncu --quants none,int8,int4 --batches 1 \
    --budget-s 280
  find "$W"/quant* -name 'trace.json.gz' -delete
  ;;
quant_compiled)  # the compiled (CUDA-graph) cells of the same comparison
  TAIL=12 run quant_compiled 240 python3 scripts/gpu/quant.py "$W/quant_compiled" --modes compiled \
    --quants none,int8,int4 --budget-s 230
  find "$W"/quant_* -name 'trace.json.gz' -delete
  ;;
bound_data)  # MODES=compiled SHAPES=llama-3.2-1b,llama-3.1-8b BUDGET=560 by default
  B=${BUDGET:-560}
  TAIL=45 run bound_vs_ncu $(( B + 15 )) python3 benchmarks/bound_vs_ncu.py "$W/bound_vs_ncu" --keep-traces \
    --modes "${MODES:-compiled}" --shapes "${SHAPES:-llama-3.2-1b,llama-3.1-8b}" --budget-s "$B"
  rm -f "$W"/bound_vs_ncu/*.ncu-rep
  gzip -6 "$W"/bound_vs_ncu/*_b*.json 2>/dev/null
  ls -la "$W/bound_vs_ncu"
  ;;
bound_rest)  # per part: MODE|SHAPES|BATCHES|BUDGET_S; results.json per part, packed as soon as it ends
  SPECS=("eager|qwen2.5-0.5b,llama-3.2-1b,llama-3.1-8b|1,8,64|${B1:-150}" "compiled|qwen2.5-0.5b|1,8,64|${B2:-160}"
         "compiled|llama-3.2-1b,llama-3.1-8b|64|${B3:-160}")
  for i in ${PARTS:-1 2 3}; do  # PARTS: which of the three (1-based), in order
    spec=${SPECS[$((i - 1))]}
    IFS='|' read -r m s b lim <<< "$spec"
    name="bound_${m}_${s%%,*}_b${b//,/-}"
    TAIL=30 run "$name" $(( lim + 15 )) python3 benchmarks/bound_vs_ncu.py "$W/$name" --modes "$m" --shapes "$s" \
      --batches "$b" --budget-s "$lim"
    rm -f "$W/$name"/*.ncu-rep; gzip -6 "$W/$name"/*_b*.json 2>/dev/null
    tar -C "$W" -czf "$OUT/$name.tgz" "$name" logs 2>/dev/null
  done
  ;;
bound_cells)  # CELLS="MODE|SHAPES|BATCHES|BUDGET_S;..." (traces kept); GROUPED=1 first runs scripts/gpu/grouped_mm.py,
  # QGEMM=1 scripts/gpu/quant_gemm.py (torchao linears' GPU and host time per call)
  [ "${GROUPED:-0}" = 1 ] && { TAIL=40 run grouped_mm 120 python3 scripts/gpu/grouped_mm.py "$W/grouped_mm";
    tar -C "$W" -czf "$OUT/grouped_mm.tgz" grouped_mm logs 2>/dev/null; }
  [ "${QGEMM:-0}" = 1 ] && { TAIL=110 run quant_gemm 150 python3 scripts/gpu/quant_gemm.py "$W/quant_gemm";
    tar -C "$W" -czf "$OUT/quant_gemm.tgz" quant_gemm logs 2>/dev/null; }
  [ -z "${CELLS:-}" ] && exit 0
  IFS=';' read -r -a SPECS <<< "${CELLS:?CELLS}"
  for spec in "${SPECS[@]}"; do
    IFS='|' read -r m s b lim <<< "$spec"
    name="bound_${m}_${s%%,*}_b${b//,/-}"
    TAIL=30 run "$name" $(( lim + 15 )) python3 benchmarks/bound_vs_ncu.py "$W/$name" --keep-traces --modes "$m" \
      --shapes "$s" --batches "$b" --budget-s "$lim"
    rm -f "$W/$name"/*.ncu-rep; gzip -6 "$W/$name"/*_b*.json 2>/dev/null
    tar -C "$W" -czf "$OUT/$name.tgz" "$name" logs 2>/dev/null
  done
  ;;
bound_quant)  # eager cells of every shape and compiled Qwen2.5-0.5B cells (traces kept); int8 / int4 GEMM bytes vs ncu
  python3 -c "import torch; p = torch.cuda.get_device_properties(0); print('L2_cache_size', p.L2_cache_size, p.name)" \
    > "$W/logs/l2.txt" 2>&1; cat "$W/logs/l2.txt"
  TAIL=30 run bound_eager 150 python3 benchmarks/bound_vs_ncu.py "$W/bound_vs_ncu" --keep-traces --modes eager --budget-s 140
  TAIL=20 run bound_qwen 180 python3 benchmarks/bound_vs_ncu.py "$W/bound_qwen" --keep-traces --modes compiled \
    --shapes qwen2.5-0.5b --budget-s 170
  rm -f "$W"/bound_*/*.ncu-rep; gzip -6 "$W"/bound_*/*_b*.json 2>/dev/null
  TAIL=14 run quant_ncu 200 python3 scripts/gpu/quant.py "$W/quant_ncu" --ncu --quants int8,int4 --batches 1 --budget-s 190
  find "$W"/quant* -name 'trace.json.gz' -delete
  ;;
quant_more)  # Nsight Compute on the int8 x int8 (_int_mm) and fp8 (_scaled_mm) GEMMs; int4 / int8 compiled
  TAIL=14 run quant_ncu2 165 python3 scripts/gpu/quant.py "$W/quant_ncu2" --ncu --quants int8-dyn,fp8 --batches 1 \
    --budget-s 155
  TAIL=12 run quant_compiled 380 python3 scripts/gpu/quant.py "$W/quant_compiled" --modes compiled \
    --quants int4,int8 --batches 1,16 --budget-s 370
  find "$W"/quant* -name 'trace.json.gz' -delete
  ;;
quant_fp8)  # Nsight Compute on fp8's _scaled_mm GEMMs only (a short call)
  TAIL=12 run quant_ncu3 178 python3 scripts/gpu/quant.py "$W/quant_ncu3" --ncu --quants fp8 --batches 1 --budget-s 172
  find "$W"/quant* -name 'trace.json.gz' -delete
  ;;
quant_dyn_ncu)  # a call of its own: int8-dyn's decode step has ~3x the kernels of fp16 under ncu's replay
  TAIL=16 run quant_ncu5 560 python3 scripts/gpu/quant.py "$W/quant_ncu5" --ncu --quants int8-dyn --batches 1 --budget-s 550
  find "$W"/quant* -name 'trace.json.gz' -delete
  ;;
quant_intmm)  # torch runs int8 x int8 as _int_mm only for more than 16 rows: decode at batch 32
  TAIL=16 run quant_ncu6 400 python3 scripts/gpu/quant.py "$W/quant_ncu6" --ncu --quants int8-dyn --batches 32 \
    --ncu-batches 32 --budget-s 390
  find "$W"/quant* -name 'trace.json.gz' -delete
  ;;
intmm)
  TAIL=24 run intmm 200 python3 scripts/gpu/intmm.py "$W/intmm"
  rm -rf "$W"/intmm/run; gzip -6 "$W"/intmm/intmm_trace.json
  ;;
quant_int8_compiled)  # a call of its own: compiling the int8 weight-only model takes minutes
  TAIL=14 run quant_compiled8 560 python3 scripts/gpu/quant.py "$W/quant_compiled8" --modes compiled \
    --quants int8 --batches 1,16 --budget-s 550
  find "$W"/quant* -name 'trace.json.gz' -delete
  ;;
models)  # architectures outside the presets (benchmarks/configs: two MoE, Gemma-2, Phi-3), random weights:
  # record + analyze at batch 1 and 8 (the MoE ones cut to 8 layers), then bound classes vs Nsight Compute (eager)
  # env: MODELS (names), RECORD_ARGS (e.g. --compile), RECORD_S (limit per record), RECORD_ONLY (no ncu)
  mkdir -p "$W/configs" "$W/runs"
  python3 - "$W/configs" <<'PY'
import json, sys
from pathlib import Path
for d in sorted(Path("benchmarks/configs").iterdir()):
    if (d / "config.json").is_file():
        c = json.loads((d / "config.json").read_text())
        if "experts" in json.dumps(c):
            c["num_hidden_layers"] = 8
        (Path(sys.argv[1]) / d.name).mkdir(parents=True, exist_ok=True)
        (Path(sys.argv[1]) / d.name / "config.json").write_text(json.dumps(c))
PY
  for m in ${MODELS:-gemma-2-2b phi-3-mini qwen3-30b-a3b mixtral-8x7b}; do
    for b in 1 8; do
      TAIL=12 run "rec_${m}_b$b" ${RECORD_S:-75} tracekit record --model "$W/configs/$m" --batch $b --requests 2 \
        --out "$W/runs/${m}_b$b" --force ${RECORD_ARGS:-}
      TAIL=12 run "an_${m}_b$b" 40 tracekit analyze "$W/runs/${m}_b$b"
      rm -f "$W/runs/${m}_b$b/trace.json.gz"
    done
  done
  B=${BUDGET:-250}
  [ -n "${RECORD_ONLY:-}" ] || TAIL=45 run bound_vs_ncu $(( B + 15 )) python3 benchmarks/bound_vs_ncu.py "$W/bound_vs_ncu" --keep-traces \
    --modes eager --batches 1,8 --budget-s "$B" \
    --shapes "benchmarks/configs/qwen3-30b-a3b,benchmarks/configs/mixtral-8x7b,benchmarks/configs/gemma-2-2b,benchmarks/configs/phi-3-mini"
  rm -f "$W"/bound_vs_ncu/*.ncu-rep
  gzip -6 "$W"/bound_vs_ncu/*_b*.json 2>/dev/null
  ;;
foreign)  # traces written as users and engines write them (plain torch.profiler), an H100/H200 bound pair
  # against Nsight Compute, and the what-if runs of the dense model (eager/compiled, batch 1/8/32, prompt 128/1,024)
  [ "${FOREIGN_ONLY:-}" = none ] || run foreign 170 python3 scripts/gpu/foreign_traces.py "$W/foreign" ${FOREIGN_ONLY:+--only $FOREIGN_ONLY}
  [ -n "${SKIP_BOUND:-}" ] || TAIL=30 run bound_vs_ncu 165 python3 benchmarks/bound_vs_ncu.py "$W/bound_vs_ncu" --keep-traces \
    --modes "${MODES:-eager,compiled}" --shapes "${SHAPES:-llama-3.2-1b}" --batches 1,8 --budget-s 150
  rm -f "$W"/bound_vs_ncu/*.ncu-rep; gzip -6 "$W"/bound_vs_ncu/*_b*.json 2>/dev/null
  for c in ${WHATIF:-dense}; do
    TAIL=14 run "whatif_$c" ${WHATIF_S:-200} python3 -P -m tracekit sweep --config "benchmarks/whatif/$c.toml" --out "$W/whatif_$c" --force --repeats 2
  done
  find "$W"/whatif_* -name 'trace.json.gz' -delete
  ;;
whatif_quant)  # what-if checks of --quant: fp16 vs torchao int8 / int4 / fp8, eager, batch 1 and 8, 128/32 (<= 240 s)
  TAIL=14 run whatif_quant ${WHATIF_S:-230} python3 -P -m tracekit sweep --config benchmarks/whatif/quant.toml \
    --out "$W/whatif_quant" --force --repeats 2
  find "$W"/whatif_* -name 'trace.json.gz' -delete
  ;;
*) echo "unknown stage $STAGE"; exit 2 ;;
esac
# Pack: everything small into one tarball (big traces left out), and the logs of the stages.
find "$W" -name '*.json.gz' -size +4M ! -path '*/bound_*/*' -delete
tar -C "$W" -czf "$OUT/results.tgz" . 2>/dev/null
tar -C "$W/logs" -czf "$OUT/logs.tgz" . 2>/dev/null
ls -la "$OUT"
echo "total $(( $(date +%s) - T0 ))s"
