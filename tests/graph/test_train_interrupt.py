"""Killing a real graph-policy training run loses no finished iteration; the same command resumes it."""
import csv
import os
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


@pytest.mark.slow
def test_an_interrupt_to_the_parent_alone_stops_the_worker_processes(tmp_path):
    """SIGINT to the training process only (not its process group, as `kill -INT` sends it): the workers' episodes
    are dropped with the iteration, so they are stopped rather than waited for. Here each worker's model takes 120 s
    to build; the run must end well before that, and leave no worker behind."""
    (tmp_path / "slow_zoo.py").write_text(
        "import os, pathlib, time\n"
        "from tvm_rl.models.registry import register, spec\n"
        "@register('slow_squeezenet', 'cnn', 'a model that takes long to build')\n"
        "def build(size):\n"
        f"    pathlib.Path({str(tmp_path)!r}, f'worker{{os.getpid()}}').touch()\n"
        "    time.sleep(120)\n"
        "    return spec('squeezenet1_1').build(size)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "tvm_rl.graph.train", *ARGS[2:], "--models", "slow_squeezenet",
                             "--model-modules", "slow_zoo", "--workers", "2", "--work-dir", str(tmp_path / "run")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        # Only a guard against a hang: on loaded cores spawning the workers and importing TVM there took over 120 s.
        deadline = time.time() + 300
        while not list(tmp_path.glob("worker*")):
            assert proc.poll() is None, proc.stdout.read()
            assert time.time() < deadline, "no worker started its episode"
            time.sleep(0.2)
        workers = [int(p.name.removeprefix("worker")) for p in tmp_path.glob("worker*")]
        start = time.time()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        assert time.time() - start < 60
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "rerun the same command to resume" in proc.stdout.read()
    time.sleep(1)
    for pid in workers:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
