"""Which of the rated, unmeasured points a knob-space search measures next.

Two rules, both over a pool of points the cost model rated this round (scores: higher is predicted faster):

- `top_k`: the best-rated, plus a small random share of the rest.
- `cluster_top`: clusters the top of the pool by score (the best `max(4 n, 64)`, but no more than the better half
  of the pool, and at least 2 n) with k-means, k at the knee of the inertia curve (`tune.sampling.adaptive_sample`),
  measures the best-rated point of each cluster, fills the rest of the batch by score, plus the same small random
  share. Clustering only the top keeps the batch where the model points (a design space or region rated lower
  gets no seat just for being different, as it did when the design-space index was a clustering coordinate),
  while the per-cluster picks keep the batch from being near-duplicates of a single point.

Both return a full batch (`min(n, len(pool))` picks): a round that measures fewer than asked pays the round's
fixed cost (the search) for nothing, and MetaSchedule reads a short batch as a space running out.
"""
from __future__ import annotations

import numpy as np

from ..sampling import adaptive_sample

TOP_MULTIPLE, TOP_MIN = 4, 64  # the part of the pool that is clustered: the best max(4 n, 64) points (see head_size)


def _ranked(scores: np.ndarray) -> np.ndarray:
    """Indices by score, best first (NaN last), ties to the lowest index."""
    scores = np.where(np.isnan(scores), -np.inf, scores)
    return np.lexsort((np.arange(len(scores)), -scores))


def _check(scores: np.ndarray, n: int, explore_fraction: float) -> np.ndarray:
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {scores.shape}")
    if not 0 <= explore_fraction <= 1:
        raise ValueError(f"explore_fraction must be in [0, 1], got {explore_fraction}")
    if n < 0:
        raise ValueError(f"the batch size must be >= 0, got {n}")
    return scores


def top_k(scores: np.ndarray, n: int, rng: np.random.Generator, explore_fraction: float = 0.05) -> list[int]:
    """Indices of the n - round(n * explore_fraction) best-rated points, then random others up to n."""
    scores = _check(scores, n, explore_fraction)
    order = _ranked(scores).tolist()
    n_top = n - int(round(n * explore_fraction))
    top, rest = order[:n_top], order[n_top:]
    picks: list[int] = rng.choice(len(rest), size=min(n - len(top), len(rest)), replace=False).tolist() if rest else []
    return top + [rest[i] for i in picks]


def head_size(n: int, m: int) -> int:
    """How many of a pool of m points, best first, `cluster_top` clusters for a batch of n: max(4 n, 64), but
    within the pool's better half unless that is below 2 n (so a representative is never a point the model
    ranks low, however small the pool)."""
    return min(m, max(TOP_MULTIPLE * n, TOP_MIN), max(2 * n, m // 2))


def cluster_top(features: np.ndarray, scores: np.ndarray, n: int, rng: np.random.Generator,
                explore_fraction: float = 0.05, k_min: int = 1) -> list[int]:
    """Indices to measure: the best-rated point per k-means cluster of the pool's top, then by score, then a
    random share (see the module docstring).

    features: (m, d) points on comparable scales (e.g. normalised knob vectors padded to a common length);
    scores: (m,) ratings, NaN worst. At most n indices, distinct, `min(n, m)` of them; deterministic for a
    given state of `rng`.
    """
    scores = _check(scores, n, explore_fraction)
    features = np.asarray(features, dtype=float)
    if features.ndim != 2 or features.shape[0] != scores.shape[0]:
        raise ValueError(f"features must be (m, d) with m = {scores.shape[0]}, got {features.shape}")
    if n == 0 or len(scores) == 0:
        return []
    order = _ranked(scores)
    n_explore = min(int(n * explore_fraction + 0.5), max(len(order) - n, 0))  # random seats only from a surplus
    n_best = n - n_explore
    head = order[: head_size(n, len(order))]
    reps = [int(head[i]) for i in adaptive_sample(features[head], scores[head], n_best, rng, explore_frac=0.0,
                                                  k_min=min(k_min, n_best))]
    chosen = set(reps)
    fill = [int(i) for i in order if int(i) not in chosen][: n_best - len(reps)]
    chosen.update(fill)
    rest = [int(i) for i in order if int(i) not in chosen]
    explore = [rest[i] for i in rng.choice(len(rest), size=min(n_explore, len(rest)), replace=False)] if rest else []
    return reps + fill + explore


def select(features: np.ndarray, scores: np.ndarray, n: int, rng: np.random.Generator, adaptive: bool = True,
           explore_fraction: float = 0.05, k_min: int = 1) -> list[int]:
    """`cluster_top` when `adaptive`, else `top_k` (which ignores `features`)."""
    if adaptive:
        return cluster_top(features, scores, n, rng, explore_fraction, k_min)
    return top_k(scores, n, rng, explore_fraction)


__all__ = ["TOP_MIN", "TOP_MULTIPLE", "cluster_top", "head_size", "select", "top_k"]
