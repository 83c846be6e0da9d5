"""Verified graph rewrite rules over Relax: one module per family group, one Rule class per family.

    >>> from tvm_rl.graph.rules import all_rules
    >>> for rule in all_rules():
    ...     for match in rule.matches(mod):
    ...         new_mod = rule.apply(mod, match)
"""
# Importing a family's module registers it; the action order is `base.ACTION_ORDER`, not this import order.
from . import algebra, attention, concat, conv, gemm, layout, linear, linear_merge, matmul, nhwc, norm, pool, simplify  # noqa: F401
from .base import ACTION_ORDER, AllMatches, Match, Rule, all_rules, get_rule, register, rule_names, with_all_matches
from .ir import Edit, Graph, RuleError

__all__ = ["ACTION_ORDER", "AllMatches", "Edit", "Graph", "Match", "Rule", "RuleError", "all_rules", "get_rule",
           "register", "rule_names", "with_all_matches"]
