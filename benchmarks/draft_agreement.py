"""How well PPOSearch's draft model ranks schedules the way the cost model does, per draft feature set.

`python benchmarks/draft_agreement.py [--models resnet18 mobilenet_v2 bert] [--tasks-per-model 3]
[--points 640] [--train 256] [--seeds 0 1 2]`
For each task (the heaviest of each model's kernels, full size, LLVM), random valid schedules of its design
spaces are rated by the tuner's shipped pre-trained cost model (no measurement), a draft model
(`tvm_rl.tune.draft`) is fitted to `--train` of them as a walk round fits it, and it ranks the rest: Spearman's
rho against the cost model, and how many of the cost model's top 10% it puts in its own top 10%. Feature sets:
"per-knob" (each tile knob's levels in log2, the other knobs' indices) and "with products" (plus the
tiling's products across knobs, `MoveSpace.level_features`). The walks climb the draft, so a draft that ranks
like the cost model is what lets the agent learn the cost model rather than the draft's errors.
Writes logs/draft_agreement_llvm.json.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tvm.s_tir import meta_schedule as ms  # noqa: E402

from tvm_rl import measure, models  # noqa: E402
from tvm_rl.tune.cost_model import shipped_model  # noqa: E402
from tvm_rl.tune.cost_model.pretrained import PretrainedXGBModel  # noqa: E402
from tvm_rl.tune.draft import DraftModel  # noqa: E402
from tvm_rl.tune.knobs import make_context  # noqa: E402
from tvm_rl.tune.search_strategy.ppo import PPOSearch  # noqa: E402
from tvm_rl.tune.tasks import extract_tasks  # noqa: E402

FEATURES = {"per-knob": False, "with products": True}


def rated_points(task, target, points: int, seed: int):
    """(search, {space: (vectors, cost-model scores)}): `points` random draws in each design space of `task`,
    the valid ones rated by the cost model."""
    context = make_context(task.dispatched[0], target, task.task_name, seed)
    strategy = PPOSearch(seed=seed)
    search = getattr(strategy, "_inst", strategy)
    search._initialize_with_tune_context(context)
    search.pre_tuning(max_trials=1 << 20, num_trials_per_iter=8, design_spaces=context.generate_design_space(),
                      database=ms.database.MemoryDatabase(), cost_model=PretrainedXGBModel(shipped_model("llvm")))
    rated = {}
    for s, space in enumerate(search.spaces):
        draws = {tuple(int(x) for x in space.random(search.rng)) for _ in range(points)}
        arr = np.array(sorted(draws), dtype=np.int64)
        scores = search.evaluate(s, arr)  # NaN: the draw does not decode
        ok = np.isfinite(scores)
        rated[s] = (arr[ok], scores[ok])
    return search, rated


def agreement(search, rated, train: int, seed: int) -> dict[str, dict]:
    """Per feature set: Spearman on the held-out points and the top-10% overlap, in the largest space."""
    s = max(rated, key=lambda k: len(rated[k][0]))
    vecs, scores = rated[s]
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(vecs))
    fit, test = order[:train], order[train:]
    moves = search._moves(s)
    out = {}
    for label, products in FEATURES.items():
        feats = moves.draft_features(vecs, level_products=products)
        draft = DraftModel(seed=seed).fit(feats[fit], scores[fit])
        pred = draft.predict(feats[test])
        k = max(1, len(test) // 10)
        top_true, top_pred = set(np.argsort(-scores[test])[:k]), set(np.argsort(-pred)[:k])
        out[label] = {"spearman": float(spearmanr(pred, scores[test]).statistic), "top10_overlap": len(
            top_true & top_pred) / k, "features": int(feats.shape[1])}
    out["points"] = {"space": int(s), "fit": int(len(fit)), "test": int(len(test))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2", "bert"])
    ap.add_argument("--tasks-per-model", type=int, default=3)
    ap.add_argument("--points", type=int, default=640)
    ap.add_argument("--train", type=int, default=256)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "logs" / "draft_agreement_llvm.json"))
    args = ap.parse_args()
    target = measure.host_cpu_target()
    rows, start = [], time.perf_counter()
    for name in args.models:
        tasks = sorted(extract_tasks(models.load(name, "full").mod, target), key=lambda t: -t.weight)
        heavy = [t for t in tasks if any(k in t.task_name for k in ("conv", "matmul", "dense"))]
        for task in heavy[: args.tasks_per_model]:
            for seed in args.seeds:
                search, rated = rated_points(task, target, args.points, seed)
                if not rated or max(len(v[0]) for v in rated.values()) < args.train + 32:
                    print(f"{name} {task.task_name} seed {seed}: too few valid points, skipped", flush=True)
                    continue
                row = {"model": name, "task": task.task_name, "seed": seed,
                       **agreement(search, rated, args.train, seed)}
                rows.append(row)
                print(f"{name} {task.task_name} seed {seed}: " + ", ".join(
                    f"{k} rho {row[k]['spearman']:.2f} top10 {row[k]['top10_overlap']:.2f}" for k in FEATURES)
                    + f" [{time.perf_counter() - start:.0f} s]", flush=True)
    summary = {k: {"median_spearman": float(np.median([r[k]["spearman"] for r in rows])),
                   "mean_top10_overlap": float(np.mean([r[k]["top10_overlap"] for r in rows]))}
               for k in FEATURES} if rows else {}
    print("\n| features | median Spearman | mean top-10% overlap |\n|---|---|---|")
    for k, v in summary.items():
        print(f"| {k} | {v['median_spearman']:.2f} | {v['mean_top10_overlap']:.2f} |")
    wins = sum(r["with products"]["spearman"] > r["per-knob"]["spearman"] for r in rows)
    print(f"with products ranks better on {wins} of {len(rows)} (task, seed) pairs")
    Path(args.out).parent.mkdir(exist_ok=True)
    Path(args.out).write_text(json.dumps({"command": "python " + " ".join(["benchmarks/draft_agreement.py",
                                                                         *sys.argv[1:]]),
                                          "seconds": round(time.perf_counter() - start, 1), "summary": summary,
                                          "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
