"""A draft model: rates knob vectors in microseconds, so the agent's walks can take thousands of steps a round.

Rating a point exactly means replaying its trace with the postprocessors and extracting its features for the cost
model, 10-100 ms on a CPU; a round of walks that rated every step that way would rate a few hundred points. The
draft model is a small gradient-boosted regressor (XGBoost) over `MoveSpace.draft_features` (tile sizes in log2,
the other knobs' indices), fitted each round to the cost model's exact scores of the points rated so far. The walks
climb the draft; only their finalists are decoded and rated exactly (`search_strategy.ppo`), so a draft that is
wrong costs a few exact ratings, never a measurement.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from scipy.stats import spearmanr


class DraftModel:
    """Gradient-boosted trees from draft features to the cost model's score (higher: predicted faster)."""

    def __init__(self, seed: int = 0, trees: int = 60, depth: int = 5) -> None:
        self.seed, self.trees, self.depth = seed, trees, depth
        self.booster: Any = None
        self.constant = 0.0

    @property
    def fitted(self) -> bool:
        return self.booster is not None

    def fit(self, features: np.ndarray, scores: np.ndarray) -> "DraftModel":
        """Fit to `scores` of `features` (finite scores only); with fewer than 8 it predicts their mean."""
        import xgboost as xgb

        features = np.asarray(features, dtype=np.float32)
        scores = np.asarray(scores, dtype=np.float64)
        ok = np.isfinite(scores)
        features, scores = features[ok], scores[ok]
        self.constant = float(scores.mean()) if len(scores) else 0.0
        if len(scores) < 8 or features.shape[1] == 0 or np.ptp(scores) == 0:
            self.booster = None
            return self
        # One thread: the walks call predict on a few dozen rows at a time, where threads cost more than they save.
        params = {"max_depth": self.depth, "eta": 0.2, "subsample": 0.9, "seed": self.seed, "nthread": 1,
                  "tree_method": "hist", "verbosity": 0, "objective": "reg:squarederror"}
        self.booster = xgb.train(params, xgb.DMatrix(features, label=scores), num_boost_round=self.trees)
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Scores of `features` (W, D)."""
        import xgboost as xgb

        features = np.asarray(features, dtype=np.float32)
        if self.booster is None:
            return np.full(len(features), self.constant)
        return self.booster.predict(xgb.DMatrix(features)).astype(np.float64)

    def agreement(self, features: np.ndarray, scores: np.ndarray) -> float | None:
        """Spearman's rho between the draft's and the exact scores of points it was not fitted on (None: too
        few points or a constant side)."""
        scores = np.asarray(scores, dtype=np.float64)
        ok = np.isfinite(scores)
        if ok.sum() < 3:
            return None
        pred = self.predict(np.asarray(features)[ok])
        if np.ptp(pred) == 0 or np.ptp(scores[ok]) == 0:
            return None
        return float(spearmanr(pred, scores[ok]).statistic)


__all__ = ["DraftModel"]
