"""Fit the learned allocator's gain model on tuning curves and judge it offline, leave one model out.

    python -m benchmarks.batch_gain --runs tvm_rl_work/bench --out logs/batch_gain_llvm.json \
        --model-out tvm_rl/tune/models/batch_gain_llvm.json

Every tuning database folder under `--runs` whose path names none of MetaSchedule's arms (their batches are of 64,
not `tvm-rl optimize`'s 8) gives each kernel's tuning curve (`tvm_rl.tune.tuning_curves`). Curves are grouped by the
zoo model their path names. For each model, a `GainModel` fitted on the other models' curves predicts the time each
of the held-out model's batches saves (best before x expected relative gain), beside MetaSchedule's gradient rule as
`LatencyShare` computes it; the allocator ranks kernels by that, so the table gives the rank correlation of each
with the time the batch did save, and each one's mean predicted gain against the mean realised. Then one model is
fitted on every curve (but `--exclude-models`') and written to `--model-out`. Prints the table, writes the JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from tvm_rl.tune.batch_gain import GainModel
from tvm_rl.tune.task_scheduler import LatencyShare
from tvm_rl.tune.tuning_curves import Curve, fit_gain_model, read_curves, transitions

MODELS = ("mobilenet_v2", "resnet18", "resnet50", "squeezenet1_1", "bert")
METASCHEDULE_ARMS = ("ms-static", "metaschedule", "ms-droplet")


def model_of(folder: Path) -> str:
    """The zoo model a run folder's path names, or "other"."""
    text = str(folder)
    return next((m for m in MODELS if m in text), "other")


def run_folders(roots: list[Path]) -> list[Path]:
    """Tuning database folders under `roots` tuned in batches of 8 (MetaSchedule's arms left out)."""
    found = sorted({p.parent for root in roots for p in root.rglob("database_tuning_record.json")})
    return [f for f in found if not any(arm in str(f) for arm in METASCHEDULE_ARMS)
            and (f / "database_workload.json").is_file()]


def rule_savings(curves: list[Curve]) -> np.ndarray:
    """The time MetaSchedule's gradient rule (`LatencyShare`, one call per run) expects each next batch to save."""
    out = []
    for curve in curves:
        scheduler = LatencyShare([curve.untuned])
        for k in range(1, len(curve.bests)):
            scheduler.history[0] = list(curve.bests[:k])
            out.append(scheduler._score(0, 1.0))
    return np.asarray(out, dtype=float)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic) if len(a) > 2 else float("nan")


def judge(model: GainModel, curves: list[Curve]) -> dict[str, float]:
    """How the model and the rule rank `curves`' batches by time saved, and their calibration."""
    x, gain = transitions(curves)
    best = np.asarray([c.bests[k - 1] for c in curves for k in range(1, len(c.bests))])
    predicted = model.predict(x)
    rule = rule_savings(curves)
    saved = best * gain
    return {"transitions": int(len(gain)), "curves": len(curves),
            "spearman_model": spearman(best * predicted, saved), "spearman_rule": spearman(rule, saved),
            "mean_gain": float(gain.mean()), "mean_predicted_gain": float(predicted.mean()),
            "mean_rule_gain": float((rule / best).mean()),
            "mae_model": float(np.abs(predicted - gain).mean()), "mae_rule": float(np.abs(rule / best - gain).mean())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/batch_gain.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=Path, nargs="+", required=True, help="folders holding tuning runs (searched)")
    p.add_argument("--out", type=Path, required=True, help="the JSON written")
    p.add_argument("--model-out", type=Path, help="write the gain model fitted on every curve here")
    p.add_argument("--exclude-models", nargs="*", default=[], metavar="MODEL",
                   help="fit the written model without these models' curves (to run it on them)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    folders = run_folders(args.runs)
    if not folders:
        raise SystemExit(f"no tuning database folder under {', '.join(map(str, args.runs))}")
    by_model: dict[str, list[Curve]] = {}
    for folder in folders:
        by_model.setdefault(model_of(folder), []).extend(read_curves(folder))
    rows = {}
    print(f"{'held out':<14} {'curves':>6} {'trans':>6} {'rho model':>9} {'rho rule':>9} {'gain':>6} "
          f"{'model':>6} {'rule':>6}")
    for held in sorted(by_model):
        train = [c for m, cs in by_model.items() if m != held for c in cs]
        test = by_model[held]
        if sum(len(c.bests) - 1 for c in test) < 3 or sum(len(c.bests) - 1 for c in train) < 2:
            continue  # too few of the held-out model's batches to rank, or none to fit on
        r = rows[held] = judge(fit_gain_model(train, seed=args.seed), test)
        print(f"{held:<14} {r['curves']:>6} {r['transitions']:>6} {r['spearman_model']:>9.3f} "
              f"{r['spearman_rule']:>9.3f} {r['mean_gain']:>6.3f} {r['mean_predicted_gain']:>6.3f} "
              f"{r['mean_rule_gain']:>6.3f}", flush=True)
    kept = {m: cs for m, cs in sorted(by_model.items()) if m not in args.exclude_models}
    everything = [c for cs in kept.values() for c in cs]
    model = fit_gain_model(everything, seed=args.seed)
    model.meta["models"] = {m: len(cs) for m, cs in kept.items()}
    if args.model_out:
        model.save(args.model_out)
        print(f"wrote {args.model_out} ({model.meta['transitions']} transitions of {len(everything)} curves)")
    args.out.write_text(json.dumps({"command": " ".join(["python -m benchmarks.batch_gain", *(argv or sys.argv[1:])]),
                                    "folders": [str(f) for f in folders], "leave_one_model_out": rows,
                                    "fitted": model.meta}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
