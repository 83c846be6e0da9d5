"""PPO's update of the graph policy from played episodes: GAE, the batch of decisions, per-model reward scaling.

`train.train` plays episodes and hands them here; the clipped objective and the update loop are the shared core's
(`tvm_rl.rl.ppo`), this module only turns graph decisions into its tensors.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from ..rl.ppo import Evaluate, PPOParams, gae
from ..rl.ppo import ppo_loss as rl_ppo_loss
from ..rl.ppo import ppo_update as rl_ppo_update
from .agent import GraphActorCritic
from .observation import Decision
from .risk_seeking import risk_seeking_advantages

if TYPE_CHECKING:
    from .train_config import TrainConfig


@dataclass
class Episode:
    """What one episode leaves for the update: decisions, rows chosen, their log-probs, values, rewards."""

    model: str
    decisions: list[Decision] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    speedup: float = 1.0
    applied: list[str] = field(default_factory=list)

    @property
    def ret(self) -> float:
        return float(sum(self.rewards))


def advantages(ep: Episode, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE(lambda) advantages and returns of one finished episode (the horizon ends it: no bootstrap)."""
    n = len(ep.rewards)
    terminals = np.zeros(n)
    terminals[-1:] = 1.0
    # In double precision, stored as float32: the precision the episode's values were recorded in.
    adv = gae(np.asarray(ep.rewards, np.float64), np.asarray(ep.values, np.float64), 0.0, terminals,
              gamma, lam).astype(np.float32)
    return adv, adv + np.asarray(ep.values, np.float32)


@dataclass
class Batch:
    """The decisions of some episodes with what PPO needs of each: row taken, its old log-prob, advantage, return
    and the value the critic gave it when the episode was played."""

    decisions: list[Decision]
    rows: torch.Tensor
    old_logp: torch.Tensor
    adv: torch.Tensor
    ret: torch.Tensor
    values: torch.Tensor | None = None

    @classmethod
    def of(cls, episodes: Sequence[Episode], gamma: float, lam: float,
           step_advantages: Sequence[np.ndarray] | None = None) -> "Batch":
        """GAE advantages and returns, or `step_advantages` (one array per episode) in place of GAE's advantages;
        the critic's targets are GAE's returns either way."""
        adv_ret = [advantages(ep, gamma, lam) for ep in episodes]
        adv = step_advantages if step_advantages is not None else [a for a, _ in adv_ret]
        return cls([d for ep in episodes for d in ep.decisions], torch.tensor([r for ep in episodes for r in ep.rows]),
                   torch.tensor([p for ep in episodes for p in ep.logps]),
                   torch.from_numpy(np.concatenate(adv)),
                   torch.from_numpy(np.concatenate([r for _, r in adv_ret])),
                   torch.tensor([v for ep in episodes for v in ep.values]))

    def evaluator(self, policy: GraphActorCritic) -> Evaluate:
        """(log-prob of the row taken, entropy, value) of decisions `idx` under `policy`'s current weights."""
        def evaluate(idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            logp, logp_all, owner, values = policy.chosen_log_probs([self.decisions[i] for i in idx.tolist()],
                                                                    self.rows[idx])
            entropy = -torch.zeros(len(idx)).index_add_(0, owner, logp_all.exp() * logp_all)
            return logp, entropy, values
        return evaluate


RETURN_FLOOR = 1.0  # % of RT[0]: a model with nothing to gain is not blown up to the target scale


def scale_rewards(episodes: Sequence[Episode], stats: dict[str, list[float]], target: float) -> None:
    """Add `episodes`' returns to `stats` (model -> [sum of returns, episodes]) and scale each episode's rewards
    in place by target / its model's running mean return (at least RETURN_FLOOR). Speedups are left as they are."""
    for ep in episodes:
        total = stats.setdefault(ep.model, [0.0, 0.0])
        total[0] += ep.ret
        total[1] += 1
    for ep in episodes:
        total = stats[ep.model]
        scale = target / max(abs(total[0]) / total[1], RETURN_FLOOR)
        ep.rewards = [r * scale for r in ep.rewards]


def ppo_params(config: TrainConfig) -> PPOParams:
    """The shared PPO core's settings for graph training: minibatches of `config.minibatch` decisions."""
    # Risk-seeking advantages are all positive and already scaled per model: centring them would push the policy
    # away from the least of the episodes it is meant to move towards.
    return PPOParams.from_config(config, split="size", normalize_advantages=config.risk_epsilon <= 0)


def ppo_loss(policy: GraphActorCritic, batch: Batch, idx: torch.Tensor, config: TrainConfig
             ) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped PPO objective (+ value loss - entropy bonus) on decisions `idx` of `batch`."""
    logp, entropy, values = batch.evaluator(policy)(idx)
    return rl_ppo_loss(logp, entropy, values, batch.old_logp[idx], batch.adv[idx], batch.ret[idx],
                       ppo_params(config))


def ppo_update(policy: GraphActorCritic, optimizer: torch.optim.Optimizer, episodes: Sequence[Episode],
               config: TrainConfig, rng: np.random.Generator) -> dict[str, float]:
    """`epochs` passes of clipped PPO over all decisions of `episodes` (with `config.risk_epsilon`, of the best
    of them); returns the update's diagnostics (losses, entropy, approx_kl, clipfrac: means over its minibatches;
    explained_variance of the critic). On a model where no episode was better than the others, only the entropy
    bonus and the critic learn (`risk_seeking.risk_seeking_advantages`)."""
    step_advantages = None
    if config.risk_epsilon > 0:
        chosen = [(ep, adv) for ep, adv in zip(episodes, risk_seeking_advantages(episodes, config.risk_epsilon))
                  if adv is not None]
        episodes, step_advantages = [ep for ep, _ in chosen], [adv for _, adv in chosen]
    batch = Batch.of(episodes, config.gamma, config.gae_lambda, step_advantages)
    return rl_ppo_update(batch.evaluator(policy), policy.parameters(), optimizer, batch.old_logp, batch.adv,
                         batch.ret, ppo_params(config), rng, old_values=batch.values).as_dict()
