"""Cost models that rate candidate schedules before any is measured: MetaSchedule's own, by name.

The knob-space strategies and the tuner benchmark take theirs from here, so a strategy comparison gives every
arm the same model, and a new model is one more entry in `create`. The names: "xgb" is MetaSchedule's XGBModel as
MetaSchedule makes it (its ratings random for its first 100 samples); "xgb-no-warmup" is the same model rating from
its first sample (the knob-space strategies' and the tuner benchmark's); "random" rates at random; "xgb-pretrained"
starts from a model trained on a corpus of measured schedules (`cost_model.pretrained`, docs/tuner_corpus.md) and
is refined on the run's own records; without a file it is the model shipped in the package for the target kind
(`shipped_model`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tvm.s_tir import meta_schedule as ms

from ...errors import TvmRlError

NAMES = ("xgb", "random", "xgb-pretrained", "xgb-no-warmup")
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "models"  # made by the commands in its README.md


def shipped_model(target_kind: str = "llvm") -> Path | None:
    """The pre-trained cost model shipped with tvm-rl for a target kind ("llvm", "cuda"), or None if none is."""
    path = SHIPPED_DIR / f"cost_model_{target_kind}.npz"
    return path if path.is_file() else None


def create(name: str = "xgb-no-warmup", seed: int = 0, path: str | os.PathLike | None = None,
           target_kind: str = "llvm", **settings: Any) -> ms.CostModel:
    """A fresh cost model: "xgb-no-warmup" is MetaSchedule's XGBModel with no warm-up (MetaSchedule's rates at
    random for its first 100 samples, the whole budget of a short run, so walks guided by it would be blind),
    "xgb" is MetaSchedule's XGBModel with its warm-up, as MetaSchedule makes it from that name, "random" rates at
    random (the control arm), "xgb-pretrained" loads the pre-trained model file `path`, by default the one shipped
    for `target_kind` (`cost_model.pretrained.PretrainedXGBModel`; a PretrainedModelError names a missing or
    unreadable file, or says that no model is shipped for the target kind); `settings` change its `TrainConfig`
    (`refine_rounds=0`: never refined on the run's records)."""
    if name == "xgb-no-warmup":
        return ms.cost_model.XGBModel(num_warmup_samples=0)
    if name == "xgb":
        # What `tune_tasks` makes of the name for tasks that use the physical cores (as `tune.tasks`' do).
        return ms.cost_model.XGBModel()
    if name == "random":
        return ms.cost_model.RandomModel(seed=seed)
    if name == "xgb-pretrained":
        from .pretrained import PretrainedModelError, PretrainedXGBModel

        path = path if path is not None else shipped_model(target_kind)
        if path is None:
            raise PretrainedModelError(f"no pre-trained cost model is shipped for {target_kind!r} targets; give "
                                       "the path of one (`tvm-rl corpus train` writes one; docs/tuner_corpus.md)")
        return PretrainedXGBModel(path, **settings)
    raise TvmRlError(f"unknown cost model {name!r}; choose one of {', '.join(NAMES)}")


def default(target_kind: str = "llvm") -> ms.CostModel | str:
    """What tunes when no cost model is named: the pre-trained model shipped for the target kind, refined online
    on the run's records (it ranked held-out workloads better than a model trained on their own first 8-32
    records: docs/tuner_corpus.md), or MetaSchedule's default XGBModel ("xgb") where none is shipped."""
    path = shipped_model(target_kind)
    return create("xgb-pretrained", path=path) if path is not None else "xgb"


def from_spec(spec: str | None, seed: int = 0, target_kind: str = "llvm") -> ms.CostModel | str:
    """The cost model a `--cost-model` option names: None (`default`: the shipped model where there is one), "xgb"
    (MetaSchedule's default XGBModel, as MetaSchedule creates it), another name of `NAMES` ("xgb-pretrained": the
    model shipped for `target_kind`), or the path of a pre-trained model file."""
    if spec is None:
        return default(target_kind)
    if spec == "xgb":
        return "xgb"
    if spec in NAMES:
        return create(spec, seed, target_kind=target_kind)
    return create("xgb-pretrained", seed, path=spec)


__all__ = ["NAMES", "SHIPPED_DIR", "create", "default", "from_spec", "shipped_model"]
