"""Graph agent: encoder, actor-critic, PPO training and RLRewritePass."""
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

from tests.support import graph_examples as T
from tvm_rl import models
from tvm_rl.graph import cost as costs
from tvm_rl.graph import profiles, roofline
from tvm_rl.graph.agent import DEFAULT_POLICY, GraphActorCritic, PolicyConfig, PolicyError
from tvm_rl.graph.env import GraphRewriteEnv
from tvm_rl.graph.fingerprint import same_graph
from tvm_rl.graph.imitation import demonstrations, greedy_row, imitate
from tvm_rl.graph.observation import Decision, decision_from_observation
from tvm_rl.graph.rewrite_pass import RLRewritePass
from tvm_rl.graph.train import TrainConfig, make_env, play, train
from tvm_rl.graph.train_update import Batch, Episode, ppo_loss, ppo_params, ppo_update, scale_rewards
from tvm_rl.graph.verify import compare_variants


def small_policy(seed: int = 0) -> GraphActorCritic:
    torch.manual_seed(seed)
    return GraphActorCritic(PolicyConfig(hidden=32, gat_layers=2, heads=4)).eval()


@pytest.fixture(scope="module")
def decision() -> Decision:
    env = GraphRewriteEnv(T.merge_matmul_graph(), cap=16, horizon=3)
    obs, _ = env.reset()
    d = decision_from_observation(obs)
    assert len(d) >= 3
    return d


def test_scores_are_invariant_to_candidate_order(decision):
    policy = small_policy()
    n = len(decision) - 1  # stop stays last
    perm = np.r_[np.random.default_rng(1).permutation(n), n]
    shuffled = Decision([decision.graphs[i] for i in perm], decision.globals[perm], decision.actions[perm])
    with torch.no_grad():
        logits, _, value = policy([decision])
        logits2, _, value2 = policy([shuffled])
    torch.testing.assert_close(logits2, logits[perm], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(value2, value)
    # Batching several decisions changes nothing either.
    with torch.no_grad():
        both, owner, values = policy([decision, shuffled])
    torch.testing.assert_close(both[owner == 1], logits[perm], rtol=1e-5, atol=1e-5)


def test_any_number_of_candidates(decision):
    policy = small_policy()
    for k in (1, 2, len(decision)):
        rows = list(range(k - 1)) + [len(decision) - 1]
        d = Decision([decision.graphs[i] for i in rows], decision.globals[rows], decision.actions[rows])
        logp, _, _ = policy.distribution([d])
        assert logp.shape == (k,) and abs(float(logp.detach().exp().sum()) - 1) < 1e-5


def _episodes(policy, n=3, seed=0):
    env = GraphRewriteEnv(T.merge_matmul_graph(), cap=16, horizon=4)
    rng = np.random.default_rng(seed)
    return [play(env, policy, rng) for _ in range(n)]


def test_ppo_update_lowers_the_loss_on_a_fixed_batch():
    policy = small_policy()
    config = TrainConfig(epochs=8, minibatch=64, learning_rate=1e-3)
    episodes = _episodes(policy)
    batch = Batch.of(episodes, config.gamma, config.gae_lambda)
    idx = torch.arange(len(batch.decisions))
    before, _ = ppo_loss(policy, batch, idx, config)
    optim = torch.optim.Adam(policy.parameters(), lr=config.learning_rate)
    ppo_update(policy, optim, episodes, config, np.random.default_rng(0))
    after, _ = ppo_loss(policy, batch, idx, config)
    assert after.item() < before.item()


def test_imitation_learns_greedy_choices():
    env = GraphRewriteEnv(T.merge_matmul_graph(), cap=16, horizon=4)
    rng = np.random.default_rng(0)
    pairs = [p for _ in range(3) for p in demonstrations(env, rng)]
    assert all(label == greedy_row(d) for d, label in pairs)

    def greedy_prob(policy):  # mean probability the policy gives greedy's choice
        with torch.no_grad():
            return np.mean([float(policy.distribution([d])[0][label].exp()) for d, label in pairs])

    policy = small_policy(3)
    before = greedy_prob(policy)
    imitate(policy, pairs, TrainConfig(imitation_epochs=30, learning_rate=3e-3), rng)
    after = greedy_prob(policy)
    assert after > before and after > 0.5, (before, after)


def _mean_return(env, policy, n, seed, greedy=False):
    rng = np.random.default_rng(seed)
    return float(np.mean([play(env, policy, rng, greedy=greedy).ret for _ in range(n)]))


class UniformPolicy(GraphActorCritic):
    """Every valid action equally likely: the random baseline."""

    def forward(self, decisions):
        sizes = [len(d) for d in decisions]
        owner = torch.repeat_interleave(torch.arange(len(decisions)), torch.tensor(sizes))
        return torch.zeros(sum(sizes)), owner, torch.zeros(len(decisions))


@pytest.mark.slow
def test_short_training_beats_a_random_policy(tmp_path):
    config = TrainConfig(models=("squeezenet1_1",), iterations=4, episodes_per_iteration=3, horizon=6, cap=32,
                         shortlist=0, hidden=32, gat_layers=2, seed=0, work_dir=str(tmp_path))
    policy = train(config, progress=False)
    env = GraphRewriteEnv(models.load("squeezenet1_1", "tiny").mod, cap=32, horizon=6)  # every candidate shown
    trained = _mean_return(env, policy, 4, seed=1)
    uniform = _mean_return(env, UniformPolicy(PolicyConfig(hidden=32, gat_layers=2)), 4, seed=1)
    assert trained > uniform
    assert (tmp_path / "train.csv").read_text().count("\n") == 5
    assert (tmp_path / "train.png").exists() and (tmp_path / "policy.pt").exists()
    # Resuming a finished run does no more work and keeps the history, on other threads too; other settings
    # of what is learned are refused.
    again = train(replace(config, torch_threads=2), progress=False)
    assert (tmp_path / "train.csv").read_text().count("\n") == 5
    assert again is not None
    with pytest.raises(ValueError, match="other settings; use another --work-dir"):
        train(replace(config, learning_rate=1e-2), progress=False)


def test_unknown_models_and_modules_are_named_before_training(tmp_path):
    with pytest.raises(ValueError, match="no_such_model.*--model-modules"):
        train(TrainConfig(models=("no_such_model",), work_dir=str(tmp_path)), progress=False)
    with pytest.raises(ImportError, match="no_such_module"):
        train(TrainConfig(model_modules=("no_such_module",), work_dir=str(tmp_path)), progress=False)


def test_a_training_checkpoint_is_loaded_without_running_its_code(tmp_path):
    """Resuming loads checkpoint.pt with weights_only: one holding objects (here a pickled TrainConfig, which
    unpickling would construct) is refused with a CheckpointError naming it, before any training."""
    from tvm_rl.errors import CheckpointError
    from tvm_rl.graph.train_files import plain_rows

    torch.save({"config": TrainConfig(), "iteration": 1}, tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match="checkpoint.pt cannot be loaded.*another --work-dir"):
        train(TrainConfig(models=("squeezenet1_1",), work_dir=str(tmp_path)), progress=False)
    # What train() writes instead: plain numbers in the history, which a weights_only load accepts.
    rows = plain_rows([{"iteration": 1, "loss": np.float64(0.5), "kl": torch.tensor(0.25)}])
    torch.save({"history": rows}, tmp_path / "plain.pt")
    assert torch.load(tmp_path / "plain.pt", weights_only=True)["history"] == [{"iteration": 1, "loss": 0.5,
                                                                                 "kl": 0.25}]


def test_training_offers_the_every_match_actions_unless_told_not_to(monkeypatch):
    from tvm_rl.graph import train as train_module
    from tvm_rl.graph.rules import AllMatches

    for flag, expected in ((None, True), ("--no-all-matches", False)):
        seen = {}
        monkeypatch.setattr(train_module, "train", lambda config: seen.setdefault("config", config))
        train_module.main(["--models", "bert"] + ([flag] if flag else []))
        config = seen["config"]
        assert config.all_matches is expected
        env = make_env("bert", config)
        assert any(isinstance(r, AllMatches) for r in env.rules) is expected


def test_training_can_reward_the_best_graph_seen(monkeypatch, tmp_path):
    from tvm_rl.graph import train as train_module

    seen = {}
    monkeypatch.setattr(train_module, "train", lambda config: seen.setdefault("config", config))
    train_module.main(["--models", "squeezenet1_1", "--reward", "best"])
    config = seen["config"]
    env = make_env("squeezenet1_1", config)
    assert env.reward == "best"
    ep = train_module.play(env, UniformPolicy(PolicyConfig(hidden=32, gat_layers=2)), np.random.default_rng(0))
    # the episode's speedup is its cheapest graph's, what its rewards add up to
    assert ep.ret == pytest.approx((ep.speedup - 1) / ep.speedup * 100)
    with pytest.raises(ValueError, match="--reward must be one of delta, best, got 'final'"):
        train(TrainConfig(models=("squeezenet1_1",), reward="final", work_dir=str(tmp_path)), progress=False)


def test_training_checks_target_kl_where_kl_stop_says(monkeypatch, tmp_path):
    from tvm_rl.graph import train as train_module

    seen = {}
    monkeypatch.setattr(train_module, "train", lambda config: seen.setdefault("config", config))
    train_module.main(["--models", "squeezenet1_1", "--target-kl", "0.02", "--kl-stop", "step"])
    assert ppo_params(seen["config"]).kl_stop == "step"
    assert ppo_params(TrainConfig()).kl_stop == "epoch"  # CleanRL's, as before the flag
    with pytest.raises(ValueError, match="--kl-stop must be 'epoch' or 'step', got 'batch'"):
        train(TrainConfig(models=("squeezenet1_1",), kl_stop="batch", work_dir=str(tmp_path)), progress=False)


def test_per_model_scaling_gives_every_model_the_same_mean_return():
    def ep(model, rewards):
        return Episode(model, rewards=list(rewards))

    stats: dict = {}
    eps = [ep("big", [30.0, 10.0]), ep("big", [20.0, 20.0]), ep("small", [4.0, 6.0]), ep("flat", [0.1, 0.1])]
    scale_rewards(eps, stats, 25.0)
    assert stats == {"big": [80.0, 2.0], "small": [10.0, 1.0], "flat": pytest.approx([0.2, 1.0])}
    assert [e.ret for e in eps[:3]] == pytest.approx([25.0, 25.0, 25.0])
    assert eps[0].rewards == pytest.approx([18.75, 6.25])  # the shape of an episode's rewards is kept
    # A model with (almost) nothing to gain is scaled as if its mean return were the floor, not blown up.
    assert eps[3].ret == pytest.approx(0.2 * 25.0)
    # The means are running ones: a later iteration's scale counts every earlier episode of the model.
    later = [ep("small", [30.0])]
    scale_rewards(later, stats, 25.0)
    assert stats["small"] == [40.0, 2.0] and later[0].ret == pytest.approx(30.0 * 25.0 / 20.0)


def test_training_scales_rewards_per_model_and_resumes_with_the_running_means(tmp_path):
    config = TrainConfig(models=("squeezenet1_1", "mobilenet_v2"), iterations=1, episodes_per_iteration=2,
                         horizon=3, cap=8, hidden=16, gat_layers=1, imitation_episodes=0, per_model_return=25.0,
                         work_dir=str(tmp_path))
    train(config, progress=False)
    ckpt = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert set(ckpt["return_stats"]) == {"squeezenet1_1", "mobilenet_v2"}
    assert all(count == 1 for _, count in ckpt["return_stats"].values())
    train(replace(config, iterations=2), progress=False)
    ckpt = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert all(count == 2 for _, count in ckpt["return_stats"].values())
    # The logged return is the unscaled one, comparable with runs that do not scale.
    row = ckpt["history"][-1]
    assert abs(row["mean_return"]) < 100.0


def test_training_can_start_from_a_saved_policy(tmp_path, monkeypatch):
    from tvm_rl.graph import train as train_module

    start = small_policy(seed=3)
    start.save(tmp_path / "start.pt")
    monkeypatch.setattr(train_module, "imitate", lambda *a, **k: pytest.fail("fine-tuning must not imitate"))
    config = TrainConfig(models=("squeezenet1_1",), iterations=0, hidden=32, gat_layers=2, heads=4,
                         init_policy=str(tmp_path / "start.pt"), work_dir=str(tmp_path / "run"))
    policy = train(config, progress=False)
    for name, value in start.state_dict().items():
        assert torch.equal(policy.state_dict()[name], value), name
    with pytest.raises(ValueError, match="--init-policy .*start.pt has network sizes.*--hidden"):
        train(replace(config, hidden=16), progress=False)
    with pytest.raises(PolicyError, match="nowhere.pt does not exist"):
        train(replace(config, init_policy=str(tmp_path / "nowhere.pt")), progress=False)


@pytest.mark.slow
def test_worker_processes_see_models_registered_by_the_users_module(tmp_path, monkeypatch):
    (tmp_path / "my_zoo.py").write_text(
        "from tvm_rl.models.registry import register, spec\n"
        "register('my_squeezenet', 'cnn', 'a user model')(lambda size: spec('squeezenet1_1').build(size))\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # spawned workers start with the parent's sys.path
    from tvm_rl.models import registry
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # the parent's registration goes away
    monkeypatch.delitem(sys.modules, "my_zoo", raising=False)
    config = TrainConfig(models=("my_squeezenet",), model_modules=("my_zoo",), workers=2, iterations=1,
                         episodes_per_iteration=2, horizon=2, cap=8, hidden=16, gat_layers=1,
                         imitation_episodes=0, work_dir=str(tmp_path / "run"))
    train(config, progress=False)
    assert (tmp_path / "run" / "train.csv").read_text().count("\n") == 2  # header + the one iteration
    sys.modules.pop("my_zoo", None)


# ---- checkpoints


def test_checkpoint_round_trip(tmp_path, decision):
    policy = small_policy()
    path = policy.save(tmp_path / "p.pt", note="test")
    loaded = GraphActorCritic.load(path)
    with torch.no_grad():
        torch.testing.assert_close(loaded([decision])[0], policy([decision])[0])
    assert loaded.meta == {"note": "test"}


def test_bad_checkpoints_say_what_is_wrong(tmp_path):
    with pytest.raises(PolicyError, match="does not exist"):
        GraphActorCritic.load(tmp_path / "missing.pt")
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint at all")
    with pytest.raises(PolicyError, match="corrupt"):
        GraphActorCritic.load(corrupt)
    truncated = tmp_path / "truncated.pt"
    small_policy().save(truncated)
    truncated.write_bytes(truncated.read_bytes()[:2000])
    with pytest.raises(PolicyError, match="corrupt"):
        GraphActorCritic.load(truncated)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, foreign)
    with pytest.raises(PolicyError, match="not a tvm-rl graph policy"):
        GraphActorCritic.load(foreign)
    other = tmp_path / "other_features.pt"
    small_policy().save(other)
    ckpt = torch.load(other, weights_only=True)
    ckpt["features"] = [1, 2, 3]
    torch.save(ckpt, other)
    with pytest.raises(PolicyError, match="features"):
        GraphActorCritic.load(other)


# ---- the pass


def test_pass_in_a_compile_script_keeps_results(cpu):
    mod = T.merge_matmul_graph()
    rewrite = RLRewritePass(target=cpu, policy=small_policy(), max_steps=4, confirm=False)
    seq = tvm.transform.Sequential([rewrite, relax.transform.LegalizeOps()])
    out = seq(mod)
    report = rewrite.last_report
    assert report is not None and report.steps >= 1
    exe = tvm.compile(out, target=cpu)
    assert exe is not None
    if report.kept:
        assert report.cost < report.initial_cost and report.applied
    comparison = compare_variants(mod, {"rewritten": RLRewritePass(policy=small_policy(), max_steps=4,
                                                                   confirm=False)(mod)})
    assert all(c.ok for c in comparison.values())


def test_never_slower_when_measurement_disagrees():
    """A policy/cost that proposes a graph the measurement finds slower: the input comes back."""
    mod = T.merge_matmul_graph()
    calls = []

    def slower_unless_original(before, after):
        calls.append((before, after))
        return 1.0, 1.0 if same_graph(after, mod) else 2.0

    rewrite = RLRewritePass(policy=small_policy(), max_steps=3, measure_pair=slower_unless_original,
                            cost=lambda m: 1.0 if same_graph(m, mod) else 0.5)  # the proxy likes every rewrite
    out = rewrite(mod)
    assert out.same_as(mod) or same_graph(out, mod)
    assert len(calls) == 1 and same_graph(calls[0][0], mod) and not rewrite.last_report.kept
    assert "not faster" in rewrite.last_report.reason


def test_real_confirmation_measures_both_graphs_and_keeps_only_a_faster_one():
    mod = T.merge_matmul_graph()
    rewrite = RLRewritePass(policy=small_policy(), max_steps=3, repeat=5,
                            cost=lambda m: 1.0 if same_graph(m, mod) else 0.5)  # the proxy likes every rewrite
    out = rewrite(mod)
    r = rewrite.last_report
    assert r.initial_ms > 0 and r.final_ms > 0
    assert r.kept == (r.final_ms < r.initial_ms) and same_graph(out, mod) == (not r.kept)


def test_the_time_budget_ends_a_step_that_would_overrun_it():
    """Pricing that takes 0.4 s a graph: a step prices every candidate (over a dozen), so the 1 s budget ends
    inside one, and the pass returns within the budget and one pricing call, not at the end of the step."""
    import time

    mod = models.load("squeezenet1_1", "tiny").mod
    proxy = costs.roofline_cost(roofline.default_hardware("llvm"))
    calls = []

    def slow(m):
        calls.append(m)
        time.sleep(0.4)
        return proxy(m)

    rewrite = RLRewritePass(policy=small_policy(), max_steps=50, confirm=False, cost=slow, time_budget_s=1.0,
                            shortlist=None)
    start = time.perf_counter()
    out = rewrite(mod)
    # the initial pricing, the calls that fit, one past the budget, and slack for a loaded machine: a step run to
    # its end would price over a dozen graphs (over 5 s)
    assert time.perf_counter() - start < 1.0 + 2 * 0.4 + 1.5 and len(calls) <= 4
    assert rewrite.last_report.steps == 0 and same_graph(out, mod)


def test_never_slower_by_cost_without_confirmation():
    mod = T.merge_matmul_graph()
    rewrite = RLRewritePass(policy=small_policy(), max_steps=3, confirm=False,
                            cost=lambda m: 1.0 if same_graph(m, mod) else 3.0)  # every rewrite is worse
    assert same_graph(rewrite(mod), mod)
    assert rewrite.last_report.reason == "the policy found no cheaper graph"


def test_the_policy_chooses_among_the_cheapest_candidates_only():
    mod = models.load("squeezenet1_1", "tiny").mod
    seen = {}
    for shortlist in (3, None):
        policy = small_policy()
        sizes, act = [], policy.act
        policy.act = lambda decision, *a, **k: (sizes.append(len(decision)), act(decision, *a, **k))[1]
        RLRewritePass(policy=policy, max_steps=2, confirm=False, shortlist=shortlist)(mod)
        seen[shortlist] = sizes
    assert max(seen[3]) == 3 + 1  # three candidates and "stop"
    assert seen[None][0] > 3 + 1


def test_the_shortlist_prices_repeated_matches_once_and_shows_exact_costs():
    """Matches priced on an earlier step are ranked by their cost change then; only new and shortlisted
    candidates are priced again, and the costs the policy sees are the cost function's own."""
    mod = models.load("squeezenet1_1", "tiny").mod
    proxy = costs.roofline_cost(roofline.default_hardware("llvm"))
    priced, shown = {}, {}
    for shortlist in (3, None):
        values, seen, policy = [], [], small_policy()
        act = policy.act
        policy.act = lambda decision, *a, **k: (seen.append(decision.globals[:, 0].copy()), act(decision, *a, **k))[1]
        RLRewritePass(policy=policy, max_steps=4, episodes=1, confirm=False, shortlist=shortlist,
                      cost=lambda m: (values.append(proxy(m)), values[-1])[1])(mod)
        priced[shortlist], shown[shortlist] = values, seen
    assert len(shown[3]) == len(shown[None]) == 4
    assert len(priced[3]) < len(priced[None]) / 2
    rt0 = proxy(mod)
    for step in shown[3]:  # each shown relative cost is one the cost function returned
        assert all(np.isclose(priced[3], c * rt0, rtol=1e-5).any() for c in step)


def bn_chain_graph(layers: int = 3, seed: int = 0):
    """conv -> batch_norm -> relu, `layers` times (the shared graph, with this file's default depth)."""
    return T.bn_chain_graph(layers, seed)


def cheapest_first(policy: GraphActorCritic) -> GraphActorCritic:
    """`policy` made to take the candidate with the lowest relative cost (global feature 0) each step."""
    policy.act = lambda decision, *a, **k: (int(np.argmin(decision.globals[:, 0])),) * 2 + (0.0, 0.0)
    return policy


def test_every_match_of_a_rule_is_one_action_by_default():
    """Folding every batch norm is one step with the "every match" actions and three without; both exact."""
    mod = bn_chain_graph(3)
    outs, applied = {}, {}
    for all_matches in (True, False):
        rewrite = RLRewritePass(policy=cheapest_first(small_policy()), max_steps=1, confirm=False,
                                all_matches=all_matches)
        outs[all_matches] = rewrite(mod)
        report = rewrite.last_report
        assert report.kept and len(report.applied) == 1
        left = profiles.op_profiles(outs[all_matches])
        n_bn = sum(p.op == "relax.nn.batch_norm" for p in left)
        assert n_bn == (0 if all_matches else 2), (all_matches, report.applied)
        applied[all_matches] = report.applied[0]
    assert applied[True] == "fold_batchnorm[all]: all 3 matches" and applied[False].startswith("fold_batchnorm: ")
    comparison = compare_variants(mod, {"all": outs[True], "one": outs[False]})
    assert all(c.ok for c in comparison.values()), comparison


def test_seeded_runs_are_reproducible():
    mod = T.merge_matmul_graph()
    runs = [RLRewritePass(policy=small_policy(), max_steps=3, episodes=3, seed=7, confirm=False) for _ in range(2)]
    outs = [r(mod) for r in runs]
    assert same_graph(outs[0], outs[1])
    assert runs[0].last_report.applied == runs[1].last_report.applied


def test_dynamic_shapes_are_left_untouched_and_said_so():
    bb = relax.BlockBuilder()
    n = tvm.tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 4], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.relu(x))
        bb.emit_func_output(y)
    mod = bb.get()
    rewrite = RLRewritePass(policy=small_policy(), confirm=False)
    assert rewrite(mod).same_as(mod)
    assert "dynamic or symbolic shapes" in rewrite.last_report.reason


@pytest.mark.slow
def test_shipped_policy_keeps_every_tiny_zoo_model_equivalent(cpu):
    assert DEFAULT_POLICY.is_file(), "the shipped policy is missing: docs/graph_pass.md has the command that made it"
    policy = GraphActorCritic.load()
    for name in models.names():
        m = models.load(name, "tiny")
        # The greedy episode and one sampled, whatever the machine's speed (the default 10 s budget would decide
        # how many episodes run).
        rewrite = RLRewritePass(target=cpu, policy=policy, max_steps=4, episodes=2, time_budget_s=None,
                                confirm=False)
        out = rewrite(m.mod)
        comparison = compare_variants(m.mod, {"rl": out}, rtol=1e-3, atol=1e-3)
        assert all(c.ok for c in comparison.values()), (name, rewrite.last_report.applied)
