"""CHAMELEON's adaptive sampling: measure one configuration per cluster of the candidates, not the top-k.

The search proposes many candidate configurations (knob vectors) that the cost model rates; the good ones tend to
sit in a few regions of the knob space, and measuring many near-duplicates of one region wastes hardware time.
`adaptive_sample` clusters the candidates with k-means, picks k at the knee of the inertia curve (so a simple
landscape gets few clusters, hence few measurements), and measures the best-rated member of each cluster (a real
candidate, not a synthesised centroid) plus a small random share for exploration.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

# Past this many candidate ks the inertia curve is sampled on a geometric grid: the knee needs the curve's shape,
# not every point, and each k costs one k-means fit.
_MAX_KS = 24


def knee(ks: Sequence[int], inertias: Sequence[float]) -> int:
    """The k at the knee of a decreasing inertia curve: the point farthest from the chord joining the first and
    last points, with both axes scaled to [0, 1] (the "kneedle" idea, without its smoothing). Ties go to the
    smallest k; a flat or straight curve gives the first k."""
    ks_arr = np.asarray(ks, dtype=float)
    y = np.asarray(inertias, dtype=float)
    if ks_arr.ndim != 1 or ks_arr.shape != y.shape or ks_arr.size == 0:
        raise ValueError(f"ks and inertias must be equal-length 1-D sequences, got {ks_arr.shape} and {y.shape}")
    if np.any(np.diff(ks_arr) <= 0):
        raise ValueError("ks must be strictly increasing")
    if ks_arr.size < 3:
        return int(ks_arr[0])
    span_y = y.max() - y.min()
    if span_y <= 0:
        return int(ks_arr[0])
    x = (ks_arr - ks_arr[0]) / (ks_arr[-1] - ks_arr[0])
    y = (y - y.min()) / span_y
    # Distance to the chord through (x0, y0) and (x1, y1), up to a constant factor.
    dx, dy = x[-1] - x[0], y[-1] - y[0]
    dist = np.abs(dy * (x - x[0]) - dx * (y - y[0]))
    if dist.max() <= 1e-12:
        return int(ks_arr[0])
    return int(ks_arr[int(np.argmax(dist))])


def _k_grid(k_lo: int, k_hi: int) -> np.ndarray:
    if k_hi - k_lo < _MAX_KS:
        return np.arange(k_lo, k_hi + 1)
    return np.unique(np.round(np.geomspace(k_lo, k_hi, _MAX_KS)).astype(int))


def _best(members: np.ndarray, scores: np.ndarray) -> int:
    """The member with the highest score; ties go to the lowest index."""
    members = np.sort(members)
    return int(members[int(np.argmax(scores[members]))])


def adaptive_sample(points: np.ndarray, scores: np.ndarray, budget: int, rng: np.random.Generator,
                    explore_frac: float = 0.1, k_max: int | None = None, k_min: int = 1) -> list[int]:
    """Indices (into `points`) of the candidates to measure, at most `budget` of them.

    points: (n, d) candidate configurations, on comparable scales per dimension (e.g. `KnobSpace.normalised`).
    scores: (n,) predicted goodness, higher is better (NaN counts as worst).
    Identical points count once (their best-scored copy). Of the budget, round(budget * explore_frac) goes to
    random unchosen points; the rest bounds k, which is chosen by the knee of the k-means inertia curve over
    k = k_min..min(that rest, k_max, distinct points) (on a geometric grid of 24 ks past 24); k_min > 1 keeps a
    round from measuring only a handful when each round has a fixed cost (the search before it). Returned: one
    best-scored representative per cluster, best first, then the exploration picks; so a landscape with few
    clusters uses less than the budget. Deterministic for a given state of `rng`.
    """
    points = np.asarray(points, dtype=float)
    scores = np.asarray(scores, dtype=float)
    if points.ndim != 2 or scores.shape != (points.shape[0],):
        raise ValueError(f"points must be (n, d) and scores (n,), got {points.shape} and {scores.shape}")
    if not 0 <= explore_frac <= 1:
        raise ValueError(f"explore_frac must be in [0, 1], got {explore_frac}")
    if budget <= 0 or points.shape[0] == 0:
        return []
    scores = np.where(np.isnan(scores), -np.inf, scores)
    seed = int(rng.integers(2**31 - 1))  # drawn first, so the rest only depends on rng's state at the call

    # One entry per distinct point: its best-scored copy.
    distinct, inverse = np.unique(points, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.lexsort((np.arange(len(scores)), -scores))  # best score first, then lowest index
    rep = np.full(len(distinct), -1)
    for i in order:
        if rep[inverse[i]] < 0:
            rep[inverse[i]] = i
    m = len(distinct)

    n_explore = min(int(budget * explore_frac + 0.5), budget - 1, m - 1)
    k_hi = min(budget - n_explore, m, k_max if k_max is not None else m)
    k_hi = max(k_hi, 1)
    k_lo = max(1, min(k_min, k_hi))
    labels = np.zeros(m, dtype=int)
    if k_hi > 1:
        fits: dict[int, KMeans] = {}
        ks = _k_grid(k_lo, k_hi)
        # One thread: on a few hundred points OpenMP's start-up and contention with a busy machine (builders,
        # runners) make k-means 10-20x slower than serial.
        with warnings.catch_warnings(), threadpool_limits(1):
            # k-means may find fewer distinct clusters than asked on near-duplicate points: harmless here.
            warnings.simplefilter("ignore", ConvergenceWarning)
            for k in ks:
                fits[int(k)] = KMeans(n_clusters=int(k), n_init=3, random_state=seed).fit(distinct)
        k = knee(ks, [fits[int(k)].inertia_ for k in ks])
        labels = fits[k].labels_

    chosen = [_best(rep[labels == c], scores) for c in np.unique(labels)]
    chosen.sort(key=lambda i: (-scores[i], i))
    rest = np.setdiff1d(rep, chosen)
    n_explore = min(n_explore, len(rest), budget - len(chosen))
    explore = rng.choice(rest, size=n_explore, replace=False).tolist() if n_explore > 0 else []
    return [int(i) for i in chosen + explore]


__all__ = ["adaptive_sample", "knee"]
