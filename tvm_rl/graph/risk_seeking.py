"""Training for the pass's objective: the best of a few episodes, not their mean (`TrainConfig.risk_epsilon`).

The pass plays a few episodes and keeps the best graph, so a policy is worth what its best episode reaches. PPO on
mean returns converges to one reliable route and loses the spread the pass lives on. The risk-seeking policy
gradient (Petersen et al., "Deep symbolic regression", ICLR 2021) learns only from the episodes above the
(1 - epsilon) quantile of their batch, each with its gain over that quantile: the policy is pushed towards its
best episodes and never penalised for its worst.

Here the quantile is taken per model (models' gains differ by several times), the gain is in log speedup, and each
model's advantages are scaled to mean 1, so every model weighs alike in the update. A model whose episodes all
reached the same speedup (its policy collapsed onto one route) has no better episode to move towards: its episodes
get zero advantages, so the policy term leaves them alone while the entropy bonus and the critic still learn on
them, which is how such a model regains the spread it needs to get out.
"""
from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np


class Played(Protocol):
    """What the selection reads of an episode (`train.Episode` has it)."""

    model: str
    speedup: float
    rewards: list[float]


def risk_seeking_advantages(episodes: Sequence[Played], epsilon: float) -> list[np.ndarray | None]:
    """For each episode, the advantage of each of its steps, or None when it is not learned from.

    Per model, the episodes whose speedup is strictly above the (1 - `epsilon`) quantile of that model's
    episodes are kept; each step of a kept episode gets log(speedup) - log(quantile), scaled so that the model's
    kept episodes average 1. A model with no episode above its quantile (all reached the same speedup) keeps all
    of them with zero advantages: only the entropy bonus and the critic learn from them."""
    if not 0.0 < epsilon <= 1.0:
        raise ValueError(f"--risk-epsilon must be in (0, 1], got {epsilon}")
    out: list[np.ndarray | None] = [None] * len(episodes)
    for model in dict.fromkeys(ep.model for ep in episodes):
        mine = [i for i, ep in enumerate(episodes) if ep.model == model]
        logs = np.log([episodes[i].speedup for i in mine])
        gains = logs - np.quantile(logs, 1.0 - epsilon)
        kept = [(i, g) for i, g in zip(mine, gains) if g > 1e-12]
        if not kept:
            for i in mine:
                out[i] = np.zeros(len(episodes[i].rewards), np.float32)
            continue
        scale = float(np.mean([g for _, g in kept]))
        for i, g in kept:
            out[i] = np.full(len(episodes[i].rewards), g / scale, np.float32)
    return out
