"""Matmul algebra and binary folding (tvm_rl/graph/rules/algebra.py): exact at every match of small graphs and of
random shapes, and every precondition a family checks refused by a graph built to need it."""
import numpy as np
import pytest
import tvm
from hypothesis import given
from hypothesis import strategies as st
from test_graph_rules_small import HYPOTHESIS, check_family
from tvm import relax

from tests.support import graph_examples as T
from tvm_rl.graph.rules import get_rule
from tvm_rl.graph.verify import compare_variants

R = relax.op
ASSOC, DIST = get_rule("matmul_associate"), get_rule("matmul_distribute")
FOLD, COMBINE = get_rule("fold_binary_into_weight"), get_rule("combine_const_adds")


def rng():
    return np.random.default_rng(0)


def cst(array, dtype="float32"):
    return relax.const(np.asarray(array).astype(dtype), dtype)


def offered_and_wrong(rule, mod, unsafe):
    """The rule refuses `mod`; `unsafe` (the same rule without the check) matches it and changes the result."""
    assert rule.matches(mod) == []
    found = unsafe.matches(mod)
    assert found
    results = compare_variants(mod, {str(m): unsafe.apply(mod, m, check=False) for m in found})
    assert any(not c.ok for c in results.values()), results


# ----------------------------------------------------------------------------------------- matmul_associate


def test_associate_example_folds_the_constant_pair_and_reorders_the_cheaper_way():
    found = check_family("matmul_associate", T.associate_graph(), min_matches=2)
    assert [m.params for m in found] == [(0, True), (1, False)]
    assert "FLOPs 9216 -> 2048" in found[1].description
    def gemms(mod):
        return sum(1 for line in str(mod).splitlines() if "R.matmul(" in line)

    assert gemms(ASSOC.apply(T.associate_graph(), found[0])) == gemms(T.associate_graph()) - 1


@HYPOTHESIS
@given(batch=st.lists(st.integers(1, 3), max_size=2), dims=st.lists(st.integers(1, 9), min_size=4, max_size=4),
       right=st.booleans())
def test_associate_random(batch, dims, right):
    """Offered exactly where the order with fewer multiply-adds differs from the graph's, and exact there."""
    m, k, n, p = dims
    shapes = [(*batch, m, k), (*batch, k, n), (*batch, n, p)]

    def body(e, a, b, c):
        return e(R.matmul(a, e(R.matmul(b, c)))) if right else e(R.matmul(e(R.matmul(a, b)), c))

    mod = T.module(body, shapes)
    left_first, right_first = m * k * n + m * n * p, k * n * p + m * k * p
    cheaper = right_first < left_first if not right else left_first < right_first
    if cheaper:
        check_family("matmul_associate", mod)
    else:
        assert ASSOC.matches(mod) == []
    fold = T.module(lambda e, x: e(R.matmul(e(R.matmul(x, T.rand(rng(), k, n))), T.rand(rng(), n, p))),
                    [(*batch, m, k)])
    check_family("matmul_associate", fold)


def _chain(a_shape, b, c, dtype="float32", out_inner=None, out_outer=None, second_reader=False):
    def body(e, a):
        inner = e(R.matmul(a, b, out_dtype=out_inner))
        y = e(R.matmul(inner, c, out_dtype=out_outer))
        return [y, inner] if second_reader else y
    return T.module(body, [a_shape], dtype)


def test_associate_needs_the_inner_product_read_once():
    b, c = T.rand(rng(), 4, 3), T.rand(rng(), 3, 2)
    assert ASSOC.matches(_chain((5, 4), b, c)) and ASSOC.matches(_chain((5, 4), b, c, second_reader=True)) == []


def test_associate_refuses_an_out_dtype_change_in_either_product():
    b16, c32 = T.rand(rng(), 4, 3, dtype="float16"), T.rand(rng(), 3, 2)
    assert ASSOC.matches(_chain((5, 4), b16, c32, "float16", out_inner="float32")) == []
    b32 = T.rand(rng(), 4, 3)
    assert ASSOC.matches(_chain((5, 4), b32, T.rand(rng(), 3, 2), out_outer="float16")) == []


def test_associate_needs_float_static_shapes():
    b, c = T.rand(rng(), 4, 3, dtype="int32"), T.rand(rng(), 3, 2, dtype="int32")
    assert ASSOC.matches(_chain((5, 4), b, c, "int32")) == []
    n = tvm.tirx.Var("n", "int64")
    assert ASSOC.matches(_chain((n, 4), T.rand(rng(), 4, 3), T.rand(rng(), 3, 2))) == []


class AssociateWithoutRankCheck(type(ASSOC)):
    """matmul_associate folding any constant pair (B, C), whatever its rank."""

    def find(self, g):
        out = []
        for name, call in g.calls("relax.matmul"):
            inner = g.call(call.args[0], "relax.matmul")
            if inner is not None and g.const(inner.args[1]) is not None and g.const(call.args[1]) is not None:
                out.append(self.match((call.args[0].name, name), "no rank check", (0, True)))
        return out


def test_associate_folds_only_2d_constant_pairs():
    """A 1-D constant b: (A @ b) @ C and A @ (b @ C) are both well typed when square, but differ."""
    mod = _chain((4, 4), T.rand(rng(), 4), T.rand(rng(), 4, 4))
    offered_and_wrong(ASSOC, mod, AssociateWithoutRankCheck())


def test_associate_general_form_needs_fewer_flops():
    # m = k: the other order costs the same, so nothing is offered (nor for m > k).
    for m in (16, 32):
        mod = T.module(lambda e, a, b, c: e(R.matmul(a, e(R.matmul(b, c)))), [(m, 16), (16, 16), (16, 16)])
        assert ASSOC.matches(mod) == []


def test_associate_general_form_refuses_broadcast_batches_and_vectors():
    # Cheaper by the formula, but A's batch broadcasts against B's and C's (or A is a vector).
    mod = T.module(lambda e, a, b, c: e(R.matmul(a, e(R.matmul(b, c)))), [(1, 2, 16), (3, 16, 16), (3, 16, 16)])
    assert ASSOC.matches(mod) == []
    mod = T.module(lambda e, a, b, c: e(R.matmul(a, e(R.matmul(b, c)))), [(16,), (16, 16), (16, 16)])
    assert ASSOC.matches(mod) == []
    same = T.module(lambda e, a, b, c: e(R.matmul(a, e(R.matmul(b, c)))), [(3, 2, 16), (3, 16, 16), (3, 16, 16)])
    check_family("matmul_associate", same)


# ---------------------------------------------------------------------------------------- matmul_distribute


def test_distribute_example():
    found = check_family("matmul_distribute", T.distribute_graph(), min_matches=2)
    assert [m.params for m in found] == [(0, True), (1, False)]


@HYPOTHESIS
@given(batch=st.lists(st.integers(1, 3), max_size=2), m=st.integers(1, 5), k=st.integers(1, 6),
       n=st.integers(1, 5), shared=st.sampled_from([0, 1]), const_other=st.booleans(), swap=st.booleans())
def test_distribute_random(batch, m, k, n, shared, const_other, swap):
    r = rng()
    shape_a, shape_b = (*batch, m, k), (*batch, k, n)
    other_shape = shape_b if shared == 0 else shape_a

    def body(e, s, o1, o2):
        if const_other:
            o1, o2 = T.rand(r, *other_shape), T.rand(r, *other_shape)
        p = e(R.matmul(s, o1) if shared == 0 else R.matmul(o1, s))
        q = e(R.matmul(s, o2) if shared == 0 else R.matmul(o2, s))
        return e(R.nn.relu(e(R.add(q, p) if swap else R.add(p, q))))

    found = check_family("matmul_distribute", T.module(body, [shape_a if shared == 0 else shape_b, other_shape,
                                                              other_shape]))
    assert found[0].params == (shared, const_other)


def _sum(e, p, q):
    return e(R.add(e(p), e(q)))


def test_distribute_needs_one_shared_operand():
    """x @ W1 + y @ W2 is not x @ (W1 + W2)."""
    r = rng()
    w1, w2 = T.rand(r, 4, 3), T.rand(r, 4, 3)
    mod = T.module(lambda e, x, y: _sum(e, R.matmul(x, w1), R.matmul(y, w2)), [(2, 4), (2, 4)])
    offered_and_wrong(DIST, mod, NoSharedCheck())
    # Equal constants (each linear exports its own copy of a tied weight) are one operand; unequal ones not.
    w = r.standard_normal((4, 3))
    tied = T.module(lambda e, x, y: _sum(e, R.matmul(x, cst(w)), R.matmul(y, cst(w))), [(2, 4), (2, 4)])
    assert check_family("matmul_distribute", tied)[0].params == (1, False)
    assert DIST.matches(T.module(lambda e, x, y: _sum(e, R.matmul(x, w1), R.matmul(y, w2)), [(2, 4), (2, 4)])) == []


class NoSharedCheck(type(DIST)):
    def find(self, g):
        return [self.match((c.args[0].name, c.args[1].name, n), "bad", (0, False)) for n, c in g.calls("relax.add")
                if all(g.call(a, "relax.matmul") is not None for a in c.args)]

    def rewrite(self, g, m, edit):
        p, q, name = m.names
        a, b, c = g.values[p].args[0], g.values[p].args[1], g.values[q].args[1]
        edit.set_value(name, R.matmul(a, edit.emit(name, R.add(b, c), "s")))


def test_distribute_needs_each_product_read_only_by_the_add():
    r = rng()
    w1, w2 = T.rand(r, 4, 3), T.rand(r, 4, 3)
    for reader in (0, 1):
        def body(e, x):
            p, q = e(R.matmul(x, w1)), e(R.matmul(x, w2))
            return [e(R.add(p, q)), (p, q)[reader]]
        assert DIST.matches(T.module(body, [(2, 4)])) == []


def test_distribute_refuses_broadcasting_operands():
    """x @ B [4, 1] + x @ C [4, 3] broadcasts in the add: B + C would broadcast the weight."""
    mod = T.module(lambda e, x: _sum(e, R.matmul(x, T.rand(rng(), 4, 1)), R.matmul(x, T.rand(rng(), 4, 3))),
                   [(2, 4)])
    assert DIST.matches(mod) == []


def test_distribute_needs_two_plain_matmuls_and_variables():
    r = rng()
    w, w16 = T.rand(r, 4, 3), T.rand(r, 4, 3, dtype="float16")
    mods = [  # each refused: x @ (W1 + W2) would lose the out_dtype, or a term is no matmul or a constant
        T.module(lambda e, x: _sum(e, R.matmul(x, w16, out_dtype="float32"), R.matmul(x, w16, out_dtype="float32")),
                 [(2, 4)], "float16"),
        T.module(lambda e, x: _sum(e, R.matmul(x, w), R.nn.relu(e(R.matmul(x, w)))), [(2, 4)]),
        T.module(lambda e, x: _sum(e, R.nn.relu(e(R.matmul(x, w))), R.matmul(x, w)), [(2, 4)]),
        T.module(lambda e, x: e(R.add(e(R.matmul(x, w)), T.rand(r, 3))), [(2, 4)]),
        T.module(lambda e, x: e(R.add(T.rand(r, 3), e(R.matmul(x, w)))), [(2, 4)]),
        T.module(lambda e, x: _sum(e, R.matmul(x, cst(np.ones((4, 3)), "int32")),
                                   R.matmul(x, cst(np.ones((4, 3)), "int32"))), [(2, 4)], "int32"),
    ]
    for mod in mods:
        assert DIST.matches(mod) == []


# ---------------------------------------------------------------------------------- fold_binary_into_weight


def test_fold_binary_example_folds_into_matmul_and_conv_weights_and_biases():
    found = check_family("fold_binary_into_weight", T.fold_binary_graph(), min_matches=3)
    assert [len(m.names) for m in found] == [3, 2, 3]  # with the bias add, without, with
    folded, _ = FOLD.apply_all(T.fold_binary_graph())
    assert "R.multiply(" not in str(folded) and "R.divide(" not in str(folded)


def _c_shape(data, n, rank, axis):
    """A shape for a factor along the channel axis (`axis` from the end) of a rank-`rank` result, or a scalar."""
    kind = data.draw(st.sampled_from(["scalar", "one", "vector", "padded"]), "c kind")
    if kind == "scalar":
        return ()
    if kind == "one":
        return (1,) * data.draw(st.integers(1, rank), "ones")
    lead = data.draw(st.integers(0, rank - axis), "leading ones") if kind == "padded" else 0
    return (1,) * lead + (n,) + (1,) * (axis - 1)


def _factor(r, shape, positive):
    return T.rand(r, *shape, low=0.5, high=2.0) if positive else T.rand(r, *shape)


@HYPOTHESIS
@given(st.data())
def test_fold_binary_into_matmul_random(data):
    r = rng()
    batch = data.draw(st.lists(st.integers(1, 3), max_size=2), "batch")
    m, k, n = (data.draw(st.integers(1, 5), d) for d in "mkn")
    bias, divide, flip = (data.draw(st.booleans(), f) for f in ("bias", "divide", "flip"))
    c_shape = _c_shape(data, n, len(batch) + 2, 1)
    b_shape = (1,) * data.draw(st.integers(0, len(batch) + 1), "bias ones") + (n,)

    def body(e, x):
        y = e(R.matmul(x, e(R.permute_dims(T.rand(r, n, k), [1, 0]))))
        if bias:
            y = e(R.add(T.rand(r, *b_shape), y) if flip else R.add(y, T.rand(r, *b_shape)))
        c = _factor(r, c_shape, divide)
        return e(R.nn.relu(e(R.divide(y, c) if divide else R.multiply(c, y) if flip else R.multiply(y, c))))

    found = check_family("fold_binary_into_weight", T.module(body, [(*batch, m, k)]))
    assert len(found[0].names) == (3 if bias else 2)


@HYPOTHESIS
@given(st.data())
def test_fold_binary_into_conv_random(data):
    r = rng()
    cin, cout, hw = (data.draw(st.integers(1, 4), d) for d in ("cin", "cout", "hw"))
    k, groups = data.draw(st.sampled_from([1, 3]), "k"), data.draw(st.sampled_from([1, 2]), "groups")
    bias, divide = data.draw(st.booleans(), "bias"), data.draw(st.booleans(), "divide")
    cin, cout = cin * groups, cout * groups
    c_shape = _c_shape(data, cout, 4, 3)

    def body(e, x):
        y = e(R.nn.conv2d(x, T.rand(r, cout, cin // groups, k, k), padding=k // 2, groups=groups))
        if bias:
            y = e(R.add(y, T.rand(r, cout, 1, 1)))
        c = _factor(r, c_shape, divide)
        return e(R.divide(y, c) if divide else R.multiply(y, c))

    check_family("fold_binary_into_weight", T.module(body, [(1, cin, hw, hw)]))


def _linear_times(c, w=None, bias=None, second_reader=None, op=R.multiply, m=3, k=4, n=4, dtype="float32",
                  shape=None):
    """x @ W [+ bias] then op(., c): returns the module."""
    r = rng()

    def body(e, x):
        mm = e(R.matmul(x, T.rand(r, k, n, dtype=dtype) if w is None else w))
        y = mm if bias is None else e(R.add(mm, bias))
        out = e(op(y, c))
        return [out, {"mm": mm, "y": y}[second_reader]] if second_reader else out

    return T.module(body, [shape or (m, k)], dtype)


def test_fold_binary_needs_a_per_column_factor():
    """c [M, 1] scales rows; refused, and folding it into W's columns would be wrong (M = N here)."""
    c = T.rand(rng(), 4, 1, low=0.5, high=2.0)
    offered_and_wrong(FOLD, _linear_times(c, m=4), FoldAnyMatmulFactor())
    # Shapes the factor must not have: more elements than the columns, or broadcasting the result bigger.
    assert FOLD.matches(_linear_times(T.rand(rng(), 4, 4), m=4)) == []
    assert FOLD.matches(_linear_times(T.rand(rng(), 1, 1, 4))) == []
    assert FOLD.matches(_linear_times(T.rand(rng(), 4))) and FOLD.matches(_linear_times(T.rand(rng(), 1, 4)))


class FoldAnyMatmulFactor(type(FOLD)):
    """Folds any c with N elements into the matmul's columns (ignores which axis c runs along)."""

    def find(self, g):
        return [self.match((n, c.args[0].name), "bad", (0,)) for n, c in g.calls("relax.multiply")
                if g.call(c.args[0], "relax.matmul") is not None]

    def rewrite(self, g, m, edit):
        import tvm_rl.graph.rules.algebra as alg
        from tvm_rl.graph.rules.ir import const
        name, target = m.names
        mm = alg.const_weight_matmul(g, target)
        scale = g.const(g.values[name].args[1]).reshape(-1)
        edit.set_value(target, R.matmul(mm["x"], const(mm["weight"] * scale[None, :], "float32")))
        edit.replace(name, g.vars[target])


def test_fold_binary_needs_a_constant_factor_and_weight():
    r = rng()
    assert FOLD.matches(T.module(lambda e, x, c: e(R.multiply(e(R.matmul(x, T.rand(r, 4, 4))), c)),
                                 [(3, 4), (4,)])) == []
    assert FOLD.matches(T.module(lambda e, x, w: e(R.multiply(e(R.matmul(x, w)), T.rand(r, 4))),
                                 [(3, 4), (4, 4)])) == []
    # Two constants multiplied (no variable side) and a product of no weighted op: nothing to fold into.
    assert FOLD.matches(T.module(lambda e, x: [e(R.multiply(T.rand(r, 4), T.rand(r, 4))),
                                               e(R.multiply(e(R.nn.relu(x)), T.rand(r, 4)))], [(3, 4)])) == []


def test_fold_binary_division_needs_a_factor_without_zeros():
    assert FOLD.matches(_linear_times(cst([1.0, 2.0, 0.5, 0.0]), op=R.divide)) == []
    assert FOLD.matches(_linear_times(cst([1.0, 2.0, 0.5, 3.0]), op=R.divide))
    # c / y is no linear function of y.
    r = rng()
    assert FOLD.matches(T.module(lambda e, x: e(R.divide(T.rand(r, 4), e(R.matmul(x, T.rand(r, 4, 4))))),
                                 [(3, 4)])) == []


def test_fold_binary_needs_single_readers():
    c, b = T.rand(rng(), 4), T.rand(rng(), 4)
    assert FOLD.matches(_linear_times(c, bias=b))
    assert FOLD.matches(_linear_times(c, second_reader="mm")) == []
    assert FOLD.matches(_linear_times(c, bias=b, second_reader="y")) == []
    assert FOLD.matches(_linear_times(c, bias=b, second_reader="mm")) == []


def test_fold_binary_needs_a_per_channel_bias():
    """A bias varying along the rows cannot be scaled per column: (x @ W + b) * c is refused."""
    c = T.rand(rng(), 4)
    assert FOLD.matches(_linear_times(c, bias=T.rand(rng(), 3, 4))) == []
    assert FOLD.matches(_linear_times(c, bias=T.rand(rng(), 3, 1))) == []
    # A non-constant second term.
    r = rng()
    assert FOLD.matches(T.module(lambda e, x, z: e(R.multiply(e(R.add(e(R.matmul(x, T.rand(r, 4, 4))), z)), c)),
                                 [(3, 4), (3, 4)])) == []


def test_fold_binary_refuses_an_out_dtype_change():
    w16 = T.rand(rng(), 4, 4, dtype="float16")

    def body(e, x):
        return e(R.multiply(e(R.matmul(x, w16, out_dtype="float32")), T.rand(rng(), 4)))

    assert FOLD.matches(T.module(body, [(3, 4)], "float16")) == []


def _conv_times(c_shape, layout="NCHW", hw=4, cout=4, op=R.multiply):
    r = rng()

    def body(e, x):
        if layout == "NCHW":
            y = e(R.nn.conv2d(x, T.rand(r, cout, 3, 1, 1)))
        else:
            y = e(R.nn.conv2d(x, T.rand(r, 1, 1, 3, cout), data_layout="NHWC", kernel_layout="HWIO"))
        return e(op(y, T.rand(r, *c_shape, low=0.5, high=2.0)))

    return T.module(body, [(1, 3, hw, hw) if layout == "NCHW" else (1, hw, hw, 3)])


def test_fold_binary_into_conv_needs_the_channel_axis_and_nchw():
    assert FOLD.matches(_conv_times((4, 1, 1))) and FOLD.matches(_conv_times((1, 4, 1, 1)))
    # c [1, O] (or [O]) runs along the width, not the channels (H = W = O here, so it broadcasts fine).
    for shape in [(1, 4), (4,), (1, 1, 4, 1)]:
        offered_and_wrong(FOLD, _conv_times(shape), FoldAnyConvFactor())
    # NHWC output: the channels are the last axis, and the weight is HWIO.
    assert FOLD.matches(_conv_times((4,), layout="NHWC")) == []


class FoldAnyConvFactor(type(FOLD)):
    """Folds any c with O elements into the conv's output channels."""

    def find(self, g):
        return [self.match((n, c.args[0].name), "bad", (0,)) for n, c in g.calls("relax.multiply")
                if g.call(c.args[0], "relax.nn.conv2d") is not None]

    def rewrite(self, g, m, edit):
        from tvm_rl.graph.rules.conv import make_conv, plain_conv
        from tvm_rl.graph.rules.ir import const
        name, target = m.names
        conv = plain_conv(g, target)
        scale = g.const(g.values[name].args[1]).reshape(-1)
        edit.set_value(target, make_conv(conv["x"], const(conv["weight"] * scale[:, None, None, None], "float32"),
                                         conv))
        edit.replace(name, g.vars[target])


def test_fold_binary_on_a_transformer_after_the_attention_scale_reaches_the_query_projection():
    """As exported no factor sits on a linear; after seven steps of scalar_mul_motion the attention scale does,
    (x @ W^T + b) * s, and this family folds it in one step (scalar_mul_motion needs two)."""
    from tvm_rl.models import load

    mod = load("bert", "tiny").mod
    assert FOLD.matches(mod) == []
    motion = get_rule("scalar_mul_motion")
    for _ in range(7):
        mod = motion.apply(mod, motion.matches(mod)[0])
    found = check_family("fold_binary_into_weight", mod)
    assert len(found[0].names) == 3  # through the bias add


# --------------------------------------------------------------------------------------- combine_const_adds


def test_combine_example():
    found = check_family("combine_const_adds", T.combine_const_graph(), min_matches=3)
    assert [m.params for m in found] == [(0, 1), (0, 0), (0, 0)]


@HYPOTHESIS
@given(st.data())
def test_combine_random(data):
    r = rng()
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3), "shape"))

    def sub(name):  # a shape broadcasting into `shape`: a suffix of it with some dims set to 1
        n = data.draw(st.integers(0, len(shape)), f"{name} rank")
        dims = shape[len(shape) - n:]
        return tuple(d if data.draw(st.booleans(), f"{name} dim {i}") else 1 for i, d in enumerate(dims))

    op = data.draw(st.sampled_from([R.add, R.multiply]), "op")
    s1, s2, side1, side2 = sub("c1"), sub("c2"), data.draw(st.booleans(), "side1"), data.draw(st.booleans(), "side2")

    def body(e, x):
        c1, c2, y = T.rand(r, *s1), T.rand(r, *s2), e(R.nn.relu(x))
        u = e(op(c1, y) if side1 else op(y, c1))
        return e(R.nn.gelu(e(op(c2, u) if side2 else op(u, c2))))

    check_family("combine_const_adds", T.module(body, [shape]))


def _chain2(op1, op2, s1=(4,), s2=(4,), y_shape=(3, 4), dtype="float32", second_reader=False, c2_var=False,
            c1_var=False):
    r = rng()

    def body(e, x, z):
        u = e(op1(x, z if c1_var else cst(r.standard_normal(s1), dtype)))
        out = e(op2(u, z if c2_var else cst(r.standard_normal(s2), dtype)))
        return [out, u] if second_reader else out

    return T.module(body, [y_shape, y_shape], dtype)


def test_combine_needs_two_constants_of_one_operation():
    assert COMBINE.matches(_chain2(R.add, R.add)) and COMBINE.matches(_chain2(R.multiply, R.multiply))
    assert COMBINE.matches(_chain2(R.add, R.multiply)) == [] and COMBINE.matches(_chain2(R.multiply, R.add)) == []
    assert COMBINE.matches(_chain2(R.add, R.add, c1_var=True)) == []
    assert COMBINE.matches(_chain2(R.add, R.add, c2_var=True)) == []
    # Not an add of a variable: two constants, or an add of no add.
    r = rng()
    assert COMBINE.matches(T.module(lambda e, x: [e(R.add(T.rand(r, 4), T.rand(r, 4))),
                                                  e(R.add(e(R.nn.relu(x)), T.rand(r, 4)))], [(3, 4)])) == []


def test_combine_needs_the_intermediate_read_once():
    assert COMBINE.matches(_chain2(R.add, R.add, second_reader=True)) == []


def test_combine_needs_float_static_shapes():
    assert COMBINE.matches(_chain2(R.multiply, R.multiply, dtype="int32")) == []
    n = tvm.tirx.Var("n", "int64")
    assert COMBINE.matches(_chain2(R.add, R.add, y_shape=(n, 4))) == []


def test_combine_refuses_a_constant_that_broadcasts_y_bigger():
    # y [4] + c1 [3, 1] + c2 [3, 4]: the result is [3, 4], bigger than y.
    assert COMBINE.matches(_chain2(R.add, R.add, s1=(3, 1), s2=(3, 4), y_shape=(4,))) == []
    assert COMBINE.matches(_chain2(R.add, R.add, s1=(3, 1), s2=(1, 4), y_shape=(3, 4)))


# ------------------------------------------------------------------------------------ as torch.export has it


def test_on_torch_exports_of_stacked_linears_a_layer_scale_and_two_biases():
    """Two Linear(bias=False) in a row (folded into one weight), Linear * a layer-scale vector (folded into
    the weight and bias) and Linear + b1 + b2 (one bias); with a 3-D input the exporter's reshapes around each
    linear hide the chain until reshape_compose."""
    torch = pytest.importorskip("torch")
    from tvm_rl.models import from_torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(32, 16, bias=False), torch.nn.Linear(16, 8, bias=False)
            self.c = torch.nn.Linear(32, 8)
            self.scale = torch.nn.Parameter(torch.rand(8) + 0.5)
            self.b1, self.b2 = torch.nn.Parameter(torch.randn(8)), torch.nn.Parameter(torch.randn(8))

        def forward(self, x):
            return self.b(self.a(x)), self.c(x) * self.scale, self.c(x) + self.b1 + self.b2

    torch.manual_seed(0)
    block = Block().eval()
    mod = from_torch(block, (torch.randn(4, 32),), name="block").mod
    counts = {r.name: len(r.matches(mod)) for r in (ASSOC, DIST, FOLD, COMBINE)}
    assert counts == {"matmul_associate": 1, "matmul_distribute": 0, "fold_binary_into_weight": 1,
                      "combine_const_adds": 2}  # (bias + x @ W) + b1, and that + b2
    for rule in (ASSOC, FOLD, COMBINE):
        check_family(rule.name, mod)
    batched = from_torch(block, (torch.randn(2, 4, 32),), name="block").mod
    assert ASSOC.matches(batched) == []
    opened, _ = get_rule("reshape_compose").apply_all(batched)
    check_family("matmul_associate", opened)
