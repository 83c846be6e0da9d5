"""The choosers `RLRewritePass` can run in its episodes: the learned policy and the rules without learning.

Every arm sees one step as `episode.rollout` builds it (an `episode.Step`: the shortlisted candidates with their
exact costs, "stop" at row `len(costs)`) and picks a row; the pass around it (shortlist, every-match actions,
episodes, time budget, best graph kept, confirmation) is the same for all, so they compare the choices alone.

- "uniform": every step, uniformly among the candidates and stop; every episode.
- "cheapest-first": episode 0 takes the cheapest candidate other than stop, uphill too, until the step or time
  budget ends (the rollout keeps the best graph seen); later episodes pick as "uniform".
- "cheapest-then-softmax": episode 0 as "cheapest-first", later episodes as "cost-softmax".
- "cost-softmax": every step and episode, P(row) proportional to exp(-relative cost change / T) (stop's change
  is 0), T = `SOFTMAX_T`; a 5% cheaper candidate weighs e = 2.7 times stop at the default.
- "untrained": a freshly initialised `GraphActorCritic`, weights seeded by the pass's seed; episode 0 its argmax,
  later ones sampled, as the trained policy.
- "trained": a checkpoint (default: the shipped one); episode 0 its argmax, later ones sampled.
- "cheapest-then-trained": episode 0 as "cheapest-first", later episodes sampled from the checkpoint.

All randomness comes from the generator the pass seeds with its `seed`, so a seeded run repeats.
`DEFAULT_ARM` is what `RLRewritePass(policy=None)` runs: "cheapest-first", a rule without learning, as the learned
policy did not beat it (docs/results/graph_ablation.md#the-passs-default).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .agent import GraphActorCritic, PolicyError
from .episode import Arm, Step

ARMS = ("uniform", "cheapest-first", "cost-softmax", "cheapest-then-softmax", "untrained", "trained",
        "cheapest-then-trained")
LEARNED = ("trained", "cheapest-then-trained")  # the others are rules or an untrained network: what learning must beat
DEFAULT_ARM = "cheapest-first"  # RLRewritePass(policy=None) runs this arm: no network, no checkpoint
SOFTMAX_T = 0.05  # cost-softmax temperature, on the relative cost change (0.05: 5% cheaper is e times as likely)
# The searches RLRewritePass runs in place of an arm (`search.pass_search`), named in `make`'s message.
SEARCH_NAMES = ("greedy", "backtracking", "backtracking-N")


class Uniform:
    """Uniform over the candidates and stop, every step of every episode."""

    name = "uniform"

    def probabilities(self, step: Step) -> np.ndarray:
        return np.full(step.rows, 1.0 / step.rows)

    def choose(self, step: Step, rng: np.random.Generator) -> int:
        return int(rng.integers(step.rows))


class CheapestFirst:
    """Episode 0: the cheapest candidate, never stop, uphill too (ties: the first in candidate order). Later
    episodes: `later` (default: uniform over the candidates and stop)."""

    def __init__(self, later: Arm | None = None, name: str = "cheapest-first"):
        self.later: Arm = later if later is not None else Uniform()
        self.name = name

    @property
    def policy(self) -> GraphActorCritic | None:
        """The later episodes' network, where they sample from one: the pass encodes graphs for it."""
        return getattr(self.later, "policy", None)

    def choose(self, step: Step, rng: np.random.Generator) -> int:
        if step.episode == 0:
            return int(np.argmin(np.asarray(step.costs, dtype=float)))
        return self.later.choose(step, rng)


class CostSoftmax:
    """P(row) proportional to exp(-(cost - current) / current / temperature); stop's change is 0."""

    name = "cost-softmax"

    def __init__(self, temperature: float = SOFTMAX_T):
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature

    def probabilities(self, step: Step) -> np.ndarray:
        costs = np.append(np.asarray(step.costs, dtype=float), step.current_cost)
        change = (costs - step.current_cost) / max(step.current_cost, 1e-12)
        logits = -change / self.temperature
        p = np.exp(logits - logits.max())
        return p / p.sum()

    def choose(self, step: Step, rng: np.random.Generator) -> int:
        p = self.probabilities(step)
        return int(rng.choice(len(p), p=p))


class Network:
    """A `GraphActorCritic`: its argmax in episode 0, a sample from it in later ones."""

    def __init__(self, policy: GraphActorCritic, name: str = "trained"):
        self.policy, self.name = policy, name

    def choose(self, step: Step, rng: np.random.Generator) -> int:
        row, _, _, _ = self.policy.act(step.observe(), rng, greedy=step.episode == 0)
        return row


def untrained(seed: int = 0) -> Network:
    """A freshly initialised network (default sizes), its weights drawn from `seed` without touching torch's
    global generator."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Network(GraphActorCritic().eval(), "untrained")


def learned(name: str, policy: GraphActorCritic | str | Path | None = None) -> Arm:
    """The learned arm `name` (one of `LEARNED`) with the network `policy` (a checkpoint path or a network; None:
    the shipped one)."""
    if name not in LEARNED:
        raise ValueError(f"{name!r} is not a learned arm: one of {', '.join(LEARNED)}")
    network = Network(policy if isinstance(policy, GraphActorCritic) else GraphActorCritic.load(policy))
    return CheapestFirst(network, name) if name == "cheapest-then-trained" else network


def make(policy: Arm | GraphActorCritic | str | Path | None = None, seed: int = 0) -> Arm:
    """The arm `policy` names: an `Arm`; a `GraphActorCritic`; an arm name from `ARMS` ("trained": the shipped
    checkpoint); a checkpoint path; None: `DEFAULT_ARM`. `seed` seeds "untrained"'s weights."""
    if policy is None:
        policy = DEFAULT_ARM
    if isinstance(policy, GraphActorCritic):
        return Network(policy)
    if isinstance(policy, Arm):
        return policy
    if isinstance(policy, str) and policy in ARMS:
        if policy == "uniform":
            return Uniform()
        if policy == "cheapest-first":
            return CheapestFirst()
        if policy == "cost-softmax":
            return CostSoftmax()
        if policy == "cheapest-then-softmax":
            return CheapestFirst(CostSoftmax(), "cheapest-then-softmax")
        if policy == "untrained":
            return untrained(seed)
        return learned(policy)
    if isinstance(policy, str) and not Path(policy).exists() and not policy.endswith(".pt"):
        raise PolicyError(f"unknown graph policy {policy!r}: an arm ({', '.join(ARMS)}), a search "
                          f"({', '.join(SEARCH_NAMES)}), or a policy checkpoint file from tvm-rl train")
    return Network(GraphActorCritic.load(policy))
