#!/usr/bin/env bash
# The whole-model budget benchmark on CUDA, in one go, on a machine with an NVIDIA GPU and tvm-rl's dependencies
# importable (at most ~8 minutes with the defaults):
#   bash benchmarks/cuda_budget.sh [OUT_DIR]
# Tunes $BUDGET_MODELS (default resnet18, full size) under one budget of $BUDGET_N measurements per model
# (default 64) twice: as `tvm-rl optimize --budget` spends it (budget-ours: evolutionary search, batches of 8,
# LatencyShare) and as MetaSchedule's users do (budget-metaschedule: its gradient task scheduler, batches of 64),
# both with MetaSchedule's XGBModel (no pre-trained model ships for CUDA); then builds both, checks them against
# PyTorch and times them beside TVM's default build, PyTorch and ONNX Runtime (benchmarks/e2e/run.py). Stops at
# $BUDGET_SECONDS (default 420); the same command resumes, and the timing runs once both are tuned.
# Writes OUT_DIR/tuner_budget_cuda.json, .png and run.log. Results: docs/results/tuner_budget.md.
set -uo pipefail
out=${1:-logs}
mkdir -p "$out"
start=$SECONDS
here=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

source "$here/benchmarks/cuda_env.sh"

timeout "${BUDGET_SECONDS:-420}" python3 -m benchmarks.tuner_e2e --target cuda --models ${BUDGET_MODELS:-resnet18} \
    --size full --trials "${BUDGET_N:-64}" --arms budget-ours budget-metaschedule --cost-model xgb --passes 5 \
    --load-wait 0 --out "$out/tuner_budget_cuda.json" --work-dir "${WORK_DIR:-/tmp/tvm_rl_cuda_budget}" \
    2>&1 | tee -a "$out/run.log"
echo "tuner_e2e: exit ${PIPESTATUS[0]} (124: stopped at ${BUDGET_SECONDS:-420} s; the same command resumes)" \
    | tee -a "$out/run.log"
echo "cuda_budget.sh: $((SECONDS - start)) s" | tee -a "$out/run.log"
