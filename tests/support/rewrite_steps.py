"""Helpers for tests that chain rewrites: apply rules until none matches, count an operator's calls, list the
convolutions' layouts."""
from tvm import relax

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


def conv_layouts(mod) -> list[str]:
    """The data layout of each conv2d in `main`, in post order."""
    found = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(e.attrs.data_layout) if isinstance(
        e, relax.Call) and getattr(e.op, "name", "") == "relax.nn.conv2d" else None)
    return found
