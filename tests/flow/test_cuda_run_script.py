"""benchmarks/cuda_run.sh and cuda_budget.sh, the GPU benchmarks in one call each: with no GPU in reach they stop at
once and say why, naming the CUDA runtime library and its missing dependencies, before any tuning starts."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script, out", [("cuda_run.sh", "tuner_cuda_n32.json"),
                                         ("cuda_budget.sh", "tuner_budget_cuda.json")])
def test_cuda_scripts_stop_at_once_without_a_gpu(tmp_path, script, out):
    # No visible device: the same path on a machine with or without a GPU.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / script), str(tmp_path)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    log = (tmp_path / "run.log").read_text()
    assert "TVM cannot reach the GPU" in log
    assert "libtvm_runtime_cuda.so" in log or "libcudart" in log  # the loader's report of what it needs
    assert not (tmp_path / out).exists()
