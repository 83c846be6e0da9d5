"""The ablation benchmark's machinery (`benchmarks.graphs.ablation`) and `benchmarks/graph_rl.py`: the
statistics, seeded runs per arm, the benchmark's settings and plot, and measuring saved graphs."""
from pathlib import Path

import numpy as np
import pytest

from benchmarks.graphs import ablation
from tests.support import graph_examples as T
from tvm_rl.graph import cost as costs
from tvm_rl.graph import roofline
from tvm_rl.graph.rewrite_pass import RLRewritePass
from tvm_rl.graph.rules import get_rule

# ---- the ablation's statistics


def test_mean_and_t_interval():
    mean, half = ablation.mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.302653 / np.sqrt(3), rel=1e-5)  # t(0.975, 2) = 4.303
    assert ablation.mean_ci([1.5]) == (1.5, None)
    assert ablation.cell({"mean": 1.5, "ci95": None}) == "1.500"


def test_compare_flags_arms_beyond_one_percent_of_the_best_rule():
    s = {a: {"mean": m} for a, m in [("cheapest-first", 1.50), ("uniform", 1.495), ("greedy", 1.2),
                                     ("trained", 1.52)]}
    c = ablation.compare(s)
    assert c["best_non_learned"] == "cheapest-first"  # the learned arm is not a candidate
    assert c["differ"] == ["greedy", "trained"] and c["any_differ"]
    assert not ablation.compare({"uniform": {"mean": 1.0}, "trained": {"mean": 1.005}})["any_differ"]


def test_rewrite_counts_read_an_every_match_action_as_its_matches():
    from tvm_rl.graph.rules import AllMatches

    fold = get_rule("fold_batchnorm")
    mod = T.bn_chain_graph(layers=3)
    every = AllMatches(fold).matches(mod)
    one = fold.matches(mod)
    assert len(every) == 1 and len(one) == 3
    # The pass's report lists str(match): the every-match action counts its 3 rewrites, a single one counts 1.
    counts = ablation.rewrite_counts([str(every[0]), str(one[0])])
    assert counts == {"fold_batchnorm": 4}
    table = ablation.rewrites_table({"a": [{"applied": [str(every[0])]}, {"applied": [str(one[0])]}],
                                     "b": [{"applied": []}]})
    assert table.splitlines()[0] == "| arm or snapshot | fold_batchnorm |"
    assert table.splitlines()[2:] == ["| a | 2 |", "| b | 0 |"]  # the mean over a label's runs


def test_evaluate_runs_seeded_arms_per_seed_and_baselines_once():
    settings = ablation.Settings(max_steps=3, episodes=2, time_budget_s=None)
    seen = []
    runs = ablation.evaluate(T.merge_matmul_graph(), ["uniform", "greedy", "backtracking-5"], [0, 1],
                             lambda: costs.roofline_cost(roofline.default_hardware("llvm")), settings,
                             on_run=lambda arm, r: seen.append((arm, r.seed)))
    assert seen == [("uniform", 0), ("uniform", 1), ("greedy", None), ("backtracking-5", None)]
    assert all(r["speedup"] >= 1.0 for rows in runs.values() for r in rows)
    again = ablation.evaluate(T.merge_matmul_graph(), ["uniform", "greedy"], [0, 1, 2],
                              lambda: costs.roofline_cost(roofline.default_hardware("llvm")), settings, done=runs,
                              on_run=lambda arm, r: seen.append((arm, r.seed)))
    assert seen[-1] == ("uniform", 2) and len(again["uniform"]) == 3  # only the missing run ran
    with pytest.raises(ValueError, match="unknown arm"):
        ablation.check_arm("backtracking")


def test_the_benchmarks_cap_zero_enumerates_every_candidate_as_the_pass_does(monkeypatch):
    import argparse
    import sys

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    sys.modules.pop("graph_rl", None)
    import graph_rl

    ap = argparse.ArgumentParser()
    graph_rl.add_arm_args(ap)
    ap.add_argument("--policy", default=None)
    assert graph_rl.settings_of("llvm", ap.parse_args([])).cap == 64
    assert graph_rl.settings_of("llvm", ap.parse_args(["--cap", "0"])).cap is None
    assert RLRewritePass(cap=None).cap is None  # what --cap 0 compares with: every candidate
    assert graph_rl.settings_of("llvm", ap.parse_args([])).time_budget_s == 10.0
    assert graph_rl.settings_of("llvm", ap.parse_args(["--time-budget", "0"])).time_budget_s is None  # steps alone


def test_the_benchmarks_plot_draws_measured_speedups_beside_the_proxys(monkeypatch, tmp_path):
    import sys

    import matplotlib.pyplot as plt

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    sys.modules.pop("graph_rl", None)
    import graph_rl

    def summ(a, b):
        return {"a": {"mean": a, "ci95": 0.01}, "b": {"mean": b, "ci95": None}}

    proxy_only = {"m": {"summary": summ(2.1, 2.0)}}
    both = {"m": {"summary": summ(2.1, 2.0), "measured": {"summary": summ(1.2, 1.4)}},
            "n": {"summary": summ(1.1, 1.0), "measured": {"skipped": "no two arms differ"}}}
    one = plt.imread(graph_rl.plot(proxy_only, ["a", "b"], tmp_path / "one.png", "t"))
    two = plt.imread(graph_rl.plot(both, ["a", "b"], tmp_path / "two.png", "t"))
    assert two.shape[1] == 2 * one.shape[1]  # a second panel, for the measured speedups


@pytest.mark.slow
def test_the_benchmark_measures_saved_graphs_without_searching_again(monkeypatch, tmp_path):
    """--save-graphs keeps each run's graph; --graphs-from measures a --no-measure run's graphs from them."""
    import json
    import shutil
    import sys

    import tvm

    from tvm_rl.graph.fingerprint import same_graph

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    sys.modules.pop("graph_rl", None)
    import graph_rl

    graphs, proxy_json, measured_json = tmp_path / "graphs", tmp_path / "proxy.json", tmp_path / "measured.json"
    common = ["graph_rl.py", "--models", "bert", "--arms", "cheapest-first", "greedy", "--seeds", "0",
              "--time-budget", "0", "--steps", "4"]
    monkeypatch.setattr(sys, "argv", [*common, "--no-measure", "--save-graphs", str(graphs), "--out", str(proxy_json)])
    graph_rl.main()
    saved = sorted(p.name for p in (graphs / "bert").iterdir())
    assert saved == ["cheapest-first@0.relax.json", "greedy@None.relax.json", "original.relax.json"]
    assert same_graph(tvm.ir.load_json((graphs / "bert" / "original.relax.json").read_text()),
                      graph_rl.models.load("bert", "tiny").mod)
    shutil.copy(proxy_json, measured_json)
    evaluate = graph_rl.ablation.evaluate

    def no_search(mod, arms_, seeds, *args, done=None, **kwargs):
        assert not graph_rl.missing(done or {}, arms_, seeds), "searched again"
        return evaluate(mod, arms_, seeds, *args, done=done, **kwargs)

    monkeypatch.setattr(graph_rl.ablation, "evaluate", no_search)
    monkeypatch.setattr(sys, "argv", [*common, "--graphs-from", str(graphs), "--measure-all", "--repeat", "2",
                                      "--out", str(measured_json)])
    graph_rl.main()
    measured = json.loads(measured_json.read_text())["models"]["bert"]["measured"]
    assert set(measured["runs"]) == {"cheapest-first", "greedy"} and measured["all_match_original"]
    (graphs / "bert" / "greedy@None.relax.json").unlink()
    shutil.copy(proxy_json, measured_json)
    with pytest.raises(SystemExit, match="greedy@None.relax.json"):
        graph_rl.main()
