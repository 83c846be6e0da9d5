"""Table of rule family x zoo model: how many places each family offers on each model (matches are only
offered where proven safe), as exported and one rewrite later.

`python benchmarks/rule_matches.py [--size tiny|full]`; writes logs/rule_matches_<size>.json. Some families
only appear once another rewrite has run (merge_parallel_matmul after dedup shares Q/K/V's input,
permute_past_elementwise after conv2d_to_nhwc): the second table counts, per family, the most matches in any
graph one rewrite away from the model, and names the rewrite that opens them up.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tests.support.heldout_models  # noqa: E402, F401  (registers the held-out models for --models)
from tvm_rl import models  # noqa: E402
from tvm_rl.graph.candidates import enumerate_candidates  # noqa: E402
from tvm_rl.graph.rules import all_rules  # noqa: E402
from tvm_rl.graph.view import graph_of  # noqa: E402


def match_counts(mod, rules) -> dict[str, int]:
    graph = graph_of(mod)
    return {rule.name: len(rule.find(graph)) for rule in rules}


def one_rewrite_later(mod, rules) -> dict[str, tuple[int, str]]:
    """Per family: the most matches in any graph one rewrite away, and that rewrite."""
    best = {rule.name: (0, "") for rule in rules}
    for cand in enumerate_candidates(mod, rules, strict=False):
        for name, n in match_counts(cand.mod, rules).items():
            if n > best[name][0]:
                best[name] = (n, cand.rule.name)
    return best


def print_table(title: str, rules, names, cell) -> None:
    short = {n: n.replace("_", "")[:7] for n in names}
    print(f"\n{title}\n{'family':<26}" + "".join(f"{short[n]:>9}" for n in names))
    for rule in rules:
        print(f"{rule.name:<26}" + "".join(f"{cell(n, rule.name):>9}" for n in names))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny", choices=models.SIZES)
    ap.add_argument("--models", nargs="*", default=models.names())
    args = ap.parse_args()
    rules = all_rules()
    direct, later = {}, {}
    for name in args.models:
        mod = models.load(name, args.size).mod
        direct[name] = match_counts(mod, rules)
        later[name] = one_rewrite_later(mod, rules)
        print(f"{name}: {sum(direct[name].values())} matches", flush=True)
    print_table("matches as exported:", rules, args.models, lambda n, r: direct[n][r])
    print_table("most matches one rewrite later:", rules, args.models, lambda n, r: later[n][r][0])
    print("\nfamilies with no match as exported, and the rewrite that opens them up:")
    for rule in rules:
        if not any(direct[n][rule.name] for n in args.models):
            opened = [(n, *later[n][rule.name]) for n in args.models if later[n][rule.name][0]]
            print(f"  {rule.name}: " + (", ".join(f"{n} ({k} after {by})" for n, k, by in opened)
                                         or "none within one rewrite"))
    out = Path(__file__).resolve().parents[1] / "logs" / f"rule_matches_{args.size}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"as_exported": direct,
                               "one_rewrite_later": {n: {r: {"matches": k, "after": by} for r, (k, by) in v.items()}
                                                     for n, v in later.items()}}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
