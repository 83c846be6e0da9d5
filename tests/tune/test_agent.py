"""The PPO agent: walks stay in range, every action gives a valid schedule or a reported rejection, and the
policy learns from the reward (on a synthetic score, so the test needs no cost model)."""

import numpy as np
import pytest

from tvm_rl.tune.agent import TOKEN_FEATURES, PPOAgent, PPOConfig, observe
from tvm_rl.tune.moves import MoveSpace


def test_observation_shapes_and_ranges(space):
    rng = np.random.default_rng(0)
    vecs = np.stack([space.random(rng) for _ in range(5)])
    moves = MoveSpace(space)
    tokens, glob = observe(moves, vecs, np.array([0.1, np.nan, 0.3, 0.4, 0.5]), 0.5)
    assert tokens.shape == (5, moves.size, TOKEN_FEATURES) and glob.shape == (5, 3)
    assert np.all(np.isfinite(tokens)) and np.all(tokens >= 0) and np.all(tokens <= 2)
    assert glob[1, 2] == 1.0 and glob[1, 0] == 0.0  # an unrated point is flagged, not NaN


def test_every_action_gives_a_schedule_or_a_reported_rejection(space):
    agent = PPOAgent(PPOConfig(seed=0))
    rng = np.random.default_rng(1)
    vecs = np.stack([space.default()] * 6 + [space.random(rng) for _ in range(6)])
    moves = MoveSpace(space)
    tokens, glob = observe(moves, vecs, np.zeros(len(vecs)), 0.0)
    outcomes = {"valid": 0, "rejected": 0}
    for _ in range(3):
        actions, logp, value = agent.act(tokens, glob, rng)
        assert actions.shape == (len(vecs), moves.size) and set(np.unique(actions)) <= {0, 1, 2}
        assert np.all(np.isfinite(logp)) and np.all(np.isfinite(value))
        for vec, act in zip(vecs, actions):
            moved = moves.move(vec, act, rng)
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
    """Score = minus the distance (in log2 tile sizes and normalised indices) to a target point. The walks update
    the policy every `update_every` steps; a trained agent must end its walks closer to the target than the same
    agent before training, from the same starts with the same random stream."""
    moves = MoveSpace(space)
    cfg = PPOConfig(walks=32, max_steps=48, update_every=16, stuck_fraction=1.01, seed=0)
    agent = PPOAgent(cfg)
    target = moves.draft_features(space.random(np.random.default_rng(7))[None])[0]

    def evaluate(vecs: np.ndarray) -> np.ndarray:
        return -np.abs(moves.draft_features(vecs) - target).sum(1)

    def walk_end(rounds: int) -> float:
        """Mean score of the walks' last points from fixed starts (no learning on the way)."""
        starts = np.stack([space.random(np.random.default_rng(100 + i)) for i in range(32)])
        probe = PPOAgent(cfg)
        probe.policy.load_state_dict(agent.policy.state_dict())
        result = probe.explore(moves, starts, evaluate(starts), evaluate, np.random.default_rng(5), learn=False)
        assert not result.updates and probe.updates == 0
        return float(np.mean(sorted(result.scores.values())[-32:]))

    before = walk_end(0)
    rng = np.random.default_rng(0)
    for _ in range(6):
        starts = np.stack([space.random(rng) for _ in range(cfg.walks)])
        result = agent.explore(moves, starts, evaluate(starts), evaluate, rng)
        assert result.steps == cfg.max_steps and result.invalid == 0
        assert len(result.updates) == cfg.max_steps // cfg.update_every
        for stats in result.updates:
            assert all(np.isfinite(stats[k]) for k in ("policy_loss", "value_loss", "entropy", "approx_kl"))
    assert agent.updates == 6 * 3
    assert walk_end(6) > before, (before, walk_end(6))


def test_save_and_load_round_trip(tmp_path, space):
    agent = PPOAgent(PPOConfig(seed=3, walks=4))
    path = tmp_path / "agent.pt"
    agent.save(str(path))
    again = PPOAgent.load(str(path))
    vecs = np.stack([space.default()] * 4)
    tokens, glob = observe(MoveSpace(space), vecs, np.zeros(4), 0.0)
    a1 = agent.act(tokens, glob, np.random.default_rng(0))
    a2 = again.act(tokens, glob, np.random.default_rng(0))
    assert np.array_equal(a1[0], a2[0]) and np.allclose(a1[1], a2[1]) and again.config.walks == 4


@pytest.mark.parametrize("reward", ["delta", "improvement"])
def test_walk_rewards_add_up_to_what_the_reward_promises(space, reward):
    """delta: a walk's rewards add up to its last rating minus its first; improvement: to its best minus its first,
    and no step is punished for going down."""
    moves = MoveSpace(space)
    agent = PPOAgent(PPOConfig(walks=8, max_steps=20, update_every=100, stuck_fraction=1.01, keep_bias=0.0,
                               reward=reward, seed=1))
    rng = np.random.default_rng(3)
    target = moves.draft_features(space.random(np.random.default_rng(9))[None])[0]

    def evaluate(vecs: np.ndarray) -> np.ndarray:
        return -np.abs(moves.draft_features(vecs) - target).sum(1)

    stored = []
    agent._store = lambda trajectory, last_value: stored.append(trajectory)
    starts = np.stack([space.random(rng) for _ in range(8)])
    agent.explore(moves, starts, evaluate(starts), evaluate, rng, learn=True)
    (trajectory,) = stored
    rewards = np.stack([t[5] for t in trajectory])  # (steps, walks)
    ratings = np.stack([t[1][:, 0] for t in trajectory])  # each step's rating before the move
    assert rewards.shape == (20, 8)
    if reward == "improvement":
        assert np.all(rewards >= 0)
        walk_best = np.maximum(ratings.max(0), ratings[-1] + rewards[-1])
        np.testing.assert_allclose(rewards.sum(0), walk_best - ratings[0], rtol=1e-4, atol=1e-4)
    else:
        np.testing.assert_allclose(rewards.sum(0), ratings[-1] + rewards[-1] - ratings[0], rtol=1e-4, atol=1e-4)
