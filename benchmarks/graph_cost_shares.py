"""Where the proxy puts each model's time, and how much of it a FLOP-preserving rewrite could still lower.

`python benchmarks/graph_cost_shares.py [--size full] [--proxy-from JSON] [--models ...] [--steps 50] [--out JSON]`

For each model: the exported graph priced by the proxy, split by kernel kind; then the graph the pass's default
arm reaches (cheapest-first's first episode, bounded by `--steps` alone, so a loaded machine gives the same graph),
and the share of *its* priced time that is not compute-bound FLOPs at the best peak a change of kind could give
(`benchmarks.graphs.cost_shares`). That share bounds what any further rewrite of the pass could gain by the proxy:
"max further" is the default graph's time over its fixed part. Writes logs/graph_cost_shares_<target>_<size>.json.
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tests.support.heldout_models  # noqa: E402, F401  (registers the held-out models for --models)
from benchmarks.graphs import ablation  # noqa: E402
from benchmarks.graphs.cost_shares import cost_shares  # noqa: E402
from tvm_rl import models  # noqa: E402
from tvm_rl.graph.calibration import recorded_proxy  # noqa: E402
from tvm_rl.graph.cost import roofline_cost  # noqa: E402
from tvm_rl.graph.roofline import default_hardware  # noqa: E402


def top_kinds(shares, n: int = 3) -> str:
    kinds = sorted(shares.kinds.items(), key=lambda kv: -kv[1].ms)[:n]
    return ", ".join(f"{k} {100 * v.ms / shares.total_ms:.0f}%" for k, v in kinds)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="full")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--proxy-from", default="", help="a graph benchmark JSON whose recorded proxy prices the graphs "
                    "(default: the target's nominal roofline)")
    ap.add_argument("--models", nargs="+", default=models.names())
    ap.add_argument("--steps", type=int, default=50, help="the default arm's steps (its pass default: 50)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    proxy = recorded_proxy(args.proxy_from) if args.proxy_from else default_hardware(args.target)
    out = Path(args.out or f"logs/graph_cost_shares_{args.target.split()[0]}_{args.size}.json")
    settings = ablation.Settings(target=args.target, episodes=1, max_steps=args.steps, time_budget_s=None)
    rows = []
    print("| model | exported, proxy ms | its time by kind | default's graph, proxy ms (speedup) | its time by kind "
          "| movable share of it | max further speedup |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models:
        t0 = time.perf_counter()
        mod = models.load(name, args.size).mod
        before = cost_shares(mod, proxy)
        run = ablation.run(mod, "cheapest-first", lambda: roofline_cost(proxy), settings)
        after = cost_shares(run.mod, proxy)
        speedup = before.total_ms / after.total_ms
        rows.append({"model": name, "exported": before.as_dict(), "default": after.as_dict(),
                     "default_speedup": speedup, "default_applied": run.applied,
                     "seconds": round(time.perf_counter() - t0, 1)})
        print(f"| {name} | {before.total_ms:.2f} | {top_kinds(before)} | {after.total_ms:.2f} "
              f"({speedup:.3f}x) | {top_kinds(after)} | {100 * after.movable_share:.0f}% "
              f"| {after.max_speedup:.2f}x |", flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"command": "python benchmarks/graph_cost_shares.py " + " ".join(
            argv if argv is not None else sys.argv[1:]), "size": args.size, "target": args.target,
            "proxy": proxy.as_dict(), "proxy_source": args.proxy_from or "nominal", "models": rows}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
