"""One episode over graph rewrites: the walk `RLRewritePass` and the Gymnasium environment (`env`) share.

A `Walk` is an episode's state: the current graph, the rewrites that led to it, and the shortlist's memory of the
matches priced on earlier steps. Each step it offers the current graph's candidates (every one up to `cap`, or
with a shortlist the cheapest by the cost function; `Walk.priced_candidates` also prices them exactly) and moves
to the one chosen (`Walk.take`). `rollout` plays a whole episode of an `Arm`, a chooser that sees one `Step` at a
time and picks a row, and keeps the cheapest graph seen: the pass runs its episodes with it, and the environment
steps the same walk one action at a time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence, runtime_checkable

import numpy as np
import tvm

from . import roofline
from .candidates import Candidate, CandidateSet, Shortlist, enumerate_candidates, past
from .cost import CostFn
from .observation import Decision, FeatureSpec, observe
from .rules import Rule


@dataclass
class Step:
    """One decision of a rollout: the candidates' costs (row i is candidate i; row len(costs) is stop), the
    current graph's cost, the episode (0 first), and `observe()`, the policy's encoding of the step, built only
    when an arm asks for it (encoding the graphs is most of a step's time on full-size models)."""

    costs: Sequence[float]
    current_cost: float
    episode: int
    observe: Callable[[], Decision]

    @property
    def rows(self) -> int:
        """Rows to choose among: the candidates and stop."""
        return len(self.costs) + 1


@runtime_checkable
class Arm(Protocol):
    """Picks a row of a `Step` with `rng` (the pass's seeded generator)."""

    name: str

    def choose(self, step: Step, rng: np.random.Generator) -> int: ...


class Walk:
    """An episode's walk from `start`: the current graph (`mod`), the rewrites that led to it (`applied`), and,
    with `shortlist`, a `Shortlist` of that size ranking each step's candidates by `cost`. `reset` starts over."""

    def __init__(self, start: tvm.IRModule, cost: CostFn, rules: Sequence[Rule], cap: int | None = None,
                 shortlist: int | None = None, check: bool = False):
        self.start, self.cost, self.rules, self.cap, self.check = start, cost, rules, cap, check
        self.shortlist = Shortlist(shortlist, cost) if shortlist is not None else None
        self.reset()

    def reset(self) -> None:
        self.mod: tvm.IRModule = self.start
        self.applied: list[str] = []
        if self.shortlist is not None:
            self.shortlist.reset()

    def candidates(self, now: float, deadline: float | None = None) -> CandidateSet:
        """The current graph's candidates: the shortlist's (`now`, the current graph's cost, ranks them), or all
        up to `cap`. Past `deadline` the set comes back marked `.timed_out`."""
        if self.shortlist is not None:
            return self.shortlist.enumerate(self.mod, now, self.rules, cap=self.cap, check=self.check,
                                            deadline=deadline)
        return enumerate_candidates(self.mod, self.rules, cap=self.cap, check=self.check, strict=False,
                                    deadline=deadline)

    def priced_candidates(self, deadline: float | None = None) -> tuple[CandidateSet, list[float], float]:
        """The current graph's candidates, their exact costs and the current graph's cost; the shortlist keeps
        the costs to rank the same matches on later steps. Past `deadline` the set comes back marked
        `.timed_out` or with fewer costs than candidates, and nothing is kept."""
        now = self.cost(self.mod)
        found = self.candidates(now, deadline)
        costs = [self.cost(c.mod) for c in found if not past(deadline)]
        if self.shortlist is not None and not found.timed_out and len(costs) == len(found):
            self.shortlist.record(found.candidates, costs, now)
        return found, costs, now

    def take(self, candidate: Candidate) -> None:
        """Move to `candidate`'s graph."""
        self.mod = candidate.mod
        self.applied = self.applied + [str(candidate.match)]


def rollout(mod: tvm.IRModule, arm: Arm, cost: CostFn, features: FeatureSpec | roofline.Roofline | None,
            rules: Sequence[Rule], max_steps: int, rng: np.random.Generator | None, deadline: float,
            cap: int | None = None, shortlist: int | None = None, episode: int | None = None
            ) -> tuple[tvm.IRModule, float, list[str], int]:
    """One episode of `arm` from `mod`; returns the cheapest graph on the way (possibly `mod`), its cost, the
    rewrites leading to it, and the steps taken. `episode` tells the arm which episode this is (None: 0 when
    `rng` is None, else 1; a network's episode 0 is its argmax); `rng` is the generator its choices draw from.
    A network reads the graphs as `observation.observe` builds them, node features from `features` (unused by
    the arms without a network). With `shortlist`, the arm sees only that many candidates, the cheapest by
    `cost` (ranked incrementally: `Shortlist`), and "stop"; the costs it sees are exact. A step still finding or
    pricing its candidates at `deadline` is abandoned there: one step on a full-size model can take seconds, and
    the budget is the user's."""
    episode = (0 if rng is None else 1) if episode is None else episode
    rng = rng if rng is not None else np.random.default_rng(0)  # only read by sampling arms when no rng is given
    walk = Walk(mod, cost, rules, cap, shortlist)
    rt0 = cost(mod)
    best, best_cost, best_path = mod, rt0, []
    steps = 0
    while steps < max_steps and not past(deadline):
        cands, costs, now = walk.priced_candidates(deadline)
        if not cands or cands.timed_out or len(costs) < len(cands):
            break

        def observation(cands=cands, current=walk.mod, costs=costs, now=now) -> Decision:
            if features is None:
                raise ValueError("a network policy needs `features` to read the graphs with")
            return observe([c.mod for c in cands] + [current], costs + [now], rt0, features)

        row = arm.choose(Step(costs, now, episode, observation), rng)
        steps += 1
        if row == len(cands):  # stop
            break
        walk.take(cands[row])
        c = cost(walk.mod)
        if c < best_cost:
            best, best_cost, best_path = walk.mod, c, list(walk.applied)
    return best, best_cost, best_path, steps
