"""Offline pre-training of the tuner's agent on a corpus (no measurement) and the offline comparison of walkers."""
import numpy as np
import pytest
import torch

from tests.support.kernels import fake_corpus
from tvm_rl.errors import TvmRlError
from tvm_rl.tune.agent import PPOAgent, PPOConfig
from tvm_rl.tune.corpus.policy_pretrain import compare_walkers, pretrain_policy, select_workloads
from tvm_rl.tune.corpus.train import train_on_corpus
from tvm_rl.tune.cost_model.pretrained import TrainConfig

SMALL = PPOConfig(walks=8, max_steps=16, update_every=8, seed=0)


@pytest.fixture(scope="module")
def corpus_and_model(tmp_path_factory, cpu):
    path = tmp_path_factory.mktemp("policy_corpus")
    corpus = fake_corpus(path, cpu, sizes=(16, 32), per_workload=12)
    model, _ = train_on_corpus(corpus, path / "cost_model.npz", TrainConfig(max_rounds=20, early_stopping=5),
                               write=lambda _: None)
    return corpus, model


def test_workloads_are_selected_by_pattern_and_bad_names_are_named(corpus_and_model):
    corpus, _ = corpus_and_model
    assert select_workloads(corpus) == ["matmul16", "matmul32"]
    assert select_workloads(corpus, exclude=["*32"]) == ["matmul16"]
    with pytest.raises(TvmRlError, match="matmul99"):
        select_workloads(corpus, only=["matmul99"])
    with pytest.raises(TvmRlError, match="no workload"):
        select_workloads(corpus, exclude=["matmul*"])


def test_pretraining_updates_the_agent_and_saves_it(tmp_path, corpus_and_model):
    corpus, model = corpus_and_model
    lines = []
    result = pretrain_policy(corpus, model, tmp_path / "policy.pt", rounds=1, batch=4, config=SMALL,
                             exclude=["*32"], write=lines.append)
    assert result["workloads"] == ["matmul16"] and result["updates"] >= 2 and len(lines) == 1
    (entry,) = result["log"]
    assert entry["ppo_updates"] >= 2 and np.isfinite(entry["entropy"]) and entry["exact_ratings"] > 0
    saved = PPOAgent.load(str(tmp_path / "policy.pt"))
    fresh = PPOAgent(SMALL)
    assert saved.updates == result["updates"]
    assert any(not torch.equal(a, b) for a, b in zip(saved.policy.parameters(), fresh.policy.parameters()))


def test_walkers_are_compared_on_the_same_seed_without_learning(corpus_and_model):
    corpus, model = corpus_and_model
    a, b = PPOAgent(SMALL), PPOAgent(SMALL)
    rows = compare_walkers(corpus, model, {"a": a, "b": b}, ["matmul32"], batch=4, seeds=(0,), write=lambda _: None)
    assert [r["walker"] for r in rows] == ["a", "b"]
    assert a.updates == b.updates == 0
    # Two identical untrained agents from the same seed walk the same way, so they rate the same finalists.
    assert rows[0]["best"] == rows[1]["best"] and rows[0]["best"] is not None


def test_cli_trains_a_policy_and_compares_it(tmp_path, corpus_and_model, capsys):
    from tvm_rl.tune.corpus.command import main as corpus_main

    corpus, model = corpus_and_model
    policy = tmp_path / "policy.pt"
    assert corpus_main(["train-policy", "--corpus", str(corpus.path), "--model", str(model), "--out", str(policy),
                        "--rounds", "1", "--batch", "4", "--exclude", "*32"]) == 0
    assert policy.is_file() and policy.with_suffix(".json").is_file()
    out = tmp_path / "compare.json"
    assert corpus_main(["compare-policy", "--corpus", str(corpus.path), "--model", str(model), "--policy",
                        str(policy), "--heldout", "matmul32", "--seeds", "1", "--batch", "4", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "PPO updates on 1 workloads" in text and "by the cost model: not a measurement" in text
    assert out.is_file()


def test_the_shipped_policy_is_found_by_target_kind(tmp_path, monkeypatch):
    from tvm_rl.tune import agent as agent_module

    monkeypatch.setattr(agent_module, "SHIPPED_DIR", tmp_path)
    assert agent_module.shipped_policy("llvm") is None
    PPOAgent(SMALL).save(str(tmp_path / "policy_llvm.pt"))
    assert agent_module.shipped_policy("llvm") == tmp_path / "policy_llvm.pt"
    assert PPOAgent.load(str(agent_module.shipped_policy("llvm"))).config.walks == SMALL.walks
    assert agent_module.shipped_policy("cuda") is None


def _compare_rows(diffs_by_workload):
    rows = []
    for workload, diffs in diffs_by_workload:
        for seed, d in enumerate(diffs):
            rows += [{"workload": workload, "seed": seed, "walker": "untrained", "best": 0.5},
                     {"workload": workload, "seed": seed, "walker": "policy", "best": 0.5 + d}]
    return rows


def test_the_comparison_pairs_runs_and_uses_the_benchmarks_cluster_bootstrap():
    from benchmarks.tuning import stats
    from tvm_rl.tune.corpus.bootstrap import cluster_bootstrap
    from tvm_rl.tune.corpus.policy_pretrain import compare_summary

    assert stats.cluster_bootstrap is cluster_bootstrap  # one definition, the package's

    rows = _compare_rows((("a", [0.1, 0.1, 0.1]), ("b", [-0.1, -0.1, -0.1]), ("c", [0.05, -0.05, 0.3])))
    rows.append({"workload": "d", "seed": 0, "walker": "policy", "best": 0.9})  # no partner: not counted
    s = compare_summary(rows, "best", resamples=500)
    assert (s["wins"], s["runs"]) == (5, 9)
    assert abs(s["mean"] - 0.3 / 9) < 1e-9
    # The interval is the tuner benchmark's two-level one (workloads, then seeds within each), not a second recipe.
    groups = [[0.1, 0.1, 0.1], [-0.1, -0.1, -0.1], [0.05, -0.05, 0.3]]
    expect = cluster_bootstrap([[x + 0.5 - 0.5 for x in g] for g in groups], n_boot=500, seed=0)
    assert abs(s["low"] - expect[1]) < 1e-9 and abs(s["high"] - expect[2]) < 1e-9
    with pytest.raises(ValueError, match="top_mean"):
        compare_summary(rows, "top_mean")


def test_the_comparison_keeps_a_workloads_seeds_together():
    """When every seed of a workload gives the same difference, only workloads vary: the interval cannot go past the
    best and worst workload; pooling runs across workloads would ignore that they share a design space."""
    from tvm_rl.tune.corpus.policy_pretrain import compare_summary

    s = compare_summary(_compare_rows((("a", [0.2] * 3), ("b", [-0.1] * 3), ("c", [0.0] * 3))), "best",
                        resamples=500)
    assert -0.1 - 1e-9 <= s["low"] < s["mean"] < s["high"] <= 0.2 + 1e-9
