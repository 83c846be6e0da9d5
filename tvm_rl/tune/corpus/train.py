"""Training the pre-trained cost model (`cost_model.pretrained`) on a corpus: `train` fits a booster from scratch
on workloads' features (`corpus.features`), as MetaSchedule's XGBModel trains, and `train_on_corpus` trains on a
corpus folder and writes the model file that tuning loads (`tvm-rl corpus train`, docs/tuner_corpus.md)."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ...errors import TvmRlError
from ..cost_model.features import WorkloadFeatures
from ..cost_model.pretrained import TrainConfig, fit, pack, save_model
from .build import Corpus
from .features import corpus_features

# A frozen dataclass: one shared default is safe.
_DEFAULT_CONFIG = TrainConfig()


def train(data: Sequence[WorkloadFeatures], config: TrainConfig = _DEFAULT_CONFIG):
    """An XGBoost booster trained on `data` from scratch, as XGBModel trains (pack-sum objective, targets
    normalised per workload, early stopping on the training p-rmse). Needs at least one valid schedule."""
    data = [d for d in data if len(d)]
    if not any(len(d.valid) for d in data):
        raise TvmRlError("no valid measured schedule to train on")
    return fit(pack(data), config, config.max_rounds, early_stopping=config.early_stopping)


def train_on_corpus(corpus: str | Path | Corpus, out: str | Path, config: TrainConfig = _DEFAULT_CONFIG,
                    names: Iterable[str] | None = None, cache: bool = True,
                    write: Callable[[str], None] | None = None) -> tuple[Path, dict[str, Any]]:
    """Train on every workload of a corpus (or `names`) and save the model to `out`; returns (path, meta)."""
    corpus = corpus if isinstance(corpus, Corpus) else Corpus(corpus)
    start = time.perf_counter()
    data = corpus_features(corpus, names, cache, write)
    features_seconds = time.perf_counter() - start
    booster = train(data, config)
    manifest = corpus.read_manifest()
    # The corpus path as given: an absolute one would carry the trainer's file system into a shipped file.
    meta = {"target": manifest.get("target"), "target_kind": manifest.get("target_kind"),
            "host": manifest.get("host"), "corpus": str(corpus.path),
            "workloads": [{"name": d.name, "structural_hash": d.key, "records": len(d), "valid": len(d.valid)}
                          for d in data],
            "records": sum(len(d) for d in data), "config": asdict(config), "rounds": booster.num_boosted_rounds(),
            "features_seconds": round(features_seconds, 1),
            "train_seconds": round(time.perf_counter() - start - features_seconds, 1),
            "created": time.strftime("%Y-%m-%d %H:%M:%S")}
    return save_model(booster, out, meta), meta


__all__ = ["train", "train_on_corpus"]
