"""Leave-one-workload-out evaluation of the pre-trained cost model (`cost_model.pretrained`) on a corpus.

`evaluate`: for each held-out workload, a model trained on the other workloads rates its measured schedules;
reported are Spearman's rank correlation with the measured speed and top-k recall (does the model's top k hold
the best measured schedule, and the ratio of the best latency in the model's top k to the best). Beside it, for
k = 8/16/32, what a cold start has: a model trained on the workload's first k records only (in measurement
order: the corpus measures random samples first), the pre-trained model refined on the same k records, and the
pre-trained model alone, each rated on the workload's remaining records. With a `given` model (one trained
elsewhere: the shipped model, or one from another machine), that model is rated beside them, alone and refined on the
same k records, so a user can see whether a corpus of their own beats the model they were given; each row says
whether the given model trained on that workload (by structural hash or name), and the summary is also given over the
workloads it never saw. `format_table` prints the result and `evaluate_corpus` runs it all on a corpus directory
(`tvm-rl corpus evaluate`, docs/tuner_corpus.md).
"""
from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ... import paths
from ...database import FAILED_SECONDS
from ...errors import TvmRlError
from ..cost_model.features import WorkloadFeatures
from ..cost_model.pretrained import TrainConfig, load_model, predict, refine
from .build import Corpus
from .features import corpus_features
from .sources import CorpusError
from .train import train

# A frozen dataclass: one shared default is safe (as `train.train`'s is).
_DEFAULT_CONFIG = TrainConfig()


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
             config: TrainConfig = _DEFAULT_CONFIG, folds: int | None = None, heldout: Iterable[str] | None = None,
             write: Callable[[str], None] | None = None, given: tuple[Any, dict[str, Any]] | None = None
             ) -> dict[str, Any]:
    """Leave-one-workload-out (or, with `folds`, leave-a-fold-out) evaluation; see the module docstring.
    `heldout` limits which workloads are held out (each still trained against all the others); `given` is a
    (booster, meta) pair as `load_model` returns, rated beside the others. Returns {"rows": one per held-out
    workload, "summary": per arm, "settings": ...}, and with `given`, "summary_unseen" (the workloads it never saw)."""
    data = [d for d in data if len(d)]
    if len(data) < 2:
        raise TvmRlError(f"leave-one-workload-out needs at least 2 workloads with records, got {len(data)}")
    wanted = set(heldout) if heldout is not None else None
    if wanted is not None and wanted - {d.name for d in data}:
        raise CorpusError(f"no such workload(s) to hold out: {', '.join(sorted(wanted - {d.name for d in data}))}")
    seen = _trained_on(given[1]) if given is not None else (set(), set())
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
            if given is not None:
                # Either will do: erring towards "saw" keeps the unseen summary honest.
                row["given_saw"] = bool(held.key and held.key in seen[0]) or held.name in seen[1]
                row["given"] = rank_metrics(predict(given[0], held.features), held.seconds, top)
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
                if given is not None:
                    row[f"k{k}"]["given"] = rank_metrics(predict(given[0], rated.features), rated.seconds, top)
                    row[f"k{k}"]["given-refined"] = rank_metrics(
                        predict(refine(given[0], [own], config), rated.features), rated.seconds, top)
            rows.append(row)
            if write is not None:
                write(_row_line(row, ks, top) + f"  [{time.perf_counter() - began:.0f} s]")
    order = {d.name: i for i, d in enumerate(data)}
    rows.sort(key=lambda r: order[r["workload"]])  # folds visit workloads out of order
    result: dict[str, Any] = {"settings": {"ks": list(ks), "top": top, "folds": folds, "config": asdict(config),
                                           "k_split": "the first k records in measurement order train, the rest "
                                                      "are rated"},
                              "rows": rows, "summary": summarize(rows, ks, top)}
    if given is not None:
        result["given"] = {key: given[1].get(key) for key in ("target", "host", "corpus", "records", "created")}
        unseen = [r for r in rows if not r["given_saw"]]
        result["summary_unseen"] = summarize(unseen, ks, top) if unseen else None
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def _trained_on(meta: dict[str, Any]) -> tuple[set[str], set[str]]:
    """The structural hashes and the names of the workloads a model's meta says it was trained on."""
    workloads = meta.get("workloads") or []
    return ({str(w["structural_hash"]) for w in workloads if w.get("structural_hash")},
            {w["name"] for w in workloads if w.get("name")})


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
    given = any("given" in r for r in rows)
    out = {"pretrained (all records)": _arm([r["pretrained"] for r in rows], top)}
    if given:
        out["given (all records)"] = _arm([r["given"] for r in rows], top)
    for k in ks:
        cells = [r[f"k{k}"] for r in rows if r.get(f"k{k}")]
        for arm in ("cold", "pretrained", "refined") + (("given", "given-refined") if given else ()):
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
    if "given" in row:
        parts.append(f"given{'' if row['given_saw'] else ' (unseen)'}: {_fmt(row['given'], top)}")
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

    def block(summary: dict[str, Any]) -> None:
        for arm, s in summary.items():
            hits, ratio = show(s[f"top{top}_has_best_rate"], ".2f"), show(s[f"top{top}_ratio_geomean"], ".3f")
            lines.append(f"{arm:30s} {s['workloads']:9d} {show(s['spearman_mean'], '+.3f'):>9s} {hits:>14s} "
                         f"{ratio:>22s}")

    block(result["summary"])
    if "given" in result:
        rows = result["rows"]
        saw = sum(bool(r["given_saw"]) for r in rows)
        lines.append(f"(given: the model from {_given_source(result['given'])}; it trained on {saw} of these "
                     f"{len(rows)} workloads, on its own machine)")
        if result.get("summary_unseen"):
            lines += ["", f"the {len(rows) - saw} workloads the given model never saw:"]
            block(result["summary_unseen"])
    return "\n".join(lines)


def _given_source(given: dict[str, Any]) -> str:
    host, target = given.get("host") or {}, given.get("target") or {}
    cpu = host.get("cpu_model") or host.get("cpu") or target.get("mcpu") or target.get("kind") or "an unnamed machine"
    mcpu = target.get("mcpu")
    return f"{cpu}" + (f" (-mcpu={mcpu})" if mcpu and mcpu != cpu else "") + f", {given.get('records')} schedules"


def evaluate_corpus(corpus: str | Path | Corpus, out: str | Path | None = None, ks: Sequence[int] = (8, 16, 32),
                    top: int = 8, config: TrainConfig = _DEFAULT_CONFIG, folds: int | None = None,
                    heldout: Iterable[str] | None = None, names: Iterable[str] | None = None, cache: bool = True,
                    write: Callable[[str], None] | None = None, given: str | Path | None = None
                    ) -> tuple[dict[str, Any], Path]:
    """`evaluate` on a corpus's workloads (or `names`), with `given` a model file to rate beside them; writes the
    JSON to `out` (default `paths.work_dir()/pretrained_eval_<target kind>.json`) and returns (result, path)."""
    corpus = corpus if isinstance(corpus, Corpus) else Corpus(corpus)
    manifest = corpus.read_manifest()
    loaded = _load_given(given, manifest) if given is not None else None  # a bad file fails before the features
    start = time.perf_counter()
    data = corpus_features(corpus, names, cache=cache, write=write)
    features_seconds = time.perf_counter() - start
    result = evaluate(data, ks, top, config, folds, heldout, write, loaded)
    if loaded is not None and given is not None:
        result["given"]["path"] = _shown(given)
    kind = manifest.get("target_kind", "unknown")
    result = {"corpus": str(corpus.path), "target": manifest.get("target"), "host": manifest.get("host"),
              "workloads": len(data), "records": sum(len(d) for d in data),
              "corpus_settings": manifest.get("settings"), "features_seconds": round(features_seconds, 1), **result}
    path = Path(out) if out is not None else paths.work_dir() / f"pretrained_eval_{kind}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result, path


def _shown(path: str | Path) -> str:
    """A model file's path as the JSON records it: the shipped one relative to the package's folder, so a result
    does not carry the evaluating machine's file system; any other as given."""
    root = Path(__file__).resolve().parents[3]
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return str(path)


def _load_given(path: str | Path, manifest: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """A model file to rate beside the corpus's own models; one for another target kind (a CUDA model on a CPU
    corpus) is refused, naming both, since its ratings would mean nothing here."""
    booster, meta = load_model(path)
    mine, theirs = manifest.get("target_kind"), meta.get("target_kind")
    if mine and theirs and mine != theirs:
        raise CorpusError(f"model {path} was trained for target kind {theirs!r}, the corpus is {mine!r}: rate it on "
                          f"a {theirs} corpus")
    return booster, meta


__all__ = ["evaluate", "evaluate_corpus", "format_table", "rank_metrics", "summarize"]
