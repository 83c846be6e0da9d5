"""One round of PPOSearch's walks: long walks rated by a draft model, finalists rated exactly.

Per design space, each round:
1. the points of the space that are decoded already (measured ones, earlier finalists, random draws; at most
   `draft_points`, best measured first) are rated by the tuner's cost model (decoding is cached, so this costs
   feature extraction only) and a draft model (`tune.draft`) is fitted to those ratings;
2. `walks` walks start, half from the best measured points, half from random valid ones, and take up to
   `max_steps` steps of the agent's moves (`tune.moves`), each rated by the draft in microseconds; with
   `learn` the agent is updated every `update_every` steps (`PPOAgent.explore`);
3. the `finalists` best unmeasured points the walks met, by the draft, are decoded and rated by the cost model;
   those ratings, not the draft's, are what selection sees.

What a round did is returned as one dict (rated points, draft agreement with the cost model on the finalists,
the PPO updates' diagnostics), which the strategy appends to its log.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..agent import PPOAgent
from ..draft import DraftModel
from ..moves import MoveSpace

if TYPE_CHECKING:
    from .knob_search import KnobSearch, Point


@dataclass
class WalkSettings:
    """How much a round rates exactly: `draft_points` to fit the draft, `finalists` per space and batch slot
    (the round rates `finalists * n` of them over the spaces); at least `min_random` random valid points train
    the draft in a space with few decoded ones."""

    draft_points: int = 256
    finalists: int = 4
    min_random: int = 32
    learn: bool = True


def walk_round(search: "KnobSearch", agent: PPOAgent, live: list[int], moves: Callable[[int], MoveSpace], n: int,
               settings: WalkSettings) -> tuple[dict["Point", float], dict[str, Any]]:
    """Exact ratings of the round's finalists in the design spaces `live` (unmeasured, valid points; see the
    module docstring) and the round's record; `moves(s)` gives space s's action units."""
    cfg = agent.config
    spaces = len(live)
    walks_per_space = max(2, cfg.walks // spaces)
    finalists_per_space = max(n, int(math.ceil(settings.finalists * n / spaces)))
    elite = search.best_measured(max(1, walks_per_space // 2))
    rated: dict[Point, float] = {}
    record: dict[str, Any] = {"draft_seconds": 0.0, "walk_seconds": 0.0, "exact_seconds": 0.0, "steps": 0,
                              "draft_ratings": 0, "exact_ratings": 0, "updates": [], "agreement": []}
    for s in live:
        start = time.perf_counter()
        train = _draft_training_points(search, s, settings)
        if not train:
            continue
        vecs = np.array([p[1] for p in train], dtype=np.int64)
        exact = search.evaluate(s, vecs)
        ok = ~np.isnan(exact)
        vecs, exact = vecs[ok], exact[ok]
        if not len(vecs):
            continue
        draft = DraftModel(seed=int(search.rng.integers(2**31 - 1))).fit(moves(s).draft_features(vecs), exact)
        record["draft_seconds"] += time.perf_counter() - start

        start = time.perf_counter()
        mine = [np.array(p[1]) for p in elite if p[0] == s]
        starts = [mine[i % len(mine)] for i in range(walks_per_space // 2)] if mine else []
        order = search.rng.permutation(len(vecs))
        starts += [vecs[i] for i in order[: walks_per_space - len(starts)]]
        starts_arr = np.stack(starts)
        space_moves = moves(s)

        def rate(vecs: np.ndarray, m: MoveSpace = space_moves, d: DraftModel = draft) -> np.ndarray:
            return d.predict(m.draft_features(vecs))

        walk = agent.explore(space_moves, starts_arr, rate(starts_arr), rate, search.rng, learn=settings.learn)
        record["walk_seconds"] += time.perf_counter() - start
        record["steps"] += walk.steps
        record["draft_ratings"] += walk.evaluations
        record["updates"] += walk.updates

        start = time.perf_counter()
        pool = sorted(((sc, v) for v, sc in walk.scores.items() if (s, v) not in search.measured),
                      key=lambda x: -x[0])[:finalists_per_space]
        if pool:
            final = np.array([v for _, v in pool], dtype=np.int64)
            scores = search.evaluate(s, final)
            record["exact_ratings"] += len(final)
            agreement = draft.agreement(moves(s).draft_features(final), scores)
            if agreement is not None:
                record["agreement"].append(agreement)
            rated.update({(s, tuple(int(x) for x in v)): float(sc)
                          for v, sc in zip(final, scores) if not np.isnan(sc)})
        record["exact_seconds"] += time.perf_counter() - start
    record["agreement"] = float(np.mean(record["agreement"])) if record["agreement"] else None
    return rated, record


def _draft_training_points(search: "KnobSearch", s: int, settings: WalkSettings) -> list["Point"]:
    """Decoded valid points of space s to fit the draft on: the measured ones (fastest first), then the most
    recently decoded others, topped up with random valid draws to `min_random`."""
    measured = [p for p in search.best_measured(len(search.measured)) if p[0] == s]
    others = [p for p, sch in reversed(list(search.schedules.items()))
              if p[0] == s and sch is not None and p not in search.measured]
    points = (measured + others)[: settings.draft_points]
    for _ in range(settings.min_random - len(points)):
        vec = search.spaces[s].random(search.rng)
        point = (s, tuple(int(x) for x in vec))
        if point not in points and search._schedule(point) is not None:
            points.append(point)
    return points


__all__ = ["WalkSettings", "walk_round"]
