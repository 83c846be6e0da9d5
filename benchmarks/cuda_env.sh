# Sourced by the CUDA benchmark scripts, with $out set: puts the CUDA runtime libraries on the loader's path,
# logs the GPU to $out/run.log, and exits 1 (saying why) when TVM cannot reach it.
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

