"""The Rule base class, the Match it offers, and the registry of rule families.

One action of the graph search is one (rule, match) pair: `rule.apply(mod, match)` rewrites that place
and nothing else. `matches` returns only places whose preconditions (float dtype, static shapes, single
use of the values it removes, attributes) are proven; anything it cannot prove is not offered.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence, TypeVar

import tvm
from tvm import relax

from .ir import Edit, Graph, RuleError


@dataclass(frozen=True)
class Match:
    """One place a rule applies: the bindings it rewrites (by variable name) plus rule-specific options."""

    rule: str
    names: tuple[str, ...]
    params: tuple = ()
    description: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.rule}: {self.description or ', '.join(self.names)}"


class Rule:
    """A rewrite rule family. Subclasses set `name` and implement `find` and `rewrite` on a Graph."""

    name: str = ""

    def for_fast_math(self) -> Rule:
        """This family as offered when the build computes transcendentals with `tvm_rl.fast_math` (a rewrite can
        pay only then); by default the family itself."""
        return self

    @property
    def description(self) -> str:
        """The first paragraph of the family's docstring: what it rewrites into what."""
        return " ".join((type(self).__doc__ or "").strip().split("\n\n")[0].split())

    def matches(self, mod: tvm.IRModule) -> list[Match]:
        """Every place in `main` where the rule provably applies, in program order."""
        return self.find(Graph(mod))

    def apply(self, mod: tvm.IRModule, match: Match, check: bool = True, graph: Graph | None = None
              ) -> tvm.IRModule:
        """`mod` with exactly `match` rewritten.

        With `check` (the default) it first confirms `match` is offered on `mod` and afterwards that the
        result is well formed (about 0.1 s on a 200-binding model); a caller that took `match` from
        `matches(mod)` and trusts the rules may skip both.
        """
        graph = self._offered(mod, match, check, graph)
        edit = Edit(graph)
        self.rewrite(graph, match, edit)
        return edit.commit(str(match), check=check)

    def _offered(self, mod: tvm.IRModule, match: Match, check: bool, graph: Graph | None) -> Graph:
        """A view of `mod` (`graph` when it is one), after confirming `match` is this rule's and, with `check`,
        offered on `mod`."""
        if match.rule != self.name:
            raise RuleError(f"match of rule {match.rule!r} given to rule {self.name!r}")
        if graph is None or graph.mod is not mod:
            graph = Graph(mod)
        if check and match not in self.find(graph):
            raise RuleError(f"{match} does not match this module")
        return graph

    def apply_all(self, mod: tvm.IRModule, check: bool = True, graph: Graph | None = None
                  ) -> tuple[tvm.IRModule, list[Match]]:
        """Apply every match offered on `mod`, one after another (skipping any an earlier one removed);
        returns the result and the matches applied. With `check`, the result's well-formedness is checked
        once at the end. `graph`: a view of `mod` already built."""
        applied = []
        if graph is None or graph.mod is not mod:
            graph = Graph(mod)
        pending = self.find(graph)
        offered: set[Match] | None = set(pending)  # the matches of the current `mod`; None: not found yet
        for match in pending:
            if offered is None:
                graph = Graph(mod)
                offered = set(self.find(graph))
            if match in offered:
                edit = Edit(graph)
                self.rewrite(graph, match, edit)
                mod = edit.commit(str(match), check=False)
                applied.append(match)
                offered = None
        if check and applied and not relax.analysis.check_well_formed(mod):
            raise RuleError(f"{self.name}: applying {len(applied)} matches produced an ill-formed module")
        return mod, applied

    # ---- for subclasses

    def find(self, graph: Graph) -> list[Match]:
        raise NotImplementedError

    def rewrite(self, graph: Graph, match: Match, edit: Edit) -> None:
        raise NotImplementedError

    def match(self, names: tuple[str, ...], description: str, params: tuple = ()) -> Match:
        return Match(self.name, tuple(names), tuple(params), description)

    def __repr__(self) -> str:
        return f"<Rule {self.name}>"


class AllMatches(Rule):
    """Every match of one rule family at once, as a single action.

    Full-size CNNs need 50-120 single rewrites (one batch-norm fold per conv), more than a policy can take
    one at a time in seconds; "fold every batch norm" is one step. The matches are applied one after another,
    each re-found on the graph the previous ones left (`Rule.apply_all`), so each is proven where it is
    applied. Offered only where the family has at least two matches (one is the family's own action). Its
    match's `params` are the member matches, so a caller can estimate its effect from theirs."""

    SUFFIX = "[all]"

    def __init__(self, rule: Rule):
        self.rule = rule
        self.name = f"{rule.name}{self.SUFFIX}"

    @classmethod
    def parse(cls, applied: str) -> tuple[str, int] | None:
        """(family, number of matches) of an every-match action as `str(match)` writes it (a pass report's
        `applied` entry), else None."""
        name, _, what = applied.partition(": ")
        many = re.fullmatch(r"all (\d+) matches", what)
        return (name[:-len(cls.SUFFIX)], int(many.group(1))) if name.endswith(cls.SUFFIX) and many else None

    @property
    def description(self) -> str:
        return f"every match of {self.rule.name} at once: {self.rule.description}"

    def find(self, graph: Graph) -> list[Match]:
        found = self.rule.find(graph)
        if len(found) < 2:
            return []
        names = tuple(n for m in found for n in m.names)
        return [self.match(names, f"all {len(found)} matches", tuple(found))]  # params: the members

    def apply(self, mod: tvm.IRModule, match: Match, check: bool = True, graph: Graph | None = None
              ) -> tvm.IRModule:
        return self.rule.apply_all(mod, check=check, graph=self._offered(mod, match, check, graph))[0]

    def __repr__(self) -> str:
        return f"<Rule {self.name}>"


def with_all_matches(rules: Sequence[Rule]) -> list[Rule]:
    """`rules`, then an `AllMatches` action for each of them that has none yet."""
    rules = list(rules)
    covered = {r.rule.name for r in rules if isinstance(r, AllMatches)}
    return rules + [AllMatches(r) for r in rules if not isinstance(r, AllMatches) and r.name not in covered]


# The action order of the graph search, independent of which module registers a family first. Candidates are
# enumerated round-robin over the rules in this order (`candidates.interleave`), so it decides which matches a
# cap keeps and the row each candidate takes in an observation; the shipped policy (tvm_rl/graph/policies/) was
# trained with exactly this order. `register` refuses a family not listed here, so a new rule's place is a
# deliberate choice (appending it leaves the existing families' order, and trained policies, as they were).
ACTION_ORDER: tuple[str, ...] = (
    "split_concat_cancel", "activation_into_concat", "activation_out_of_concat", "merge_parallel_matmul",
    "scalar_mul_motion", "fold_batchnorm", "merge_parallel_conv2d", "enlarge_conv_kernel", "permute_compose",
    "reshape_compose", "identity_shape_op", "fold_const_transform", "identity_arith", "dedup",
    "fold_tuple_get_item", "fuse_attention", "conv1x1_to_matmul", "matmul_to_conv1x1", "conv2d_to_nhwc",
    "permute_past_elementwise", "activation_after_maxpool", "avg_pool_to_conv",
    # Transformer families (issue 21), appended after the shipped policy's 22.
    "merge_sibling_linear", "split_fused_matmul", "merge_shared_weight_matmul", "matmul_associate",
    "matmul_distribute", "fold_binary_into_weight", "combine_const_adds", "transpose_into_matmul", "pad_gemm",
    "fold_layernorm_affine",
    # Appended 2026-12-03.
    "reshape_past_elementwise",
)
if len(set(ACTION_ORDER)) != len(ACTION_ORDER):
    raise ValueError(f"ACTION_ORDER lists {sorted({n for n in ACTION_ORDER if ACTION_ORDER.count(n) > 1})} "
                     "more than once; each rule family takes exactly one place")

_REGISTRY: dict[str, type[Rule]] = {}
R = TypeVar("R", bound=type[Rule])


def register(cls: R) -> R:
    """Class decorator adding a rule family to the registry; its name must have a place in `ACTION_ORDER`."""
    if not cls.name or cls.name in _REGISTRY:
        raise ValueError(f"rule {cls.__name__} needs a unique name, got {cls.name!r}")
    if cls.name not in ACTION_ORDER:
        raise ValueError(f"rule {cls.__name__} ({cls.name!r}) has no place in ACTION_ORDER "
                         "(tvm_rl/graph/rules/base.py): add its name there; the position is its action index, "
                         "and appending it keeps trained policies' order unchanged")
    _REGISTRY[cls.name] = cls
    return cls


def rule_names() -> list[str]:
    """Every rule family's name, in `ACTION_ORDER`; ValueError if one listed there was never registered."""
    missing = [n for n in ACTION_ORDER if n not in _REGISTRY]
    if missing:
        raise ValueError(f"ACTION_ORDER lists {', '.join(missing)}, but no rule family of that name is registered "
                         "(tvm_rl/graph/rules/__init__.py imports every family's module)")
    return list(ACTION_ORDER)


def all_rules(fast_math: bool = False) -> list[Rule]:
    """One instance of every registered rule family, in `ACTION_ORDER`; with `fast_math` (the build computes
    transcendentals with `tvm_rl.fast_math`) each as `Rule.for_fast_math` gives it."""
    rules = [_REGISTRY[name]() for name in rule_names()]
    return [r.for_fast_math() for r in rules] if fast_math else rules


def get_rule(name: str) -> Rule:
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise ValueError(f"unknown rule {name!r}; known: {', '.join(rule_names())}") from None

