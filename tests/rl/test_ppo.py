"""The shared PPO core: GAE, the clipped losses, the diagnostics, and one update that learns."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tvm_rl.rl.ppo import (
    PPOParams,
    clipped_policy_loss,
    explained_variance,
    gae,
    minibatches,
    ppo_loss,
    ppo_update,
    value_loss,
)


def params(**kw) -> PPOParams:
    base = {"gamma": 0.9, "gae_lambda": 0.8, "clip": 0.2, "value_coef": 0.5, "entropy_coef": 0.0, "epochs": 1,
            "minibatch": 64, "max_grad_norm": 10.0}
    return PPOParams(**(base | kw))


REWARDS = np.array([1.0, 2.0, 3.0])
VALUES = np.array([0.5, 1.0, 1.5])


def test_gae_of_a_three_step_episode_that_ends_in_a_terminal_state():
    # gamma 0.9, lambda 0.8: delta_2 = 3 - 1.5; delta_1 = 2 + 0.9 * 1.5 - 1; delta_0 = 1 + 0.9 * 1 - 0.5
    adv = gae(REWARDS, VALUES, last_value=10.0, terminals=np.array([0, 0, 1]), gamma=0.9, gae_lambda=0.8)
    np.testing.assert_allclose(adv, [1.4 + 0.72 * 3.43, 2.35 + 0.72 * 1.5, 1.5], rtol=1e-12)
    assert adv[-1] == 1.5  # the last_value of a terminal state is never used


def test_gae_bootstraps_a_cut_off_trajectory_from_the_last_value():
    adv = gae(REWARDS, VALUES, last_value=2.0, gamma=0.9, gae_lambda=0.8)
    # delta_2 = 3 + 0.9 * 2 - 1.5 = 3.3
    np.testing.assert_allclose(adv, [1.4 + 0.72 * (2.35 + 0.72 * 3.3), 2.35 + 0.72 * 3.3, 3.3], rtol=1e-12)


def test_gae_does_not_look_across_an_episode_boundary():
    # The first episode ends after step 1 (delta_1 = 2 - 1, nothing after); step 2 starts the next one.
    adv = gae(REWARDS, VALUES, last_value=2.0, terminals=np.array([0, 1, 0]), gamma=0.9, gae_lambda=0.8)
    np.testing.assert_allclose(adv, [1.4 + 0.72 * 1.0, 1.0, 3.3], rtol=1e-12)


def test_gae_runs_over_parallel_walks_in_their_dtype():
    rewards = np.stack([REWARDS, 2 * REWARDS], axis=1).astype(np.float32)
    values = np.stack([VALUES, VALUES], axis=1).astype(np.float32)
    adv = gae(rewards, values, np.array([2.0, 0.0], np.float32), gamma=0.9, gae_lambda=0.8)
    assert adv.dtype == np.float32 and adv.shape == (3, 2)
    np.testing.assert_allclose(adv[:, 0], gae(REWARDS, VALUES, 2.0, gamma=0.9, gae_lambda=0.8), rtol=1e-6)
    np.testing.assert_allclose(adv[:, 1], gae(2 * REWARDS, VALUES, 0.0, gamma=0.9, gae_lambda=0.8), rtol=1e-6)


def test_clipped_loss_is_the_plain_surrogate_at_ratio_one():
    adv = torch.tensor([1.0, -2.0, 0.5])
    ratio = torch.ones(3, requires_grad=True)
    loss = clipped_policy_loss(ratio, adv, 0.2)
    assert loss.item() == pytest.approx(-adv.mean().item())
    loss.backward()
    np.testing.assert_allclose(ratio.grad.numpy(), -adv.numpy() / 3)  # the unclipped gradient


@pytest.mark.parametrize("r, a, expected, clipped", [
    (1.5, 2.0, -2.0 * 1.2, True),    # good action made much likelier: the gain stops at 1 + clip
    (1.5, -2.0, 2.0 * 1.5, False),   # bad action made likelier: the full penalty (pessimistic bound)
    (0.5, -2.0, 2.0 * 0.8, True),    # bad action made much rarer: the gain stops at 1 - clip
    (0.5, 2.0, -2.0 * 0.5, False),   # good action made rarer: the full penalty
])
def test_clipped_loss_beyond_the_clip_range(r, a, expected, clipped):
    ratio = torch.tensor([r], requires_grad=True)
    loss = clipped_policy_loss(ratio, torch.tensor([a]), 0.2)
    assert loss.item() == pytest.approx(expected)
    loss.backward()
    assert (ratio.grad.item() == 0.0) is clipped  # a clipped sample pushes the policy no further


def test_value_loss_clipping_keeps_the_worse_of_the_two():
    value, ret, old = torch.tensor([2.0]), torch.tensor([0.0]), torch.tensor([1.0])
    assert value_loss(value, ret).item() == pytest.approx(0.5 * 4.0)
    # Clipped move: 1 + 0.2 = 1.2, squared error 1.44 < 4, so the unclipped (worse) one counts.
    assert value_loss(value, ret, old, 0.2).item() == pytest.approx(0.5 * 4.0)
    # Moving towards the return by more than the clip: the clipped (worse) error counts.
    assert value_loss(torch.tensor([0.0]), ret, old, 0.2).item() == pytest.approx(0.5 * 0.8 ** 2)


def test_explained_variance():
    returns = np.array([1.0, 3.0, -2.0, 0.5])
    assert explained_variance(returns, returns) == pytest.approx(1.0)
    assert explained_variance(np.full(4, returns.mean()), returns) == pytest.approx(0.0, abs=1e-12)
    assert explained_variance(np.full(4, 7.0), returns) == pytest.approx(0.0, abs=1e-12)
    assert np.isnan(explained_variance(returns, np.ones(4)))  # nothing to explain


def test_minibatches_by_size_or_evenly_one_permutation_per_epoch():
    rng, twin = np.random.default_rng(0), np.random.default_rng(0)
    sized = list(minibatches(10, params(minibatch=4, split="size"), rng))
    assert [len(m) for m in sized] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate(sized), twin.permutation(10))
    even = list(minibatches(10, params(minibatch=4, split="even"), rng))
    assert [len(m) for m in even] == [5, 5]
    np.testing.assert_array_equal(np.concatenate(even), twin.permutation(10))


def test_params_come_from_an_agents_config_by_name():
    config = SimpleNamespace(gamma=0.5, gae_lambda=0.9, clip=0.1, value_coef=1.0, entropy_coef=0.0, epochs=2,
                             minibatch=8, lr=1e-3)
    p = PPOParams.from_config(config, max_grad_norm=0.5, split="even")
    assert (p.gamma, p.clip, p.minibatch, p.max_grad_norm, p.split) == (0.5, 0.1, 8, 0.5, "even")


class Categorical(torch.nn.Module):
    """A state-free policy over 3 actions with a scalar critic: the smallest thing PPO can train."""

    def __init__(self):
        super().__init__()
        self.logits = torch.nn.Parameter(torch.zeros(3))
        self.value = torch.nn.Parameter(torch.zeros(()))

    def evaluator(self, actions: torch.Tensor):
        def evaluate(idx: torch.Tensor):
            dist = torch.distributions.Categorical(logits=self.logits.expand(len(idx), 3))
            return dist.log_prob(actions[idx]), dist.entropy(), self.value.expand(len(idx))
        return evaluate


def rollout(n: int = 60):
    actions = torch.arange(n) % 3
    old_logp = torch.full((n,), float(np.log(1 / 3)))
    adv = (actions == 0).float() - 0.5  # action 0 is better than the others
    return actions, old_logp, adv, adv.clone(), torch.zeros(n)


def test_the_first_minibatch_of_an_update_from_the_rollout_policy_has_no_kl_and_no_clipping():
    policy = Categorical()
    actions, old_logp, adv, ret, values = rollout()
    optim = torch.optim.SGD(policy.parameters(), lr=0.5)
    seen = []

    def evaluate(idx):  # record each minibatch's diagnostics as the update sees them
        out = policy.evaluator(actions)(idx)
        seen.append(ppo_loss(*out, old_logp[idx], adv[idx], ret[idx], params())[1])
        return out

    stats = ppo_update(evaluate, policy.parameters(), optim, old_logp, adv, ret, params(epochs=3, minibatch=20),
                       np.random.default_rng(0), old_values=values)
    assert len(seen) == 9
    assert seen[0]["approx_kl"] == 0.0 and seen[0]["clipfrac"] == 0.0
    assert seen[-1]["approx_kl"] > 0.0  # the policy has moved since the rollout
    assert stats.approx_kl == pytest.approx(np.mean([s["approx_kl"] for s in seen]))
    assert stats.clipfrac == pytest.approx(np.mean([s["clipfrac"] for s in seen]))
    assert stats.entropy == pytest.approx(np.mean([s["entropy"] for s in seen]))
    assert stats.explained_variance == pytest.approx(0.0)  # a zero critic explains nothing


def counted_update(lr: float, **kw):
    """One update of a fresh Categorical policy on rollout(), SGD at `lr`, params(**kw): the number of minibatches
    it evaluated, the policy's move over the whole rollout after it (approx_kl) and the update's stats."""
    policy = Categorical()
    actions, old_logp, adv, ret, values = rollout()
    calls = [0]

    def evaluate(idx):
        calls[0] += 1
        return policy.evaluator(actions)(idx)

    stats = ppo_update(evaluate, policy.parameters(), torch.optim.SGD(policy.parameters(), lr=lr), old_logp, adv,
                       ret, params(**kw), np.random.default_rng(0))
    with torch.no_grad():
        log_ratio = policy.evaluator(actions)(torch.arange(len(actions)))[0] - old_logp
        moved = ((log_ratio.exp() - 1) - log_ratio).mean().item()
    return calls[0], moved, stats


def test_target_kl_stops_the_epochs_once_the_policy_has_moved_that_far():
    """CleanRL's target_kl: the first epoch of a large step moves the policy past it, so no second epoch runs."""
    def run(target_kl):
        return counted_update(2.0, epochs=5, minibatch=20, target_kl=target_kl)[0]

    assert run(0.0) == 15  # off: 5 epochs of 3 minibatches
    assert run(1e-4) == 3  # one epoch, then stop
    assert run(10.0) == 15  # never reached


def test_a_step_wise_kl_check_stops_within_the_epoch_that_would_overshoot():
    """kl_stop="step": the update stops at the first minibatch showing the policy moved past 1.5 x target_kl, without
    stepping on it, where the epoch-wise check lets the whole epoch's steps through; so it ends closer to the cap."""
    def run(kl_stop):
        return counted_update(0.5, epochs=5, minibatch=8, target_kl=0.01, kl_stop=kl_stop)

    epoch_calls, epoch_moved, _ = run("epoch")
    step_calls, step_moved, stats = run("step")
    assert epoch_calls == 8  # the first epoch's 8 minibatches all step, then the epoch's mean is past the cap
    assert 1 < step_calls < 8  # stopped inside the first epoch
    assert step_moved < epoch_moved
    assert stats.approx_kl > 0.0  # the stopping minibatch's measurement is kept in the diagnostics
    with pytest.raises(ValueError, match="kl_stop must be 'epoch' or 'step', not 'batch'"):
        params(kl_stop="batch")


def test_an_update_makes_the_positively_advantaged_action_likelier():
    torch.manual_seed(0)
    policy = Categorical()
    actions, old_logp, adv, ret, values = rollout()
    optim = torch.optim.Adam(policy.parameters(), lr=0.05)
    stats = ppo_update(policy.evaluator(actions), policy.parameters(), optim, old_logp, adv, ret,
                       params(epochs=4, minibatch=16), np.random.default_rng(0), old_values=values)
    p = torch.softmax(policy.logits.detach(), 0)
    assert p[0] > 1 / 3 + 0.05 and p[1] < 1 / 3 and p[2] < 1 / 3, p
    assert policy.value.item() != 0.0  # the critic learned too
    d = stats.as_dict()
    assert set(d) == {"policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "explained_variance"}
    assert all(np.isfinite(v) for v in d.values()) and 0.0 <= d["clipfrac"] <= 1.0
    assert d["entropy"] < np.log(3) and d["approx_kl"] > 0.0


def test_the_tuner_agent_keeps_each_updates_diagnostics():
    from tvm_rl.tune.agent import TOKEN_FEATURES, PPOAgent, PPOConfig

    agent = PPOAgent(PPOConfig(minibatch=8, epochs=2))
    rng = np.random.default_rng(0)
    w, k = 6, 4
    trajectory = []
    for _ in range(5):
        tokens = rng.random((w, k, TOKEN_FEATURES), dtype=np.float32)
        glob = rng.random((w, 3), dtype=np.float32)
        actions, logp, value = agent.act(tokens, glob, rng)
        trajectory.append((tokens, glob, actions, logp, value, rng.standard_normal(w).astype(np.float32)))
    agent._store(trajectory, np.zeros(w, np.float32))
    rewards = np.stack([t[5] for t in trajectory])
    np.testing.assert_allclose(np.concatenate(agent.rollout.advantages),
                               gae(rewards, np.stack([t[4] for t in trajectory]), np.zeros(w, np.float32),
                                   gamma=agent.config.gamma, gae_lambda=agent.config.gae_lambda).ravel())
    stats = agent.update(rng)
    assert agent.updates == 1 and agent.history == [stats]
    assert {"approx_kl", "clipfrac", "entropy", "explained_variance", "policy_loss", "value_loss"} == set(stats)
