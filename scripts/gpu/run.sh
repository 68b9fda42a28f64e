#!/usr/bin/env bash
# The lead's one-call driver for the GPU machine: install tracekit into /tmp/site
# (no network there: carried wheels under .whl/), run a stage's scripts with
# per-script time limits, two GPUs in parallel where the machine has them, and
# pack everything into a few files under $OUT (the device tool returns at most 8).
# Usage: bash scripts/gpu/run.sh STAGE   (STAGE: a | sweep | tp | ...)
set -u
STAGE=${1:?stage}
OUT=${OUT:?OUT must be set}
W=/tmp/work; rm -rf "$W"; mkdir -p "$W/logs"
T0=$(date +%s)
left() { echo $(( ${1} - ($(date +%s) - T0) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target /tmp/site . > "$W/logs/install.log" 2>&1 || { cat "$W/logs/install.log"; exit 1; }
rm -rf build
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv > "$W/logs/nvidia-smi.csv" 2>&1
python3 -c "import torch, transformers; print(torch.__version__, torch.version.cuda, transformers.__version__, torch.cuda.device_count())" > "$W/logs/versions.txt" 2>&1
run() { # run NAME LIMIT_S CMD...: log to $W/logs/NAME.log, print its tail
  local name=$1 lim=$2; shift 2
  local s=$(date +%s)
  timeout "$lim" "$@" > "$W/logs/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $(( $(date +%s) - s ))s"; grep -v '^USDT' "$W/logs/$name.log" | tail -n 25
}
case "$STAGE" in
a)
  ( export CUDA_VISIBLE_DEVICES=0
    run validate_record 230 python3 scripts/gpu/record_timers.py "$W/validate"
    run gpm_validate 90 python3 scripts/gpu/gpm.py "$W/gpm"
    run overhead 140 python3 benchmarks/overhead.py --out "$W/overhead"
  ) > "$W/logs/stream0.txt" 2>&1 &
  ( export CUDA_VISIBLE_DEVICES=1
    run plain_generate 200 python3 scripts/gpu/plain_generate_fixtures.py "$W/plain"
    run bound_check 150 python3 scripts/gpu/bound_fixture.py "$W/bound"
    run calibrate 60 tracekit calibrate --out "$W/calibrate.json"
    run record80 120 tracekit record --model tinyllama-1.1b --input-tokens 128 --output-tokens 32 --warmup 1 --out "$W/record80" --no-nvml --quiet
  ) > "$W/logs/stream1.txt" 2>&1 &
  wait
  cat "$W/logs/stream0.txt" "$W/logs/stream1.txt"
  ;;
sweep)
  run sweep 560 tracekit sweep --preset seed --out "$W/sweep" --force
  ;;
b)  # GPU0: the seed sweep; GPU1: other presets and shapes through record + analyze
  ( export CUDA_VISIBLE_DEVICES=0
    run sweep 480 tracekit sweep --preset seed --out "$W/sweep" --force
    # A sweep cut by the time limit still gets its report from the points that finished.
    [ -f "$W/sweep/report.md" ] || run sweep_report 60 python3 -c "import sys; from pathlib import Path; from tracekit.report.sweep import write_all; from tracekit.model.pricing import DEFAULT; write_all(Path(sys.argv[1]), DEFAULT)" "$W/sweep"
    find "$W/sweep" -name 'trace.json.gz' -delete
  ) > "$W/logs/stream0.txt" 2>&1 &
  ( export CUDA_VISIBLE_DEVICES=1
    for spec in "qwen2.5-0.5b smoke 1" "llama-3.2-1b chat 1" "tinyllama-1.1b rag 4" "tinyllama-1.1b creative 1"; do
      set -- $spec
      run "rec_$1_$2" 150 tracekit record --model "$1" --shape "$2" --batch "$3" --trace-steps 0:8 --warmup 1 --no-nvml --quiet --out "$W/rec/$1-$2"
      run "an_$1_$2" 90 tracekit analyze "$W/rec/$1-$2"
      rm -f "$W/rec/$1-$2/trace.json.gz"
    done
  ) > "$W/logs/stream1.txt" 2>&1 &
  wait
  cat "$W/logs/stream0.txt" "$W/logs/stream1.txt"
  ;;
seed)
  export CUDA_VISIBLE_DEVICES=0
  run sweep 500 tracekit sweep --preset seed --out "$W/sweep" --force
  [ -f "$W/sweep/report.md" ] || run sweep_report 60 python3 -c "import sys; from pathlib import Path; from tracekit.report.sweep import write_all; from tracekit.model.pricing import DEFAULT; write_all(Path(sys.argv[1]), DEFAULT)" "$W/sweep"
  find "$W/sweep" -name 'trace.json.gz' -delete
  ;;
final)  # GPU0: record validation, GPM, sampler overhead, compiled trace, bound check; GPU1: the seed sweep
  ( export CUDA_VISIBLE_DEVICES=0
    run validate_record 170 python3 scripts/gpu/record_timers.py "$W/validate"
    run gpm_validate 60 python3 scripts/gpu/gpm.py "$W/gpm"
    run overhead 120 python3 benchmarks/overhead.py --out "$W/overhead"
    run plain_compiled 80 python3 scripts/gpu/plain_generate_fixtures.py "$W/plain" --only d
    run bound_check 45 python3 scripts/gpu/bound_fixture.py "$W/bound"
    run sweep_firstuse 60 python3 scripts/gpu/sweep_firstuse.py "$W/firstuse"
  ) > "$W/logs/stream0.txt" 2>&1 &
  ( export CUDA_VISIBLE_DEVICES=1
    run sweep 470 tracekit sweep --preset seed --repeats 2 --out "$W/sweep" --force
    [ -f "$W/sweep/report.md" ] || run sweep_report 40 python3 -c "import sys; from pathlib import Path; from tracekit.report.sweep import write_all; from tracekit.model.pricing import DEFAULT; write_all(Path(sys.argv[1]), DEFAULT)" "$W/sweep"
    find "$W/sweep" -name 'trace.json.gz' -delete
  ) > "$W/logs/stream1.txt" 2>&1 &
  wait
  cat "$W/logs/stream0.txt" "$W/logs/stream1.txt"
  ;;
overhead)  # which NVML read costs TPOT: all metrics, without PCIe, without PCIe/energy/GPM
  export CUDA_VISIBLE_DEVICES=0
  run overhead_all 110 python3 benchmarks/overhead.py --out "$W/overhead_all"
  run overhead_nopcie 110 python3 benchmarks/overhead.py --out "$W/overhead_nopcie" --exclude pcie_tx,pcie_rx
  run overhead_fastonly 110 python3 benchmarks/overhead.py --out "$W/overhead_fastonly" --exclude pcie_tx,pcie_rx,energy --no-gpm
  ;;
overhead_compiled)
  export CUDA_VISIBLE_DEVICES=0
  run overhead_compiled 220 python3 benchmarks/overhead.py --out "$W/overhead_compiled" --compiled --blocks 16
  ;;
tp)
  run tp 400 python3 scripts/gpu/tp_record.py "$W/tp"
  ;;
gpu2)  # issue 2's open parts: record --compile on the GPU; sampler overhead, pinned / unpinned / compiled
  export CUDA_VISIBLE_DEVICES=0
  { nproc; lscpu; grep -H . /sys/devices/system/cpu/cpu*/topology/thread_siblings_list; uptime; } > "$W/logs/cpu.txt" 2>&1
  run validate_record 190 python3 scripts/gpu/record_timers.py "$W/validate"
  # Main process on CPUs 0-5, sampler child on 15 (disjoint; 15 is no SMT sibling of 0-5 whether
  # siblings are n/n+8 or 2k/2k+1). Arms: null = same child without NVML calls, fast = cheap reads only.
  PIN="--pin-main 0-5 --pin-sampler 15"
  run ov_eager_pinned 140 python3 benchmarks/overhead.py --out "$W/ov_eager_pinned" --blocks 300 --max-seconds 105 --arms off_a,on,null,fast,off_b $PIN
  run ov_eager_unpinned 90 python3 benchmarks/overhead.py --out "$W/ov_eager_unpinned" --blocks 300 --max-seconds 60 --arms off_a,on,null,off_b
  run ov_compiled 150 python3 benchmarks/overhead.py --out "$W/ov_compiled" --compiled --no-eager --blocks 300 --max-seconds 90 $PIN
  ;;
gpu2b)  # second pass: every block after the same 0.3 s pause (the sampler's start inside it), longer compiled blocks
  export CUDA_VISIBLE_DEVICES=0
  PIN="--pin-main 0-5 --pin-sampler 15"
  run ov_compiled 300 python3 benchmarks/overhead.py --out "$W/ov_compiled" --compiled --no-eager --new-tokens 128 --blocks 400 --max-seconds 240 $PIN
  run ov_eager_pinned 230 python3 benchmarks/overhead.py --out "$W/ov_eager_pinned" --blocks 300 --max-seconds 190 --arms off_a,on,null,off_b $PIN
  ;;
gpu2c)  # third pass: samplers kept alive and paused between their blocks (no start gap, no pause for anyone)
  export CUDA_VISIBLE_DEVICES=0
  PIN="--pin-main 0-5 --pin-sampler 15"
  run ov_compiled 200 python3 benchmarks/overhead.py --out "$W/ov_compiled" --compiled --no-eager --blocks 1000 --max-seconds 140 --sampler-mode pause $PIN
  run ov_eager_pinned 65 python3 benchmarks/overhead.py --out "$W/ov_eager_pinned" --blocks 300 --max-seconds 40 --sampler-mode pause $PIN
  ;;
overhead_segments)  # next: compiled decode (CUDA graphs, steadier than eager) with arms switching every 32 tokens
  export CUDA_VISIBLE_DEVICES=0
  run overhead_segments 420 python3 benchmarks/overhead.py --compiled --no-eager --segment-tokens 32 --new-tokens 960 \
    --blocks 100000 --pin-main 0-5 --pin-sampler 15 --max-seconds 300 --out "$W/overhead_segments"
  ;;
overhead_eager)  # eager decode (the default record path), arms switching every 16 tokens inside 960-token generations
  export CUDA_VISIBLE_DEVICES=0
  run overhead_eager 520 python3 benchmarks/overhead.py --segment-tokens 16 --new-tokens 960 \
    --blocks 100000 --pin-main 0-5 --pin-sampler 15 --max-seconds 400 --out "$W/overhead_eager"
  ;;
fold)  # the sweep's timed_generate now runs on record's GenerationTracker (streamer mode): eager, compiled, agent
  export CUDA_VISIBLE_DEVICES=0
  run sweep_fold 420 tracekit sweep --shapes chat,agentic --modes eager,compiled --model tinyllama-1.1b \
    --repeats 2 --out "$W/sweep" --force
  find "$W/sweep" -name 'trace.json.gz' -delete
  run sweep_firstuse 80 python3 scripts/gpu/sweep_firstuse.py "$W/firstuse"
  ;;
agent_ab)  # old _Streamer vs the tracker on eager agent loops (ABBA), then compiled kv-reuse (see agent_ab.py for the old file)
  export CUDA_VISIBLE_DEVICES=0
  run agent_ab 330 python3 scripts/gpu/agent_ab.py "$W/agent_ab"
  ;;
agent_compiled)  # after the max_cache_len guard: the agent tests on this stack, then compiled kv-reuse on the GPU
  export CUDA_VISIBLE_DEVICES=0
  R=$PWD; cd /tmp  # the checkout's tracekit/ would shadow the installed package (collectors/ maps in only there)
  run agent_tests 120 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib "$R/tests/test_agent.py"
  run agent_compiled 150 python3 -c "
from tracekit.collectors import agent, compiled, presets, workload
cfg = workload.WorkloadConfig(model=presets.resolve_model('tinyllama-1.1b'), device='cuda', dtype='fp16', shape='x', input_tokens=1, output_tokens=1)
model, _ = workload.build_model(cfg)
compiled.enable(model, max_cache_len=1024)
kw = dict(steps=5, system_tokens=128, output_tokens=64, tool_tokens=64, mode='kv-reuse', annotate=False)
agent.run_agent_loop(model, **kw)
for _ in range(2):
    lp = agent.run_agent_loop(model, **kw)
    print('TPOT ms', [round(c.tpot_ns / 1e6, 3) for c in lp.calls], 'prefilled', [s.prefilled_tokens for s in lp.steps])
"
  cd "$R"
  ;;
bound_vs_ncu)  # the latency class against Nsight Compute, every cell (docs/roofline.md section 10)
  export CUDA_VISIBLE_DEVICES=0
  run bound_vs_ncu 250 python3 benchmarks/bound_vs_ncu.py "$W/bound_vs_ncu" --budget-s 235
  ;;
*) echo "unknown stage $STAGE"; exit 2;;
esac
# Pack: small results in one tarball, traces in another (each file <= 16 MiB comes back).
cd "$W"
find . -name '*.json.gz' -size +14M -print > logs/too_big.txt
mv record80/trace.json.gz "$OUT/record80.trace.json.gz" 2>/dev/null
tar czf "$OUT/results.tgz" --exclude='*.json.gz' --exclude='*.pt.trace.json' . 2>/dev/null
tar czf "$W/traces.tgz" $(find . -name '*.json.gz' -size -14M) 2>/dev/null
[ -s "$W/traces.tgz" ] && split -b 15M -d "$W/traces.tgz" "$OUT/traces.tgz.part"; rm -f "$W/traces.tgz"
ls -la "$OUT"
echo "stage $STAGE done in $(( $(date +%s) - T0 ))s"
