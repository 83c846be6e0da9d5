"""Which graph policy to ship: greedy search and `RLRewritePass` with each policy, by the roofline proxy.

`python benchmarks/compare_policies.py --size full --database logs/tuning/llvm --policies A.pt B.pt`
Nothing is built or timed end to end: each policy's pass runs as users get it (its default time budget,
episodes and shortlist, no confirmation) with the proxy fitted to --database, and the table gives the proxy's
speedup of its graph, the seconds it took and its steps, beside greedy search's (cap 64, no time limit). The
pass's steps depend on the machine's load, so compare policies within one run. Writes
logs/compare_policies_<target>_<size>.json.
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tvm_rl import measure, models  # noqa: E402
from tvm_rl.graph import cost, search  # noqa: E402
from tvm_rl.graph.agent import DEFAULT_POLICY, GraphActorCritic  # noqa: E402
from tvm_rl.graph.calibration import proxy_roofline  # noqa: E402
from tvm_rl.graph.rewrite_pass import RLRewritePass  # noqa: E402


def cell(row: dict) -> str:
    """Proxy speedup, seconds and (for a pass) steps."""
    return f"{row['speedup']:.3f}x {row['seconds']:.1f}s" + (f" {row['steps']} steps" if "steps" in row else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny", choices=models.SIZES)
    ap.add_argument("--models", nargs="*", default=models.names())
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--database", default=None, help="MetaSchedule work dir whose tuned kernels fit the proxy")
    ap.add_argument("--policies", nargs="+", default=[str(DEFAULT_POLICY)], help="policy checkpoints")
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--time-budget", type=float, default=10.0)
    args = ap.parse_args()
    target = measure.parse_target(args.target)
    fn = cost.roofline_cost(proxy_roofline(target, args.database))
    policies = {p: GraphActorCritic.load(p) for p in args.policies}
    results = {}
    print(f"{'model':<14}{'greedy':>18}" + "".join(f"{Path(p).parent.name + '/' + Path(p).name:>32}" for p in policies))
    for name in args.models:
        mod = models.load(name, args.size).mod
        t0 = time.perf_counter()
        g = search.greedy(mod, fn, cap=64)
        rows = {"greedy": {"speedup": fn(mod) / g.cost, "seconds": time.perf_counter() - t0,
                           "rewrites": len(g.applied)}}
        for path, policy in policies.items():
            rl = RLRewritePass(target, policy, confirm=False, cap=64, cost=fn, episodes=args.episodes,
                               time_budget_s=args.time_budget)
            rl(mod)
            r = rl.last_report
            rows[path] = {"speedup": r.initial_cost / r.cost, "seconds": r.seconds, "steps": r.steps,
                          "rewrites": len(r.applied)}
        results[name] = rows
        print(f"{name:<14}" + "".join(f"{cell(row):>32}" if key != "greedy" else f"{cell(row):>18}"
                                      for key, row in rows.items()), flush=True)
    out = Path(__file__).resolve().parents[1] / "logs" / f"compare_policies_{target.kind.name}_{args.size}.json"
    out.write_text(json.dumps({"target": str(target), "size": args.size, "database": args.database,
                               "episodes": args.episodes, "time_budget_s": args.time_budget,
                               "models": results}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
