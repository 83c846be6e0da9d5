"""`tvm-rl demo`: every arm runs, is checked against PyTorch and lands in one table; a rerun resumes."""
import json
import subprocess
import sys

import numpy as np
import pytest

from tvm_rl import demo
from tvm_rl.graph import arms


def test_demo_block_matches_pytorch_and_has_batch_norms_worth_folding():
    m = demo.demo_model("tiny")
    ops = m.mod.script()
    assert ops.count("R.nn.batch_norm") == 3 and "R.nn.conv2d" in ops
    bn = [b for b in m.torch_module.modules() if b.__class__.__name__ == "BatchNorm2d"]
    # Default statistics (mean 0, var 1, weight 1, bias 0) would make folding them a no-op.
    assert all(float(b.running_var.std()) > 0 and float(b.bias.detach().abs().max()) > 0 for b in bn)
    import tvm_rl.measure as measure

    out = measure.Runner(measure.build(m.mod, "llvm"), "llvm")(m.inputs)
    np.testing.assert_allclose(out[0], m.reference_outputs()[0], rtol=1e-4, atol=1e-4)


def test_time_rounds_gives_every_arm_rounds_times_block_samples():
    calls = {"a": 0, "b": 0}

    def sampler(key, value):
        def sample():
            calls[key] += 1
            return value
        return sample

    timings = demo.time_rounds({"a": sampler("a", 1.0), "b": sampler("b", 3.0)}, rounds=3, block=4, warmup=1)
    assert timings["a"].median_ms == 1.0 and timings["b"].median_ms == 3.0
    assert timings["a"].repeats == 12 and calls == {"a": 15, "b": 15}


def test_table_says_who_is_faster():
    out = {"model": "m", "target": "llvm", "threads": 2, "rounds": 3, "arms": {
        "pytorch": {"label": "PyTorch eager", "ms": 2.0, "correct": True},
        "tvm_rl": {"label": "tvm_rl.optimize", "ms": 1.0, "correct": True, "tuning_s": 5.0, "measurements": 7}}}
    text = demo.table(out)
    assert "2.00x" in text and "1.00x" in text and " 7 " in text


def test_cli_demo_help_names_the_options():
    proc = subprocess.run([sys.executable, "-m", "tvm_rl.cli", "demo", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0
    for flag in ("--trials", "--size", "--fresh", "--no-ablation", "--work-dir"):
        assert flag in proc.stdout


@pytest.mark.slow
def test_demo_runs_every_arm_once_and_resumes(tmp_path, capsys):
    args = ["--size", "tiny", "--trials", "2", "--work-dir", str(tmp_path), "--rewrite-seconds", "3",
            "--rounds", "2", "--no-ablation"]
    assert demo.main(args) == 0
    printed = capsys.readouterr().out
    assert printed.count("median ms") == 1  # one table, printed once
    run_dir = next(tmp_path.iterdir())
    result = json.loads((run_dir / "demo.json").read_text())
    assert set(result["arms"]) == {"pytorch", "onnxruntime", "tvm_default", "evolutionary", "tvm_rl"}
    assert all(arm["correct"] and arm["ms"] > 0 for arm in result["arms"].values())
    ours, evo = result["arms"]["tvm_rl"], result["arms"]["evolutionary"]
    assert "fold_batchnorm" in " ".join(ours["graph_rewrites"])
    assert ours["graph_policy"] == arms.DEFAULT_ARM  # the demo runs the pass's default
    # Same budget per kernel; the pass folded three batch norms, so PPOSearch had fewer kernels to tune.
    assert 0 < ours["measurements"] <= 2 * ours["kernels"] and 0 < evo["measurements"] <= 2 * evo["kernels"]
    assert (run_dir / "demo.png").stat().st_size > 0

    # A rerun with the same settings measures nothing new: both tuners resume from their databases.
    assert demo.main(args) == 0
    again = json.loads((run_dir / "demo.json").read_text())
    for key in ("tvm_rl", "evolutionary"):
        assert again["arms"][key]["measurements"] == result["arms"][key]["measurements"]


def test_table_columns_stay_aligned_with_long_arm_names():
    long = "tvm_rl.optimize (graph pass + evolutionary search, 32/kernel)"
    out = {"model": "m", "target": "llvm", "threads": 2, "rounds": 3, "arms": {
        "pytorch": {"label": "PyTorch eager", "ms": 2.0, "correct": True},
        "tvm_rl": {"label": long, "ms": 1.0, "correct": True}}}
    lines = demo.table(out).splitlines()
    head, rows = lines[1], lines[3:5]
    assert all(len(row) == len(head) for row in rows)  # the label column widens rather than pushing the rest
