"""Graph RL benchmark: original, TVM's built-in Relax rewrites, greedy, backtracking and RLRewritePass per model.

`python benchmarks/graph_rl.py [--size tiny|full] [--models ...] [--policy PATH] [--database DIR]`
Every variant is built with the same kernel schedules (untuned, or the given MetaSchedule work dir's), checked
against the original's outputs and timed end to end (median of --repeat). The searches and the policy are
steered by the roofline proxy; the RL pass confirms its result by measurement (as users get it by default), so
it never returns a slower graph. "seen" marks models (at that size) the policy was trained on: the others
measure generalisation. Resumable: models already in logs/graph_rl_<target>_<size>.json are skipped unless
--force; the file is rewritten after every model. On CPU, untuned kernels are naive loops (docs/limits.md).
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from graph_search import (  # noqa: E402
    add_tuning_args,
    check_tuning_args,
    confirmed,
    measure_variants,
    open_database_arg,
    plot_speedups,
    print_table,
    proxy_hardware,
    tuner,
    variant_measure,
)

from tvm_rl import measure, models  # noqa: E402
from tvm_rl.graph import cost, search  # noqa: E402
from tvm_rl.graph.agent import GraphActorCritic  # noqa: E402
from tvm_rl.graph.rewrite_pass import RLRewritePass  # noqa: E402

KEYS = ("original", "relax_builtin", "greedy", "backtracking", "rl_one_match", "rl")


def proxy_rows(variants: dict, fn) -> dict[str, dict]:
    """Rows like measure_variants', with the proxy's cost in place of a measured latency."""
    rows = {}
    for key, (mod, seconds, applied, *_) in variants.items():
        c = None if key == "relax_builtin" else fn(mod)  # the proxy cannot read the built-ins' call_tir
        rows[key] = {"latency_ms": c, "search_cost_ms": c, "optimisation_s": round(seconds, 2),
                     "rewrites": len(applied), "applied": applied, "matches_original": True, "proxy_only": True}
    rows.pop("relax_builtin")
    for row in rows.values():
        row["speedup"] = rows["original"]["latency_ms"] / row["latency_ms"]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny", choices=models.SIZES)
    ap.add_argument("--models", nargs="*", default=models.names())
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--policy", default=None, help="policy checkpoint (default: the shipped one)")
    add_tuning_args(ap)
    ap.add_argument("--budget", type=int, default=10, help="backtracking expansions")
    ap.add_argument("--alpha", type=float, default=1.05)
    ap.add_argument("--cap", type=int, default=64, help="candidates per step (searches and the policy)")
    ap.add_argument("--steps", type=int, default=50,
                    help="RL pass: steps per episode (the time budget usually ends it first)")
    ap.add_argument("--episodes", type=int, default=4, help="RL pass: episodes (first greedy, rest sampled)")
    ap.add_argument("--time-budget", type=float, default=10.0, help="RL pass: search seconds per model")
    ap.add_argument("--no-all-matches", action="store_true", help="RL pass: one match per step only (no "
                    "\"apply every match of a rule\" actions)")
    ap.add_argument("--one-match-too", action="store_true", help="also run the RL pass with one match per step "
                    "(column rl_one_match): what the \"every match\" actions add")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--greedy-steps", type=int, default=500, help="greedy: rewrites at most")
    ap.add_argument("--no-measure", action="store_true", help="compare by the roofline proxy only (no builds: "
                    "for full-size models on CPU, whose untuned builds take minutes per run)")
    ap.add_argument("--force", action="store_true", help="re-run models already in the JSON")
    ap.add_argument("--table-only", action="store_true", help="print the table (and plot) of the JSON's models "
                    "and run nothing (without it, a model missing from the JSON is run)")
    args = ap.parse_args()
    check_tuning_args(ap, args)
    target = measure.parse_target(args.target)
    database = open_database_arg(args.database)
    policy = GraphActorCritic.load(args.policy)
    trained = set(policy.meta.get("models", []))
    seen_models = trained if policy.meta.get("size") == args.size else set()
    suffix = "_proxy" if args.no_measure else ""
    out = Path(__file__).resolve().parents[1] / "logs" / f"graph_rl_{target.kind.name}_{args.size}{suffix}.json"
    results = json.loads(out.read_text())["models"] if out.exists() else {}
    hardware = proxy_hardware(target, args.database)
    for name in [] if args.table_only else args.models:
        if name in results and not args.force:
            print(f"{name}: already in {out.name} (--force to re-run)")
            continue
        model = models.load(name, args.size)
        fn = cost.roofline_cost(hardware)
        variants = {"original": (model.mod, 0.0, [])}
        start = time.perf_counter()
        variants["relax_builtin"] = (search.tvm_builtin(model.mod), time.perf_counter() - start,
                                     list(search.TVM_BUILTIN_PASSES))
        guard = not (args.no_measure or args.no_confirm)
        measure_pair = None if args.no_measure else variant_measure(model, target, args)
        r = search.greedy(model.mod, fn, cap=args.cap, max_steps=args.greedy_steps)
        variants["greedy"] = confirmed(r, model.mod, measure_pair, guard)
        r = search.backtracking(model.mod, fn, alpha=args.alpha, budget=args.budget, cap=args.cap)
        variants["backtracking"] = confirmed(r, model.mod, measure_pair, guard)
        def run_pass(all_matches: bool):
            rl = RLRewritePass(target, policy, max_steps=args.steps, episodes=args.episodes, cap=args.cap,
                               time_budget_s=args.time_budget, database=database, cost=fn, confirm=guard,
                               measure_pair=measure_pair, all_matches=all_matches)
            return rl(model.mod), rl.last_report

        reports = {}
        if args.one_match_too:
            rewritten, reports["rl_one_match"] = run_pass(False)
            variants["rl_one_match"] = (rewritten, reports["rl_one_match"].seconds, reports["rl_one_match"].applied)
        rewritten, reports["rl"] = run_pass(not args.no_all_matches)
        variants["rl"] = (rewritten, reports["rl"].seconds, reports["rl"].applied)
        rows = (proxy_rows(variants, fn) if args.no_measure
                else measure_variants(model, variants, target, database, args.repeat, fn, tuner(target, args)))
        for key, report in reports.items():
            rows[key].update(confirm_s=round(report.confirm_seconds, 2), steps=report.steps, kept=report.kept,
                             reason=report.reason)
        report = reports["rl"]
        rows["seen_in_training"] = name in seen_models
        # Per row: models run on different days use different databases and proxy fits (the file's top-level
        # settings are the last run's).
        rows["run"] = {"date": time.strftime("%Y-%m-%d"), "database": cost.database_tag(database),
                       "tune_trials": args.tune_trials, "proxy": hardware.as_dict()}
        results[name] = rows
        print(f"{name}: " + ", ".join(f"{k} {rows[k]['latency_ms']:.3f} ms ({rows[k]['speedup']:.2f}x)"
                                      for k in KEYS if k in rows) + f"; rl: {report.reason}", flush=True)
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps({"target": str(target), "size": args.size, "search_cost": "roofline",
                                   "proxy": hardware.as_dict(),
                                   "measured": not args.no_measure, "greedy_steps": args.greedy_steps,
                                   "database": cost.database_tag(database), "tune_trials": args.tune_trials,
                                   "confirmed": not (args.no_measure or args.no_confirm),
                                   "policy": args.policy or "shipped",
                                   "policy_meta": policy.meta, "budget": args.budget, "alpha": args.alpha,
                                   "cap": args.cap, "steps": args.steps, "episodes": args.episodes,
                                   "time_budget_s": args.time_budget,
                                   "all_matches": not args.no_all_matches, "repeat": args.repeat, "models": results},
                                  indent=1))
    keys = tuple(k for k in KEYS if not (args.no_measure and k == "relax_builtin")
                 and all(k in r for r in results.values()))
    table = {n: {k: v for k, v in r.items() if k not in ("seen_in_training", "run")} for n, r in results.items()}
    def group(name: str) -> str:
        if name in seen_models:
            return "seen"
        return "shapes" if name in trained else "unseen"

    for kind, title in (("seen", "models the policy was trained on"),
                        ("shapes",
                         f"models the policy was trained on at {policy.meta.get('size')} size: unseen shapes"),
                        ("unseen", "models left out of training")):
        part = {n: r for n, r in table.items() if group(n) == kind}
        if part:
            print(f"\n{title} ({args.size}):")
            print_table(part, keys)
    rl_vs_bt = [r["backtracking"]["latency_ms"] / r["rl"]["latency_ms"] for r in table.values()]
    if rl_vs_bt:
        print(f"\nRL vs backtracking: >= on {sum(x >= 0.99 for x in rl_vs_bt)}/{len(rl_vs_bt)} models (1% noise), "
              f">= 5% faster on {sum(x >= 1.05 for x in rl_vs_bt)}")
        by = "by the proxy, nothing built" if args.no_measure else "measured"
        plot_speedups(table, keys, out.with_suffix(".png"), f"Graph rewrites, {target.kind.name} ({args.size}), {by}")
    png = f"; wrote {out.with_suffix('.png').name}" if table else ""
    print(f"read {out}{png}" if args.table_only else f"wrote {out}{png}")


if __name__ == "__main__":
    main()
