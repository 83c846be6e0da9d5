"""Candidate enumeration: every (rule, match) applied, deduplicated by structural hash, capped, in order."""
import time

import pytest
import tvm_ffi
from tvm import relax

from tests.support import graph_examples as T
from tvm_rl.graph.candidates import Shortlist, enumerate_candidates, interleave
from tvm_rl.graph.fingerprint import module_key
from tvm_rl.graph.rules import Rule, RuleError, all_rules, get_rule

R = relax.op


def triple_permute():
    """Three transposes in a row: composing the first two or the last two gives the same graph."""
    def body(e, x):
        a = e(R.permute_dims(x, [1, 0]))
        b = e(R.permute_dims(a, [1, 0]))
        return e(R.nn.relu(e(R.permute_dims(b, [1, 0]))))

    return T.module(body, [(2, 3)])


def test_equal_results_are_one_candidate_keeping_the_first():
    mod = triple_permute()
    rule = get_rule("permute_compose")
    first, second = rule.matches(mod)
    cs = enumerate_candidates(mod, [rule])
    assert (cs.n_matches, len(cs), cs.duplicates, cs.unchanged, cs.truncated) == (2, 1, 1, 0, 0)
    assert cs[0].match == first and cs[0].rule is rule
    assert tvm_ffi.structural_equal(cs[0].mod, rule.apply(mod, second))


class NoOp(Rule):
    """Offers every relu and rewrites nothing (not registered)."""

    name = "noop"

    def find(self, g):
        return [self.match((n,), n) for n, _ in g.calls("relax.nn.relu")]

    def rewrite(self, g, m, edit):
        pass


class Dangling(Rule):
    """Removes a binding that is still read: an ill-formed result (not registered)."""

    name = "dangling"

    def find(self, g):
        return [self.match((n,), n) for n, _ in g.calls("relax.permute_dims")][:1]

    def rewrite(self, g, m, edit):
        edit.remove(m.names[0])


def test_results_equal_to_the_input_are_counted_not_offered():
    cs = enumerate_candidates(T.dedup_graph(), [NoOp()])
    assert (cs.n_matches, len(cs), cs.unchanged) == (3, 0, 3)


def test_cap_keeps_the_first_and_counts_what_was_cut():
    mod = T.identity_arith_graph()
    full = enumerate_candidates(mod)
    assert full.n_matches == len(full) == 4 and full.truncated == 0
    for cap in (0, 1, 3, 4, 10):
        cs = enumerate_candidates(mod, cap=cap)
        assert len(cs) == min(cap, 4) and cs.truncated == 4 - min(cap, 4)
        assert [c.match for c in cs] == [c.match for c in full][:cap]
    with pytest.raises(ValueError):
        enumerate_candidates(mod, cap=-1)


def test_order_interleaves_rules_keeps_program_order_and_repeats():
    # dedup twice, identity_shape_op once (permute_dims(y, [0, 1])), permute_past_elementwise once (d + e)
    mod = T.dedup_graph()
    a = enumerate_candidates(mod)
    b = enumerate_candidates(mod)
    assert [(c.rule.name, c.match) for c in a] == [(c.rule.name, c.match) for c in b]
    order = [r.name for r in all_rules()]
    # each rule's first match, in rule order
    round_one = sorted(["dedup", "identity_shape_op", "permute_past_elementwise"], key=order.index)
    assert [c.rule.name for c in a] == round_one + ["dedup"]
    rev = enumerate_candidates(mod, list(reversed(all_rules())))
    assert [c.rule.name for c in rev] == round_one[::-1] + ["dedup"]
    assert [c.match.names for c in a if c.rule.name == "dedup"] == [("lv", "lv1"), ("lv3", "lv4")]


def test_interleave_is_round_robin():
    assert interleave([[1, 2, 3], [], ["a"], [4, 5]]) == [1, "a", 4, 2, 5, 3]
    assert interleave([]) == []


def test_candidates_are_well_formed_distinct_and_add_up():
    for name, graph in T.EXAMPLES.items():
        mod = graph()
        cs = enumerate_candidates(mod)
        assert len(cs) + cs.duplicates + cs.unchanged + cs.truncated == cs.n_matches
        assert any(c.rule.name == name for c in cs), name
        hashes = [c.key for c in cs]
        assert len(set(hashes)) == len(hashes)
        for c in cs:
            assert c.key == module_key(c.mod)
            assert relax.analysis.check_well_formed(c.mod)
        assert "candidates from" in cs.summary()


def test_a_failing_rule_raises_or_is_recorded():
    mod = T.permute_graph()
    with pytest.raises(RuleError, match="ill-formed"):
        enumerate_candidates(mod, [Dangling()])
    cs = enumerate_candidates(mod, [Dangling(), get_rule("permute_compose")], strict=False)
    assert len(cs.errors) == 1 and len(cs) == 2


def test_shortlist_keeps_the_cheapest_and_later_builds_only_what_it_keeps(monkeypatch):
    from tvm_rl import models
    from tvm_rl.graph import candidates as C
    from tvm_rl.graph import cost, roofline
    from tvm_rl.graph.fingerprint import same_graph

    mod = models.load("squeezenet1_1", "tiny").mod
    proxy = cost.roofline_cost(roofline.default_hardware("llvm"))
    every = enumerate_candidates(mod, cap=64, check=False, strict=False)
    short = C.Shortlist(4, proxy)
    first = short.enumerate(mod, proxy(mod), cap=64)
    cheapest = sorted(range(len(every)), key=lambda i: proxy(every[i].mod))[:4]
    assert [c.match for c in first] == [every[i].match for i in sorted(cheapest)]  # exact on a first step
    assert first.shortlisted_out == len(every) - 4 and "left out of the shortlist" in first.summary()
    short.record(first.candidates, [proxy(c.mod) for c in first], proxy(mod))

    built = []
    apply = Rule.apply
    monkeypatch.setattr(Rule, "apply", lambda self, *a, **k: (built.append(1), apply(self, *a, **k))[1])
    step = first[0].mod
    second = short.enumerate(step, proxy(step), cap=64)
    n_built = len(built)
    later = enumerate_candidates(step, cap=64, check=False, strict=False)
    assert n_built < len(later) / 2  # matches priced on the first step were not built again
    assert 0 < len(second) <= 4
    for c in second:  # each kept candidate is its match applied to this step's graph, and a change
        assert same_graph(c.mod, get_rule(c.match.rule).apply(step, c.match)) and not same_graph(c.mod, step)


def test_shortlist_ranks_every_match_actions_by_their_members_without_building_them(monkeypatch):
    """An "every match" action is built only once it makes the shortlist: ranked by its members' mean cost
    change times their number, and last while none of them has been priced."""
    from tvm_rl.graph import candidates as C
    from tvm_rl.graph.rules import AllMatches, with_all_matches

    rule = get_rule("identity_arith")
    mod = T.identity_arith_graph()
    members = rule.matches(mod)
    assert len(members) >= 2
    every = AllMatches(rule)
    built = []
    apply = AllMatches.apply
    monkeypatch.setattr(AllMatches, "apply", lambda self, *a, **k: (built.append(1), apply(self, *a, **k))[1])
    short = C.Shortlist(1, lambda m: float(len(m["main"].body.blocks[0].bindings)))  # cost: bindings left
    (match,) = every.matches(mod)
    assert short.delta(match) == float("inf")  # no member priced yet
    first = short.enumerate(mod, 0.0, rules=with_all_matches([rule]))
    assert not built and [c.rule.name for c in first] == [rule.name]  # ranked last, never built
    short.deltas = {members[0]: -1.0, members[1]: -3.0}  # the others unpriced: the mean stands for them
    assert short.delta(match) == -2.0 * len(members)
    short.deltas.update({m: -2.0 for m in members[2:]})
    second = short.enumerate(mod, 0.0, rules=with_all_matches([rule]))
    assert len(built) == 1 and [c.rule.name for c in second] == [every.name]  # now the cheapest: built


def test_a_passed_deadline_stops_enumeration_and_marks_the_set(monkeypatch):
    mod = T.merge_matmul_graph()
    full = enumerate_candidates(mod)
    assert len(full) >= 2 and not full.timed_out
    ticks = iter(range(1000))  # a clock that passes the deadline after the first candidate is applied
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(ticks)))
    part = enumerate_candidates(mod, deadline=1.0)
    assert part.timed_out and len(part) == 1
    monkeypatch.setattr(time, "perf_counter", lambda: 5.0)
    short = Shortlist(2, lambda m: 1.0).enumerate(mod, 1.0, deadline=1.0)
    assert short.timed_out and len(short) == 0
