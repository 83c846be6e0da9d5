"""Behaviour cloning of greedy search: the optional warm start of graph training (`TrainConfig.imitation_episodes`).

X-RLflow trains from scratch; cloning greedy first makes PPO start where greedy search is instead of from uniform.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from .agent import GraphActorCritic
from .observation import Decision, decision_from_observation

if TYPE_CHECKING:
    from .train_config import TrainConfig


def greedy_row(decision: Decision) -> int:
    """The row greedy search would take: the cheapest candidate if it is cheaper than now, else stop (last)."""
    cost = decision.globals[:, 0]
    best = int(np.argmin(cost[:-1])) if len(decision) > 1 else len(decision) - 1
    return best if len(decision) > 1 and cost[best] < cost[-1] else len(decision) - 1


def demonstrations(env, rng: np.random.Generator, explore: float = 0.3) -> list[tuple[Decision, int]]:
    """One episode of greedy search (a random step with probability `explore`, to reach varied states),
    as (decision, greedy row) pairs."""
    out = []
    obs, _ = env.reset()
    done = False
    while not done:
        decision = decision_from_observation(obs)
        label = greedy_row(decision)
        out.append((decision, label))
        row = int(rng.integers(len(decision) - 1)) if len(decision) > 1 and rng.random() < explore else label
        obs, _, terminated, truncated, _ = env.step(int(decision.actions[row]))
        done = terminated or truncated
    return out


def imitate(policy: GraphActorCritic, pairs: Sequence[tuple[Decision, int]], config: TrainConfig,
            rng: np.random.Generator) -> float:
    """Behaviour cloning of greedy search (cross-entropy on its rows); returns the last epoch's mean loss.
    A warm start we added to X-RLflow's recipe: PPO then starts from greedy instead of from uniform."""
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate)
    labels = torch.tensor([label for _, label in pairs])
    losses: list[float] = []
    for _ in range(config.imitation_epochs):
        losses = []
        order = rng.permutation(len(pairs))
        for start in range(0, len(order), config.minibatch):
            idx = order[start:start + config.minibatch].tolist()
            logp, _, _, _ = policy.chosen_log_probs([pairs[i][0] for i in idx], labels[idx])
            loss = -logp.mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return float(np.mean(losses)) if losses else 0.0
