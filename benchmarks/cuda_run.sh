#!/usr/bin/env bash
# The CUDA benchmarks, in one go, on a machine with an NVIDIA GPU and tvm-rl's dependencies importable:
#   bash benchmarks/cuda_run.sh [OUT_DIR] [TOPHUB_DIR]
# 1. checks that TVM's CUDA runtime loads and sees the GPU (and says why not: usually libcudart / libcuda);
# 2. the tuner kernel benchmark (benchmarks/tuner.py --target cuda) on three tasks at 32 trials, one seed:
#    evolutionary search, PPOSearch and PPOSearch's random walks, from the same measured first batch;
#    $TUNER_SECONDS bounds it, and the tables are printed from whatever finished (--report re-times it).
# Writes OUT_DIR/tuner_cuda_n32.json, .png, the records archive and run.log. Results: docs/results/tuner.md.
set -uo pipefail
out=${1:-logs}
tophub=${2:-${TVM_RL_TOPHUB_DIR:-}}
mkdir -p "$out"
start=$SECONDS
here=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

# TVM's CUDA runtime (libtvm_runtime_cuda.so) needs libcudart.so.13 and the driver's libcuda.so.1 on the
# loader's path; without them TVM still builds CUDA code but cannot run it, and says only "no loader".
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64 \
         $(python3 -c "import glob, site; print(' '.join(glob.glob(p + '/nvidia/*/lib') for p in site.getsitepackages()))" 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$out/run.log"
if ! python3 -c "import tvm; import sys; sys.exit(0 if tvm.cuda().exist else 1)"; then
    echo "TVM cannot reach the GPU: the CUDA runtime library did not load" | tee -a "$out/run.log"
    lib=$(python3 -c "import tvm, os; print(os.path.join(os.path.dirname(tvm.__file__), 'lib', 'libtvm_runtime_cuda.so'))")
    ldd "$lib" | tee -a "$out/run.log"
    exit 1
fi
python3 -c "import tvm; d = tvm.cuda(); print('tvm', tvm.__version__, d.device_name, 'sm', d.compute_version)" \
    | tee -a "$out/run.log"

tasks="depthwise_conv2d_n1_c24_h112_w112_o24_k3_s2_p1 batch_matmul_b12_m128_n128_k64 conv2d_n1_c256_h28_w28_o256_k1_s1_p0"
bench=(python3 benchmarks/tuner.py --target cuda --tasks $tasks --arms evolutionary ppo random-walk --trials 32
       --seeds 1 --load-wait 0 --out "$out/tuner_cuda_n32.json" --work-dir "${WORK_DIR:-/tmp/tvm_rl_cuda_runs}"
       ${tophub:+--tophub-dir "$tophub"})
timeout "${TUNER_SECONDS:-420}" "${bench[@]}" 2>&1 | tee -a "$out/run.log"
if [ "${PIPESTATUS[0]}" = 124 ]; then
    echo "tuner benchmark stopped at ${TUNER_SECONDS:-420} s: tables from the runs that finished" | tee -a "$out/run.log"
    "${bench[@]}" --report 2>&1 | tee -a "$out/run.log"
fi
echo "cuda_run.sh: $((SECONDS - start)) s" | tee -a "$out/run.log"
