"""Verified graph rewrite rules over Relax: one module per family group, one Rule class per family.

    >>> from tvm_rl.graph.rules import all_rules
    >>> for rule in all_rules():
    ...     for match in rule.matches(mod):
    ...         new_mod = rule.apply(mod, match)
"""
from . import concat, conv, layout, matmul, simplify  # noqa: F401  (registers the families, in this order)
from . import attention, linear, nhwc, pool  # noqa: F401,E402  (the later families, after these)
from .base import AllMatches, Match, Rule, all_rules, get_rule, register, rule_names, with_all_matches
from .ir import Edit, Graph, RuleError

__all__ = ["AllMatches", "Edit", "Graph", "Match", "Rule", "RuleError", "all_rules", "get_rule", "register", "rule_names",
           "with_all_matches"]
