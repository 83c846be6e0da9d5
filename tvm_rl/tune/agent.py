"""CHAMELEON's agent: an actor-critic PPO policy that walks a kernel's knob space, one step for every knob at once.

State: the knob vector, one token per knob (normalised index, log cardinality, knob kind, position, whether it
sits at an end of its range) plus global features (the cost model's score of the current point, the walk's
progress). Action: decrease / keep / increase for every knob. Reward: the change of the cost model's score
(an invalid point is penalised and the walk stays where it was). The network is shared across knobs (a small
per-knob MLP, mean-pooled context, one actor head per knob and one critic on the pooled state), so the same
agent serves knob spaces of any size and is reused across tuning rounds and across tasks.

Written after CleanRL's single-file PPO: `PPOConfig` holds every hyperparameter (CHAMELEON's: lr 1e-3,
3 epochs, clip 0.2), `explore` collects the walks' rollout, `update` is the clipped-objective step (the PPO
core shared with the graph agent, `tvm_rl.rl.ppo`).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ..errors import CheckpointError
from ..rl.ppo import PPOParams, gae, ppo_update
from .knobs import CATEGORICAL, COMPUTE_LOCATION, TILE, KnobSpace

TOKEN_FEATURES = 9
GLOBAL_FEATURES = 3
INVALID = float("nan")


@dataclass
class PPOConfig:
    """Walks and PPO hyperparameters (CHAMELEON: 128 walks, up to 500 steps, lr 1e-3, 3 epochs, clip 0.2).

    `max_evaluations` bounds the distinct points the cost model rates per round: each costs a trace replay
    plus feature extraction (tens of milliseconds on a CPU), which is what bounds a round's time, not the step count.
    """

    walks: int = 128
    max_steps: int = 500
    max_evaluations: int = 512
    stuck_fraction: float = 0.9  # stop the round when this share of walks made no move in a step
    lr: float = 1e-3
    epochs: int = 3
    clip: float = 0.2
    gamma: float = 0.9
    gae_lambda: float = 0.95
    entropy_coef: float = 0.01
    value_coef: float = 0.5
    minibatch: int = 256  # the rollout is cut into max(1, n // minibatch) near-equal minibatches
    max_grad_norm: float = 0.5
    hidden: int = 64
    invalid_penalty: float = 0.05
    keep_bias: float = 1.5  # initial preference for "keep": without it a step moves two thirds of the knobs
    seed: int = 0


def knob_tokens(space: KnobSpace) -> np.ndarray:
    """The static part of each knob's token: log cardinality, kind one-hot, relative position; (K, 5)."""
    k = max(space.size, 1)
    rows = []
    for knob in space.knobs:
        rows.append([np.log2(knob.cardinality) / 8.0, knob.kind == TILE, knob.kind == CATEGORICAL,
                     knob.kind == COMPUTE_LOCATION, knob.position / k])
    return np.asarray(rows, dtype=np.float32).reshape(space.size, 5)


def observe(space: KnobSpace, static: np.ndarray, vecs: np.ndarray, scores: np.ndarray,
            progress: float) -> tuple[np.ndarray, np.ndarray]:
    """Tokens (W, K, TOKEN_FEATURES) and global features (W, GLOBAL_FEATURES) for W points of one space."""
    vecs = np.asarray(vecs)
    cards = space.cardinalities
    w = vecs.shape[0]
    norm = vecs / np.maximum(cards - 1, 1)
    tokens = np.concatenate([
        norm[..., None], np.broadcast_to(static, (w, *static.shape)),
        (vecs == 0)[..., None], (vecs == cards - 1)[..., None],
        np.full((w, space.size, 1), np.log2(max(space.size, 1)) / 6.0),
    ], axis=-1).astype(np.float32)
    glob = np.stack([np.nan_to_num(scores, nan=0.0), np.full(w, progress), np.isnan(scores).astype(float)],
                    axis=-1).astype(np.float32)
    return tokens, glob


class KnobPolicy(nn.Module):
    """Per-knob actor (3 logits per knob) and a critic on the mean-pooled state, for any number of knobs."""

    def __init__(self, hidden: int = 64, keep_bias: float = 1.5):
        super().__init__()
        self.encode = nn.Sequential(nn.Linear(TOKEN_FEATURES + GLOBAL_FEATURES, hidden), nn.Tanh(),
                                    nn.Linear(hidden, hidden), nn.Tanh())
        self.actor = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.Tanh(), nn.Linear(hidden, 3))
        self.critic = nn.Sequential(nn.Linear(hidden + GLOBAL_FEATURES, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        with torch.no_grad():
            self.actor[-1].weight.mul_(0.01)
            self.actor[-1].bias.copy_(torch.tensor([0.0, keep_bias, 0.0]))

    def forward(self, tokens: torch.Tensor, glob: torch.Tensor, mask: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens (B, K, F), glob (B, G), mask (B, K) true for real knobs -> logits (B, K, 3), value (B,)."""
        g = glob[:, None, :].expand(-1, tokens.shape[1], -1)
        h = self.encode(torch.cat([tokens, g], dim=-1))
        m = mask[..., None].float()
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
        logits = self.actor(torch.cat([h, pooled[:, None, :].expand_as(h)], dim=-1))
        value = self.critic(torch.cat([pooled, glob], dim=-1)).squeeze(-1)
        return logits, value


def _log_prob(logits: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Joint log-probability of the per-knob actions (sum over real knobs) and the mean per-knob entropy."""
    dist = torch.distributions.Categorical(logits=logits)
    m = mask.float()
    return (dist.log_prob(actions) * m).sum(1), (dist.entropy() * m).sum(1) / m.sum(1).clamp(min=1.0)


@dataclass
class Rollout:
    """One round's transitions, for every walk of every knob space (padded to the largest knob count)."""

    tokens: list[np.ndarray] = field(default_factory=list)
    glob: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)  # in {0, 1, 2} = decrease, keep, increase
    logp: list[np.ndarray] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)
    advantages: list[np.ndarray] = field(default_factory=list)
    returns: list[np.ndarray] = field(default_factory=list)

    def __len__(self) -> int:
        return sum(len(a) for a in self.actions)


@dataclass
class WalkResult:
    """What one round of walks in one space saw: every valid point rated (vector -> score) and the counts."""

    scores: dict[tuple, float]
    steps: int
    evaluations: int
    invalid: int


# Rates points of one knob space: (n, K) index vectors -> (n,) scores, NaN for a vector that does not decode.
Evaluator = Callable[[np.ndarray], np.ndarray]


class PPOAgent:
    """The policy, its optimiser and the walk loop. One agent can serve every task of a tuning run."""

    def __init__(self, config: PPOConfig | None = None):
        self.config = config or PPOConfig()
        torch.manual_seed(self.config.seed)
        self.policy = KnobPolicy(self.config.hidden, self.config.keep_bias)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=self.config.lr, eps=1e-5)
        self.rollout = Rollout()
        self.updates = 0
        self.history: list[dict[str, float]] = []  # each update's diagnostics (PPOStats), this session's

    @torch.no_grad()
    def act(self, tokens: np.ndarray, glob: np.ndarray, rng: np.random.Generator
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample per-knob actions for W points: (actions in {0,1,2} (W, K), log-probs (W,), values (W,))."""
        t, g = torch.from_numpy(tokens), torch.from_numpy(glob)
        mask = torch.ones(t.shape[:2], dtype=torch.bool)
        logits, value = self.policy(t, g, mask)
        probs = torch.softmax(logits, -1).numpy().astype(np.float64)
        # Inverse-CDF sampling with numpy's generator keeps walks reproducible from the strategy's seed.
        u = rng.random(probs.shape[:2])[..., None]
        actions = np.minimum((probs.cumsum(-1) < u).sum(-1), 2)
        logp, _ = _log_prob(logits, torch.from_numpy(actions), mask)
        return actions, logp.numpy(), value.numpy()

    def explore(self, space: KnobSpace, starts: np.ndarray, start_scores: np.ndarray, evaluate: Evaluator,
                rng: np.random.Generator, max_evaluations: int | None = None) -> WalkResult:
        """Walk from `starts` (W, K) for up to `max_steps`, recording the transitions for `update`.

        Stops early when the evaluation budget is spent or when `stuck_fraction` of the walks made no move
        (every knob kept, or blocked at its range end, or the move was invalid). Returns every valid point rated.
        """
        cfg = self.config
        budget = cfg.max_evaluations if max_evaluations is None else max_evaluations
        static = knob_tokens(space)
        vecs, scores = np.array(starts, dtype=np.int64), np.array(start_scores, dtype=float)
        seen: dict[tuple, float] = {tuple(v): s for v, s in zip(vecs, scores) if not np.isnan(s)}
        if vecs.shape[1] == 0:  # a kernel with no sampling decisions has one schedule: nothing to walk
            return WalkResult(seen, 0, 0, 0)
        trajectory = []  # (tokens, glob, actions, logp, value, reward) per step
        evaluations = invalid = steps = 0
        while steps < cfg.max_steps and evaluations < budget:
            tokens, glob = observe(space, static, vecs, scores, steps / cfg.max_steps)
            actions, logp, value = self.act(tokens, glob, rng)
            moved = np.stack([space.step(v, a - 1) for v, a in zip(vecs, actions)])
            new_scores = np.full(len(moved), np.nan)
            fresh = [i for i, v in enumerate(moved) if tuple(v) not in seen]
            known = [i for i in range(len(moved)) if i not in set(fresh)]
            for i in known:
                new_scores[i] = seen[tuple(moved[i])]
            if fresh:
                # A vector reached by several walks is rated once.
                uniq = {tuple(moved[i]): i for i in fresh}
                rated = evaluate(np.array(list(uniq), dtype=np.int64))
                evaluations += len(uniq)
                by_vec = dict(zip(uniq, rated))
                for i in fresh:
                    new_scores[i] = by_vec[tuple(moved[i])]
                for v, s in by_vec.items():
                    if not np.isnan(s):
                        seen[v] = float(s)
                    else:
                        invalid += 1
            bad = np.isnan(new_scores)
            reward = np.where(bad, -cfg.invalid_penalty, np.nan_to_num(new_scores) - np.nan_to_num(scores))
            still = bad | np.all(moved == vecs, axis=1)
            trajectory.append((tokens, glob, actions, logp, value, reward.astype(np.float32)))
            vecs = np.where(bad[:, None], vecs, moved)
            scores = np.where(bad, scores, new_scores)
            steps += 1
            if still.mean() >= cfg.stuck_fraction:
                break
        if trajectory:
            tokens, glob = observe(space, static, vecs, scores, steps / cfg.max_steps)
            _, _, last_value = self.act(tokens, glob, rng)
            self._store(trajectory, last_value, truncated=steps >= cfg.max_steps or evaluations >= budget)
        return WalkResult(seen, steps, evaluations, invalid)

    def _store(self, trajectory: list, last_value: np.ndarray, truncated: bool) -> None:
        """GAE over one space's walks; the walk's end bootstraps from the critic (rounds have no terminal)."""
        cfg = self.config
        rewards = np.stack([t[5] for t in trajectory])
        values = np.stack([t[4] for t in trajectory])
        adv = gae(rewards, values, last_value, None, cfg.gamma, cfg.gae_lambda)
        returns = adv + values
        for t, (tokens, glob, actions, logp, _, _) in enumerate(trajectory):
            self.rollout.tokens.append(tokens)
            self.rollout.glob.append(glob)
            self.rollout.actions.append(actions)
            self.rollout.logp.append(logp)
            self.rollout.values.append(values[t])
            self.rollout.advantages.append(adv[t])
            self.rollout.returns.append(returns[t])

    def update(self, rng: np.random.Generator) -> dict[str, float]:
        """PPO's clipped update on the stored rollout (then cleared); returns its diagnostics (also appended to
        `history`): policy/value loss, entropy, approx_kl, clipfrac (means over the update), explained_variance."""
        cfg, ro = self.config, self.rollout
        if len(ro) == 0:
            return {}
        k_max = max(t.shape[1] for t in ro.tokens)

        def pad(arrays: list[np.ndarray], fill: float = 0.0) -> np.ndarray:
            out = []
            for a in arrays:
                widths = [(0, 0)] * a.ndim
                widths[1] = (0, k_max - a.shape[1])
                out.append(np.pad(a, widths, constant_values=fill))
            return np.concatenate(out)

        tokens = torch.from_numpy(pad(ro.tokens))
        mask = torch.from_numpy(pad([np.ones(a.shape, dtype=bool) for a in ro.actions], False))
        actions = torch.from_numpy(pad(ro.actions, 1)).long()
        glob = torch.from_numpy(np.concatenate(ro.glob))
        old_logp = torch.from_numpy(np.concatenate(ro.logp)).float()
        adv = torch.from_numpy(np.concatenate(ro.advantages)).float()
        returns = torch.from_numpy(np.concatenate(ro.returns)).float()
        values = torch.from_numpy(np.concatenate(ro.values)).float()

        def evaluate(i: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            logits, value = self.policy(tokens[i], glob[i], mask[i])
            logp, entropy = _log_prob(logits, actions[i], mask[i])
            return logp, entropy, value

        stats = ppo_update(evaluate, self.policy.parameters(), self.optimizer, old_logp, adv, returns,
                           PPOParams.from_config(cfg, split="even"), rng, old_values=values).as_dict()
        self.rollout = Rollout()
        self.updates += 1
        self.history.append(stats)
        return stats

    def save(self, path: str) -> None:
        """Policy and optimiser state, to reuse a trained agent in a later run."""
        torch.save({"config": self.config.__dict__, "policy": self.policy.state_dict(),
                    "optimizer": self.optimizer.state_dict(), "updates": self.updates}, path)

    @classmethod
    def load(cls, path: str) -> "PPOAgent":
        """An agent saved by `save`; CheckpointError naming the file and the problem if it cannot be used."""
        what = f"tuner policy checkpoint {path}"
        todo = "delete it (a new agent starts from scratch) or point to another checkpoint"
        if not os.path.isfile(path):
            raise CheckpointError(f"{what} not found")
        try:
            # weights_only: a checkpoint is tensors and plain values; never run a pickle's code on load.
            state = torch.load(path, weights_only=True)
        except Exception as err:
            raise CheckpointError(f"{what} is corrupt or truncated ({type(err).__name__}: "
                                  f"{str(err).strip().splitlines()[0] if str(err).strip() else ''}); {todo}") from err
        keys = {"config", "policy", "optimizer", "updates"}
        if not isinstance(state, dict) or not keys <= set(state):
            found = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise CheckpointError(f"{what} is not a tuner policy saved by PPOAgent.save (found {found}, expected "
                                  f"{sorted(keys)}); {todo}")
        try:
            agent = cls(PPOConfig(**state["config"]))
        except TypeError as err:
            raise CheckpointError(f"{what}: its settings do not match this version's PPOConfig ({err}); "
                                  f"{todo}") from err
        try:
            agent.policy.load_state_dict(state["policy"])
            agent.optimizer.load_state_dict(state["optimizer"])
        except Exception as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise CheckpointError(f"{what}: its network does not match this version's policy ({first}); "
                                  f"{todo}") from err
        agent.updates = int(state["updates"])
        return agent


__all__ = ["INVALID", "KnobPolicy", "PPOAgent", "PPOConfig", "Rollout", "WalkResult", "knob_tokens", "observe"]
