"""Table of rule family x zoo model: how many places each family offers on each model (matches are only
offered where proven safe). `python benchmarks/rule_matches.py [--size tiny|full]`; writes logs/rule_matches_<size>.json."""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tvm_rl import models  # noqa: E402
from tvm_rl.graph.rules import all_rules  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny", choices=models.SIZES)
    ap.add_argument("--models", nargs="*", default=models.names())
    args = ap.parse_args()
    rules = all_rules()
    counts = {}
    for name in args.models:
        mod = models.load(name, args.size).mod
        counts[name] = {rule.name: len(rule.matches(mod)) for rule in rules}
    short = {n: n.replace("_", "")[:7] for n in args.models}
    print(f"{'family':<26}" + "".join(f"{short[n]:>9}" for n in args.models))
    for rule in rules:
        print(f"{rule.name:<26}" + "".join(f"{counts[n][rule.name]:>9}" for n in args.models))
    out = Path(__file__).resolve().parents[1] / "logs" / f"rule_matches_{args.size}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(counts, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
