"""PPOSearch (CHAMELEON): a knob-space search strategy (`knob_search.KnobSearch`) whose rounds are PPO walks over
the knob space rated by the cost model (`walks`), then a pick of what to measure (`selection`)."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
from tvm.ir.utils import derived_object

from ..agent import PPOAgent, PPOConfig
from ..moves import MoveSpace
from .knob_search import KnobSearch, Point
from .selection import select
from .walks import WalkSettings, walk_round


@derived_object
class PPOSearch(KnobSearch):
    """CHAMELEON's search: PPO walks over the knob space rated by the cost model, then a pick of what to measure.

    Each round, `config.walks` walks (split over the design spaces with unmeasured points left) start half
    from the best measured points and half from random valid ones, and move under the agent's policy, which
    PPO updates on the walks. Of the unmeasured valid points the walks rated, the default (`adaptive=False`)
    measures the top-rated ones (`selection.top_k`); `adaptive=True`, CHAMELEON's adaptive sampling, clusters the
    best-rated ones (`selection.cluster_top`: k-means on the normalised knob vectors, k at the knee, at least
    `min_batch_fraction` of the batch) and measures the best of each cluster, then the next best by score, plus
    a small random share. Top-k is the default because adaptive sampling has not beaten it in the tuner
    benchmark's paired runs (docs/results/tuner.md), and a choice that loses its ablation is not a default.

    The agent is shared by every clone of the strategy, so a multi-task run trains one agent across tasks and a
    given agent carries over between runs.
    """

    def __init__(self, agent: PPOAgent | None = None, config: PPOConfig | None = None, adaptive: bool = False,
                 min_batch_fraction: float = 0.5, seed: int = 0, explore_fraction: float = 0.05,
                 init_random: int | None = None, log: list[dict] | None = None, enumerate_limit: int = 4096,
                 learn: bool = True, walk: WalkSettings | None = None) -> None:
        super().__init__(seed, explore_fraction, init_random, log, enumerate_limit)
        self.agent = agent or PPOAgent(config or PPOConfig(seed=seed))
        self.adaptive, self.min_batch_fraction = adaptive, min_batch_fraction
        self.walk = replace(walk or WalkSettings(), learn=learn)  # the one place `learn` lives
        self.history: list[dict[str, float]] = []  # every PPO update's diagnostics, this strategy's
        self.moves: dict[int, MoveSpace] = {}  # the agent's action units, per design space
        self.last_rated: dict[Point, float] = {}

    def propose(self, n: int) -> list[Point]:
        live = [s for s in range(len(self.spaces)) if s not in self.exhausted]
        if not live:
            return []
        rated, record = walk_round(self, self.agent, live, self._moves, n, self.walk)
        self.last_rated = rated  # the finalists' exact ratings, for offline comparisons of walkers
        self.history.extend(record["updates"])
        self.round_record = _summary(record)
        pool = [(p, sc) for p, sc in rated.items() if p not in self.measured]
        if not pool:
            return []
        features = np.stack([self._features(p) for p, _ in pool])
        chosen = select(features, np.array([sc for _, sc in pool]), n, self.rng, adaptive=self.adaptive,
                        explore_fraction=self.explore_fraction, k_min=int(math.ceil(n * self.min_batch_fraction)))
        return [pool[i][0] for i in chosen]

    def _moves(self, s: int) -> MoveSpace:
        """Space s's action units (made again when pre_tuning made new spaces)."""
        moves = self.moves.get(s)
        if moves is None or moves.space is not self.spaces[s]:
            moves = self.moves[s] = MoveSpace(self.spaces[s])
        return moves

    def _features(self, point: Point) -> np.ndarray:
        """A point as clustering sees it: its normalised knob vector, zero-padded to the largest space's length.
        No design-space axis: which space a point comes from must not buy it a seat in the batch."""
        s, vec = point
        space = self.spaces[s]
        out = np.zeros(max(sp.size for sp in self.spaces))
        out[: space.size] = space.normalised(np.array(vec, dtype=np.int64))
        return out

    def clone(self) -> "PPOSearch":
        return PPOSearch(agent=self.agent, adaptive=self.adaptive, min_batch_fraction=self.min_batch_fraction,
                         seed=self.seed, explore_fraction=self.explore_fraction, init_random=self.init_random,
                         log=self.log, enumerate_limit=self.enumerate_limit, learn=self.walk.learn, walk=self.walk)


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    """A walk round's record as the log line keeps it: counts, seconds, draft agreement, and the mean of each PPO
    diagnostic over the round's updates (entropy, approx_kl, clipfrac, explained variance, losses)."""
    out = {k: v for k, v in record.items() if k != "updates"}
    out["ppo_updates"] = len(record["updates"])
    for key in ("entropy", "approx_kl", "clipfrac", "explained_variance", "policy_loss", "value_loss"):
        values = [u[key] for u in record["updates"] if key in u and np.isfinite(u[key])]
        out[key] = float(np.mean(values)) if values else None
    return out


__all__ = ["KnobSearch", "PPOSearch"]
