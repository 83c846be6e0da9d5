"""`tvm-rl rewrite`: the graph pass alone on a zoo model or an ONNX file, with a report."""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import tvm

from .. import measure, models, paths
from . import defaults
from .arms import ARMS, DEFAULT_ARM


def main(argv: list[str] | None = None, prog: str = "tvm-rl rewrite") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=(
        "Rewrite a model's Relax graph with the graph pass (RLRewritePass) and report what it did. By default the "
        f"rewrites are chosen by {DEFAULT_ARM}, a rule without learning: the learned policy did not beat it "
        "(docs/results/graph_ablation.md); --policy trained runs the learned one. The result is kept only if it "
        "is cheaper by the cost model and, unless --no-confirm, measures faster end to end."))
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", help="a zoo model name (see tvm_rl.models.names())")
    what.add_argument("--onnx", help="an ONNX file (static shapes)")
    ap.add_argument("--size", default="tiny", choices=models.SIZES, help="zoo model size (default tiny)")
    ap.add_argument("--target", default="llvm", help="llvm (this CPU), cuda, cuda:sm_80, or a target JSON")
    ap.add_argument("--policy", default=DEFAULT_ARM, help=f"what chooses the rewrites: {', '.join(ARMS)} "
                    "(trained: the learned policy shipped with tvm-rl), a policy checkpoint from tvm-rl train, or a "
                    "search run once until done or --time-budget: greedy, backtracking (TASO's, 1000 expansions; "
                    "backtracking-N for N), which take minutes on full-size models: give them --time-budget 600 "
                    f"(default {DEFAULT_ARM}, a rule without learning)")
    ap.add_argument("--steps", type=int, default=defaults.MAX_STEPS,
                    help=f"rewrites per episode at most (default {defaults.MAX_STEPS}; the time budget usually ends an "
                         "episode first on full-size models)")
    ap.add_argument("--episodes", type=int, default=defaults.EPISODES, help=f"episodes (default {defaults.EPISODES}); "
                    "with cheapest-first or a network the first takes the cheapest candidate / the argmax, the others "
                    "sample")
    ap.add_argument("--time-budget", type=float, default=defaults.TIME_BUDGET_S,
                    help=f"search seconds at most (default {defaults.TIME_BUDGET_S:g})")
    ap.add_argument("--database", default=None, help="MetaSchedule work dir whose tuned kernels the "
                    "confirmation builds use (on CPU, untuned kernels are naive loops)")
    ap.add_argument("--no-confirm", action="store_true", help="trust the cost model; skip the measurement")
    ap.add_argument("--no-all-matches", action="store_true", help="one match per step only (no \"apply every "
                    "match of a rule\" actions)")
    ap.add_argument("--allow-feature-mismatch", action="store_true", help="use a policy trained for another "
                    "target kind (CPU/GPU) anyway (refused by default: it would read features on another scale)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work-dir", default=None, help="where rewrite_<model>.json and .relax.json go (default "
                    f"{paths.WORK_DIR_HELP})")
    args = ap.parse_args(argv)

    from .rewrite_pass import RLRewritePass

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    target = measure.parse_target(args.target)
    model = models.load(args.model, args.size) if args.model else models.from_onnx(args.onnx)
    database = None
    if args.database:
        from ..database import open_database
        database = open_database(args.database)
    rewrite = RLRewritePass(target, args.policy, max_steps=args.steps, episodes=args.episodes,
                            time_budget_s=args.time_budget, confirm=not args.no_confirm, database=database,
                            seed=args.seed, all_matches=not args.no_all_matches,
                            allow_feature_mismatch=args.allow_feature_mismatch)
    out = rewrite(model.mod)
    r = rewrite.last_report
    name = args.model or Path(args.onnx).stem
    work = Path(args.work_dir) if args.work_dir else paths.work_dir()
    work.mkdir(parents=True, exist_ok=True)
    (work / f"rewrite_{name}.relax.json").write_text(tvm.ir.save_json(out))
    report = {"model": name, "target": str(target), "policy": args.policy, "kept": r.kept, "reason": r.reason,
              "applied": r.applied,
              "cost_ms": r.cost, "initial_cost_ms": r.initial_cost, "measured_ms": r.final_ms,
              "initial_measured_ms": r.initial_ms, "speedup": r.speedup, "episodes": r.episodes, "steps": r.steps,
              "search_seconds": r.seconds, "confirm_seconds": r.confirm_seconds}
    (work / f"rewrite_{name}.json").write_text(json.dumps(report, indent=1))
    print(f"{name}: {r.reason} (policy {args.policy}); {r.episodes} episodes, {r.steps} steps, {r.seconds:.1f} s search"
          + (f", {r.confirm_seconds:.1f} s confirming" if r.confirm_seconds else ""))
    for step in r.applied:
        print(f"  {step}")
    print(f"wrote {work / f'rewrite_{name}.json'} and the rewritten module {work / f'rewrite_{name}.relax.json'} "
          "(tvm.ir.load_json)")
    return 0
