"""The task-clustered bootstrap that `tvm-rl corpus compare-policy` reports its intervals with, and the tuner
benchmark (`benchmarks/tuning/stats.py`) its ratios: one definition for both."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def mean_of_means(groups: Sequence[Sequence[float] | np.ndarray]) -> float:
    """The mean of the non-empty groups' means (each group weighs the same, whatever its size)."""
    return float(np.mean([np.mean(g) for g in groups if len(g)]))


def cluster_bootstrap(groups: Sequence[Sequence[float]], n_boot: int = 2000, seed: int = 0,
                      level: float = 0.95) -> tuple[float, float, float]:
    """Mean of the group means (each task weighs the same, whatever its number of seeds) and its `level`
    interval by resampling groups with replacement, then values within each drawn group. NaNs when empty."""
    arrays = [np.asarray(g, dtype=float) for g in groups if len(g)]
    if not arrays:
        return math.nan, math.nan, math.nan
    point = mean_of_means(arrays)
    rng = np.random.default_rng(seed)
    stats = np.empty(n_boot)
    for b in range(n_boot):
        picks = rng.integers(len(arrays), size=len(arrays))
        stats[b] = np.mean([arrays[i][rng.integers(len(arrays[i]), size=len(arrays[i]))].mean() for i in picks])
    tail = (1 - level) / 2
    return point, float(np.quantile(stats, tail)), float(np.quantile(stats, 1 - tail))


__all__ = ["cluster_bootstrap", "mean_of_means"]
