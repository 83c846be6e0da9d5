"""A learned estimate of what a kernel's next batch of measurements gains, for the whole-model budget.

`task_scheduler.LatencyShare` gives each batch to the kernel whose next batch is expected to save the most time per
model run. By default it guesses that saving with MetaSchedule's gradient rule. A `GainModel` replaces the guess, for
kernels measured at least once, with a regression fitted offline on tuning curves: each kernel's best latency after
each batch of its records, in the order a tuning database recorded them (`read_curves`). Its features are what the
scheduler knows during a run (`features`), and it predicts the relative gain of the next batch, (best before - best
after) / best before, whose mean is what the scheduler needs. The curves and the fit's rows come from
`tuning_curves`.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import TvmRlError
from .library import SHIPPED_DIR  # the package's models folder, one definition for the library and this

FEATURES = ("log2_batches", "last_gain", "total_gain", "log10_speedup", "log10_best")
FORMAT = "tvm-rl batch gain model"


def features(bests: Sequence[float], untuned: float) -> list[float]:
    """What the scheduler knows of a kernel measured at least once: `bests` is its best latency after each batch so
    far (seconds, all finite), `untuned` its untuned estimate (`task_scheduler.untuned_seconds`)."""
    best = bests[-1]
    last = (bests[-2] - best) / bests[-2] if len(bests) > 1 else 0.0
    return [math.log2(len(bests)), last, (bests[0] - best) / bests[0], math.log10(max(untuned, 1e-12) / best),
            math.log10(best)]


class GainModel:
    """Gradient-boosted trees (xgboost) from `features` to the next batch's expected relative gain."""

    def __init__(self, booster, meta: dict | None = None) -> None:
        self.booster = booster
        self.meta = meta or {}

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, seed: int = 0, rounds: int = 60, depth: int = 3) -> GainModel:
        """Fit rows of `features` to the gains that followed them (squared error: the prediction is the mean)."""
        import xgboost as xgb

        if len(y) < 2:
            raise TvmRlError(f"a gain model needs at least two transitions (a kernel with two full batches); "
                             f"got {len(y)}")
        params = {"max_depth": depth, "eta": 0.1, "subsample": 0.8, "min_child_weight": 5, "seed": seed,
                  "objective": "reg:squarederror", "nthread": 1}
        booster = xgb.train(params, xgb.DMatrix(x, label=y, feature_names=list(FEATURES)), num_boost_round=rounds)
        return cls(booster, {"transitions": int(len(y)), "mean_gain": float(y.mean()), "rounds": rounds,
                             "depth": depth})

    def predict(self, rows: Sequence[Sequence[float]]) -> np.ndarray:
        """Each row's expected relative gain of the next batch, within [0, 1]."""
        import xgboost as xgb

        x = np.asarray(rows, dtype=float).reshape(-1, len(FEATURES))
        return np.clip(self.booster.predict(xgb.DMatrix(x, feature_names=list(FEATURES))), 0.0, 1.0)

    def save(self, path: str | os.PathLike) -> None:
        """One JSON file: the format, the features, how it was fitted, and the booster."""
        booster = json.loads(self.booster.save_raw("json").decode())
        Path(path).write_text(json.dumps({"format": FORMAT, "features": list(FEATURES), "meta": self.meta,
                                          "booster": booster}) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> GainModel:
        import xgboost as xgb

        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise TvmRlError(f"cannot read the gain model {path}: {err}") from err
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("features") != list(FEATURES):
            raise TvmRlError(f"{path} is not a {FORMAT} with features {list(FEATURES)}")
        booster = xgb.Booster()
        booster.load_model(bytearray(json.dumps(data["booster"]).encode()))
        return cls(booster, data.get("meta"))


def shipped_gain_model(target_kind: str = "llvm") -> Path | None:
    """The gain model file shipped for a target kind, or None."""
    path = SHIPPED_DIR / f"batch_gain_{target_kind}.json"
    return path if path.is_file() else None


def open_gain_model(allocator: GainModel | str | os.PathLike | None, target_kind: str) -> GainModel | None:
    """The gain model `allocator` names: None (MetaSchedule's gradient rule, no model), a GainModel, its file, or
    "shipped" (the one shipped for `target_kind`)."""
    if allocator is None or isinstance(allocator, GainModel):
        return allocator
    if str(allocator) == "shipped":
        path = shipped_gain_model(target_kind)
        if path is None:
            raise TvmRlError(f"no gain model ships for target kind {target_kind!r}: fit one on your tuning runs "
                             f"(`tuning_curves.fit_gain_model(...)`, then `.save(path)`) and pass its file")
        return GainModel.load(path)
    return GainModel.load(allocator)
