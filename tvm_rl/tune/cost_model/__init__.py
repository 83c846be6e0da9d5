"""Cost models that rate candidate schedules before any is measured: MetaSchedule's own, by name.

The knob-space strategies and the tuner benchmark take theirs from here, so a strategy comparison gives every
arm the same model, and a new model is one more entry in `create`. "xgb-pretrained" starts from a model trained
on a corpus of measured schedules (`tune.pretrained`, docs/tuner_corpus.md) and is refined on the run's own
records.
"""
from __future__ import annotations

import os

from tvm.s_tir import meta_schedule as ms

from ...errors import TvmRlError

NAMES = ("xgb", "random", "xgb-pretrained")


def create(name: str = "xgb", seed: int = 0, path: str | os.PathLike | None = None) -> ms.CostModel:
    """A fresh cost model: "xgb" is MetaSchedule's XGBModel with no warm-up (it would rate at random for its
    first 100 samples, the whole budget of a short run, so walks guided by it would be blind), "random" rates
    at random (the control arm), "xgb-pretrained" loads the pre-trained model file `path`
    (`tune.pretrained.PretrainedXGBModel`; a PretrainedModelError names a missing or unreadable file)."""
    if name == "xgb":
        return ms.cost_model.XGBModel(num_warmup_samples=0)
    if name == "random":
        return ms.cost_model.RandomModel(seed=seed)
    if name == "xgb-pretrained":
        from ..pretrained import PretrainedModelError, PretrainedXGBModel

        if path is None:
            raise PretrainedModelError("cost model 'xgb-pretrained' needs the path of a pre-trained model file "
                                       "(`tvm-rl corpus train` writes one; docs/tuner_corpus.md)")
        return PretrainedXGBModel(path)
    raise TvmRlError(f"unknown cost model {name!r}; choose one of {', '.join(NAMES)}")


__all__ = ["NAMES", "create"]
