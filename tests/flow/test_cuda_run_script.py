"""benchmarks/cuda_run.sh, the GPU benchmarks in one call: with no GPU in reach it stops at once and says why,
naming the CUDA runtime library and its missing dependencies, before any tuning starts."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_cuda_run_stops_at_once_without_a_gpu(tmp_path):
    # No visible device: the same path on a machine with or without a GPU.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "cuda_run.sh"), str(tmp_path)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    log = (tmp_path / "run.log").read_text()
    assert "TVM cannot reach the GPU" in log
    assert "libtvm_runtime_cuda.so" in log or "libcudart" in log  # the loader's report of what it needs
    assert not (tmp_path / "tuner_cuda_n32.json").exists()
