"""Linear merges and splits (tvm_rl/graph/rules/linear_merge.py): exact at every match of small graphs, of random
shapes and of the exported transformers, and every precondition a family checks refused by a graph built to
need it."""
import numpy as np
import pytest
import torch
import tvm
from hypothesis import given
from hypothesis import strategies as st
from test_graph_rules_small import HYPOTHESIS, assert_exact, check_family
from tvm import relax
from tvm.ir import TupleGetItem

from tests.support import graph_examples as T
from tvm_rl.graph.rules import Edit, Graph, Match, RuleError, get_rule
from tvm_rl.graph.verify import compare_variants

R = relax.op
SIBLING, SPLIT, SHARED = (get_rule(n) for n in ("merge_sibling_linear", "split_fused_matmul",
                                                   "merge_shared_weight_matmul"))


def rng(seed=0):
    return np.random.default_rng(seed)


def force(rule, mod, names, params=()):
    """`rule` applied at `names` without asking whether it is offered there (what a missing check would do)."""
    g = Graph(mod)
    edit = Edit(g)
    rule.rewrite(g, Match(rule.name, tuple(names), tuple(params)), edit)
    return edit.commit(check=True)


def bound(mod, op):
    return [b.var.name for b in mod["main"].body.blocks[0].bindings
            if getattr(getattr(b.value, "op", None), "name", None) == op]


# ------------------------------------------------------------------------------------- merge_sibling_linear


def test_sibling_linears_on_identical_reshapes_merge_into_one_matmul():
    mod = T.sibling_linear_graph()
    (m,) = check_family("merge_sibling_linear", mod)
    assert len(m.names) == 3 and m.params == (True,)
    new = SIBLING.apply(mod, m)
    assert len(bound(new, "relax.matmul")) == 1 and len(bound(new, "relax.reshape")) == 4  # one view + 3 back
    (m,) = check_family("merge_sibling_linear", T.sibling_linear_graph(bias=False))
    assert m.params == (False,)


def test_sibling_linears_on_identical_transposes_merge():
    def body(e, x):
        return [e(R.nn.relu(e(R.matmul(e(R.permute_dims(x, [1, 0])), T.rand(rng(i), 4, o))))) for i, o in
                enumerate((3, 5))]

    (m,) = check_family("merge_sibling_linear", T.module(body, [(4, 6)]))
    assert m.params == (False,)


@HYPOTHESIS
@given(batch=st.integers(1, 3), seq=st.integers(1, 4), k=st.integers(1, 6),
       outs=st.lists(st.integers(1, 5), min_size=2, max_size=4), bias=st.booleans())
def test_merge_sibling_linear_random(batch, seq, k, outs, bias):
    (m,) = check_family("merge_sibling_linear", T.sibling_linear_graph(batch, seq, k, outs, bias))
    assert len(m.names) == len(outs) and m.params == (bias,)


@pytest.mark.parametrize("model", ["bert", pytest.param("vit", marks=pytest.mark.slow),
                                   pytest.param("dalle", marks=pytest.mark.slow),
                                   pytest.param("transducer", marks=pytest.mark.slow)])
def test_sibling_linear_merges_qkv_of_the_exported_transformers_exactly(model):
    from tvm_rl.models import load

    mod = load(model, "tiny").mod
    found = SIBLING.matches(mod)
    # Two layers, Q/K/V each: three siblings with a bias each, as exported (no dedup first).
    assert [(len(m.names), m.params) for m in found] == [(3, (True,))] * 2
    assert get_rule("merge_parallel_matmul").matches(mod) == []
    merged, applied = SIBLING.apply_all(mod)
    assert len(applied) == 2
    # The inverse undoes it: split_fused_matmul is offered on each merged projection.
    back, undone = SPLIT.apply_all(merged)
    assert len(undone) == 2
    assert_exact(mod, {"first": SIBLING.apply(mod, found[0]), "all": merged, "back": back})


def test_siblings_on_the_very_same_variable_are_merge_parallel_matmuls():
    mod = T.merge_matmul_graph()
    assert SIBLING.matches(mod) == [] and len(get_rule("merge_parallel_matmul").matches(mod)) == 1


def test_sibling_read_twice_or_with_a_variable_weight_is_not_merged():
    def body(e, x, w, twice=False, variable=False):
        a = e(R.matmul(e(R.reshape(x, (6, 4))), w if variable else T.rand(rng(1), 4, 3)))
        b = e(R.matmul(e(R.reshape(x, (6, 4))), T.rand(rng(2), 4, 3)))
        return [a, b, e(R.nn.relu(a))] if twice else [a, b]

    shapes = [(2, 3, 4), (4, 3)]
    assert len(SIBLING.matches(T.module(body, shapes))) == 1
    assert SIBLING.matches(T.module(lambda e, x, w: body(e, x, w, twice=True), shapes)) == []
    assert SIBLING.matches(T.module(lambda e, x, w: body(e, x, w, variable=True), shapes)) == []


def test_different_views_or_sources_are_not_siblings():
    w = [T.rand(rng(i), 4, 3) for i in range(2)]
    # Same source, same shape, different axes: x^T and x (an identity permutation) are different inputs.
    axes = T.module(lambda e, x: [e(R.matmul(e(R.permute_dims(x, p)), w[i]))
                                  for i, p in enumerate([[1, 0], [0, 1]])], [(4, 4)])
    assert SIBLING.matches(axes) == []
    unsafe = force(SIBLING, axes, bound(axes, "relax.matmul"), (False,))
    assert not compare_variants(axes, {"unsafe": unsafe})["unsafe"].ok
    sources = T.module(lambda e, x, y: [e(R.matmul(e(R.reshape(v, (4, 4))), w[i])) for i, v in enumerate((x, y))],
                       [(2, 2, 4), (2, 2, 4)])
    assert SIBLING.matches(sources) == []
    shapes = T.module(lambda e, x: [e(R.matmul(e(R.reshape(x, (4, 4))), w[0])),
                                    e(R.matmul(e(R.reshape(x, (2, 8))), T.rand(rng(), 8, 3)))], [(2, 2, 4)])
    assert SIBLING.matches(shapes) == []


def test_sibling_bias_is_merged_only_when_every_sibling_has_one():
    def body(e, x):
        a = e(R.add(T.rand(rng(1), 3), e(R.matmul(e(R.reshape(x, (6, 4))), T.rand(rng(2), 4, 3)))))
        return [a, e(R.matmul(e(R.reshape(x, (6, 4))), T.rand(rng(3), 4, 5)))]

    (m,) = check_family("merge_sibling_linear", T.module(body, [(2, 3, 4)]))
    assert m.params == (False,)


# --------------------------------------------------------------------------------------- split_fused_matmul


def fused(body_tail, k=6, n=12, m=4, bias=True, shapes=None, weight=None):
    """x [m, k] @ W [k, n] (+ b), handed to `body_tail(e, y, x...)` for the readers."""
    def body(e, x, *rest):
        y = e(R.matmul(x, weight if weight is not None else T.rand(rng(), k, n)))
        if bias:
            y = e(R.add(y, T.rand(rng(1), n)))
        return body_tail(e, y, x, *rest)

    return T.module(body, shapes or [(m, k)])


def items(e, s, count):
    return [e(TupleGetItem(s, i)) for i in range(count)]


def test_gpt2_style_split_through_the_reshape_becomes_one_matmul_per_piece():
    mod = T.fused_matmul_graph()
    (m,) = check_family("split_fused_matmul", mod)
    new = SPLIT.apply(mod, m)
    assert len(bound(new, "relax.matmul")) == 3 and bound(new, "relax.split") == []
    check_family("split_fused_matmul", T.fused_matmul_graph(bias=False, parts=2))


def test_split_pieces_of_unequal_width_and_a_positive_axis():
    mod = fused(lambda e, y, x: [e(R.nn.relu(p)) for p in items(e, e(R.split(y, [2, 7], axis=1)), 3)])
    check_family("split_fused_matmul", mod)


def test_disjoint_strided_slices_of_the_last_axis_each_become_a_matmul():
    def tail(e, y, x):  # [0:3], [-4:] and [5:7] (the step given), columns 3-4 and 7 read by none
        return [e(R.strided_slice(y, [1], [0], [3])), e(R.strided_slice(y, [-1], [-4], [100])),
                e(R.strided_slice(y, [1], [5], [7], [1]))]

    (m,) = check_family("split_fused_matmul", fused(tail))
    assert m.description.endswith("into 3 matmuls")
    # A piece read twice (the same range) is computed once.
    twice = fused(lambda e, y, x: [e(R.strided_slice(y, [1], [0], [3])), e(R.strided_slice(y, [1], [0], [3]))])
    assert check_family("split_fused_matmul", twice)[0].description.endswith("into 1 matmuls")


@HYPOTHESIS
@given(batch=st.integers(1, 3), seq=st.integers(1, 3), k=st.integers(1, 5), width=st.integers(1, 4),
       parts=st.integers(2, 4), bias=st.booleans())
def test_split_fused_matmul_random(batch, seq, k, width, parts, bias):
    check_family("split_fused_matmul", T.fused_matmul_graph(batch, seq, k, width, parts, bias))


@HYPOTHESIS
@given(m=st.integers(1, 4), k=st.integers(1, 5), cuts=st.lists(st.integers(0, 9), min_size=1, max_size=5))
def test_split_fused_matmul_random_slices(m, k, cuts):
    bounds = sorted(set(cuts) | {0, 10})
    pieces = list(zip(bounds, bounds[1:]))[::2]  # every other range: gaps in between

    def tail(e, y, x):
        return [e(R.nn.relu(e(R.strided_slice(y, [1], [lo], [hi])))) for lo, hi in pieces]

    check_family("split_fused_matmul", fused(tail, k=k, n=10, m=m))


def test_split_fused_matmul_on_gpt2_conv1d_as_torch_exports_it():
    from tvm_rl.models import from_torch

    class Conv1D(torch.nn.Module):  # GPT-2's c_attn: addmm(b, x.view(-1, K), W).view(B, S, 3N), split(N, 2)
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(8, 24))
            self.bias = torch.nn.Parameter(torch.randn(24))

        def forward(self, x):
            y = torch.addmm(self.bias, x.view(-1, 8), self.weight).view(*x.shape[:-1], 24)
            q, k, v = y.split(8, dim=2)
            return q + k * v

    mod = from_torch(Conv1D(), [torch.randn(2, 5, 8)]).mod
    (m,) = check_family("split_fused_matmul", mod)
    assert m.description.endswith("into 3 matmuls")


def test_split_fused_matmul_needs_a_constant_weight_and_only_last_axis_pieces():
    sizes = lambda e, y, x: [e(R.nn.relu(p)) for p in items(e, e(R.split(y, 2, axis=-1)), 2)]  # noqa: E731
    assert len(SPLIT.matches(fused(sizes))) == 1
    variable = T.module(lambda e, x, w: [e(R.nn.relu(p)) for p in items(e, e(R.split(e(R.matmul(x, w)), 2, -1)), 2)],
                        [(4, 6), (6, 12)])
    rows = fused(lambda e, y, x: [e(R.nn.relu(p)) for p in items(e, e(R.split(y, 2, axis=0)), 2)])
    strided = fused(lambda e, y, x: e(R.strided_slice(y, [1], [0], [12], [2])))
    first_axis = fused(lambda e, y, x: e(R.strided_slice(y, [0], [0], [2])))
    empty = fused(lambda e, y, x: [e(R.strided_slice(y, [1], [5], [5])), e(R.strided_slice(y, [1], [0], [3]))])
    backwards = fused(lambda e, y, x: [e(R.strided_slice(y, [1], [5], [3])), e(R.strided_slice(y, [1], [0], [3]))])
    other_reader = fused(lambda e, y, x: [*items(e, e(R.split(y, 2, axis=-1)), 2), e(R.nn.relu(y))])
    whole = fused(lambda e, y, x: e(R.concat(e(R.split(y, 2, axis=-1)), axis=0)))  # the tuple read whole
    overlap = fused(lambda e, y, x: [e(R.strided_slice(y, [1], [0], [6])), e(R.strided_slice(y, [1], [4], [9]))])
    unread = fused(lambda e, y, x: [e(R.split(y, 2, axis=-1)), e(R.nn.relu(x))][1])  # a dead split
    dead = fused(lambda e, y, x: e(R.nn.relu(x)))  # y read by nothing
    for name, mod in {"variable": variable, "rows": rows, "strided": strided, "first_axis": first_axis,
                      "empty": empty, "backwards": backwards,
                      "other_reader": other_reader, "whole": whole, "overlap": overlap,
                      "unread": unread, "dead": dead}.items():
        assert SPLIT.matches(mod) == [], name


def test_split_fused_matmul_through_a_reshape_only_when_it_keeps_the_last_axis():
    def tail(shape):
        return lambda e, y, x: [e(R.nn.relu(p)) for p in items(e, e(R.split(e(R.reshape(y, shape)), 2, -1)), 2)]

    assert len(SPLIT.matches(fused(tail((2, 2, 12))))) == 1
    assert SPLIT.matches(fused(tail((2, 2, 2, 6)))) == []  # the columns are regrouped: no piece is a column range
    # An element-wise op between is no view: the pieces would skip it.
    relu = fused(lambda e, y, x: [e(R.nn.relu(p)) for p in items(e, e(R.split(e(R.nn.relu(y)), 2, -1)), 2)])
    assert SPLIT.matches(relu) == []


def test_split_fused_matmul_bias_must_be_per_column():
    def body(e, x):
        y = e(R.add(e(R.matmul(x, T.rand(rng(), 6, 12))), T.rand(rng(1), 4, 12)))  # varies along the rows too
        return [e(R.nn.relu(p)) for p in items(e, e(R.split(y, 2, axis=-1)), 2)]

    assert SPLIT.matches(T.module(body, [(4, 6)])) == []


def _with_outputs(make):
    """A module whose dataflow block binds some values as outputs (read outside the block too)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([4, 6], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            result = make(bb, x)
        bb.emit_func_output(relax.Tuple(result))
    return bb.get()


def test_split_fused_matmul_keeps_away_from_results_read_outside_the_block():
    w = T.rand(rng(), 6, 12)

    def split_returned(bb, x):  # the split tuple is a function result: the fused matmul must stay anyway
        s = bb.emit_output(R.split(bb.emit(R.matmul(x, w)), 2, axis=-1))
        return [s, bb.emit_output(R.nn.relu(bb.emit(TupleGetItem(s, 0))))]

    def matmul_returned(bb, x):
        y = bb.emit_output(R.matmul(x, w))
        return [y, bb.emit_output(R.nn.relu(bb.emit(TupleGetItem(bb.emit(R.split(y, 2, axis=-1)), 0))))]

    for make in (split_returned, matmul_returned):
        assert SPLIT.matches(_with_outputs(make)) == [], make.__name__


def _symbolic_slice(begin, end, **kw):
    bb = relax.BlockBuilder()
    sym = tvm.tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([4, 6], "float32"))
    z = relax.Var("z", relax.TensorType([sym], "float32"))
    with bb.function("main", [x, z]):
        with bb.dataflow():
            y = bb.emit(R.matmul(x, T.rand(rng(), 6, 12)))
            out = bb.emit_output(R.strided_slice(y, [1], begin(sym), end(sym), **kw))
        bb.emit_func_output(out)
    return bb.get()


def test_split_fused_matmul_needs_a_slice_of_known_columns():
    symbolic_end = _symbolic_slice(lambda n: [0], lambda n: [n])  # no static width
    # Assumed in bounds, [n, n + 3) has a static width of 3, but which columns it takes is not known.
    symbolic_begin = _symbolic_slice(lambda n: [n], lambda n: [n + 3], assume_inbound=True)
    assert relax.analysis.check_well_formed(symbolic_begin) and "(4, 3)" in str(symbolic_begin)
    for mod in (symbolic_end, symbolic_begin):
        assert SPLIT.matches(mod) == []


def test_split_fused_matmul_refuses_slices_assumed_in_bounds_that_are_not():
    def sliced(begin, end):
        return fused(lambda e, y, x: [e(R.strided_slice(y, [1], [begin], [end], assume_inbound=True)),
                                      e(R.strided_slice(y, [1], [0], [1]))])

    assert len(SPLIT.matches(sliced(2, 5))) == 1
    check_family("split_fused_matmul", sliced(2, 5))
    assert SPLIT.matches(sliced(2, 100)) == []  # typed 98 columns wide: past the end
    assert SPLIT.matches(sliced(-4, -1)) == []  # not counted from the end when bounds are assumed


# ------------------------------------------------------------------------------- merge_shared_weight_matmul


def test_one_weight_on_two_inputs_merges_into_one_matmul():
    mod = T.shared_weight_graph()
    (m,) = check_family("merge_shared_weight_matmul", mod)
    assert len(m.names) == 2 and len(bound(SHARED.apply(mod, m), "relax.matmul")) == 1


def test_shared_weight_3d_inputs_and_equal_valued_constants():
    check_family("merge_shared_weight_matmul", T.shared_weight_graph(((2, 3, 6), (1, 3, 6), (3, 3, 6))))
    w = rng().standard_normal((6, 4)).astype("float32")
    # Separate constant objects of equal values, one of them transposed back from [4, 6] (permute folds).
    def body(e, x, y):
        a = e(R.matmul(x, relax.const(w)))
        b = e(R.matmul(y, e(R.permute_dims(relax.const(np.ascontiguousarray(w.T)), [1, 0]))))
        return [e(R.nn.relu(a)), e(R.sigmoid(b))]

    check_family("merge_shared_weight_matmul", T.module(body, [(3, 6), (2, 6)]))


@HYPOTHESIS
@given(rows=st.lists(st.integers(1, 4), min_size=2, max_size=4), k=st.integers(1, 5), n=st.integers(1, 5),
       seq=st.sampled_from([None, 1, 3]))
def test_merge_shared_weight_matmul_random(rows, k, n, seq):
    shapes = [(r, k) if seq is None else (r, seq, k) for r in rows]
    (m,) = check_family("merge_shared_weight_matmul", T.shared_weight_graph(shapes, n))
    assert len(m.names) == len(rows)


def test_different_weights_or_inputs_are_not_merged():
    assert SHARED.matches(T.shared_weight_graph(same=False)) == []
    assert SHARED.matches(T.shared_weight_graph(((2, 3, 6), (2, 4, 6)))) == []  # other dims differ
    assert SHARED.matches(T.shared_weight_graph(((3, 6),))) == []  # alone
    w = rng().standard_normal((6, 4)).astype("float32")
    late = w.copy()
    late[5, 3] += 1  # equal in the first values, not in the last one
    differ = T.module(lambda e, x, y: [e(R.matmul(x, relax.const(w))), e(R.matmul(y, relax.const(late)))],
                      [(3, 6), (2, 6)])
    assert SHARED.matches(differ) == []
    unsafe = force(SHARED, differ, bound(differ, "relax.matmul"))
    assert not compare_variants(differ, {"unsafe": unsafe})["unsafe"].ok


def test_shared_weight_on_one_input_twice_or_read_twice_or_variable_is_not_merged():
    w = T.rand(rng(), 6, 4)
    same_input = T.module(lambda e, x: [e(R.matmul(x, w)), e(R.matmul(x, w))], [(3, 6)])
    assert SHARED.matches(same_input) == []  # dedup's match, not a merge
    # With a third, distinct input, the repeated one is left out of the merge.
    (m,) = SHARED.matches(T.module(lambda e, x, y: [e(R.matmul(x, w)), e(R.matmul(x, w)), e(R.matmul(y, w))],
                                   [(3, 6), (2, 6)]))
    assert len(m.names) == 2

    def read_twice(e, x, y):
        a = e(R.matmul(x, w))
        return [a, e(R.matmul(y, w)), e(R.nn.relu(a))]

    assert SHARED.matches(T.module(read_twice, [(3, 6), (2, 6)])) == []
    variable = T.module(lambda e, x, y, v: [e(R.matmul(x, v)), e(R.matmul(y, v))], [(3, 6), (2, 6), (6, 4)])
    assert SHARED.matches(variable) == []


def test_shared_weight_input_computed_from_a_result_is_not_merged():
    """x2 = f(x1 @ W): merging would feed the merged matmul its own output (a cycle)."""
    w = T.rand(rng(), 6, 6)
    through = T.module(lambda e, x: e(R.matmul(e(R.nn.relu(e(R.matmul(x, w)))), w)), [(3, 6)])
    direct = T.module(lambda e, x: e(R.matmul(e(R.matmul(x, w)), w)), [(3, 6)])
    for mod in (through, direct):
        assert SHARED.matches(mod) == []
        with pytest.raises(RuleError):
            force(SHARED, mod, bound(mod, "relax.matmul"))


def test_shared_weight_input_bound_after_a_result_is_read_is_not_merged():
    """Independent inputs, but the second is bound after the first result is read: no place for the merge."""
    w = T.rand(rng(), 6, 4)

    def body(e, x, y):
        a = e(R.nn.relu(e(R.matmul(x, w))))
        return [a, e(R.matmul(e(R.sigmoid(y)), w))]

    assert SHARED.matches(T.module(body, [(3, 6), (2, 6)])) == []


def test_shared_weight_as_torch_exports_a_tied_linear():
    from tvm_rl.models import from_torch

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(6, 4, bias=False)

        def forward(self, a, b):
            return torch.relu(self.linear(a)), torch.sigmoid(self.linear(b))

    mod = from_torch(Tied(), [torch.randn(3, 6), torch.randn(5, 6)]).mod
    (m,) = check_family("merge_shared_weight_matmul", mod)
    assert len(m.names) == 2
