"""The candidate set of one search step: every (rule, match) applied, deduplicated by structural hash.

X-RLflow scores one candidate graph per (rule, match-location) pair (plus "stop"). Two matches that give
the same graph (e.g. permute compositions reached two ways) are one action, so results are deduplicated
by a structural key (`fingerprint.module_key`, confirmed with structural equality), keeping the first.

The order interleaves the rules (each rule's first match, then each rule's second, ...), so a cap keeps a
few matches of every family instead of all matches of the first families: on full-size BERT the first 64
matches in plain rule order are all layout and reshape no-ops, and greedy search under that cap found nothing.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import tvm

from .fingerprint import module_key, same_graph
from .rules import AllMatches, Match, Rule, RuleError, all_rules
from .view import graph_of


@dataclass(frozen=True)
class Candidate:
    """One rewritten module and the (rule, match) that produced it."""

    rule: Rule
    match: Match
    mod: tvm.IRModule = field(repr=False)
    key: int  # fingerprint.module_key(mod)

    def __str__(self) -> str:
        return str(self.match)


@dataclass
class CandidateSet:
    """Unique candidates in a deterministic order: round-robin over the rules in the given order, each
    rule's matches in program order (see `interleave`).

    n_matches: (rule, match) pairs found; duplicates: applied pairs dropped because their result equals an
    earlier candidate's; unchanged: pairs whose result equals the input module; truncated: pairs not
    applied at all because `cap` unique candidates were already collected; errors: pairs whose rewrite
    failed (only with strict=False); timed_out: the `deadline` passed before the set was complete (a partial
    set, which a caller that honours its time budget does not act on).
    """

    candidates: list[Candidate]
    n_matches: int
    duplicates: int
    unchanged: int
    truncated: int
    errors: list[tuple[Match, str]] = field(default_factory=list)
    shortlisted_out: int = 0  # unique candidates left out by a `Shortlist`
    timed_out: bool = False

    def __len__(self) -> int:
        return len(self.candidates)

    def __iter__(self):
        return iter(self.candidates)

    def __getitem__(self, i: int) -> Candidate:
        return self.candidates[i]

    def summary(self) -> str:
        return (f"{len(self.candidates)} candidates from {self.n_matches} matches "
                f"({self.duplicates} duplicates, {self.unchanged} unchanged, {self.truncated} cut by the cap"
                + (f", {len(self.errors)} failed" if self.errors else "")
                + (f", {self.shortlisted_out} left out of the shortlist" if self.shortlisted_out else "") + ")")


def interleave(groups: Sequence[Sequence]) -> list:
    """Round-robin over `groups`: every group's first item, then every group's second, and so on."""
    out = []
    for i in range(max((len(g) for g in groups), default=0)):
        out.extend(g[i] for g in groups if i < len(g))
    return out


def enumerate_candidates(mod: tvm.IRModule, rules: Sequence[Rule] | None = None, cap: int | None = None,
                         check: bool = True, strict: bool = True, deadline: float | None = None) -> CandidateSet:
    """Apply every match of every rule to `mod`; keep the first of each structurally distinct result.

    `cap` bounds the number of unique candidates kept; the (rule, match) pairs left unapplied once it is
    reached are counted in `.truncated`. `check` validates each rewrite (see `Rule.apply`). With
    `strict=False` a rule that fails is recorded in `.errors` instead of raising. Past `deadline` (a
    `time.perf_counter()` value) no more pairs are applied and the set is marked `.timed_out`.
    """
    return _Enumeration(mod, rules, check, strict).collect(cap, deadline=deadline)


def past(deadline: float | None) -> bool:
    """Whether `deadline` (a `time.perf_counter()` value, None: none) has passed."""
    return deadline is not None and time.perf_counter() >= deadline


class _Enumeration:
    """The (rule, match) pairs of one module, applied on demand, with the dedup state across applications."""

    def __init__(self, mod: tvm.IRModule, rules: Sequence[Rule] | None, check: bool, strict: bool):
        rules = all_rules() if rules is None else list(rules)
        self.mod, self.check, self.strict = mod, check, strict
        self.graph = graph_of(mod)  # one read-only view serves every rule's search, every rewrite, the cost model
        self.pairs = interleave([[(rule, match) for match in rule.find(self.graph)] for rule in rules])
        self.seen: dict[int, list[tvm.IRModule]] = {module_key(mod): [mod]}
        self.out = CandidateSet([], len(self.pairs), 0, 0, 0)
        self.deferred: list[tuple[Rule, Match]] = []  # pairs `collect` left unapplied

    def apply(self, rule: Rule, match: Match) -> Candidate | None:
        """The candidate of one pair, or None (counted) when it fails, is the input or repeats an earlier one."""
        try:
            new = rule.apply(self.mod, match, check=self.check, graph=self.graph)
        except RuleError as err:
            if self.strict:
                raise
            self.out.errors.append((match, str(err)))
            return None
        key = module_key(new)
        same = next((m for m in self.seen.get(key, ()) if same_graph(m, new)), None)
        if same is self.mod:
            self.out.unchanged += 1
        elif same is not None:
            self.out.duplicates += 1
        else:
            self.seen.setdefault(key, []).append(new)
            return Candidate(rule, match, new, key)
        return None

    def collect(self, cap: int | None, defer: Callable[[Rule, Match], bool] = lambda r, m: False,
                deadline: float | None = None) -> CandidateSet:
        """Apply pairs in order until `cap` candidates or `deadline`; a pair `defer` accepts is kept unapplied, as
        (rule, match), counted towards the cap (`Shortlist` applies the few it keeps)."""
        if cap is not None and cap < 0:
            raise ValueError(f"cap must be >= 0, got {cap}")
        for i, (rule, match) in enumerate(self.pairs):
            if cap is not None and len(self.out.candidates) + len(self.deferred) >= cap:
                self.out.truncated = len(self.pairs) - i
                break
            if defer(rule, match):
                self.deferred.append((rule, match))
                continue
            if past(deadline):
                self.out.timed_out = True
                break
            cand = self.apply(rule, match)
            if cand is not None:
                self.out.candidates.append(cand)
        return self.out


class Shortlist:
    """Keep the `size` candidates `cost` rates cheapest (in candidate order), pricing as few as it can.

    Pricing every candidate was two thirds of a step on full-size models, and most of one step's candidates are
    the last step's again: the same (rule, match), untouched by the rewrite taken. So a match priced before is
    ranked by the cost change it had then, and only new matches are priced to rank them. The caller prices
    the kept ones exactly (they are what a policy sees) and passes those prices to `record`. One instance per
    episode: `reset` forgets the matches.
    """

    def __init__(self, size: int, cost: Callable[[tvm.IRModule], float]):
        if size < 1:
            raise ValueError(f"shortlist size must be >= 1, got {size}")
        self.size, self.cost = size, cost
        self.deltas: dict[Match, float] = {}  # match -> its cost change when last priced exactly

    def reset(self) -> None:
        self.deltas.clear()

    def enumerate(self, mod: tvm.IRModule, current_cost: float, rules: Sequence[Rule] | None = None,
                  cap: int | None = None, check: bool = False, strict: bool = False,
                  deadline: float | None = None) -> CandidateSet:
        """The `size` cheapest of `enumerate_candidates(mod, rules, cap, check, strict)`, without building the
        graphs of matches it has priced before and then leaves out (applying every candidate was a third of a
        step on full-size models).
        A deferred match is assumed to give a new graph (it did when it was priced); the few kept are applied
        and checked, so one that now repeats another or the input is dropped (the shortlist comes out short).
        Past `deadline` it stops where it is and returns the set marked `.timed_out`."""
        enum = _Enumeration(mod, rules, check, strict)
        found = enum.collect(cap, defer=lambda r, m: m in self.deltas or isinstance(r, AllMatches), deadline=deadline)
        if found.timed_out:
            return found
        for c in found.candidates:  # all new: the matches priced before were deferred
            if past(deadline):
                return replace(found, timed_out=True)
            self.deltas[c.match] = self.cost(c.mod) - current_cost
        position = {match: i for i, (_, match) in enumerate(enum.pairs)}
        entries = sorted([(c.rule, c.match, c) for c in found.candidates] + [(r, m, None) for r, m in enum.deferred],
                         key=lambda e: position[e[1]])  # candidate order, as enumerate_candidates gives it
        ranked = sorted(range(len(entries)), key=lambda i: self.delta(entries[i][1]))[:self.size]
        kept = [entries[i] for i in sorted(ranked)]
        cands = []
        for rule, match, c in kept:
            if c is None and past(deadline):  # an every-match action takes seconds to build on a full-size CNN
                return replace(found, timed_out=True)
            cands.append(c if c is not None else enum.apply(rule, match))
        return replace(found, candidates=[c for c in cands if c is not None],
                       shortlisted_out=max(0, len(entries) - self.size))

    def delta(self, match: Match) -> float:
        """The cost change `match` had when last priced exactly. An `AllMatches` action never priced is not built
        to rank it (that took seconds on full-size CNNs: every batch norm folded): it is ranked by its members'
        mean change times their number, and last when none of them was priced yet."""
        if match in self.deltas:
            return self.deltas[match]
        known = [self.deltas[m] for m in match.params if isinstance(m, Match) and m in self.deltas]
        return sum(known) / len(known) * len(match.params) if known else math.inf

    def record(self, candidates: Sequence[Candidate], costs: Sequence[float], current_cost: float) -> None:
        """The exact prices of the kept candidates, for ranking their matches on later steps."""
        self.deltas.update((c.match, float(cost) - current_cost) for c, cost in zip(candidates, costs))
