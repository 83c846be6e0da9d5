"""What the pre-trained cost model (`cost_model.pretrained`) sees of schedules: PerStoreFeature features of each
candidate (as MetaSchedule's XGBModel computes them) and per-workload normalised targets. A workload's schedules
are a `WorkloadFeatures`; `tune.corpus.features` reads a corpus into these."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tvm.s_tir import meta_schedule as ms

from ...database import FAILED_SECONDS

EXTRACTOR = "per-store-feature"


@dataclass
class WorkloadFeatures:
    """One workload's measured schedules as the model sees them: a (stores x features) array per schedule and
    its run seconds (`database.FAILED_SECONDS` for a failed one), in measurement order."""

    name: str
    features: list[np.ndarray]
    seconds: np.ndarray
    key: str = ""  # structural hash, when known

    def __post_init__(self) -> None:
        self.seconds = np.asarray(self.seconds, dtype=np.float64)
        if len(self.features) != len(self.seconds):
            raise ValueError(f"{self.name}: {len(self.features)} feature sets for {len(self.seconds)} latencies")

    def __len__(self) -> int:
        return len(self.seconds)

    def subset(self, index: Sequence[int] | np.ndarray) -> WorkloadFeatures:
        index = [int(i) for i in index]
        return WorkloadFeatures(self.name, [self.features[i] for i in index], self.seconds[index], self.key)

    @property
    def valid(self) -> np.ndarray:
        """Indices of the schedules that ran."""
        return np.flatnonzero(self.seconds < FAILED_SECONDS)


def normalized_scores(seconds: np.ndarray) -> np.ndarray:
    """Per-workload targets: the best valid latency over each latency (1 for the best), 0 for a failure."""
    seconds = np.asarray(seconds, dtype=np.float64)
    ok = seconds < FAILED_SECONDS
    if not ok.any():
        return np.zeros(len(seconds), dtype=np.float32)
    best = seconds[ok].min()
    return np.where(ok, best / np.where(ok, seconds, 1.0), 0.0).astype(np.float32)


def extract_features(context: ms.TuneContext, candidates: Sequence[ms.MeasureCandidate],
                     extractor: ms.feature_extractor.FeatureExtractor | None = None) -> list[np.ndarray]:
    """PerStoreFeature features of `candidates` (one array of stores x features each), as XGBModel computes them."""
    extractor = extractor or ms.feature_extractor.PerStoreFeature()
    return [x.numpy().astype("float32") for x in extractor.extract_from(context, list(candidates))]


__all__ = ["EXTRACTOR", "WorkloadFeatures", "extract_features", "normalized_scores"]
