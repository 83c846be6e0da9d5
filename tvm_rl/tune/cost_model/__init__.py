"""Cost models that rate candidate schedules before any is measured: MetaSchedule's own, by name.

The knob-space strategies and the tuner benchmark take theirs from here, so a strategy comparison gives every
arm the same model, and a new model (a pre-trained one, say) is one more entry in `create`.
"""
from __future__ import annotations

from tvm.s_tir import meta_schedule as ms

from ...errors import TvmRlError

NAMES = ("xgb", "random")


def create(name: str = "xgb", seed: int = 0) -> ms.CostModel:
    """A fresh cost model: "xgb" is MetaSchedule's XGBModel with no warm-up (it would rate at random for its
    first 100 samples, the whole budget of a short run, so walks guided by it would be blind), "random" rates
    at random (the control arm)."""
    if name == "xgb":
        return ms.cost_model.XGBModel(num_warmup_samples=0)
    if name == "random":
        return ms.cost_model.RandomModel(seed=seed)
    raise TvmRlError(f"unknown cost model {name!r}; choose one of {', '.join(NAMES)}")


__all__ = ["NAMES", "create"]
