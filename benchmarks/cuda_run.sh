#!/usr/bin/env bash
# The CUDA benchmarks, in one go, on a machine with an NVIDIA GPU and tvm-rl's dependencies importable:
#   bash benchmarks/cuda_run.sh [OUT_DIR] [TOPHUB_DIR]
# 1. checks that TVM's CUDA runtime loads and sees the GPU (and says why not: usually libcudart / libcuda);
# 2. the tuner kernel benchmark (benchmarks/tuner.py --target cuda) at 32 trials, one seed, on $CUDA_TASKS
#    (default three tasks): evolutionary search, PPOSearch and PPOSearch's random walks, from the same measured
#    first batch; no run starts after $TUNER_SECONDS (default 420), the finished ones are re-timed and tabled, and
#    the same command resumes the rest from OUT_DIR/tuner_cuda_n32.json (a hard stop 300 s later is a backstop);
# 3. unless $CORPUS_SECONDS is 0: a small CUDA corpus (two TopHub workloads and one zoo kernel, 16 schedules each,
#    `tvm-rl corpus build --target cuda`, bounded by $CORPUS_SECONDS, default 150, resumable) and a cost model
#    trained on it (`tvm-rl corpus train`): a check that the corpus commands work on this GPU, not a corpus.
# Writes OUT_DIR/tuner_cuda_n32.json, .png, the records archive, run.log and $CORPUS_DIR (default
# OUT_DIR/corpus_cuda). Results: docs/results/tuner.md.
set -uo pipefail
out=${1:-logs}
tophub=${2:-${TVM_RL_TOPHUB_DIR:-}}
mkdir -p "$out"
start=$SECONDS
here=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

source "$here/benchmarks/cuda_env.sh"

tasks=${CUDA_TASKS:-depthwise_conv2d_n1_c24_h112_w112_o24_k3_s2_p1 batch_matmul_b12_m128_n128_k64 conv2d_n1_c256_h28_w28_o256_k1_s1_p0}
seconds=${TUNER_SECONDS:-420}
bench=(python3 benchmarks/tuner.py --target cuda --tasks $tasks --arms evolutionary ppo random-walk --trials 32
       --seeds 1 --load-wait 0 --out "$out/tuner_cuda_n32.json" --work-dir "${WORK_DIR:-/tmp/tvm_rl_cuda_runs}"
       ${tophub:+--tophub-dir "$tophub"})
timeout "$((seconds + 300))" "${bench[@]}" --stop-after "$seconds" 2>&1 | tee -a "$out/run.log"
if [ "${PIPESTATUS[0]}" = 124 ]; then
    echo "tuner benchmark cut at $((seconds + 300)) s: tables from the runs that finished" | tee -a "$out/run.log"
    "${bench[@]}" --report 2>&1 | tee -a "$out/run.log"
fi

corpus_seconds=${CORPUS_SECONDS:-150}
if [ "$corpus_seconds" != 0 ]; then
    corpus=${CORPUS_DIR:-$out/corpus_cuda}
    timeout "$corpus_seconds" python3 -m tvm_rl.cli corpus build --target cuda --tophub --max-tasks 2 \
        --models squeezenet1_1 --size tiny --limit 3 --trials 16 --per-iter 8 --out "$corpus" \
        ${tophub:+--tophub-dir "$tophub"} 2>&1 | tee -a "$out/run.log"
    echo "corpus build: exit ${PIPESTATUS[0]} (124: stopped at $corpus_seconds s; the same command resumes)" \
        | tee -a "$out/run.log"
    timeout 120 python3 -m tvm_rl.cli corpus train --corpus "$corpus" 2>&1 | tee -a "$out/run.log"
fi
echo "cuda_run.sh: $((SECONDS - start)) s" | tee -a "$out/run.log"
