"""benchmarks/graph_learning_curve.py: a training run's snapshots run as the pass's learned arm beside the arms
without learning, on the same settings and proxy; resumable; a run without snapshots is named."""
import json
import sys
from pathlib import Path

import pytest

from benchmarks.graphs import ablation
from tvm_rl.graph.train import TrainConfig, train

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import graph_learning_curve as curve  # noqa: E402


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    work = tmp_path_factory.mktemp("train")
    train(TrainConfig(models=("squeezenet1_1",), iterations=3, episodes_per_iteration=2, horizon=3, cap=8,
                      shortlist=4, hidden=16, gat_layers=1, imitation_episodes=0, snapshot_every=1,
                      work_dir=str(work)), progress=False)
    return work


def test_snapshots_are_thinned_but_the_last_is_kept(run_dir, tmp_path):
    assert [i for i, _ in curve.snapshots(run_dir, every=2)] == [1, 3]
    assert [i for i, _ in curve.snapshots(run_dir, every=5)] == [1, 3]
    assert [i for i, _ in curve.snapshots(run_dir)] == [1, 2, 3]
    with pytest.raises(FileNotFoundError, match="--snapshot-every"):
        curve.snapshots(tmp_path)


def test_the_curve_runs_each_snapshot_in_the_pass_and_resumes(run_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "curve.json"
    argv = ["--work-dir", str(run_dir), "--model", "squeezenet1_1", "--size", "tiny", "--seeds", "0",
            "--arms", "cheapest-first", "greedy-never-stop", "--episodes", "1", "--steps", "3", "--every", "2",
            "--out", str(out)]
    calls = []
    real = ablation.run
    monkeypatch.setattr(ablation, "run", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    curve.main(argv)
    result = json.loads(out.read_text())
    assert sorted(result["snapshots"]) == ["0001", "0003"]
    assert result["episodes_per_iteration"] == 2 and len(result["training"]) == 3
    assert result["settings"]["time_budget_s"] is None  # bounded by steps: a loaded machine cannot cut it short
    snap = result["snapshots"]["0003"]["runs"][0]
    assert snap["steps"] <= 3 and snap["speedup"] >= 1.0  # the pass keeps the best graph seen, the input included
    assert set(result["arm_summary"]) == {"cheapest-first", "greedy-never-stop"}
    assert calls == ["cheapest-first", "greedy-never-stop", "trained", "trained"]
    table = capsys.readouterr().out
    assert "| policy, iteration 3 | 6 |" in table and out.with_suffix(".png").exists()
    assert "| arm or snapshot | " in table.split("rewrites per family")[1]  # what each did, beside how well
    # Run again: everything is in the JSON, nothing runs; other settings are refused, not mixed in.
    calls.clear()
    curve.main(argv)
    assert calls == []
    with pytest.raises(SystemExit, match="other settings"):
        curve.main([*argv[:-2], "--steps", "4", "--out", str(out)])
