"""Training for the pass's objective, the best of a few episodes (`TrainConfig.risk_epsilon`, graph.risk_seeking)."""
import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.support import graph_examples as T
from tvm_rl.graph.agent import GraphActorCritic, PolicyConfig
from tvm_rl.graph.env import GraphRewriteEnv
from tvm_rl.graph.risk_seeking import risk_seeking_advantages
from tvm_rl.graph.train import TrainConfig, play, train
from tvm_rl.graph.train_update import ppo_params, ppo_update


def fake(model: str, speedup: float, steps: int = 2) -> SimpleNamespace:
    return SimpleNamespace(model=model, speedup=speedup, rewards=[0.0] * steps)


def test_only_the_episodes_above_their_models_quantile_are_learned_from():
    eps = [fake("a", 1.0), fake("a", 1.1), fake("b", 2.0, 3), fake("a", 1.2, 4), fake("a", 1.5), fake("b", 2.0),
           fake("b", 3.0, 5), fake("c", 1.3), fake("c", 1.3)]
    adv = risk_seeking_advantages(eps, 0.5)
    kept = [i for i, a in enumerate(adv) if a is not None and a.any()]
    # The quantile is each model's own: b's 2.0 would be kept among a's episodes, a's 1.5 is never compared with b.
    assert kept == [3, 4, 6]
    # One advantage per step, the same on every step of an episode.
    assert [len(adv[i]) for i in kept] == [4, 2, 5]
    assert all(np.all(adv[i] == adv[i][0]) for i in kept)
    # The gain over the quantile in log speedup, each model's kept episodes scaled to mean 1.
    q = np.quantile(np.log([1.0, 1.1, 1.2, 1.5]), 0.5)
    assert adv[3][0] / adv[4][0] == pytest.approx((math.log(1.2) - q) / (math.log(1.5) - q))
    assert (adv[3][0] + adv[4][0]) / 2 == pytest.approx(1.0)
    assert adv[6][0] == pytest.approx(1.0)
    # A model whose episodes all reached the same graph has nothing to move towards: zero advantages, so only the
    # entropy bonus and the critic learn from its episodes.
    assert [adv[i].tolist() for i in (7, 8)] == [[0.0, 0.0], [0.0, 0.0]]


def test_epsilon_one_keeps_every_episode_but_the_worst():
    adv = risk_seeking_advantages([fake("a", s) for s in (1.0, 1.2, 1.4)], 1.0)
    assert adv[0] is None and adv[1] is not None and adv[2] is not None


@pytest.mark.parametrize("epsilon", [0.0, -0.1, 1.5])
def test_an_epsilon_outside_the_unit_interval_is_refused(epsilon):
    with pytest.raises(ValueError, match="--risk-epsilon"):
        risk_seeking_advantages([fake("a", 1.0)], epsilon)


def _played(n: int = 4):
    torch.manual_seed(0)
    policy = GraphActorCritic(PolicyConfig(hidden=32, gat_layers=2, heads=4)).eval()
    env = GraphRewriteEnv(T.merge_matmul_graph(), cap=16, horizon=3)
    rng = np.random.default_rng(0)
    return policy, [play(env, policy, rng) for _ in range(n)]


def _episode_logp(policy: GraphActorCritic, ep) -> float:
    with torch.no_grad():
        logp, _, _, _ = policy.chosen_log_probs(ep.decisions, torch.tensor(ep.rows))
    return float(logp.sum())


def test_the_update_moves_the_policy_towards_the_kept_episodes_and_learns_nothing_from_the_others():
    policy, episodes = _played()
    for ep, speedup in zip(episodes, (1.0, 1.05, 1.3, 1.6)):
        ep.speedup = speedup
    config = TrainConfig(epochs=4, minibatch=64, learning_rate=1e-3, risk_epsilon=0.5, entropy_coef=0.0)

    def updated(eps):
        torch.manual_seed(1)
        net = GraphActorCritic(PolicyConfig(hidden=32, gat_layers=2, heads=4))
        net.load_state_dict(policy.state_dict())
        stats = ppo_update(net.train(), torch.optim.Adam(net.parameters(), lr=1e-3), eps, config,
                           np.random.default_rng(0))
        return net.eval(), stats

    net, stats = updated(episodes)
    assert math.isfinite(stats["policy_loss"])
    # The best episode (1.6) becomes likelier.
    assert _episode_logp(net, episodes[3]) > _episode_logp(policy, episodes[3])
    # The episodes below the quantile are not learned from: other choices in them change nothing.
    for ep in episodes[:2]:
        ep.rows = [(r + 1) % len(d) for r, d in zip(ep.rows, ep.decisions)]
    other, _ = updated(episodes)
    assert all(torch.equal(other.state_dict()[k], v) for k, v in net.state_dict().items())


def test_risk_seeking_advantages_are_not_centred():
    """Centring (PPO's usual per-minibatch normalisation) would make the least of the kept episodes' advantages
    negative and push the policy away from an episode better than most."""
    assert ppo_params(TrainConfig(risk_epsilon=0.25)).normalize_advantages is False
    assert ppo_params(TrainConfig()).normalize_advantages is True


def _entropy(policy: GraphActorCritic, episodes) -> float:
    total = 0.0
    with torch.no_grad():
        for ep in episodes:  # each decision's rows are its own distribution: the sum is the decisions' entropy
            logp = policy.chosen_log_probs(ep.decisions, torch.tensor(ep.rows))[1]
            total -= float((logp.exp() * logp).sum())
    return total


def test_when_no_episode_is_better_only_the_entropy_bonus_and_the_critic_learn():
    """A policy collapsed onto one route plays equal episodes: nothing is above the quantile. The update must not
    stop for good (it never could restart), nor push the policy: only the entropy bonus (and the critic) move it."""
    policy, episodes = _played(3)
    for ep in episodes:
        ep.speedup = 1.25

    def update(**kw):
        net = GraphActorCritic(PolicyConfig(hidden=32, gat_layers=2, heads=4))
        net.load_state_dict(policy.state_dict())
        config = TrainConfig(risk_epsilon=0.25, epochs=4, **kw)
        stats = ppo_update(net.train(), torch.optim.Adam(net.parameters(), lr=1e-2), episodes, config,
                           np.random.default_rng(0))
        return net.eval(), stats

    net, stats = update(entropy_coef=0.0, value_coef=0.0)
    assert stats["policy_loss"] == 0.0 and math.isfinite(stats["entropy"])
    assert all(torch.equal(net.state_dict()[k], v) for k, v in policy.state_dict().items())
    net, _ = update(entropy_coef=0.5, value_coef=0.0)
    assert _entropy(net, episodes) > _entropy(policy, episodes)


def test_training_with_risk_epsilon_runs_and_refuses_a_bad_value(tmp_path):
    config = TrainConfig(models=("squeezenet1_1",), iterations=1, episodes_per_iteration=4, horizon=3, cap=8,
                         hidden=16, gat_layers=1, imitation_episodes=0, risk_epsilon=0.5, work_dir=str(tmp_path))
    train(config, progress=False)
    ckpt = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert ckpt["iteration"] == 1 and ckpt["config"]["risk_epsilon"] == 0.5
    with pytest.raises(ValueError, match="--risk-epsilon must be in"):
        train(replace(config, risk_epsilon=2.0, work_dir=str(tmp_path / "other")), progress=False)


def test_a_collapsed_model_beside_a_spread_one_still_gets_the_entropy_bonus():
    """The zero-advantage fallback is per model: one model's spread must not drop another, collapsed model's
    episodes from the update (only its entropy bonus could restore the spread it lost)."""
    policy, episodes = _played(4)
    for ep, (model, speedup) in zip(episodes, [("a", 1.25), ("a", 1.25), ("b", 1.0), ("b", 1.5)]):
        ep.model, ep.speedup = model, speedup

    def update(eps):
        net = GraphActorCritic(PolicyConfig(hidden=32, gat_layers=2, heads=4))
        net.load_state_dict(policy.state_dict())
        config = TrainConfig(risk_epsilon=0.25, epochs=2, entropy_coef=0.5, value_coef=0.0)
        ppo_update(net.train(), torch.optim.Adam(net.parameters(), lr=1e-2), eps, config, np.random.default_rng(0))
        return net.eval()

    with_a, without_a = update(episodes), update(episodes[2:])
    # Model a's episodes are in the update: its states' entropy is pushed up, which leaving them out would not do.
    assert not all(torch.equal(with_a.state_dict()[k], v) for k, v in without_a.state_dict().items())
    assert _entropy(with_a, episodes[:2]) > _entropy(without_a, episodes[:2])
