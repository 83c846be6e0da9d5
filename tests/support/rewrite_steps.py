"""Helpers for tests that chain rewrites: apply rules until none matches, and count an operator's calls."""
from tvm_rl.graph.rules import get_rule


def apply_until_none(mod, rule_names, limit=20):
    """`mod` after applying, again and again, the first match of the first of `rule_names` that has one."""
    rules = [get_rule(n) for n in rule_names]
    for _ in range(limit):
        found = [(r, m) for r in rules for m in r.matches(mod)]
        if not found:
            break
        mod = found[0][0].apply(mod, found[0][1])
    return mod


def count_calls(mod, op="relax.permute_dims"):
    """How many bindings of `main`'s first block call `op`."""
    return sum(1 for b in mod["main"].body.blocks[0].bindings
               if getattr(getattr(b.value, "op", None), "name", "") == op)
