"""Proximal Policy Optimisation, the part every agent shares, read top to bottom (after CleanRL's ppo.py).

An agent keeps its own network, environment and rollout; it hands this module per-step arrays and a callable
that re-evaluates its policy on a minibatch, and gets back the update's diagnostics:

    adv = gae(rewards, values, last_value, terminals, gamma, gae_lambda)      # (T, ...) arrays
    stats = ppo_update(evaluate, policy.parameters(), optimizer, old_logp, adv, adv + values, params, rng)

`evaluate(idx)` returns the log-probability of the stored action, the policy's entropy and the critic's value
of samples `idx` under the current weights, one entry per sample. The diagnostics are CleanRL's: approx_kl
(the (ratio - 1) - log ratio estimator), clipfrac, entropy, policy and value loss (means over every minibatch
of the update) and the explained variance of the rollout's values.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

import numpy as np
import torch

# Returns (log-prob of the stored action, entropy, value), each of shape (len(idx),), for sample indices idx.
Evaluate = Callable[[torch.Tensor], "tuple[torch.Tensor, torch.Tensor, torch.Tensor]"]

# A minibatch's approx_kl is a noisy estimate of the whole rollout's; a step-wise check stops only past this
# multiple of target_kl, Spinning Up's margin.
STEP_KL_MARGIN = 1.5
KL_STOPS = ("epoch", "step")  # PPOParams.kl_stop's values


@dataclass(frozen=True)
class PPOParams:
    """The PPO hyperparameters both agents have; each agent fills them from its own config (and defaults).

    `split` says how an epoch's shuffled samples are cut into minibatches: "size" takes consecutive slices of
    `minibatch` samples (the last one shorter), "even" cuts them into max(1, n // minibatch) near-equal parts.
    """

    gamma: float
    gae_lambda: float
    clip: float
    value_coef: float
    entropy_coef: float
    epochs: int
    minibatch: int
    max_grad_norm: float
    split: Literal["size", "even"] = "size"
    normalize_advantages: bool = True  # per minibatch, as CleanRL's norm_adv
    clip_value: bool = False  # CleanRL's clip_vloss: clip the critic's move like the policy's
    # > 0: CleanRL's target_kl: no further epoch once an epoch's mean approx_kl exceeds it (0: every epoch)
    target_kl: float = 0.0
    # When target_kl is checked: "epoch" after each epoch (CleanRL), "step" before each optimiser step, stopping
    # the update once the minibatch about to be stepped on shows the policy already moved by more than
    # STEP_KL_MARGIN x target_kl (Spinning Up's rule): a single epoch of many minibatches can overshoot a cap
    # checked only after it.
    kl_stop: Literal["epoch", "step"] = "epoch"

    def __post_init__(self) -> None:
        if self.split not in ("size", "even"):
            raise ValueError(f"PPOParams.split must be 'size' or 'even', not {self.split!r}")
        if self.kl_stop not in KL_STOPS:
            raise ValueError(f"PPOParams.kl_stop must be {' or '.join(map(repr, KL_STOPS))}, not {self.kl_stop!r}")

    @classmethod
    def from_config(cls, config: Any, **overrides: Any) -> PPOParams:
        """The fields `config` has under the same names, then `overrides` (for fields it lacks or names otherwise)."""
        values = {f.name: getattr(config, f.name) for f in fields(cls) if hasattr(config, f.name)}
        return cls(**(values | overrides))


@dataclass
class PPOStats:
    """One update's diagnostics: means over its minibatches, and the explained variance of the rollout's values."""

    policy_loss: float = float("nan")
    value_loss: float = float("nan")
    entropy: float = float("nan")
    approx_kl: float = float("nan")
    clipfrac: float = float("nan")
    explained_variance: float = float("nan")

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def gae(rewards: np.ndarray, values: np.ndarray, last_value: np.ndarray | float = 0.0,
        terminals: np.ndarray | None = None, gamma: float = 0.99, gae_lambda: float = 0.95) -> np.ndarray:
    """Generalised advantage estimates of a (T, ...) trajectory; the returns are advantages + values.

    `last_value` is the critic's value of the state after the last step (bootstraps a cut-off trajectory).
    `terminals[t]` true means the episode ended after step t: nothing is bootstrapped across it. The arithmetic
    runs in the arrays' dtype.
    """
    rewards, values = np.asarray(rewards), np.asarray(values)
    adv = np.zeros(rewards.shape, np.result_type(rewards, values))
    last = np.zeros(rewards.shape[1:], adv.dtype)
    for t in reversed(range(len(rewards))):
        next_value = last_value if t == len(rewards) - 1 else values[t + 1]
        if terminals is not None:
            nonterminal = 1.0 - np.asarray(terminals[t], adv.dtype)
            next_value, last = next_value * nonterminal, last * nonterminal
        delta = rewards[t] + gamma * next_value - values[t]
        last = delta + gamma * gae_lambda * last
        adv[t] = last
    return adv


def normalize(adv: torch.Tensor) -> torch.Tensor:
    """Zero mean, unit standard deviation; a single sample is left as it is (its std is undefined)."""
    return (adv - adv.mean()) / (adv.std() + 1e-8) if len(adv) > 1 else adv


def clipped_policy_loss(ratio: torch.Tensor, adv: torch.Tensor, clip: float) -> torch.Tensor:
    """PPO's clipped surrogate, as a loss: mean of max(-A r, -A clamp(r, 1 - clip, 1 + clip))."""
    return torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()


def value_loss(value: torch.Tensor, returns: torch.Tensor, old_value: torch.Tensor | None = None,
               clip: float | None = None) -> torch.Tensor:
    """Half the mean squared error; with `old_value` and `clip`, the worse of it and of the clipped move."""
    unclipped = (value - returns) ** 2
    if old_value is None or clip is None:
        return 0.5 * unclipped.mean()
    clipped = (old_value + (value - old_value).clamp(-clip, clip) - returns) ** 2
    return 0.5 * torch.max(unclipped, clipped).mean()


def explained_variance(values: np.ndarray | torch.Tensor, returns: np.ndarray | torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns): 1 for a perfect critic, 0 for a constant one, NaN if Var = 0."""
    y_pred = np.asarray(values, np.float64).ravel()
    y_true = np.asarray(returns, np.float64).ravel()
    var = np.var(y_true) if len(y_true) else 0.0
    return float("nan") if var == 0 else float(1 - np.var(y_true - y_pred) / var)


def ppo_loss(logp: torch.Tensor, entropy: torch.Tensor, value: torch.Tensor, old_logp: torch.Tensor,
             adv: torch.Tensor, returns: torch.Tensor, params: PPOParams, old_value: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, dict[str, float]]:
    """The minibatch's loss (clipped policy loss + value_coef x value loss - entropy_coef x entropy) and its
    diagnostics (policy_loss, value_loss, entropy, approx_kl, clipfrac)."""
    log_ratio = logp - old_logp
    ratio = log_ratio.exp()
    if params.normalize_advantages:
        adv = normalize(adv)
    pg_loss = clipped_policy_loss(ratio, adv, params.clip)
    v_loss = value_loss(value, returns, old_value, params.clip if params.clip_value else None)
    ent = entropy.mean()
    loss = pg_loss + params.value_coef * v_loss - params.entropy_coef * ent
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean().item()
        clipfrac = ((ratio - 1).abs() > params.clip).float().mean().item()
    return loss, {"policy_loss": pg_loss.item(), "value_loss": v_loss.item(), "entropy": ent.item(),
                  "approx_kl": approx_kl, "clipfrac": clipfrac}


def minibatches(n: int, params: PPOParams, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """One epoch's minibatches of sample indices: a fresh permutation from `rng`, cut as `params.split` says."""
    order = rng.permutation(n)
    if params.split == "even":
        yield from np.array_split(order, max(1, n // params.minibatch))
    else:
        for start in range(0, n, params.minibatch):
            yield order[start:start + params.minibatch]


def ppo_update(evaluate: Evaluate, parameters: Iterable[torch.nn.Parameter], optimizer: torch.optim.Optimizer,
               old_logp: torch.Tensor, advantages: torch.Tensor, returns: torch.Tensor, params: PPOParams,
               rng: np.random.Generator, old_values: torch.Tensor | None = None) -> PPOStats:
    """`params.epochs` passes of clipped PPO over the rollout, one optimiser step per minibatch (fewer when the
    policy has moved by more than `params.target_kl`, checked as `params.kl_stop` says).

    `old_values` (the critic's values when the rollout was collected) give the explained variance and, with
    `params.clip_value`, the clipped value loss. Returns the diagnostics averaged over every minibatch.
    """
    parameters = list(parameters)
    n = len(advantages)
    if params.clip_value and old_values is None:
        raise ValueError("clip_value needs the rollout's old_values")
    parts: dict[str, list[float]] = {}
    step_cap = STEP_KL_MARGIN * params.target_kl if params.target_kl > 0 and params.kl_stop == "step" else None
    stopped = False
    for _ in range(params.epochs):
        epoch_kl = []
        for idx in minibatches(n, params, rng):
            i = torch.as_tensor(idx)
            logp, entropy, value = evaluate(i)
            loss, mb = ppo_loss(logp, entropy, value, old_logp[i], advantages[i], returns[i], params,
                                None if old_values is None else old_values[i])
            for k, v in mb.items():  # kept also for a minibatch that stops the update: it measures the move so far
                parts.setdefault(k, []).append(v)
            epoch_kl.append(mb["approx_kl"])
            if step_cap is not None and mb["approx_kl"] > step_cap:
                stopped = True
                break
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, params.max_grad_norm)
            optimizer.step()
        if stopped or (params.target_kl > 0 and params.kl_stop == "epoch"
                       and float(np.mean(epoch_kl)) > params.target_kl):
            break
    stats = PPOStats(**{k: float(np.mean(v)) for k, v in parts.items()})
    if old_values is not None:
        stats.explained_variance = explained_variance(old_values.detach(), returns.detach())
    return stats


__all__ = ["KL_STOPS", "STEP_KL_MARGIN", "Evaluate", "PPOParams", "PPOStats", "clipped_policy_loss",
           "explained_variance", "gae", "minibatches", "normalize", "ppo_loss", "ppo_update", "value_loss"]
