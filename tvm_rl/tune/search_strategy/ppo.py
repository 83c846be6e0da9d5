"""Knob-space search strategies for MetaSchedule: PPOSearch (CHAMELEON) and the plumbing they share.

A `KnobSearch` is a MetaSchedule `PySearchStrategy`, so it plugs into `tune_tir`, `tune_tasks` and `tune_relax`
like `EvolutionarySearch`: the task scheduler asks it for a batch of candidates, measures them, the default
measure callbacks append the records to the database, and the strategy is told the results. What it shares
with every knob-space strategy:

- each design space becomes a `KnobSpace`; a point is (space index, knob vector), decoded to a schedule
  (replay + postprocessors) and rated by the tuner's cost model (TVM's `XGBModel` by default, retrained by
  the measure callbacks on every measured batch; without a cost model the strategy keeps its own). Its warm-up
  is set to 0: MetaSchedule's XGBModel predicts at random for its first 100 samples, the whole budget of a
  short run. Rated schedules are cached, so revisiting a point costs nothing;
- resume: records already in the database for this workload are encoded back to points, never measured again,
  train the cost model before the first round, and seed the search;
- a point that does not decode is never measured; the count of such rejections is kept (`stats`).

Subclasses only say which unmeasured points to measure next (`propose`).
"""
from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from ..agent import PPOAgent, PPOConfig
from ..cost_model import create as create_cost_model
from ..knobs import KnobError, KnobSpace, to_candidate
from ..sampling import adaptive_sample

logger = logging.getLogger(__name__)

Point = tuple[int, tuple[int, ...]]  # (design-space index, knob vector)


class KnobSearch(PySearchStrategy):
    """Shared state of a knob-space search (see the module docstring); subclasses implement `propose`."""

    def __init__(self, seed: int = 0, explore_fraction: float = 0.05, init_random: int | None = None,
                 log: list[dict] | None = None) -> None:
        self.seed, self.explore_fraction, self.init_random = seed, explore_fraction, init_random
        self.context: ms.TuneContext | None = None
        # One line per round, shared by every clone (the task scheduler tunes clones, not this object).
        self.log: list[dict] = log if log is not None else []

    # --- MetaSchedule's interface ---
    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        self.context = context

    def pre_tuning(self, max_trials: int, num_trials_per_iter: int, design_spaces: list,
                   database: ms.Database | None = None, cost_model=None) -> None:
        if self.context is None:
            raise RuntimeError(f"{type(self).__name__} was not initialised with a TuneContext")
        self.max_trials, self.per_iter = int(max_trials), int(num_trials_per_iter)
        self.rng = np.random.default_rng(self.seed)
        self.spaces: list[KnobSpace] = []
        for sch in design_spaces:
            try:
                self.spaces.append(KnobSpace(sch, self.context))
            except KnobError as err:  # e.g. a space whose trace cannot be replayed: the others still tune
                logger.warning("%s: design space skipped: %s", self.context.task_name, err)
        if not self.spaces:
            raise KnobError(f"{self.context.task_name}: no design space could be viewed as knobs")
        # The tuner's cost model is retrained by the default measure callbacks; without one we keep our own.
        self.own_model = cost_model is None
        self.model = create_cost_model("xgb") if cost_model is None else cost_model
        if getattr(self.model, "num_warmup_samples", 0):
            # An XGBModel predicts at random until it has seen this many samples (MetaSchedule: 100, the whole
            # budget of a short run); the walks need its ratings from the first measured batch.
            self.model.num_warmup_samples = 0
        self.schedules: dict[Point, Any] = {}  # decoded schedules (None: invalid)
        self.scores: dict[Point, float] = {}  # cost-model scores under the current model
        self.measured: dict[Point, float] = {}  # mean run seconds (inf: failed)
        self.pending: list[Point] = []
        self.trials = 0
        self.stats = {"rounds": 0, "evaluations": 0, "invalid": 0, "resumed": 0, "search_seconds": 0.0,
                      "evaluate_seconds": 0.0}
        self.database = database
        if database is not None:
            self._resume(database)

    def post_tuning(self) -> None:
        self.schedules.clear()
        self.scores.clear()

    def generate_measure_candidates(self):
        if self.trials >= self.max_trials:
            return None
        start = time.perf_counter()
        n = min(self.per_iter, self.max_trials - self.trials)
        if not self.measured:  # nothing measured yet: the cost model knows nothing
            points = self._random_points(n if self.init_random is None else min(n, self.init_random))
        else:
            points = self.propose(n)
            if len(points) < n * self.explore_fraction:  # the search found too few: fill with random ones
                points += self._random_points(n - len(points), exclude=set(points))
        points = points[:n]
        self.stats["rounds"] += 1
        seconds = time.perf_counter() - start
        self.stats["search_seconds"] += seconds
        self.log.append({"task": self.context.task_name, "round": self.stats["rounds"], "measure": len(points),
                         "search_seconds": seconds, "evaluations": self.stats["evaluations"],
                         "invalid": self.stats["invalid"], "evaluate_seconds": self.stats["evaluate_seconds"]})
        if not points:
            return None  # the space has nothing left to measure
        self.pending = points
        return [to_candidate(self.schedules[p]) for p in points]

    def notify_runner_results(self, measure_candidates, results) -> None:
        costs = [_mean_seconds(r) for r in results]
        for point, cost in zip(self.pending, costs):
            self.measured[point] = cost
        self.trials += len(results)
        if self.own_model:
            self.model.update(self.context, list(measure_candidates), list(results))
        self.scores.clear()  # the model changed
        self.pending = []

    # --- what subclasses decide ---
    def propose(self, n: int) -> list[Point]:
        """Up to n unmeasured, valid points to measure next."""
        raise NotImplementedError

    # --- shared helpers ---
    def evaluate(self, space_index: int, vecs: np.ndarray) -> np.ndarray:
        """Cost-model scores of vectors of one space (NaN: does not decode); decodes and rates only new ones."""
        start = time.perf_counter()
        keys = [(space_index, tuple(int(x) for x in v)) for v in vecs]
        todo = [k for k in dict.fromkeys(keys) if k not in self.scores]
        valid = [k for k in todo if self._schedule(k) is not None]
        for k in todo:
            self.scores[k] = math.nan
        if valid:
            preds = self.model.predict(self.context, [to_candidate(self.schedules[k]) for k in valid])
            for k, p in zip(valid, preds):
                self.scores[k] = float(p)
        self.stats["evaluate_seconds"] += time.perf_counter() - start
        return np.array([self.scores[k] for k in keys], dtype=float)

    def best_measured(self, k: int) -> list[Point]:
        """The k fastest measured points."""
        ok = sorted((c, p) for p, c in self.measured.items() if math.isfinite(c))
        return [p for _, p in ok[:k]]

    def _random_points(self, n: int, exclude: set | None = None, tries_per_point: int = 8) -> list[Point]:
        """Up to n random valid unmeasured points, spread over the design spaces."""
        exclude = exclude or set()
        out: list[Point] = []
        for _ in range(n * tries_per_point):
            if len(out) >= n:
                break
            s = int(self.rng.integers(len(self.spaces)))
            point = (s, tuple(int(x) for x in self.spaces[s].random(self.rng)))
            if point in self.measured or point in exclude or point in out:
                continue
            if self._schedule(point) is not None:
                out.append(point)
        return out

    def _schedule(self, point: Point) -> Any:
        """The point's decoded schedule (None: invalid), decoding and counting it on first sight."""
        if point not in self.schedules:
            self.schedules[point] = self.spaces[point[0]].decode(np.array(point[1]))
            self.stats["evaluations"] += 1
            self.stats["invalid"] += self.schedules[point] is None
        return self.schedules[point]

    def _resume(self, database: ms.Database) -> None:
        """Encode this workload's records back to points: they are not measured again and train the model."""
        if not database.has_workload(self.context.mod):
            return
        workload = database.commit_workload(self.context.mod)
        records = database.get_top_k(workload, 1 << 20)
        candidates, results = [], []
        for rec in records:
            for s, space in enumerate(self.spaces):
                try:
                    point = (s, tuple(int(x) for x in space.encode(rec.trace)))
                except KnobError:
                    continue
                sch = space.decode(np.array(point[1]))
                if sch is None:
                    break
                self.schedules[point] = sch
                self.measured[point] = _mean_seconds(rec)
                candidates.append(to_candidate(sch))
                results.append(ms.runner.RunnerResult(run_secs=rec.run_secs, error_msg=None))
                break
        self.stats["resumed"] = len(candidates)
        if candidates:
            self.model.update(self.context, candidates, results)


def _mean_seconds(result: Any) -> float:
    """Mean of a runner result's or tuning record's run times; inf for a failed one."""
    secs = getattr(result, "run_secs", None)
    if getattr(result, "error_msg", None) is not None or not secs:
        return math.inf
    return float(np.mean([float(s) for s in secs]))


@derived_object
class PPOSearch(KnobSearch):
    """CHAMELEON's search: PPO walks over the knob space rated by the cost model, then adaptive sampling.

    Each round, `config.walks` walks start half from the best measured points and half from random valid
    ones, and move every knob at once (decrease / keep / increase) under the agent's policy; the agent is
    updated with PPO on the round's walks. Of the unmeasured valid points the walks rated, `adaptive=True`
    measures one best-rated representative per k-means cluster (k at the knee of the inertia curve, so a
    round may measure fewer than asked when the landscape is simple) plus a small random share;
    `adaptive=False` measures the top-rated ones. The agent is shared by every clone of the strategy, so a
    multi-task run trains one agent across tasks and a given agent carries over between runs.
    """

    def __init__(self, agent: PPOAgent | None = None, config: PPOConfig | None = None, adaptive: bool = True,
                 min_batch_fraction: float = 0.5, seed: int = 0, explore_fraction: float = 0.05,
                 init_random: int | None = None, log: list[dict] | None = None) -> None:
        super().__init__(seed, explore_fraction, init_random, log)
        self.agent = agent or PPOAgent(config or PPOConfig(seed=seed))
        self.adaptive, self.min_batch_fraction = adaptive, min_batch_fraction
        self.history: list[dict[str, float]] = []

    def propose(self, n: int) -> list[Point]:
        cfg = self.agent.config
        walks_per_space = max(1, cfg.walks // len(self.spaces))
        budget = max(1, cfg.max_evaluations // len(self.spaces))
        elite = self.best_measured(max(1, walks_per_space // 2))
        rated: dict[Point, float] = {}
        for s, space in enumerate(self.spaces):
            mine = [np.array(p[1]) for p in elite if p[0] == s]
            starts = [mine[i % len(mine)] for i in range(walks_per_space // 2)] if mine else []
            fresh = (self._random_valid(s) for _ in range(walks_per_space - len(starts)))
            starts += [vec for vec in fresh if vec is not None]
            if not starts:
                continue
            starts = np.stack(starts)
            walk = self.agent.explore(space, starts, self.evaluate(s, starts), lambda v, s=s: self.evaluate(s, v),
                                      self.rng, max_evaluations=budget)
            rated.update({(s, v): score for v, score in walk.scores.items()})
        stats = self.agent.update(self.rng)
        self.history.append(stats)
        pool = [(p, sc) for p, sc in rated.items() if p not in self.measured]
        if not pool:
            return []
        if not self.adaptive:
            pool.sort(key=lambda x: -x[1])
            n_top = n - int(round(n * self.explore_fraction))
            top = [p for p, _ in pool[:n_top]]
            rest = [p for p, _ in pool[n_top:]]
            picks = self.rng.choice(len(rest), size=min(n - len(top), len(rest)), replace=False) if rest else []
            return top + [rest[i] for i in picks]
        features = np.stack([self._features(p) for p, _ in pool])
        chosen = adaptive_sample(features, np.array([sc for _, sc in pool]), n, self.rng,
                                 explore_frac=self.explore_fraction,
                                 k_min=int(math.ceil(n * self.min_batch_fraction)))
        return [pool[i][0] for i in chosen]

    def _random_valid(self, s: int, tries: int = 8) -> np.ndarray | None:
        """A random vector of space s that decodes (rated on the way), or None after `tries` invalid draws."""
        for _ in range(tries):
            vec = self.spaces[s].random(self.rng)
            if not np.isnan(self.evaluate(s, vec[None])[0]):
                return vec
        return None

    def _features(self, point: Point) -> np.ndarray:
        """A point as clustering sees it: its normalised knob vector, with the space index as one more axis
        (so points of different design spaces never share a cluster)."""
        s, vec = point
        space = self.spaces[s]
        k_max = max(sp.size for sp in self.spaces)
        out = np.zeros(k_max + 1)
        out[: space.size] = space.normalised(np.array(vec))
        out[-1] = 10.0 * s
        return out

    def clone(self) -> "PPOSearch":
        return PPOSearch(agent=self.agent, adaptive=self.adaptive, min_batch_fraction=self.min_batch_fraction,
                         seed=self.seed, explore_fraction=self.explore_fraction, init_random=self.init_random,
                         log=self.log)


__all__ = ["KnobSearch", "PPOSearch"]
