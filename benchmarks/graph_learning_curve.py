"""Graph RL learning curve: a training run's policy snapshots in the pass's own loop, against the arms without learning.

`python benchmarks/graph_learning_curve.py --work-dir logs/graph_train/RUN --model mobilenet_v2 [--size full]
[--proxy-from JSON | --database DIR] [--arms ...] [--seeds 0 1 2] [--every K] [--time-budget S]`

Issue 20 asks whether training "rises above the best non-learned arm". Each `policy_iterNNNN.pt` that
`python -m tvm_rl.graph.train --snapshot-every N` kept (every K-th of them, and the last) runs as the pass's
"trained" arm, and the arms without learning (default: uniform, cheapest-first, cost-softmax, untrained and
greedy-never-stop) run once per seed, all with the same pass settings (shortlist, every-match actions, episodes,
steps) and priced by the same proxy, which should be the one the run trained with. `--time-budget 0` (the
default here) bounds the pass by steps alone, so a curve measured beside another job is not cut short by the
load; give `--time-budget 10` for the pass's own budget. Prints a table of each snapshot's mean speedup ±
95% t-interval and its difference from the best arm, then one of the rewrites each made per rule family, and
writes logs/graph_curve_<model>_<size>.json (resumable: snapshots and arms already there are kept) and a plot
beside it: the snapshots' levels, the training episodes' own speedups, and each arm's level as a line.
"""
import argparse
import csv
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from graph_rl import add_arm_args, pricing_of, proxy_of, settings_of  # noqa: E402

import tests.support.heldout_models  # noqa: E402, F401  (registers the held-out models for --models)
from benchmarks.graphs import ablation  # noqa: E402
from tvm_rl import models  # noqa: E402
from tvm_rl.graph import arms  # noqa: E402

DEFAULT_ARMS = tuple(a for a in arms.ARMS if a not in arms.LEARNED) + ("greedy-never-stop",)


def snapshots(work_dir: Path, every: int = 1) -> list[tuple[int, Path]]:
    """(iteration, path) of the run's `policy_iterNNNN.pt` files in order: every `every`-th and the last."""
    found = sorted((int(m.group(1)), p) for p in work_dir.glob("policy_iter*.pt")
                   if (m := re.fullmatch(r"policy_iter(\d+)\.pt", p.name)))
    if not found:
        raise FileNotFoundError(f"{work_dir} has no policy_iterNNNN.pt snapshots: train with --snapshot-every N")
    picked = found[::every]
    return picked if picked[-1] == found[-1] else picked + [found[-1]]


def training_rows(work_dir: Path) -> list[dict]:
    """train.csv's rows (iteration, mean and best episode speedup), as numbers; [] when there is none."""
    path = work_dir / "train.csv"
    if not path.exists():
        return []
    with open(path) as f:
        return [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(f)]


def episodes_per_iteration(work_dir: Path) -> int:
    """The run's episodes per PPO update, from its checkpoint's config (to put snapshots on an episode axis)."""
    import torch

    ckpt = torch.load(work_dir / "checkpoint.pt", map_location="cpu", weights_only=True)
    return int(ckpt["config"]["episodes_per_iteration"])


def plot(result: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.5, 4.2))
    train = result.get("training", [])
    per = result["episodes_per_iteration"]
    if train:
        ax.plot([r["iteration"] * per for r in train], [r["mean_speedup"] for r in train], color="0.7", lw=1,
                label="training episodes (sampled, mean)")
    snaps = sorted(result["snapshots"].values(), key=lambda s: s["iteration"])
    if snaps:
        x = [s["iteration"] * per for s in snaps]
        y = [s["summary"]["mean"] for s in snaps]
        err = [s["summary"]["ci95"] or 0.0 for s in snaps]
        ax.errorbar(x, y, yerr=err, marker="o", color="C3", capsize=3, label="policy snapshot in the pass")
    for i, (arm, summary) in enumerate(sorted(result["arm_summary"].items(), key=lambda kv: -kv[1]["mean"])):
        ax.axhline(summary["mean"], ls="--", lw=1, color=f"C{i % 3}" if i < 3 else "0.5",
                   label=f"{arm} ({summary['mean']:.3f})")
    ax.set_xlabel("training episodes")
    ax.set_ylabel("speedup by the proxy")
    ax.set_title(f"{result['model']} ({result['size']}): learned policy vs arms without learning", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # beside the curve, not over it
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work-dir", required=True, help="a `tvm_rl.graph.train` run with --snapshot-every")
    ap.add_argument("--model", required=True, help="the zoo model to judge the snapshots on")
    ap.add_argument("--size", default="full")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--database", default=None, help="price with the roofline fitted to this tuning database")
    ap.add_argument("--every", type=int, default=1, help="judge every K-th snapshot (and the last)")
    ap.add_argument("--out", default=None, help="default: logs/graph_curve_<model>_<size>.json")
    add_arm_args(ap, DEFAULT_ARMS)
    ap.set_defaults(time_budget=0.0)
    args = ap.parse_args(argv)
    if args.every < 1:
        ap.error("--every must be >= 1")
    args.policy = None
    work = Path(args.work_dir)
    import tvm

    target = tvm.target.Target(args.target)
    hardware, proxy_source = proxy_of(target, args)
    price, priced_by = pricing_of(hardware, args)  # a fresh memo per run (ablation.run)
    settings = settings_of(target, args)
    out = Path(args.out or f"logs/graph_curve_{args.model}_{args.size}.json")
    saved = json.loads(out.read_text()) if out.exists() else {}
    same = (saved.get("settings") == settings.as_dict() and saved.get("proxy") == hardware.as_dict()
            and saved.get("priced_by", "proxy") == priced_by)
    if saved and not same:
        raise SystemExit(f"{out} holds a curve made with other settings or another proxy; give another --out")
    result = {"model": args.model, "size": args.size, "work_dir": str(work), "proxy": hardware.as_dict(),
              "proxy_source": proxy_source, "priced_by": priced_by, "settings": settings.as_dict(),
              "seeds": args.seeds,
              "command": "python " + " ".join([f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
              "episodes_per_iteration": episodes_per_iteration(work), "training": training_rows(work),
              "arms": saved.get("arms", {}), "snapshots": saved.get("snapshots", {}), "arm_summary": {}}

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))

    mod = models.load(args.model, args.size).mod
    t0 = time.perf_counter()

    def arm_done(arm: str, r: ablation.Run) -> None:
        result["arms"].setdefault(arm, []).append(r.row())
        print(f"  {arm} seed {r.seed}: {r.speedup:.3f}x, {r.steps} steps, {r.seconds:.0f} s", flush=True)
        save()

    ablation.evaluate(mod, args.arms, args.seeds, price, settings, done=result["arms"], on_run=arm_done)
    result["arm_summary"] = {a: ablation.summarise(rows) for a, rows in result["arms"].items() if a in args.arms}
    best = max(result["arm_summary"], key=lambda a: result["arm_summary"][a]["mean"])
    vs_best = lambda summary: summary["mean"] / result["arm_summary"][best]["mean"] - 1  # noqa: E731
    for it, path in snapshots(work, args.every):
        key = f"{it:04d}"
        entry = result["snapshots"].setdefault(key, {"iteration": it, "runs": []})
        snap = settings_of(target, argparse.Namespace(**{**vars(args), "policy": str(path)}))
        runs = ablation.evaluate(mod, ["trained"], args.seeds, price, snap, done={"trained": entry["runs"]})
        entry["runs"] = runs["trained"]
        entry["summary"] = ablation.summarise(entry["runs"])
        print(f"iteration {it}: {ablation.cell(entry['summary'])} ({vs_best(entry['summary']):+.1%} vs {best}) "
              f"[{time.perf_counter() - t0:.0f} s]", flush=True)
        save()
    result["best_non_learned"] = best
    save()
    per = result["episodes_per_iteration"]
    print(f"\n{args.model} ({args.size}), proxy speedup in the pass, mean ± 95% t-interval over seeds {args.seeds}")
    print("| arm or snapshot | training episodes | speedup | vs the best arm |\n|---|---|---|---|")
    for arm, s in sorted(result["arm_summary"].items(), key=lambda kv: -kv[1]["mean"]):
        print(f"| {arm} | - | {ablation.cell(s)} | {vs_best(s):+.1%} |")
    for key in sorted(result["snapshots"]):
        s = result["snapshots"][key]
        print(f"| policy, iteration {s['iteration']} | {s['iteration'] * per} | {ablation.cell(s['summary'])} | "
              f"{vs_best(s['summary']):+.1%} |")
    # What each did: a policy trained under one proxy can keep moves that another proxy does not pay for.
    print("\nrewrites per family, mean over the runs\n")
    print(ablation.rewrites_table({**{a: result["arms"][a] for a in result["arm_summary"]},
                                   **{f"policy, iteration {s['iteration']}": s["runs"]
                                      for _, s in sorted(result["snapshots"].items())}}))
    print(f"wrote {out}; plot {plot(result, out.with_suffix('.png'))}")


if __name__ == "__main__":
    main()
