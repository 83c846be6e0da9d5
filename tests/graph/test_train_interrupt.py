"""Killing a real graph-policy training run loses no finished iteration; the same command resumes it."""
import csv
import signal
import subprocess
import sys
import time

import pytest
import torch

ARGS = ["--models", "squeezenet1_1", "--iterations", "3", "--episodes-per-iteration", "1", "--horizon", "3",
        "--cap", "8", "--hidden", "16", "--gat-layers", "1", "--imitation-episodes", "0"]


def _start(work):
    return subprocess.Popen([sys.executable, "-m", "tvm_rl.graph.train", *ARGS, "--work-dir", str(work)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _iterations(work) -> list[int]:
    with open(work / "train.csv") as f:
        return [int(r["iteration"]) for r in csv.DictReader(f)]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_killed_training_resumes_without_losing_an_iteration(tmp_path, sig):
    proc = _start(tmp_path)
    try:
        deadline = time.time() + 300
        while not (tmp_path / "checkpoint.pt").exists():
            assert proc.poll() is None, proc.stdout.read()
            assert time.time() < deadline, "no checkpoint after 300 s"
            time.sleep(0.2)
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = proc.stdout.read()
    done = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["iteration"]  # plain values only
    assert 1 <= done < 3, output  # killed mid-run
    if sig == signal.SIGINT:
        assert "rerun the same command to resume" in output
    rerun = subprocess.run([sys.executable, "-m", "tvm_rl.graph.train", *ARGS, "--work-dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"resuming from {tmp_path / 'checkpoint.pt'} at iteration {done}" in rerun.stdout
    assert _iterations(tmp_path) == [1, 2, 3]
    assert not list(tmp_path.glob("*.tmp"))
