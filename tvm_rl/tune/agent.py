"""CHAMELEON's agent: an actor-critic PPO policy that walks a kernel's knob space, every action unit at once.

State: one token per action unit of `tune.moves.MoveSpace` (a boundary between two levels of a tile, or a
categorical / compute-location knob): its kind, the sizes on either side of the boundary (or the index), whether
it can move either way, plus global features (the rating of the current point, the walk's progress). Action:
decrease / keep / increase per unit; at a tile boundary that moves one prime factor outward or inward, the moves
MetaSchedule's MutateTileSize makes. Reward: the change of the rating (an invalid point is penalised and the walk
stays where it was). The network is shared across units (a small per-unit MLP, mean-pooled context, one actor
head per unit and one critic on the pooled state), so the same agent serves knob spaces of any size and is reused
across tuning rounds and across tasks.

Walks are long (`max_steps`, default 128) because each step is rated by a cheap rater (the draft model of
`tune.draft` in PPOSearch), and the policy is updated every `update_every` steps of the walks, so one round gives
several PPO updates. Written after CleanRL's single-file PPO: `PPOConfig` holds every hyperparameter
(CHAMELEON's: lr 1e-3, 3 epochs, clip 0.2), `explore` collects the walks' rollout and updates, `update` is the
clipped-objective step (the PPO core shared with the graph agent, `tvm_rl.rl.ppo`).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..errors import CheckpointError
from ..rl.ppo import PPOParams, gae, ppo_update
from .moves import UNIT_FEATURES, MoveSpace

TOKEN_FEATURES = UNIT_FEATURES
SHIPPED_DIR = Path(__file__).resolve().parent / "models"  # made by the commands in its README.md


def shipped_policy(target_kind: str = "llvm") -> Path | None:
    """The tuner policy shipped with tvm-rl for a target kind (pre-trained offline on a corpus), or None."""
    path = SHIPPED_DIR / f"policy_{target_kind}.pt"
    return path if path.is_file() else None

GLOBAL_FEATURES = 3
INVALID = float("nan")


@dataclass
class PPOConfig:
    """Walks and PPO hyperparameters (CHAMELEON: 128 walks, up to 500 steps, lr 1e-3, 3 epochs, clip 0.2).

    `max_evaluations` bounds the distinct points rated per round and space; with the draft model a rating costs
    microseconds, so the bound is generous. `update_every`: steps of the walks between PPO updates.
    """

    walks: int = 64
    max_steps: int = 128
    max_evaluations: int = 20_000
    update_every: int = 32
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
    keep_bias: float = 2.5  # initial preference for "keep": a step then moves about one unit in seven
    reward: str = "improvement"  # "improvement": only a walk's new best pays; "delta": the rating's change (CHAMELEON)
    seed: int = 0


def observe(moves: MoveSpace, vecs: np.ndarray, scores: np.ndarray, progress: float
            ) -> tuple[np.ndarray, np.ndarray]:
    """Tokens (W, units, TOKEN_FEATURES) and global features (W, GLOBAL_FEATURES) for W points of one space."""
    vecs = np.asarray(vecs)
    tokens = moves.tokens(vecs)
    glob = np.stack([np.nan_to_num(scores, nan=0.0), np.full(len(vecs), progress), np.isnan(scores).astype(float)],
                    axis=-1).astype(np.float32)
    return tokens, glob


class KnobPolicy(nn.Module):
    """Per-unit actor (3 logits per action unit) and a critic on the mean-pooled state, for any number of units."""

    def __init__(self, hidden: int = 64, keep_bias: float = 2.5):
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
    updates: list[dict[str, float]] = field(default_factory=list)  # the PPO updates made during the walks


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

    def explore(self, moves: MoveSpace, starts: np.ndarray, start_scores: np.ndarray, evaluate: Evaluator,
                rng: np.random.Generator, max_evaluations: int | None = None, learn: bool = True) -> WalkResult:
        """Walk from `starts` (W, K) for up to `max_steps`, rating each new point with `evaluate`.

        With `learn`, the policy is updated with PPO every `update_every` steps and once more at the end (each
        segment bootstraps from the critic: the walks go on after it). Stops early when the rating budget is
        spent or when `stuck_fraction` of the walks made no move (every unit kept or blocked, or the move was
        invalid). Returns every valid point rated and the updates' diagnostics.
        """
        # The policy's tensors are a few dozen units wide: one thread is as fast, and several contend with the
        # builders and runners that share the machine.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._explore(moves, starts, start_scores, evaluate, rng, max_evaluations, learn)
        finally:
            torch.set_num_threads(threads)

    def _explore(self, moves: MoveSpace, starts: np.ndarray, start_scores: np.ndarray, evaluate: Evaluator,
                 rng: np.random.Generator, max_evaluations: int | None, learn: bool) -> WalkResult:
        cfg = self.config
        budget = cfg.max_evaluations if max_evaluations is None else max_evaluations
        vecs, scores = np.array(starts, dtype=np.int64), np.array(start_scores, dtype=float)
        best = np.nan_to_num(scores, nan=-np.inf)  # each walk's best rating so far
        seen: dict[tuple, float] = {tuple(v): s for v, s in zip(vecs, scores) if not np.isnan(s)}
        result = WalkResult(seen, 0, 0, 0)
        if vecs.shape[1] == 0 or moves.size == 0:  # a kernel with no sampling decisions has one schedule
            return result
        segment: list[tuple] = []  # (tokens, glob, actions, logp, value, reward) per step
        while result.steps < cfg.max_steps and result.evaluations < budget:
            tokens, glob = observe(moves, vecs, scores, result.steps / cfg.max_steps)
            actions, logp, value = self.act(tokens, glob, rng)
            moved = np.stack([moves.move(v, a, rng) for v, a in zip(vecs, actions)])
            new_scores = np.array([seen.get(tuple(v), np.nan) for v in moved])
            fresh = list(dict.fromkeys(tuple(v) for v in moved if tuple(v) not in seen))
            if fresh:  # a vector reached by several walks is rated once
                rated = evaluate(np.array(fresh, dtype=np.int64))
                result.evaluations += len(fresh)
                for v, sc in zip(fresh, rated):
                    if np.isnan(sc):
                        result.invalid += 1
                    seen[v] = float(sc)
                new_scores = np.array([seen.get(tuple(v), np.nan) for v in moved])
            bad = np.isnan(new_scores)
            if cfg.reward == "improvement":  # only a new best of the walk pays: a step down costs nothing
                gain = np.maximum(np.nan_to_num(new_scores, nan=-np.inf) - best, 0.0)
            else:  # "delta": the change of the rating, CHAMELEON's reward
                gain = np.nan_to_num(new_scores) - np.nan_to_num(scores)
            reward = np.where(bad, -cfg.invalid_penalty, gain)
            best = np.fmax(best, new_scores)
            still = bad | np.all(moved == vecs, axis=1)
            segment.append((tokens, glob, actions, logp, value, reward.astype(np.float32)))
            vecs = np.where(bad[:, None], vecs, moved)
            scores = np.where(bad, scores, new_scores)
            result.steps += 1
            if learn and len(segment) >= cfg.update_every:
                self._close(segment, moves, vecs, scores, result, rng)
                segment = []
            if still.mean() >= cfg.stuck_fraction:
                break
        if learn and segment:
            self._close(segment, moves, vecs, scores, result, rng)
        result.scores = {v: sc for v, sc in seen.items() if not np.isnan(sc)}
        return result

    def _close(self, segment: list, moves: MoveSpace, vecs: np.ndarray, scores: np.ndarray, result: WalkResult,
               rng: np.random.Generator) -> None:
        """Store a segment of the walks (bootstrapped from the critic at its end) and update the policy on it."""
        tokens, glob = observe(moves, vecs, scores, result.steps / self.config.max_steps)
        _, _, last_value = self.act(tokens, glob, rng)
        self._store(segment, last_value)
        stats = self.update(rng)
        if stats:
            result.updates.append(stats)

    def _store(self, trajectory: list, last_value: np.ndarray) -> None:
        """GAE over one segment of one space's walks; its end bootstraps from the critic (walks have no terminal)."""
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


__all__ = ["INVALID", "KnobPolicy", "PPOAgent", "PPOConfig", "Rollout", "WalkResult", "observe", "shipped_policy"]
