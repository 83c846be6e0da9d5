"""The graph-rewrite Gymnasium environment: spaces, checker, mask, reward, measurement, random agents."""
import time

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from tests.support import graph_examples as T
from tvm_rl import models
from tvm_rl.graph import profiles, roofline
from tvm_rl.graph.env import GraphRewriteEnv


def small_env(**kw):
    return GraphRewriteEnv(T.merge_matmul_graph(), cap=8, horizon=4, **kw)


def test_passes_gymnasium_env_checker():
    check_env(small_env(), skip_render_check=True)


def test_observation_has_a_graph_per_action_and_stop_is_always_valid():
    env = small_env()
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    n = info["n_candidates"]
    assert n >= 1
    mask = obs["action_mask"]
    assert mask[env.stop_action] == 1 and mask[:n].all() and not mask[n:env.stop_action].any()
    assert (info["action_mask"] == mask).all()
    # the stop slot holds the current graph, costed at RT[0]
    assert obs["n_nodes"][env.stop_action] > 0 and obs["globals"][env.stop_action, 0] == pytest.approx(1.0)
    assert (obs["n_nodes"][n:env.stop_action] == 0).all()


def test_shortlist_shows_the_cheapest_candidates_as_the_pass_does():
    mod = models.load("squeezenet1_1", "tiny").mod
    full = GraphRewriteEnv(mod, cap=64, horizon=3)
    short = GraphRewriteEnv(mod, cap=64, horizon=3, shortlist=4)
    check_env(short, skip_render_check=True)
    obs_full, info_full = full.reset(seed=0)
    obs, info = short.reset(seed=0)
    assert short.stop_action == 4 and obs["action_mask"].sum() == 5 and info_full["n_candidates"] > 4
    assert "left out of the shortlist" in info["candidates"]
    costs_full = np.sort(obs_full["globals"][:info_full["n_candidates"], 0])
    assert np.allclose(np.sort(obs["globals"][:4, 0]), costs_full[:4])  # the four cheapest, priced exactly
    obs, *_ = short.step(0)  # and again after a step (ranked by the cost changes seen before)
    assert obs["action_mask"].sum() == 5


def test_rewards_add_up_to_the_relative_gain():
    env = GraphRewriteEnv(T.bn_graph(), cap=8, horizon=5)
    obs, info = env.reset(seed=0)
    rewards, done = [], False
    while not done:
        obs, r, term, trunc, info = env.step(0 if info["action_mask"][0] else env.stop_action)
        rewards.append(r)
        done = term or trunc
    total = sum(rewards)
    assert total == pytest.approx((info["initial_cost_ms"] - info["cost_ms"]) / info["initial_cost_ms"] * 100)
    assert info["applied"][0].startswith("fold_batchnorm")
    assert rewards[0] > 0  # folding the batch norm saves its kernel under the roofline


def test_invalid_action_is_a_no_op_and_stop_terminates():
    env = small_env()
    obs, info = env.reset(seed=0)
    invalid = int(np.flatnonzero(obs["action_mask"] == 0)[0])
    obs2, r, term, trunc, info2 = env.step(invalid)
    assert info2["invalid_action"] and r == 0.0 and not term and info2["applied"] == []
    _, _, term, _, _ = env.step(env.stop_action)
    assert term


def test_real_measurement_every_n_steps_rescales_the_proxy():
    measured = []

    def fake_measure(mod):  # a "real" latency 3x the proxy, recorded to see when it is called
        measured.append(mod)
        return 3 * profiles.graph_roofline_ms(mod, roofline.default_hardware("llvm"))

    env = GraphRewriteEnv(T.merge_matmul_graph(outs=(4, 6, 4, 5)), cap=8, horizon=3, measure=fake_measure,
                          measure_every=2)
    _, info = env.reset(seed=0)
    flags, total = [info["measured"]], 0.0
    for _ in range(3):
        _, r, term, trunc, info = env.step(0 if info["action_mask"][0] else env.stop_action)
        flags.append(info["measured"])
        total += r
        if term or trunc:
            break
    assert flags[0] and flags[2] and flags[-1]  # at reset, every 2nd step, at the end
    assert total == pytest.approx((info["initial_cost_ms"] - info["cost_ms"]) / info["initial_cost_ms"] * 100)
    with pytest.raises(ValueError, match="measure_every"):
        GraphRewriteEnv(T.bn_graph(), measure=fake_measure)


def run_random_episode(mod, seed=0, cap=16, horizon=3):
    env = GraphRewriteEnv(mod, cap=cap, horizon=horizon)
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    steps, done = 0, False
    while not done:
        assert env.observation_space.contains(obs)
        action = int(rng.choice(np.flatnonzero(info["action_mask"])))
        obs, _, term, trunc, info = env.step(action)
        assert not info["invalid_action"]
        steps, done = steps + 1, term or trunc
    return steps, info


def test_random_agent_runs_an_episode_on_a_tiny_model():
    steps, info = run_random_episode(models.load("resnet18", "tiny").mod, seed=1)
    assert 1 <= steps <= 3


@pytest.mark.slow
@pytest.mark.parametrize("name", models.names())
def test_random_agent_runs_full_episodes_on_every_tiny_model(name):
    start = time.perf_counter()
    mod = models.load(name, "tiny").mod
    for seed in range(2):
        steps, info = run_random_episode(mod, seed=seed, cap=64, horizon=4)
        assert steps >= 1 and info["cost_ms"] > 0
    assert time.perf_counter() - start < 300


def hashed_cost(mod):
    """A cost with no relation to the graph's work, so some rewrites are uphill and some downhill."""
    import tvm_ffi

    return 1.0 + (tvm_ffi.structural_hash(mod) % 1000) / 1000.0


def test_best_reward_pays_only_for_a_new_cheapest_graph():
    def walk(reward):
        env = GraphRewriteEnv(T.merge_matmul_graph(), cap=8, horizon=6, cost=hashed_cost, reward=reward)
        obs, info = env.reset(seed=0)
        steps, done = [], False
        while not done:
            valid = np.flatnonzero(obs["action_mask"][:env.stop_action])
            obs, r, term, trunc, info = env.step(int(valid[-1]) if len(valid) else env.stop_action)
            steps.append((r, info["cost_ms"]))
            done = term or trunc
        return steps, info

    delta, _ = walk("delta")
    best, info = walk("best")
    assert [c for _, c in delta] == [c for _, c in best]  # the same walk, rewarded two ways
    assert any(r < 0 for r, _ in delta), "the walk should go uphill somewhere for this test to mean anything"
    rt0 = info["initial_cost_ms"]
    lowest = min([rt0] + [c for _, c in best])
    assert info["best_cost_ms"] == pytest.approx(lowest)
    assert sum(r for r, _ in best) == pytest.approx((rt0 - lowest) / rt0 * 100)
    assert all(r >= 0 for r, _ in best)


def test_unknown_reward_is_named():
    with pytest.raises(ValueError, match="reward must be one of delta, best, got 'final'"):
        small_env(reward="final")
