"""The cost model's view of a corpus (`corpus.build`): each workload's measured schedules as `WorkloadFeatures`
(`cost_model.features`), with an on-disk cache per workload (`features/<name>.npz`) that is reused while the
workload's record count, target and extractor are unchanged. `corpus.train` trains on these."""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
from tvm.s_tir import meta_schedule as ms

from ..cost_model.features import EXTRACTOR, WorkloadFeatures, extract_features
from ..intrin import preload_tensor_intrinsics
from .build import Corpus
from .sources import CorpusError

FEATURE_CACHE_VERSION = 1


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


__all__ = ["corpus_features"]
