"""The rewrite fuzzer in CI: random graphs, random rewrite sequences, every rewritten graph checked numerically.

A bounded, deterministic run (fixed seed); `python -m tests.support.fuzz --examples N --seed S` is the long
mode. The fuzzer itself is checked too: it must find a deliberately broken rule and say how to reproduce it.
"""
from collections import Counter

import pytest
import tvm_ffi
from hypothesis import HealthCheck, given, settings
from tvm import relax

from tests.support import fuzz
from tvm_rl.graph.rules import all_rules, base, layout, rule_names, simplify
from tvm_rl.graph.rules.ir import float_tensor, ndim_of, permute_axes, static_shape

SEED = 2026


def test_random_graphs_are_well_formed_deterministic_and_match_most_families():
    matched = Counter()
    dtypes = Counter()
    for i in range(60):
        mod = fuzz.random_graph([SEED, i])
        assert relax.analysis.check_well_formed(mod), i
        assert tvm_ffi.structural_equal(mod, fuzz.random_graph([SEED, i])), f"graph {i} is not deterministic"
        dtypes[fuzz.graph_dtype(mod)] += 1
        for rule in all_rules():
            if rule.matches(mod):
                matched[rule.name] += 1
    assert dtypes["float16"] >= 5 and dtypes["float32"] >= 30
    # Biased towards matches: nearly every family has a place to rewrite in a handful of random graphs (all 33
    # with this seed; the transformer families through their own motifs).
    assert len(matched) >= 30, sorted(set(rule_names()) - set(matched))


@pytest.mark.slow
def test_random_rewrite_sequences_never_change_results():
    cov, failures = fuzz.fuzz(examples=36, seed=SEED, walks=3, steps=4, max_variants=12)
    print(cov.table())
    assert not failures, "\n\n".join(f.report() for f in failures[:3])
    assert not cov.unbuildable
    assert cov.graphs >= 300, cov.table()
    assert cov.families() >= 28, cov.table()


class _WrongOrderPermuteCompose(layout.PermuteCompose):
    """Composes the two permutations in the wrong order: mostly an ill-typed module (a crash of the rewrite),
    and a wrong result where the shapes happen to agree."""

    def rewrite(self, g, m, edit):
        inner_name, name = m.names
        inner, outer = g.values[inner_name], g.values[name]
        ndim = ndim_of(inner.args[0])
        p1, p2 = permute_axes(inner, ndim), permute_axes(outer, ndim)
        edit.set_value(name, relax.op.permute_dims(inner.args[0], [p2[k] for k in p1]))


class _AnyScalarIsNeutral(simplify.IdentityArith):
    """Takes x * c for any scalar constant c as x: well typed, numerically wrong unless c == 1."""

    def find(self, g):
        out = []
        for name, call in g.calls("relax.multiply"):
            c = g.const(call.args[1])
            if c is not None and c.size == 1 and float_tensor(call.args[0]) == float_tensor(g.vars[name]):
                out.append(self.match((name,), f"{name} = x * c -> x", (0,)))
        return out


@pytest.mark.parametrize("family, broken, reason", [
    ("permute_compose", _WrongOrderPermuteCompose, "the rewrite raised"),
    ("identity_arith", _AnyScalarIsNeutral, "max abs error"),
])
def test_the_fuzzer_catches_a_broken_rule_and_prints_a_reproducer(monkeypatch, capsys, family, broken, reason):
    rule = base._REGISTRY[family]()
    examples = [i for i in range(60) if rule.matches(fuzz.random_graph([SEED, i]))]
    monkeypatch.setitem(base._REGISTRY, family, broken)
    found = []
    for i in examples[:8]:
        _, found = fuzz.fuzz_example(SEED, i, walks=2, steps=2, max_variants=6)
        if any(reason in f.reason for f in found):
            break
    assert found and all(f.matches[-1].rule == family for f in found)
    assert any(reason in f.reason for f in found), [f.reason for f in found]
    code = fuzz.main(["--seed", str(SEED), "--first", str(found[0].example), "--examples", "1", "--walks", "2",
                      "--steps", "2", "--max-variants", "6", "--quiet"])
    out = capsys.readouterr().out
    assert code == 1
    assert f"--seed {SEED} --first {found[0].example} --examples 1" in out
    assert f"Match(rule='{family}'" in out and "def main(" in out


def test_coverage_table_lists_every_family():
    cov = fuzz.Coverage(checked=Counter({"dedup": 3}), graphs=3, examples=1)
    table = cov.table()
    assert all(name in table for name in rule_names()) and "1 of" in table
    assert cov.families() == 1


@settings(max_examples=5, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(fuzz.graphs(dtype="float16"))
def test_hypothesis_strategy_gives_well_formed_static_graphs(mod):
    assert relax.analysis.check_well_formed(mod) and fuzz.graph_dtype(mod) == "float16"
    assert all(static_shape(p.ty) is not None for p in mod["main"].params)
