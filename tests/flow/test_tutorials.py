"""Every tutorial's quick mode runs to the end, prints its results and writes its plots (CI runs these)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXPECT = {  # tutorial -> what its output must contain
    "graph_pass.py": ["RL pass", "greedy", "TVM default", "vs greedy"],
    "tuner.py": ["TopHub tasks", "ppo", "evolutionary", "annealing", "fraction of runs at their task's target"],
    "onnx_flow.py": ["outputs match the source model", "exported library vs ONNX Runtime", "tvm-rl report"],
    "train_policy.py": ["iteration 2:", "your policy", "shipped policy"],
}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(EXPECT))
def test_tutorial_quick_mode(script, tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "tutorials" / script), "--quick", "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    for text in EXPECT[script]:
        assert text in run.stdout, f"{script}: {text!r} missing from its output"
    figures = [Path(line[len("figure: "):]) for line in run.stdout.splitlines() if line.startswith("figure: ")]
    assert figures and all(f.stat().st_size > 0 for f in figures), figures


def test_every_tutorial_is_tested_and_rendered():
    scripts = {p.name for p in (ROOT / "tutorials").glob("*.py")} - {"render.py"}
    assert scripts == set(EXPECT)
    for script in scripts:
        assert (ROOT / "tutorials" / script).with_suffix(".md").is_file(), f"{script} has no rendered page"
