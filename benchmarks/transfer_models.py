"""Which transfer cost model ranks a new model's kernels best (issue 68 item 4): the shipped form (XGBoost with
MetaSchedule's objective), XGBoost as a ranker, MetaSchedule's SegmentSumMLP, the shipped model as given, random.

Data: every record of the tuning databases under `--runs` (`benchmarks/transfer/data.py`: one entry per distinct
kernel, records of all runs merged, each kernel labelled with the models that ran it). Folds hold out one model
at a time (`--folds model`, the default: every kernel that model ran, so none of its kernels and none of their
duplicates in other models is trained on), or one kernel at a time (`--folds kernel`). Each arm is fitted on the
rest and rates each held-out kernel with at least `--min-valid` valid records:

- zero-shot: all its records (Spearman's rho with speed; the best latency among the model's top 8 over the best
  measured, `tvm_rl.tune.corpus.pretrained_eval.rank_metrics`);
- online (`--k`): updated on the kernel's first k records as a tuning run updates it, rating the rest.

The table gives per arm the mean rho, how often its top 8 hold the best, the geometric mean top-8 ratio, and the
ratio against `xgb` (the shipped form) with a kernel-clustered 95% bootstrap interval (seeds within a kernel). No
measurement is taken: it reads what the runs measured.

    python -m benchmarks.transfer_models --runs tvm_rl_work/bench tvm_rl_work/kernel_ceiling \
        --skip discarded tuner_seeds --seeds 3 --out logs/transfer_models_llvm.json.gz
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks.transfer.arms import ARMS, make_arm  # noqa: E402
from benchmarks.transfer.data import Kernel, find_databases, load_kernels  # noqa: E402
from tvm_rl.tune.corpus.bootstrap import cluster_bootstrap  # noqa: E402
from tvm_rl.tune.corpus.pretrained_eval import rank_metrics  # noqa: E402

TOP = 8
BASE = "xgb"
VIEWS = ("zero-shot", "online")


def folds_of(kernels: list[Kernel], by: str) -> list[tuple[str, list[int]]]:
    """(fold name, held-out kernel indices): one fold per model (`by="model"`) or per kernel."""
    if by == "kernel":
        return [(k.name, [i]) for i, k in enumerate(kernels)]
    models = sorted({m for k in kernels for m in k.models})
    return [(m, [i for i, k in enumerate(kernels) if m in k.models]) for m in models]


def evaluate(kernels: list[Kernel], arms: list[str], seeds: int, by: str, k: int, min_valid: int,
             write=print) -> list[dict[str, Any]]:
    """One row per (fold, held-out kernel, arm, seed) with its zero-shot and online metrics."""
    rows = []
    for fold, held in folds_of(kernels, by):
        rated = [i for i in held if len(kernels[i].data.valid) >= min_valid]
        if not rated:
            continue
        held_out = set(held)
        train_set = [kernels[i].data for i in range(len(kernels)) if i not in held_out]
        if not any(len(d.valid) for d in train_set):
            write(f"  fold {fold}: every kernel is held out, nothing to train on (skipped)")
            continue
        for arm_name in arms:
            for seed in range(seeds if make_arm(arm_name).seeded else 1):
                began = time.perf_counter()
                arm = make_arm(arm_name)
                arm.fit(train_set, seed)
                for i in rated:
                    data = kernels[i].data
                    own, rest = data.subset(np.arange(k)), data.subset(np.arange(k, len(data)))
                    row = {"fold": fold, "kernel": data.name, "arm": arm_name, "seed": seed,
                           "records": len(data), "valid": int(len(data.valid)),
                           "zero-shot": rank_metrics(arm.score(data.features), data.seconds, TOP)}
                    if len(rest) > TOP and len(own.valid) > 1:
                        row["online"] = rank_metrics(arm.updated(own).score(rest.features), rest.seconds, TOP)
                    rows.append(row)
                write(f"  fold {fold}: {arm_name} seed {seed} trained on {len(train_set)} kernels, rated "
                      f"{len(rated)} [{time.perf_counter() - began:.0f} s]")
    return rows


def _cells(rows, arm: str, view: str, key: str) -> dict[str, list[float]]:
    """{kernel: [value per seed]} of an arm's metric, where present."""
    out: dict[str, list[float]] = {}
    for r in rows:
        m = r.get(view)
        if r["arm"] == arm and m and m.get(key) is not None:
            out.setdefault(f"{r['fold']}/{r['kernel']}", []).append(float(m[key]))
    return out


def summarize(rows: list[dict[str, Any]], arms: list[str]) -> dict[str, Any]:
    """Per view and arm: kernels rated, mean rho, top-8 hit rate, geomean top-8 ratio and its ratio to `xgb`'s."""
    out: dict[str, Any] = {}
    ratio_key, hit_key = f"top{TOP}_ratio", f"top{TOP}_has_best"
    for view in VIEWS:
        base = {kern: float(np.mean(np.log(v))) for kern, v in _cells(rows, BASE, view, ratio_key).items()}
        for arm in arms:
            ratios = _cells(rows, arm, view, ratio_key)
            if not ratios:
                continue
            rho = _cells(rows, arm, view, "spearman")
            hits = _cells(rows, arm, view, hit_key)
            point, lo, hi = cluster_bootstrap([np.log(v) for v in ratios.values()])
            entry = {"kernels": len(ratios),
                     "spearman_mean": round(float(np.mean([np.mean(v) for v in rho.values()])), 3),
                     "top8_has_best_rate": round(float(np.mean([np.mean(v) for v in hits.values()])), 3),
                     "top8_ratio": [round(math.exp(x), 3) for x in (point, lo, hi)]}
            shared = [kern for kern in ratios if kern in base]
            if arm != BASE and shared:
                # Below 1: the arm's top 8 hold faster schedules than xgb's on the same kernel.
                p, lo, hi = cluster_bootstrap([np.log(ratios[kern]) - base[kern] for kern in shared])
                entry["vs_xgb"] = [round(math.exp(x), 3) for x in (p, lo, hi)]
            out[f"{view} {arm}"] = entry
    return out


def format_table(summary: dict[str, Any]) -> str:
    lines = ["| view | arm | kernels | mean rho | top-8 holds the best | top-8 ratio (geomean, 95% CI) | "
             "top-8 ratio / xgb's |", "|---|---|---|---|---|---|---|"]
    for key, e in summary.items():
        view, arm = key.split(" ", 1)
        ratio = "{:.3f}x [{:.3f}, {:.3f}]".format(*e["top8_ratio"])
        vs = "{:.3f} [{:.3f}, {:.3f}]".format(*e["vs_xgb"]) if "vs_xgb" in e else "-"
        lines.append(f"| {view} | {arm} | {e['kernels']} | {e['spearman_mean']:+.2f} | "
                     f"{e['top8_has_best_rate']:.0%} | {ratio} | {vs} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="+", required=True, help="folders holding tuning databases")
    ap.add_argument("--skip", nargs="*", default=[], help="leave out databases whose path contains one of these")
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    ap.add_argument("--seeds", type=int, default=3, help="seeds of the stochastic arms (mlp, xgb-rank, random)")
    ap.add_argument("--folds", default="model", choices=["model", "kernel"])
    ap.add_argument("--k", type=int, default=16, help="records a held-out kernel's online update sees (16)")
    ap.add_argument("--min-valid", type=int, default=24, help="rate only kernels with this many valid records")
    ap.add_argument("--cache", default="tvm_rl_work/transfer_models", help="feature cache folder")
    ap.add_argument("--out", default="logs/transfer_models_llvm.json.gz", help="JSON, gzip'd if it ends in .gz")
    args = ap.parse_args(argv)
    if BASE not in args.arms:
        ap.error(f"--arms needs {BASE}: every arm is compared with it")
    started = time.perf_counter()
    databases = find_databases(args.runs, args.skip)
    kernels = load_kernels(databases, args.cache)
    print(f"{len(databases)} databases, {len(kernels)} kernels, {sum(len(k.data) for k in kernels)} records")
    rows = evaluate(kernels, args.arms, args.seeds, args.folds, args.k, args.min_valid)
    summary = summarize(rows, args.arms)
    print(format_table(summary))
    result = {"command": "python -m benchmarks.transfer_models " + " ".join(sys.argv[1:] if argv is None else argv),
              "settings": {"folds": args.folds, "k": args.k, "min_valid": args.min_valid, "top": TOP,
                           "seeds": args.seeds, "databases": [str(db.path) for db in databases]},
              "kernels": [{"name": k.name, "key": k.data.key, "records": len(k.data),
                           "valid": int(len(k.data.valid)), "models": sorted(k.models)} for k in kernels],
              "summary": summary, "rows": rows, "seconds": round(time.perf_counter() - started, 1)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=1) + "\n"
    # The rows run to hundreds of KB: gzip'd where the name asks for it (the default).
    out.write_bytes(gzip.compress(text.encode(), mtime=0)) if out.suffix == ".gz" else out.write_text(text)
    print(f"wrote {args.out} ({result['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
