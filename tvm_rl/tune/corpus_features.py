"""The cost model's view of a corpus (`tune.corpus`): PerStoreFeature features of each measured schedule and
per-workload normalised targets, with an on-disk cache per workload (`features/<name>.npz`) that is reused while
the workload's record count, target and extractor are unchanged. `tune.pretrained` trains and rates on these."""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tvm.s_tir import meta_schedule as ms

from .corpus import FAILED_SECONDS, Corpus, CorpusError
from .intrin import preload_tensor_intrinsics

EXTRACTOR = "per-store-feature"
FEATURE_CACHE_VERSION = 1


@dataclass
class WorkloadFeatures:
    """One workload's measured schedules as the model sees them: a (stores x features) array per schedule and
    its mean run seconds (1e10 for a failed one), in measurement order."""

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


def corpus_features(corpus: Corpus | str | Path, names: Iterable[str] | None = None, cache: bool = True,
                    write: Callable[[str], None] | None = None) -> list[WorkloadFeatures]:
    """Features of every workload of a corpus (or of `names`), in the corpus's order. With `cache`, each
    workload's features are kept in `features/<name>.npz` and reused while its record count is unchanged."""
    corpus = corpus if isinstance(corpus, Corpus) else Corpus(corpus)
    target = corpus.target()
    manifest = corpus.read_manifest()
    keys = {w["name"]: str(w.get("structural_hash", "")) for w in manifest.get("workloads", [])}
    names = list(names) if names is not None else corpus.names()
    known = set(corpus.names())
    missing = [n for n in names if n not in known]
    if missing:
        raise CorpusError(f"{corpus.path} has no workload(s) {', '.join(missing)}")
    extractor = ms.feature_extractor.PerStoreFeature()
    preload_tensor_intrinsics()  # a TuneContext imports them: seconds this way, a minute otherwise
    out = []
    for name in names:
        folder = corpus.database(name)
        count = folder.record_count()
        cached = _read_feature_cache(corpus.features_path(name), count, str(target)) if cache else None
        if cached is None:
            start = time.perf_counter()
            records = corpus.load(name)
            context = ms.TuneContext(mod=records.mod, target=target, task_name=name)
            features = extract_features(context, [r.as_measure_candidate() for r in records.records], extractor) \
                if records.records else []
            cached = WorkloadFeatures(name, features, np.array(records.seconds), keys.get(name, ""))
            if cache:
                _write_feature_cache(corpus.features_path(name), cached, str(target))
            if write is not None:
                write(f"  features of {name}: {len(cached)} schedules in {time.perf_counter() - start:.1f} s")
        out.append(cached)
    return out


def _read_feature_cache(path: Path, count: int, target: str) -> WorkloadFeatures | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as f:
            meta = json.loads(str(f["meta"]))
            if (meta.get("version") != FEATURE_CACHE_VERSION or meta.get("records") != count
                    or meta.get("target") != target or meta.get("extractor") != EXTRACTOR):
                return None
            rows, counts, seconds = f["rows"], f["counts"], f["seconds"]
    except (OSError, ValueError, KeyError):
        return None  # a cache cut short or foreign: computed again
    splits = np.cumsum(counts)[:-1]
    features = list(np.split(rows, splits)) if len(counts) else []
    return WorkloadFeatures(meta["name"], features, seconds, meta.get("key", ""))


def _write_feature_cache(path: Path, data: WorkloadFeatures, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    width = data.features[0].shape[1] if data.features else 0
    rows = np.concatenate(data.features, axis=0) if data.features else np.zeros((0, width), np.float32)
    meta = {"version": FEATURE_CACHE_VERSION, "name": data.name, "key": data.key, "records": len(data),
            "target": target, "extractor": EXTRACTOR}
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, rows=rows, counts=np.array([len(x) for x in data.features], np.int64),
                 seconds=data.seconds, meta=np.array(json.dumps(meta)))
    tmp.replace(path)
