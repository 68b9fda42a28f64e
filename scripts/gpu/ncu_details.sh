#!/usr/bin/env bash
# Nsight Compute's CSV pages for a few small kernels (a fp16 GEMM, an add, a softmax) inside a tracekit
# NVTX step range: the default (details) page, the details page in base units and the raw page, for the
# default section set and for three metrics by id. The outputs are the fixtures
# tests/fixtures/ncu/pages_h200_* (tracekit.ingest.ncu reads every page).
# Usage (on the GPU machine): OUT=DIR bash scripts/gpu/ncu_details.sh
set -u
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
echo "ncu: $NCU"; $NCU --version | tail -1
cat > /tmp/k.py <<'PY'
import torch
a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
b = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("tracekit.step id=0")
c = a @ b
d = c + a
e = torch.softmax(d, dim=-1)
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
PY
cd /tmp
$NCU --nvtx -c 8 -f -o /tmp/basic python3 /tmp/k.py > /tmp/ncu1.log 2>&1; tail -3 /tmp/ncu1.log
$NCU --nvtx -c 8 -f --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum -o /tmp/mets python3 /tmp/k.py > /tmp/ncu2.log 2>&1; tail -2 /tmp/ncu2.log
$NCU -i /tmp/basic.ncu-rep --csv > $OUT/details_default.csv
$NCU -i /tmp/basic.ncu-rep --csv --page details --print-units base > $OUT/details_base.csv
$NCU -i /tmp/basic.ncu-rep --csv --page raw --print-units base > $OUT/raw_basic.csv
$NCU -i /tmp/mets.ncu-rep --csv > $OUT/details_metrics.csv
$NCU -i /tmp/mets.ncu-rep --csv --page raw --print-units base > $OUT/raw_metrics.csv
wc -c $OUT/*; head -5 $OUT/details_default.csv
