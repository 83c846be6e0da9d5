"""AutoTVM's XGBTuner loop rebuilt on the knob space: the baseline CHAMELEON was measured against.

Each round, parallel simulated-annealing chains (AutoTVM: 128 chains, 500 iterations, temperature 1 -> 0,
chains persisting across rounds, early stop after 50 iterations without a better plan) move one random knob to a
random value per step, accepting a worse point with probability exp((new - old) / T) under the cost model's
scores; the best `plan_size` (64) unmeasured points seen form the plan, and the batch is the plan's top, with
a 5% random share. Here a rating costs a trace replay, so a round also stops after `max_evaluations` distinct
points (the same budget PPOSearch gets).
"""
from __future__ import annotations

import heapq

import numpy as np
from tvm.ir.utils import derived_object

from .knob_search import KnobSearch, Point


@derived_object
class SimulatedAnnealing(KnobSearch):
    """Simulated annealing on knob vectors with a cost model, top-k of the plan measured (AutoTVM XGBTuner)."""

    def __init__(self, chains: int = 128, iterations: int = 500, plan_size: int = 64, early_stop: int = 50,
                 max_evaluations: int = 512, persistent: bool = True, seed: int = 0,
                 explore_fraction: float = 0.05, init_random: int | None = None, log: list[dict] | None = None
                 ) -> None:
        super().__init__(seed, explore_fraction, init_random, log)
        self.chains, self.iterations, self.plan_size = chains, iterations, plan_size
        self.early_stop, self.max_evaluations, self.persistent = early_stop, max_evaluations, persistent
        self.points: list[Point] = []

    def _mutate(self, point: Point) -> Point:
        """One random knob set to a random other value (AutoTVM's random walk)."""
        s, vec = point
        space = self.spaces[s]
        movable = np.flatnonzero(space.cardinalities > 1)
        v = list(vec)
        k = int(self.rng.choice(movable))
        v[k] = int((v[k] + self.rng.integers(1, space.cardinalities[k])) % space.cardinalities[k])
        return s, tuple(v)

    def _score(self, points: list[Point]) -> np.ndarray:
        out = np.full(len(points), np.nan)
        for s in {p[0] for p in points}:
            idx = [i for i, p in enumerate(points) if p[0] == s]
            out[idx] = self.evaluate(s, np.array([points[i][1] for i in idx]))
        return out

    def propose(self, n: int) -> list[Point]:
        start_evals = self.stats["evaluations"]
        if not (self.persistent and self.points):
            self.points = self.best_measured(self.chains // 2)
            self.points += self._random_points(self.chains - len(self.points), exclude=set(self.points))
        points = list(self.points)
        scores = self._score(points)
        plan: list[tuple[float, Point]] = []  # min-heap of the best unmeasured points
        in_plan: set[Point] = set()

        def offer(p: Point, sc: float) -> bool:
            if np.isnan(sc) or p in self.measured or p in in_plan:
                return False
            if len(plan) < self.plan_size:
                heapq.heappush(plan, (sc, p))
            elif sc > plan[0][0]:
                in_plan.discard(heapq.heapreplace(plan, (sc, p))[1])
            else:
                return False
            in_plan.add(p)
            return True

        for p, sc in zip(points, scores):
            offer(p, sc)
        since_better = 0
        for it in range(self.iterations):
            if self.stats["evaluations"] - start_evals >= self.max_evaluations or since_better >= self.early_stop:
                break
            temp = 1.0 - it / self.iterations
            new = [self._mutate(p) for p in points]
            new_scores = self._score(new)
            improved = False
            for i, (p, sc) in enumerate(zip(new, new_scores)):
                if np.isnan(sc):
                    continue
                improved |= offer(p, sc)
                old = 0.0 if np.isnan(scores[i]) else scores[i]
                if sc >= old or self.rng.random() < np.exp((sc - old) / max(temp, 1e-6)):
                    points[i], scores[i] = p, sc
            since_better = 0 if improved else since_better + 1
        self.points = points
        ranked = [p for _, p in sorted(plan, key=lambda x: (-x[0], x[1]))]
        n_top = n - int(round(n * self.explore_fraction))
        return ranked[:n_top] + self._random_points(n - min(n_top, len(ranked)), exclude=set(ranked[:n_top]))

    def clone(self) -> "SimulatedAnnealing":
        return SimulatedAnnealing(self.chains, self.iterations, self.plan_size, self.early_stop,
                                  self.max_evaluations, self.persistent, self.seed, self.explore_fraction,
                                  self.init_random, self.log)


__all__ = ["SimulatedAnnealing"]
