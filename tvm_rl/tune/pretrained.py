"""A cost model pre-trained on a corpus (`tune.corpus`), refined online on the user's records, and its
leave-one-workload-out evaluation.

The model is MetaSchedule's: XGBoost over PerStoreFeature features (one 164-wide row per buffer store of a
candidate, summed per candidate: the "pack-sum" form), trained with XGBModel's objective on per-workload
normalised targets, min latency / latency (a failed candidate scores 0), so workloads of any size share one
scale and the model ranks schedules within a workload. MetaSchedule's XGBModel retrains from scratch on every
record it holds; `PretrainedXGBModel` instead keeps the corpus booster fixed and, on every `update`, fits a few
more trees on the user's records on top of it (starting again from the corpus booster each time), so it rates
well from the first round and adapts to the task at hand for the cost of a small fit.

File format (`save_model` / `load_model`): a NumPy `.npz` archive read with `allow_pickle=False`, so loading
never runs code from the file: `format` and `version`, `booster` (XGBoost's UBJSON model bytes, portable across
processes and machines), and `meta` (JSON text: target, feature extractor, the workloads trained on with their
structural hashes, the training settings, the tvm and xgboost versions).

Leave-one-workload-out (`evaluate`): for each held-out workload, a model trained on the other workloads rates
its measured schedules; reported are Spearman's rank correlation with the measured speed and top-k recall (does
the model's top k hold the best measured schedule, and the ratio of the best latency in the model's top k to
the best). Beside it, for k = 8/16/32, what a cold start has: a model trained on the workload's first k records
only (in measurement order: the corpus measures random samples first), the pre-trained model refined on the
same k records, and the pre-trained model alone, each rated on the workload's remaining records.
"""
from __future__ import annotations

import io
import json
import logging
import math
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

from ..errors import TvmRlError
from .corpus import FAILED_SECONDS, Corpus, CorpusError
from .intrin import preload_tensor_intrinsics

logger = logging.getLogger(__name__)

FORMAT = "tvm-rl pretrained cost model"
VERSION = 1
EXTRACTOR = "per-store-feature"
FEATURE_CACHE_VERSION = 1


class PretrainedModelError(TvmRlError):
    """A pre-trained cost model file that cannot be used (missing, corrupt, or written by something else)."""


# ------------------------------------------------------------------------------------------------- features


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


# ------------------------------------------------------------------------------------------------- training


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

    def params(self, eta: float | None = None) -> dict[str, Any]:
        from tvm.s_tir.meta_schedule.utils import cpu_count

        return {"max_depth": self.max_depth, "gamma": self.gamma, "min_child_weight": self.min_child_weight,
                "eta": self.eta if eta is None else eta, "seed": self.seed,
                "nthread": self.nthread or cpu_count(logical=False), "tree_method": "hist", "verbosity": 0}


def _pack(data: Sequence[WorkloadFeatures], labels: bool = True):
    """MetaSchedule's pack-sum form of the schedules of `data` (targets normalised per workload)."""
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import PackSum

    xs = [x for d in data for x in d.features]
    ys = np.concatenate([normalized_scores(d.seconds) for d in data]) if labels else None
    return PackSum(xs=xs, ys=ys)


def _fit(pack, config: TrainConfig, rounds: int, eta: float | None = None, base=None, early_stopping: int = 0):
    import xgboost as xgb

    def objective(preds, dtrain):
        return pack.obj_square_error(preds)

    def p_rmse(preds, dtrain):
        return pack.rmse(preds)

    callbacks = []
    if early_stopping:
        callbacks.append(xgb.callback.EarlyStopping(rounds=early_stopping, metric_name="p-rmse", data_name="tr",
                                                    maximize=False, save_best=True))
    return xgb.train(config.params(eta), pack.dmatrix, num_boost_round=rounds, obj=objective,
                     custom_metric=p_rmse, evals=[(pack.dmatrix, "tr")] if early_stopping else [],
                     callbacks=callbacks, verbose_eval=False, xgb_model=base)


def train(data: Sequence[WorkloadFeatures], config: TrainConfig = TrainConfig()):
    """An XGBoost booster trained on `data` from scratch, as XGBModel trains (pack-sum objective, targets
    normalised per workload, early stopping on the training p-rmse). Needs at least one valid schedule."""
    data = [d for d in data if len(d)]
    if not any(len(d.valid) for d in data):
        raise TvmRlError("no valid measured schedule to train on")
    return _fit(_pack(data), config, config.max_rounds, early_stopping=config.early_stopping)


def refine(base, data: Sequence[WorkloadFeatures], config: TrainConfig = TrainConfig()):
    """`base` with `config.refine_rounds` more trees fitted on `data` (a copy: `base` is left as it is). With
    no valid schedule in `data` there is nothing to fit, and `base` itself is returned."""
    data = [d for d in data if len(d.valid)]
    if not data or config.refine_rounds <= 0:
        return base
    return _fit(_pack(data), config, config.refine_rounds, eta=config.refine_eta, base=base)


def predict(booster, features: Sequence[np.ndarray]) -> np.ndarray:
    """The booster's scores of schedules (higher: faster), one per feature array."""
    if not len(features):
        return np.zeros(0)
    pack = _pack([WorkloadFeatures("", list(features), np.ones(len(features)))], labels=False)
    return pack.predict_with_score(booster.predict(pack.dmatrix)).astype(np.float64)


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


def train_on_corpus(corpus: str | Path | Corpus, out: str | Path, config: TrainConfig = TrainConfig(),
                    names: Iterable[str] | None = None, cache: bool = True,
                    write: Callable[[str], None] | None = None) -> tuple[Path, dict[str, Any]]:
    """Train on every workload of a corpus (or `names`) and save the model to `out`; returns (path, meta)."""
    corpus = corpus if isinstance(corpus, Corpus) else Corpus(corpus)
    start = time.perf_counter()
    data = corpus_features(corpus, names, cache, write)
    features_seconds = time.perf_counter() - start
    booster = train(data, config)
    manifest = corpus.read_manifest()
    meta = {"target": manifest.get("target"), "target_kind": manifest.get("target_kind"),
            "host": manifest.get("host"), "corpus": str(corpus.path.resolve()),
            "workloads": [{"name": d.name, "structural_hash": d.key, "records": len(d), "valid": len(d.valid)}
                          for d in data],
            "records": sum(len(d) for d in data), "config": asdict(config), "rounds": booster.num_boosted_rounds(),
            "features_seconds": round(features_seconds, 1),
            "train_seconds": round(time.perf_counter() - start - features_seconds, 1),
            "created": time.strftime("%Y-%m-%d %H:%M:%S")}
    return save_model(booster, out, meta), meta


# --------------------------------------------------------------------------------------- the online model


@derived_object
class PretrainedXGBModel(PyCostModel):
    """A MetaSchedule cost model that starts from a pre-trained booster (rates well from the first round) and,
    on every `update`, refits `config.refine_rounds` trees on all the records it has been given, on top of the
    pre-trained booster. `num_warmup_samples` is 0: its ratings count from the start."""

    def __init__(self, path: str | os.PathLike, config: TrainConfig | None = None) -> None:
        super().__init__()
        self.path = Path(path)
        self.base, self.meta = load_model(self.path)
        stored = self.meta.get("config") or {}
        known = {k: v for k, v in stored.items() if k in TrainConfig.__dataclass_fields__}
        self.config = config or TrainConfig(**known)
        self.booster = self.base
        self.data: OrderedDict[str, WorkloadFeatures] = OrderedDict()
        self.extractor = ms.feature_extractor.PerStoreFeature()
        self.num_warmup_samples = 0
        self._warned_target = False

    @property
    def data_size(self) -> int:
        return sum(len(d) for d in self.data.values())

    def load(self, path: str) -> None:
        """Replace the pre-trained booster with the one in `path` (the records given so far are kept and refit)."""
        self.path = Path(path)
        self.base, self.meta = load_model(self.path)
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
        seconds = [float(np.median([float(s) for s in r.run_secs])) if r.run_secs else 1e10 for r in results]
        keep = [i for i, f in enumerate(features) if len(f)]
        if not keep:
            return
        group = ms.utils.shash2hex(context.mod)
        new = WorkloadFeatures(group, [features[i] for i in keep], np.array([seconds[i] for i in keep]))
        old = self.data.get(group)
        self.data[group] = new if old is None else WorkloadFeatures(
            group, old.features + new.features, np.concatenate([old.seconds, new.seconds]))
        self.booster = refine(self.base, list(self.data.values()), self.config)

    def predict(self, context: ms.TuneContext, candidates: list[ms.MeasureCandidate]) -> np.ndarray:
        self._check_target(context)
        return predict(self.booster, extract_features(context, candidates, self.extractor))

    def _check_target(self, context: ms.TuneContext) -> None:
        kind = self.meta.get("target_kind")
        if self._warned_target or context.target is None or not kind or context.target.kind.name == kind:
            return
        self._warned_target = True
        logger.warning("pre-trained cost model %s was trained on a %s corpus, but rates %s schedules; its "
                       "ratings may mean little until it is refined (or train one on a %s corpus)",
                       self.path, kind, context.target.kind.name, context.target.kind.name)


# --------------------------------------------------------------------------------------------- evaluation


def rank_metrics(scores: np.ndarray, seconds: np.ndarray, top: int = 8) -> dict[str, Any]:
    """How well `scores` (higher: predicted faster) rank schedules of measured `seconds` (valid ones only):
    Spearman's rho with the speed, whether the top `top` by score hold the best schedule, and the best latency
    in that top over the best latency (1.0: it holds the best)."""
    from scipy.stats import spearmanr

    scores, seconds = np.asarray(scores, float), np.asarray(seconds, float)
    ok = seconds < FAILED_SECONDS
    scores, seconds = scores[ok], seconds[ok]
    out: dict[str, Any] = {"n": int(len(seconds)), "spearman": None, f"top{top}_has_best": None,
                           f"top{top}_ratio": None}
    if len(seconds) < 2:
        return out
    if np.ptp(scores) > 0 and np.ptp(seconds) > 0:
        rho = float(spearmanr(scores, -seconds)[0])
        out["spearman"] = None if math.isnan(rho) else round(rho, 4)
    elif np.ptp(seconds) > 0:
        out["spearman"] = 0.0  # a constant prediction ranks nothing
    if len(seconds) > top:
        # Ties in the scores are broken against the model (a constant prediction must not look lucky).
        order = np.lexsort((-seconds, -scores))[:top]
        out[f"top{top}_has_best"] = bool(seconds[order].min() <= seconds.min())
        out[f"top{top}_ratio"] = round(float(seconds[order].min() / seconds.min()), 4)
    return out


def _folds(n: int, folds: int | None) -> list[list[int]]:
    if not folds or folds >= n:
        return [[i] for i in range(n)]
    return [list(range(f, n, folds)) for f in range(folds)]


def evaluate(data: Sequence[WorkloadFeatures], ks: Sequence[int] = (8, 16, 32), top: int = 8,
             config: TrainConfig = TrainConfig(), folds: int | None = None, heldout: Iterable[str] | None = None,
             write: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Leave-one-workload-out (or, with `folds`, leave-a-fold-out) evaluation; see the module docstring.
    `heldout` limits which workloads are held out (each still trained against all the others). Returns
    {"rows": one per held-out workload, "summary": per arm, "settings": ...}."""
    data = [d for d in data if len(d)]
    if len(data) < 2:
        raise TvmRlError(f"leave-one-workload-out needs at least 2 workloads with records, got {len(data)}")
    wanted = set(heldout) if heldout is not None else None
    if wanted is not None and wanted - {d.name for d in data}:
        raise CorpusError(f"no such workload(s) to hold out: {', '.join(sorted(wanted - {d.name for d in data}))}")
    rows = []
    start = time.perf_counter()
    for fold in _folds(len(data), folds):
        names = [data[i].name for i in fold]
        if wanted is not None and not wanted & set(names):
            continue
        began = time.perf_counter()
        rest = [d for i, d in enumerate(data) if i not in fold]
        base = train(rest, config)
        for i in fold:
            held = data[i]
            if wanted is not None and held.name not in wanted:
                continue
            row: dict[str, Any] = {"workload": held.name, "records": len(held), "valid": int(len(held.valid)),
                                   "trained_on": len(rest), "train_records": sum(len(d) for d in rest)}
            ok = held.valid
            row["best_us"] = round(float(held.seconds[ok].min()) * 1e6, 3) if len(ok) else None
            row["pretrained"] = rank_metrics(predict(base, held.features), held.seconds, top)
            for k in ks:
                first, later = np.arange(min(k, len(held))), np.arange(min(k, len(held)), len(held))
                if len(later) <= top or not len(held.subset(first).valid):
                    row[f"k{k}"] = None  # too few records left to rank, or nothing valid to learn from
                    continue
                own, rated = held.subset(first), held.subset(later)
                row[f"k{k}"] = {
                    "pretrained": rank_metrics(predict(base, rated.features), rated.seconds, top),
                    "cold": rank_metrics(predict(train([own], config), rated.features), rated.seconds, top),
                    "refined": rank_metrics(predict(refine(base, [own], config), rated.features), rated.seconds,
                                            top)}
            rows.append(row)
            if write is not None:
                write(_row_line(row, ks, top) + f"  [{time.perf_counter() - began:.0f} s]")
    order = {d.name: i for i, d in enumerate(data)}
    rows.sort(key=lambda r: order[r["workload"]])  # folds visit workloads out of order
    return {"settings": {"ks": list(ks), "top": top, "folds": folds, "config": asdict(config),
                         "k_split": "the first k records in measurement order train, the rest are rated"},
            "rows": rows, "summary": summarize(rows, ks, top), "seconds": round(time.perf_counter() - start, 1)}


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 4) if values else None


def _arm(metrics: list[dict[str, Any]], top: int) -> dict[str, Any]:
    rho = [m["spearman"] for m in metrics if m and m.get("spearman") is not None]
    hits = [m[f"top{top}_has_best"] for m in metrics if m and m.get(f"top{top}_has_best") is not None]
    ratios = [m[f"top{top}_ratio"] for m in metrics if m and m.get(f"top{top}_ratio") is not None]
    return {"workloads": len(rho), "spearman_mean": _mean(rho),
            f"top{top}_has_best_rate": _mean([float(h) for h in hits]),
            f"top{top}_ratio_geomean": round(float(np.exp(np.mean(np.log(ratios)))), 4) if ratios else None}


def summarize(rows: list[dict[str, Any]], ks: Sequence[int], top: int = 8) -> dict[str, Any]:
    """Per arm, over the held-out workloads: mean Spearman, top-k hit rate, geometric mean top-k ratio."""
    out = {"pretrained (all records)": _arm([r["pretrained"] for r in rows], top)}
    for k in ks:
        cells = [r[f"k{k}"] for r in rows if r.get(f"k{k}")]
        for arm in ("cold", "pretrained", "refined"):
            out[f"k={k} {arm}"] = _arm([c[arm] for c in cells], top)
    return out


def _fmt(m: dict[str, Any] | None, top: int) -> str:
    if not m:
        return "  -    -   "
    rho = m.get("spearman")
    ratio = m.get(f"top{top}_ratio")
    return (f"{rho:+.2f}" if rho is not None else "  - ") + " " + (f"{ratio:5.2f}x" if ratio is not None else "  -   ")


def _row_line(row: dict[str, Any], ks: Sequence[int], top: int) -> str:
    parts = [f"{row['workload'][:44]:44s} {row['valid']:4d}  {_fmt(row['pretrained'], top)}"]
    for k in ks:
        cell = row.get(f"k{k}")
        parts.append(" | ".join(_fmt(cell.get(a) if cell else None, top) for a in ("cold", "refined")))
    return "  ".join(parts)


def format_table(result: dict[str, Any]) -> str:
    """The evaluation as text: a line per held-out workload, then the summary per arm."""
    ks, top = result["settings"]["ks"], result["settings"]["top"]
    head = f"{'held-out workload':44s} {'ok':>4s}  {'pre-trained':11s}" + "".join(
        f"  {'k=' + str(k) + ' cold | refined':25s}" for k in ks)
    lines = [f"(rho = Spearman with speed; ratio = best in the model's top {top} / best measured)", head]
    lines += [_row_line(r, ks, top) for r in result["rows"]]
    lines += ["", f"{'arm':30s} {'workloads':>9s} {'mean rho':>9s} {'top' + str(top) + ' has best':>14s} "
                  f"{'top' + str(top) + ' ratio (geomean)':>22s}"]
    def show(v: Any, fmt: str) -> str:
        return format(v, fmt) if v is not None else "-"

    for arm, s in result["summary"].items():
        hits, ratio = show(s[f"top{top}_has_best_rate"], ".2f"), show(s[f"top{top}_ratio_geomean"], ".3f")
        lines.append(f"{arm:30s} {s['workloads']:9d} {show(s['spearman_mean'], '+.3f'):>9s} {hits:>14s} {ratio:>22s}")
    return "\n".join(lines)


def evaluate_corpus(corpus: str | Path | Corpus, out: str | Path | None = None, ks: Sequence[int] = (8, 16, 32),
                    top: int = 8, config: TrainConfig = TrainConfig(), folds: int | None = None,
                    heldout: Iterable[str] | None = None, names: Iterable[str] | None = None, cache: bool = True,
                    write: Callable[[str], None] | None = None) -> tuple[dict[str, Any], Path]:
    """`evaluate` on a corpus's workloads (or `names`); writes the JSON to `out` (default logs/pretrained_eval_<target
    kind>.json) and returns (result, path)."""
    corpus = corpus if isinstance(corpus, Corpus) else Corpus(corpus)
    manifest = corpus.read_manifest()
    start = time.perf_counter()
    data = corpus_features(corpus, names, cache=cache, write=write)
    features_seconds = time.perf_counter() - start
    result = evaluate(data, ks, top, config, folds, heldout, write)
    kind = manifest.get("target_kind", "unknown")
    result = {"corpus": str(corpus.path), "target": manifest.get("target"), "host": manifest.get("host"),
              "workloads": len(data), "records": sum(len(d) for d in data),
              "corpus_settings": manifest.get("settings"), "features_seconds": round(features_seconds, 1), **result}
    path = Path(out) if out is not None else Path("logs") / f"pretrained_eval_{kind}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result, path


__all__ = ["EXTRACTOR", "FORMAT", "PretrainedModelError", "PretrainedXGBModel", "TrainConfig", "WorkloadFeatures",
           "corpus_features", "evaluate", "evaluate_corpus", "extract_features", "format_table", "load_model",
           "normalized_scores", "predict", "rank_metrics", "refine", "save_model", "summarize", "train",
           "train_on_corpus"]
