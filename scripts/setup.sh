#!/usr/bin/env bash
# Set up tracekit in ./.venv on a fresh machine: everything the project needs, nothing by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# --no-compile: no bytecode for the many thousand files of torch and friends now (CPU time a fresh
# setup would spend); Python writes a module's bytecode the first time it is imported.
PIP=(.venv/bin/python -m pip install -q --no-compile --disable-pip-version-check)
# A current pip first: the one a Python 3.11 venv brings (23.x) spends about a third more CPU on the
# same install, most of it weighing the package index's links (docs/measurements/2026-12-07-speed.md).
"${PIP[@]}" --upgrade pip
# One pip call, one resolution: torch pinned, so that where a CPU build of this release is available
# it is taken (an unpinned torch would pull a multi-GB CUDA build); a machine that already has torch
# (a GPU machine: install tracekit into that environment) keeps its own. Then what recording, analysis
# and the tests need; the extras quant, bench (HTA, ijson), ray and notebook are installed where they
# are used (README "Extras").
TORCH=()
.venv/bin/python -c "import torch" 2>/dev/null || TORCH=("torch==${TRACEKIT_TORCH_VERSION:-2.13.0}")
"${PIP[@]}" "${TORCH[@]}" -e ".[record,dev]"
# analysis/ and collectors/ are installed as tracekit.analysis and tracekit.collectors (package-dir);
# these links show lint-imports and mypy the same single package from the checkout.
ln -sfn ../analysis tracekit/analysis
ln -sfn ../collectors tracekit/collectors
echo "tracekit installed in .venv: run .venv/bin/tracekit --help"
