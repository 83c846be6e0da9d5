"""Which graph policy to ship: each checkpoint's pass beside the arms without learning, by the proxy, over seeds.

`python benchmarks/compare_policies.py --size full --database logs/tuning/llvm --policies A.pt B.pt [--arms ...]`
Nothing is built or timed end to end: each policy runs as the "trained" arm of `benchmarks.graphs.ablation` (the
pass's loop: --time-budget, --episodes, shortlist, every-match actions, no confirmation), once per --seeds, beside
the --arms (default: cheapest-first, uniform, greedy-never-stop, greedy), all priced by the proxy fitted to
--database (or rebuilt from --proxy-from's recorded one). The table gives the proxy's mean speedup ± 95%
t-interval over seeds, seconds and steps; "*" marks more than 1% from the best non-learned arm (in bold). The
pass's steps depend on the machine's load, so compare within one run. Writes logs/compare_policies_<target>_<size>.json.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from graph_rl import add_arm_args, effort_table, pricing_of, proxy_of, settings_of, summaries, table  # noqa: E402

import tests.support.heldout_models  # noqa: E402, F401  (registers the held-out models for --models)
from benchmarks.graphs import ablation  # noqa: E402
from tvm_rl import measure, models  # noqa: E402
from tvm_rl.graph.agent import DEFAULT_POLICY, GraphActorCritic  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny", choices=models.SIZES)
    ap.add_argument("--models", nargs="*", default=models.names())
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--database", default=None, help="MetaSchedule work dir whose tuned kernels fit the proxy")
    ap.add_argument("--policies", nargs="+", default=[str(DEFAULT_POLICY)], help="policy checkpoints")
    add_arm_args(ap, ("cheapest-first", "uniform", "greedy-never-stop", "greedy"))
    args = ap.parse_args()
    args.policy = None
    target = measure.parse_target(args.target)
    hardware, proxy_source = proxy_of(target, args)
    price, priced_by = pricing_of(hardware, args)
    settings = settings_of(target, args)
    columns = {f"{Path(p).parent.name}/{Path(p).name}": GraphActorCritic.load(p) for p in args.policies}
    keys = list(args.arms) + list(columns)
    results: dict[str, dict] = {}
    for name in args.models:
        mod = models.load(name, args.size).mod
        runs = ablation.evaluate(mod, args.arms, args.seeds, price, settings)
        for column, policy in columns.items():
            settings.policy = policy
            runs[column] = ablation.evaluate(mod, ["trained"], args.seeds, price, settings)["trained"]
        results[name] = {"runs": runs, "summary": summaries(runs)}
        print(f"{name}: " + ", ".join(f"{k} {ablation.cell(results[name]['summary'][k])}" for k in keys), flush=True)
    print("\n".join(table(results, keys, learned=tuple(columns))))
    print("\n".join(effort_table(results, keys)))
    out = Path(__file__).resolve().parents[1] / "logs" / f"compare_policies_{target.kind.name}_{args.size}.json"
    settings.policy = None
    out.write_text(json.dumps({"target": str(target), "size": args.size, "database": args.database,
                               "proxy": hardware.as_dict(), "proxy_source": proxy_source, "priced_by": priced_by,
                               "seeds": args.seeds,
                               "settings": settings.as_dict(), "policies": args.policies, "models": results},
                              indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
