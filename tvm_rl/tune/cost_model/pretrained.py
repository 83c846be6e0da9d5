"""A cost model pre-trained on a corpus (`tune.corpus`, which trains it) and refined online on the user's records:
its file format and its MetaSchedule cost model, `PretrainedXGBModel`. Tuning only loads, predicts and refines; a
file is loaded once per process (`load_model_cached`), however many runs and rounds use it.

The model is MetaSchedule's: XGBoost over PerStoreFeature features (`cost_model.features`: one 164-wide row per
buffer store of a candidate, summed per candidate: the "pack-sum" form), trained with XGBModel's objective on
per-workload normalised targets, min latency / latency (a failed candidate scores 0), so workloads of any size
share one scale and the model ranks schedules within a workload. MetaSchedule's XGBModel retrains from scratch on
every record it holds; `PretrainedXGBModel` instead keeps the corpus booster fixed and, on every `update`, fits a
few more trees on the user's records on top of it (starting again from the corpus booster each time), so it rates
well from the first round and adapts to the task at hand for the cost of a small fit.

File format (`save_model` / `load_model`): a NumPy `.npz` archive read with `allow_pickle=False`, so loading
never runs code from the file: `format` and `version`, `booster` (XGBoost's UBJSON model bytes, portable across
processes and machines), and `meta` (JSON text: target, feature extractor, the workloads trained on with their
structural hashes, the training settings, the tvm and xgboost versions).
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

from ...database import FAILED_SECONDS, record_seconds
from ...errors import TvmRlError
from .features import EXTRACTOR, WorkloadFeatures, extract_features, normalized_scores

logger = logging.getLogger(__name__)

FORMAT = "tvm-rl pretrained cost model"
VERSION = 1


class PretrainedModelError(TvmRlError):
    """A pre-trained cost model file that cannot be used (missing, corrupt, or written by something else)."""


# -------------------------------------------------------------------------------------- fitting the booster


@dataclass(frozen=True)
class TrainConfig:
    """XGBoost settings. The defaults are MetaSchedule's XGBModel's (XGBConfig; early stopping after 50 rounds
    without a better training p-rmse), with a cap on rounds; `refine_*` set the trees fitted on the user's
    records on top of a pre-trained booster."""

    max_depth: int = 10
    gamma: float = 0.001
    min_child_weight: float = 0.0
    eta: float = 0.2
    seed: int = 43
    max_rounds: int = 2000
    early_stopping: int = 50
    nthread: int | None = None  # None: physical cores
    refine_rounds: int = 20
    refine_eta: float = 0.1
    refine_calibrate: bool = False  # see _on_base_scale: mixed offline, so off until a tuning benchmark says

    def params(self, eta: float | None = None) -> dict[str, Any]:
        from tvm.s_tir.meta_schedule.utils import cpu_count

        return {"max_depth": self.max_depth, "gamma": self.gamma, "min_child_weight": self.min_child_weight,
                "eta": self.eta if eta is None else eta, "seed": self.seed,
                "nthread": self.nthread or cpu_count(logical=False), "tree_method": "hist", "verbosity": 0}


def pack(data: Sequence[WorkloadFeatures], labels: bool = True):
    """MetaSchedule's pack-sum form of the schedules of `data` (targets normalised per workload)."""
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import PackSum

    xs = [x for d in data for x in d.features]
    ys = np.concatenate([normalized_scores(d.seconds) for d in data]) if labels else None
    return PackSum(xs=xs, ys=ys)


def fit(packed, config: TrainConfig, rounds: int, eta: float | None = None, base=None, early_stopping: int = 0,
        targets: np.ndarray | None = None):
    """XGBModel's fit of `rounds` trees on a `pack` (on top of `base`, if given); with `targets` (one per schedule),
    the trees fit those instead of the pack's labels, each schedule still weighted by its label (its normalised
    score), as XGBModel weights it. `tune.corpus.train` trains from scratch with it, `refine` on top of a base."""
    import xgboost as xgb

    def objective(preds, dtrain):
        if targets is None:
            return packed.obj_square_error(preds)
        weight = packed.dmatrix.get_label()
        gradient = packed.predict_with_score(preds)[packed.ids] - targets[packed.ids]
        return gradient * weight, weight.copy()

    def p_rmse(preds, dtrain):
        return packed.rmse(preds)

    callbacks = []
    if early_stopping:
        callbacks.append(xgb.callback.EarlyStopping(rounds=early_stopping, metric_name="p-rmse", data_name="tr",
                                                    maximize=False, save_best=True))
    return xgb.train(config.params(eta), packed.dmatrix, num_boost_round=rounds, obj=objective,
                     custom_metric=p_rmse, evals=[(packed.dmatrix, "tr")] if early_stopping else [],
                     callbacks=callbacks, verbose_eval=False, xgb_model=base)



def refine(base, data: Sequence[WorkloadFeatures], config: TrainConfig = TrainConfig()):
    """`base` with `config.refine_rounds` more trees fitted on `data` (a copy: `base` is left as it is). With
    no valid schedule in `data` there is nothing to fit, and `base` itself is returned."""
    data = [d for d in data if len(d.valid)]
    if not data or config.refine_rounds <= 0:
        return base
    targets = np.concatenate([_on_base_scale(base, d) for d in data]) if config.refine_calibrate else None
    return fit(pack(data), config, config.refine_rounds, eta=config.refine_eta, base=base, targets=targets)


def _on_base_scale(base, data: WorkloadFeatures) -> np.ndarray:
    """A workload's normalised scores mapped affinely onto the base booster's scale for it (least squares over
    its valid records). Why: pack-sum sums one prediction per buffer store, so trees that merely correct the
    base's offset or scale on a new workload add a constant per store and reorder schedules by their store
    count; on the base's own scale the trees are left only the order the base got wrong. Where the base ranks
    the records backwards, the scale is matched by spread instead, so the trees still pull towards the truth."""
    scores = normalized_scores(data.seconds).astype(np.float64)
    predicted = predict(base, data.features)
    ok = scores > 0
    if ok.sum() < 2 or np.std(scores[ok]) == 0:
        return scores + (float(np.mean(predicted[ok] - scores[ok])) if ok.any() else 0.0)
    slope = float(np.cov(predicted[ok], scores[ok], bias=True)[0, 1] / np.var(scores[ok]))
    if slope <= 0:
        slope = float(np.std(predicted[ok]) / np.std(scores[ok])) or 1.0
    return slope * scores + float(np.mean(predicted[ok]) - slope * np.mean(scores[ok]))


def predict(booster, features: Sequence[np.ndarray]) -> np.ndarray:
    """The booster's scores of schedules (higher: faster), one per feature array."""
    if not len(features):
        return np.zeros(0)
    packed = pack([WorkloadFeatures("", list(features), np.ones(len(features)))], labels=False)
    return packed.predict_with_score(booster.predict(packed.dmatrix)).astype(np.float64)


# ------------------------------------------------------------------------------------------------ the file


def save_model(booster, path: str | Path, meta: dict[str, Any]) -> Path:
    """Write a booster and its meta data as a pre-trained cost model file (see the module docstring)."""
    import xgboost as xgb

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {**meta, "xgboost": xgb.__version__, "tvm": tvm.__version__, "extractor": EXTRACTOR}
    raw = np.frombuffer(bytes(booster.save_raw(raw_format="ubj")), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, format=np.array(FORMAT), version=np.array(VERSION), booster=raw,
             meta=np.array(json.dumps(meta)))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(buffer.getvalue())
    tmp.replace(path)
    return path


def load_model(path: str | Path) -> tuple[Any, dict[str, Any]]:
    """(booster, meta) of a pre-trained cost model file; PretrainedModelError naming the file if it is missing,
    corrupt, or not such a file."""
    import xgboost as xgb

    path = Path(path)
    if not path.is_file():
        raise PretrainedModelError(f"pre-trained cost model {path} does not exist; train one on a corpus with "
                                   f"`tvm-rl corpus train --corpus DIR --out {path}` (docs/tuner_corpus.md)")
    try:
        with np.load(path, allow_pickle=False) as f:
            if str(f["format"]) != FORMAT:
                raise ValueError(f"format {str(f['format'])!r}")
            version = int(f["version"])
            raw, meta = f["booster"].tobytes(), json.loads(str(f["meta"]))
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise PretrainedModelError(f"{path} is not a tvm-rl pre-trained cost model ({type(err).__name__}: {err}); "
                                   "it may be cut short or another kind of file: train it again") from None
    if version > VERSION:
        raise PretrainedModelError(f"{path} has version {version}, newer than this tvm-rl reads ({VERSION}); "
                                   "upgrade tvm-rl")
    booster = xgb.Booster()
    try:
        booster.load_model(bytearray(raw))
    except xgb.core.XGBoostError as err:
        raise PretrainedModelError(f"{path}: its booster does not load ({str(err).splitlines()[0]})") from None
    return booster, meta


# A model file's (booster, meta) by resolved path, with the file's mtime and size when it was read.
_LOADED: dict[str, tuple[tuple[int, int], Any, dict[str, Any]]] = {}


def load_model_cached(path: str | Path) -> tuple[Any, dict[str, Any]]:
    """`load_model`, reading each file once per process (again only once it is rewritten), so a process that tunes
    many times (`tvm-rl optimize`'s rounds) loads the shipped model once. The booster is shared: nothing may
    change it (`refine` fits on a copy); the meta is the caller's own copy."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError:
        return load_model(path)  # which says what is wrong with it
    key, stamp = str(path.resolve()), (stat.st_mtime_ns, stat.st_size)
    hit = _LOADED.get(key)
    if hit is None or hit[0] != stamp:
        booster, meta = load_model(path)
        hit = _LOADED[key] = (stamp, booster, meta)
    return hit[1], copy.deepcopy(hit[2])


# --------------------------------------------------------------------------------------- the online model


@derived_object
class PretrainedXGBModel(PyCostModel):
    """A MetaSchedule cost model that starts from a pre-trained booster (rates well from the first round) and,
    on every `update`, refits `config.refine_rounds` trees on all the records it has been given, on top of the
    pre-trained booster. `num_warmup_samples` is 0: its ratings count from the start."""

    def __init__(self, path: str | os.PathLike, config: TrainConfig | None = None, **overrides: Any) -> None:
        """`config` replaces the settings stored in the file; `overrides` change single ones (`refine_rounds=0`:
        the model is never refined)."""
        super().__init__()
        self.path = Path(path)
        self.base, self.meta = load_model_cached(self.path)
        stored = self.meta.get("config") or {}
        known = {k: v for k, v in stored.items() if k in TrainConfig.__dataclass_fields__}
        unknown = set(overrides) - set(TrainConfig.__dataclass_fields__)
        if unknown:
            raise TvmRlError(f"unknown cost model setting(s) {', '.join(sorted(unknown))}; TrainConfig has "
                             f"{', '.join(TrainConfig.__dataclass_fields__)}")
        self.config = replace(config or TrainConfig(**known), **overrides)
        self.booster = self.base
        self.data: OrderedDict[str, WorkloadFeatures] = OrderedDict()
        self._deferred = False  # inside `deferred_refit`: updates add records, the refit waits for the block's end
        self.extractor = ms.feature_extractor.PerStoreFeature()
        self.num_warmup_samples = 0
        self._checked_target = False  # the target is compared with the model's once per model

    @property
    def data_size(self) -> int:
        return sum(len(d) for d in self.data.values())

    def load(self, path: str) -> None:
        """Replace the pre-trained booster with the one in `path` (the records given so far are kept and refit)."""
        self.path = Path(path)
        self.base, self.meta = load_model_cached(self.path)
        self.booster = refine(self.base, list(self.data.values()), self.config)

    def save(self, path: str) -> None:
        """Write the current (refined) booster, its meta data saying how many records refined it."""
        meta = {**self.meta, "refined_on": {k: len(d) for k, d in self.data.items()}}
        save_model(self.booster, path, meta)

    def update(self, context: ms.TuneContext, candidates: list[ms.MeasureCandidate],
               results: list[ms.runner.RunnerResult]) -> None:
        if not candidates:
            return
        self._check_target(context)
        features = extract_features(context, candidates, self.extractor)
        # The median of a result's repeats (the tuner benchmark times each candidate several times; a tuning
        # run's result holds one time, its `record_seconds`), `FAILED_SECONDS` for a failed candidate.
        seconds = [FAILED_SECONDS if record_seconds(r.run_secs) is None
                   else float(np.median([float(s) for s in r.run_secs])) for r in results]
        keep = [i for i, f in enumerate(features) if len(f)]
        if not keep:
            return
        group = ms.utils.shash2hex(context.mod)
        new = WorkloadFeatures(group, [features[i] for i in keep], np.array([seconds[i] for i in keep]))
        old = self.data.get(group)
        self.data[group] = new if old is None else WorkloadFeatures(
            group, old.features + new.features, np.concatenate([old.seconds, new.seconds]))
        if not self._deferred:
            self.booster = refine(self.base, list(self.data.values()), self.config)

    @contextlib.contextmanager
    def deferred_refit(self) -> Iterator[None]:
        """Updates inside the block add their records without refitting; the model is refit once, on all of them,
        when the block ends (as the last update would have refit it). A resumed run warms the model with every
        task's records this way: one fit instead of one per task, each over all the records so far."""
        self._deferred = True
        try:
            yield
        finally:
            self._deferred = False
            self.booster = refine(self.base, list(self.data.values()), self.config)

    def predict(self, context: ms.TuneContext, candidates: list[ms.MeasureCandidate]) -> np.ndarray:
        self._check_target(context)
        return predict(self.booster, extract_features(context, candidates, self.extractor))

    def _check_target(self, context: ms.TuneContext) -> None:
        kind = self.meta.get("target_kind")
        if self._checked_target or context.target is None or not kind:
            return
        self._checked_target = True
        if context.target.kind.name != kind:
            logger.warning("pre-trained cost model %s was trained on a %s corpus, but rates %s schedules; its "
                           "ratings may mean little until it is refined (or train one on a %s corpus)",
                           self.path, kind, context.target.kind.name, context.target.kind.name)
            return
        trained, rating = _cpu_of(self.meta.get("target")), _cpu_of(context.target)
        if trained and rating and trained != rating:
            # Said once, not as a warning: a model measured on another CPU still ranks schedules better than an
            # empty one, but how much of it carries over is the user's to judge (`tvm-rl corpus build`).
            logger.info("pre-trained cost model %s was measured on a %s CPU and rates %s schedules: it is refined "
                        "on this run's records; `tvm-rl corpus build` measures a corpus for this CPU",
                        self.path, trained, rating)


def _cpu_of(target: Any) -> str:
    """The `-mcpu` of a Target or of its JSON-like dict (as a model file's meta stores it); '' when unset."""
    attrs = target if isinstance(target, dict) else getattr(target, "attrs", {})
    return str(attrs.get("mcpu") or "")


__all__ = ["FORMAT", "PretrainedModelError", "PretrainedXGBModel", "TrainConfig", "fit", "load_model",
           "load_model_cached", "pack", "predict", "refine", "save_model"]
