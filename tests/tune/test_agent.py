"""The PPO agent: walks stay in range, every action gives a valid schedule or a reported rejection, and the
policy learns from the reward (on a synthetic score, so the test needs no cost model)."""
from pathlib import Path

import numpy as np
import pytest

from tvm_rl import measure
from tvm_rl.tune import knobs, tophub
from tvm_rl.tune.agent import PPOAgent, PPOConfig, knob_tokens, observe

TOPHUB = Path(__file__).resolve().parents[3] / "shared" / "tophub"


@pytest.fixture(scope="module")
def space():
    if not TOPHUB.is_dir():
        pytest.skip(f"no TopHub logs at {TOPHUB}")
    task = tophub.load_tasks(TOPHUB, ops=["conv2d"], shape_filter=lambda t: t.flops < 2e7, max_tasks=1)[0]
    ctx = knobs.make_context(task.mod(), measure.host_cpu_target(), task.name, seed=0)
    return knobs.knob_spaces(ctx)[0]


def test_observation_shapes_and_ranges(space):
    rng = np.random.default_rng(0)
    vecs = np.stack([space.random(rng) for _ in range(5)])
    tokens, glob = observe(space, knob_tokens(space), vecs, np.array([0.1, np.nan, 0.3, 0.4, 0.5]), 0.5)
    assert tokens.shape == (5, space.size, 9) and glob.shape == (5, 3)
    assert np.all(tokens[..., 0] >= 0) and np.all(tokens[..., 0] <= 1)
    assert glob[1, 2] == 1.0 and glob[1, 0] == 0.0  # an unrated point is flagged, not NaN


def test_every_action_gives_a_schedule_or_a_reported_rejection(space):
    agent = PPOAgent(PPOConfig(seed=0))
    rng = np.random.default_rng(1)
    vecs = np.stack([space.default()] * 6 + [space.random(rng) for _ in range(6)])
    tokens, glob = observe(space, knob_tokens(space), vecs, np.zeros(len(vecs)), 0.0)
    outcomes = {"valid": 0, "rejected": 0}
    for _ in range(3):
        actions, logp, value = agent.act(tokens, glob, rng)
        assert actions.shape == vecs.shape and set(np.unique(actions)) <= {0, 1, 2}
        assert np.all(np.isfinite(logp)) and np.all(np.isfinite(value))
        for vec, act in zip(vecs, actions):
            moved = space.step(vec, act - 1)
            assert np.all((moved >= 0) & (moved < space.cardinalities))
            sch = space.decode(moved)
            if sch is None:
                assert space.last_error  # says which knob or postprocessor refused
                outcomes["rejected"] += 1
            else:
                assert space.last_error is None
                outcomes["valid"] += 1
    assert outcomes["valid"] > 0


def test_policy_learns_to_follow_the_reward(space):
    """Score = mean normalised knob value: the return is highest for "increase"; PPO must learn that."""
    cfg = PPOConfig(walks=32, max_steps=8, max_evaluations=10_000, stuck_fraction=1.01, seed=0)
    agent = PPOAgent(cfg)
    rng = np.random.default_rng(0)

    def evaluate(vecs: np.ndarray) -> np.ndarray:
        return np.array([space.normalised(v).mean() for v in vecs])

    static = knob_tokens(space)

    def p_increase() -> float:
        vecs = np.stack([space.random(np.random.default_rng(i)) for i in range(64)])
        tokens, glob = observe(space, static, vecs, evaluate(vecs), 0.0)
        actions, _, _ = agent.act(tokens, glob, np.random.default_rng(123))
        return float((actions == 2).mean() - (actions == 0).mean())

    before = p_increase()
    gains = []
    for _ in range(12):
        starts = np.stack([space.random(rng) for _ in range(cfg.walks)])
        result = agent.explore(space, starts, evaluate(starts), evaluate, rng)
        assert result.steps == cfg.max_steps and result.invalid == 0
        stats = agent.update(rng)
        assert np.isfinite(stats["policy_loss"]) and np.isfinite(stats["value_loss"])
        gains.append(max(result.scores.values()))
    assert p_increase() > before + 0.2, (before, p_increase())
    assert agent.updates == 12


def test_save_and_load_round_trip(tmp_path, space):
    agent = PPOAgent(PPOConfig(seed=3, walks=4))
    path = tmp_path / "agent.pt"
    agent.save(str(path))
    again = PPOAgent.load(str(path))
    vecs = np.stack([space.default()] * 4)
    tokens, glob = observe(space, knob_tokens(space), vecs, np.zeros(4), 0.0)
    a1 = agent.act(tokens, glob, np.random.default_rng(0))
    a2 = again.act(tokens, glob, np.random.default_rng(0))
    assert np.array_equal(a1[0], a2[0]) and np.allclose(a1[1], a2[1]) and again.config.walks == 4
