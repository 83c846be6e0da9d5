"""The knob-space search strategies' shared plumbing for MetaSchedule: `KnobSearch` (PPOSearch in `ppo`,
SimulatedAnnealing in `annealing`).

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
- a point that does not decode is never measured; the count of such rejections is kept (`stats`);
- MetaSchedule's protocol: every batch is full while unmeasured valid points remain (a short proposal is topped
  up with the round's next-best rated points, then random valid ones), and the strategy returns None, which
  ends the task, as soon as none remain. A design space of at most `enumerate_limit` points (a space without
  knobs is one point) is enumerated: its points are drawn without replacement in a random order, each decoded
  once, so the strategy knows exactly when every valid point has been measured. For larger spaces the task
  ends when the search and random sampling find no new valid point in a round; when no point decodes at all
  (every postprocessor fails), that is the first round.

Subclasses only say which unmeasured points to measure next (`propose`).
"""
from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from ...database import FAILED_SECONDS, record_seconds
from ..cost_model import create as create_cost_model
from ..knobs import KnobError, KnobSpace, to_candidate

logger = logging.getLogger(__name__)

Point = tuple[int, tuple[int, ...]]  # (design-space index, knob vector)


class KnobSearch(PySearchStrategy):
    """Shared state of a knob-space search (see the module docstring); subclasses implement `propose`."""

    def __init__(self, seed: int = 0, explore_fraction: float = 0.05, init_random: int | None = None,
                 log: list[dict] | None = None, enumerate_limit: int = 4096) -> None:
        self.seed, self.explore_fraction, self.init_random = seed, explore_fraction, init_random
        self.enumerate_limit = enumerate_limit
        self.context: ms.TuneContext | None = None
        self.round_record: dict[str, Any] = {}  # what a subclass's search did this round, for the log line
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
        # Small spaces: every vector, in a random order of their own (so the main random stream, hence the
        # search in large spaces, does not depend on which spaces are small).
        self.orders: dict[int, list[tuple[int, ...]]] = {}
        for s, space in enumerate(self.spaces):
            cards = [int(c) for c in space.cardinalities]
            if math.prod(cards) <= self.enumerate_limit:
                vecs = list(itertools.product(*(range(c) for c in cards)))
                perm = np.random.default_rng([self.seed, s]).permutation(len(vecs))
                self.orders[s] = [vecs[i] for i in perm]
        self.exhausted: set[int] = set()  # enumerated spaces with no valid unmeasured point left
        self.done = False  # returned None once: the task is over
        # The tuner's cost model is retrained by the default measure callbacks; without one we keep our own.
        self.own_model = cost_model is None
        self.model = create_cost_model("xgb-no-warmup") if cost_model is None else cost_model
        if getattr(self.model, "num_warmup_samples", 0):
            # An XGBModel predicts at random until it has seen this many samples (MetaSchedule: 100, the whole
            # budget of a short run); the walks need its ratings from the first measured batch.
            self.model.num_warmup_samples = 0
        self.schedules: dict[Point, Any] = {}  # decoded schedules (None: invalid)
        self.scores: dict[Point, float] = {}  # cost-model scores under the current model
        self.measured: dict[Point, float] = {}  # run seconds (`_mean_seconds`)
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
        if self.done or self.trials >= self.max_trials:
            return None
        start = time.perf_counter()
        n = min(self.per_iter, self.max_trials - self.trials)
        self._note_exhausted()
        if len(self.exhausted) == len(self.spaces):
            points = []  # every valid point is measured: no search
        elif not self.measured:  # nothing measured yet: the cost model knows nothing
            points = self._random_points(n if self.init_random is None else min(n, self.init_random))
        else:
            points = self._fill(self.propose(n), n)
        seconds = time.perf_counter() - start
        self.stats["search_seconds"] += seconds
        if not points:
            self._end()
            return None
        self.stats["rounds"] += 1
        self.log.append({"task": self.context.task_name, "round": self.stats["rounds"], "measure": len(points),
                         "search_seconds": seconds, "evaluations": self.stats["evaluations"],
                         "invalid": self.stats["invalid"], "evaluate_seconds": self.stats["evaluate_seconds"],
                         **self.round_record})
        self.round_record = {}
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
        """Up to n random valid unmeasured points, spread over the design spaces not exhausted: an enumerated
        space gives its next valid unmeasured point in its random order; a large one a uniform draw, at most
        max(n * tries_per_point, 64) draws in all."""
        exclude = set(exclude or ())
        out: list[Point] = []
        live = [s for s in range(len(self.spaces)) if s not in self.exhausted]
        for _ in range(max(n * tries_per_point, 64)):
            if len(out) >= n or not live:
                break
            s = live[int(self.rng.integers(len(live)))]
            if s in self.orders:
                point = next(self._unmeasured(s, exclude), None)
                if point is None:  # nothing left here for this batch
                    live.remove(s)
                    continue
            else:
                point = (s, tuple(int(x) for x in self.spaces[s].random(self.rng)))
                if point in self.measured or point in exclude or self._schedule(point) is None:
                    continue
            out.append(point)
            exclude.add(point)
        return out

    def _fill(self, points: list[Point], n: int) -> list[Point]:
        """A proposal made distinct, unmeasured and valid, cut to n and topped up to n: first with the round's
        next-best rated points, then with random valid ones; short only when neither finds more."""
        out = list(dict.fromkeys(p for p in points if p not in self.measured and self._schedule(p) is not None))
        out = out[:n]
        if len(out) < n:
            taken = set(out)
            rated = sorted((-sc, p) for p, sc in self.scores.items()
                           if not math.isnan(sc) and p not in self.measured and p not in taken)
            out += [p for _, p in rated[: n - len(out)]]
        if len(out) < n:
            out += self._random_points(n - len(out), exclude=set(out))
        return out

    def _unmeasured(self, s: int, exclude: set) -> Iterator[Point]:
        """The valid unmeasured points of enumerated space s in its random order, decoding each on first sight."""
        for vec in self.orders[s]:
            point = (s, vec)
            if point not in self.measured and point not in exclude and self._schedule(point) is not None:
                yield point

    def _note_exhausted(self) -> None:
        """Mark the enumerated spaces whose valid points are all measured."""
        for s in self.orders:
            if s not in self.exhausted and next(self._unmeasured(s, set()), None) is None:
                self.exhausted.add(s)

    def _end(self) -> None:
        """No valid unmeasured point is left (or none was found): say why, and end the task."""
        self.done = True
        assert self.context is not None  # set before pre_tuning, which checks it
        name = self.context.task_name
        if not self.measured and self.stats["evaluations"] == self.stats["invalid"]:
            errors = {sp.last_error for sp in self.spaces if sp.last_error}
            logger.warning("%s: none of %d schedules tried decodes, ending the task (%s)", name,
                           self.stats["evaluations"], "; ".join(sorted(errors)) or "no reason given")
        else:
            logger.info("%s: no valid unmeasured schedule left after %d trials (%d decoded, %d invalid): ending "
                        "the task", name, self.trials, self.stats["evaluations"], self.stats["invalid"])

    def _schedule(self, point: Point) -> Any:
        """The point's decoded schedule (None: invalid), decoding and counting it on first sight."""
        if point not in self.schedules:
            self.schedules[point] = self.spaces[point[0]].decode(np.array(point[1]))
            self.stats["evaluations"] += 1
            self.stats["invalid"] += self.schedules[point] is None
        return self.schedules[point]

    def _resume(self, database: ms.Database) -> None:
        """Encode this workload's records back to points: they are not measured again and train the model."""
        assert self.context is not None  # set before pre_tuning, which checks it
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
    """A runner result's or tuning record's run time (`record_seconds`): inf for a result that did not run, and
    `FAILED_SECONDS` for a record of a failed candidate (which the database keeps with that time)."""
    secs = getattr(result, "run_secs", None)
    if getattr(result, "error_msg", None) is not None or not secs:
        return math.inf
    seconds = record_seconds(secs)
    return FAILED_SECONDS if seconds is None else seconds


__all__ = ["KnobSearch", "Point"]
