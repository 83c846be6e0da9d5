"""reshape_past_elementwise: f(reshape(x, s)) -> reshape(f(x), s), so f joins the kernel that computes x.

Exact at every match (also on random shapes), not offered where a precondition fails (each has a graph here that
the rule would otherwise take, wrongly or with a crash) nor for transcendental activations unless the build uses
fast math, and on a ConvNeXt-style MLP it lets TVM fuse the layer scale (and a relu) into the matmuls, as the
fusion model predicts."""
from collections import Counter

import numpy as np
import pytest
import tvm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_graph_fusion import lowered, predicted
from tvm import relax

from tests.support import graph_examples as T
from tvm_rl.graph.rules import get_rule
from tvm_rl.graph.verify import compare_variants

R = relax.op
RULE = "reshape_past_elementwise"


def exact_matches(mod, rule=None):
    """The rule's matches on `mod`, after checking that each rewrite, and all of them at once, is exact."""
    rule = rule or get_rule(RULE)
    found = rule.matches(mod)
    if found:
        variants = {str(m): rule.apply(mod, m) for m in found}
        variants["all"] = rule.apply_all(mod)[0]
        results = compare_variants(mod, variants)
        assert all(c.ok for c in results.values()), results
    return found


def after_reshape(op, before, after, c_shape=None, seed=0, dtype="float32"):
    """op(reshape(x, after)), or op(reshape(x, after), c) with a random constant c of `c_shape`."""
    rng = np.random.default_rng(seed)

    def body(e, x):
        u = e(R.reshape(x, after))
        return e(op(u) if c_shape is None else op(u, T.rand(rng, *c_shape, dtype=dtype)))

    return T.module(body, [before], dtype=dtype)


@pytest.mark.parametrize("op", [R.nn.relu, lambda x: R.clip(x, -1.0, 2.0), lambda x: R.nn.leakyrelu(x, 0.1)],
                         ids=["relu", "clip", "leakyrelu"])
def test_a_piecewise_linear_activation_moves_above_any_reshape(op):
    assert len(exact_matches(after_reshape(op, (2, 3, 4), (4, 6)))) == 1


@pytest.mark.parametrize("op", [R.nn.gelu, R.nn.gelu_tanh, R.nn.silu, R.sigmoid, R.tanh, R.nn.softplus],
                         ids=lambda f: f.__name__)
def test_a_transcendental_activation_is_left_where_it_is(op):
    """Measured slower inside a matmul's epilogue than in a kernel of its own (the rule's docstring)."""
    assert exact_matches(after_reshape(op, (2, 3, 4), (6, 4))) == []


@pytest.mark.parametrize("op", [R.nn.gelu, R.nn.gelu_tanh, R.nn.silu, R.sigmoid, R.tanh], ids=lambda f: f.__name__)
def test_with_fast_math_a_transcendental_activation_moves_too(op):
    """Built with fast math the GELU epilogue measured free (the rule's comment), so the pass offers it then."""
    from tvm_rl.graph.rules import all_rules

    fast = get_rule(RULE).for_fast_math()
    assert len(exact_matches(after_reshape(op, (2, 3, 4), (6, 4)), fast)) == 1
    assert [type(r) for r in all_rules(fast_math=True)] == [type(r) for r in all_rules()]
    offered = {r.name: r for r in all_rules(fast_math=True)}[RULE]
    assert len(offered.matches(after_reshape(op, (2, 3, 4), (6, 4)))) == 1
    # softplus has no fast form (FastMath leaves it exact), so it stays where it is
    assert exact_matches(after_reshape(R.nn.softplus, (2, 3, 4), (6, 4)), fast) == []


def test_the_pass_offers_the_fast_math_form_only_when_told():
    from tvm_rl.graph.rewrite_pass import RLRewritePass

    def offered(**kw):
        rule = next(r for r in RLRewritePass("llvm", confirm=False, **kw).search_rules if r.name == RULE)
        return len(rule.matches(after_reshape(R.nn.gelu, (2, 3, 4), (6, 4))))

    assert offered() == 0 and offered(fast_math=True) == 1


@pytest.mark.parametrize("c_shape", [(4,), (1, 4), (3, 4), (1, 1, 4), (), (1,)])
@pytest.mark.parametrize("op", [R.add, R.subtract, R.multiply, R.divide], ids=lambda f: f.__name__)
def test_a_constant_on_kept_trailing_axes_moves_with_it(op, c_shape):
    """(2, 3, 4) viewed as (6, 4) or (2, 3, 4) -> (6, 3, 4)..., the constant varying along axes the view keeps."""
    before, after = ((2, 3, 4), (6, 4)) if len(c_shape) < 2 or c_shape[0] == 1 else ((2, 3, 4), (1, 2, 3, 4))
    assert len(exact_matches(after_reshape(op, before, after, c_shape))) == 1


def test_a_reshape_read_elsewhere_is_left():
    def body(e, x):
        u = e(R.reshape(x, (6, 4)))
        return [e(R.nn.relu(u)), u]

    assert exact_matches(T.module(body, [(2, 3, 4)])) == []


def test_a_non_float_or_symbolic_result_is_left():
    assert exact_matches(after_reshape(R.nn.relu, (2, 3, 4), (6, 4), dtype="int32")) == []
    n = tvm.tirx.Var("n", "int64")
    mod = T.module_of([relax.Var("x", relax.TensorType([n, 4], "float32"))],
                    lambda e, x: e(R.nn.relu(e(R.reshape(x, (n * 4,))))))
    assert exact_matches(mod) == []


def test_a_binary_op_needs_a_constant_and_a_static_input():
    """x + y with y an input is not moved (only a constant can be re-laid-out); nor is a constant added to a
    reshape of an x whose shape is symbolic (whose trailing axes cannot be compared)."""
    mod = T.module(lambda e, x, y: e(R.add(e(R.reshape(x, (6, 4))), y)), [(2, 3, 4), (6, 4)])
    assert exact_matches(mod) == []
    n = tvm.tirx.Var("n", "int64")
    c = relax.const(np.arange(8, dtype="float32"))
    mod = T.module_of([relax.Var("x", relax.TensorType([n, 4], "float32"))],
                    lambda e, x: e(R.add(e(R.reshape(x, (8,))), c)))
    assert exact_matches(mod) == []


@pytest.mark.parametrize("before, after, c_shape", [
    ((2, 6), (3, 4), (4,)),  # the last axis is not kept: per-channel on (3, 4) is not per-anything on (2, 6)
    ((2, 3, 4), (2, 12), (12,)),  # the view merges the axis the constant runs along with another
    ((4, 2, 2), (4, 4), (4, 1)),  # the last axis is kept in extent, not the one before it
    ((2, 3, 4), (3, 2, 4), (5, 3, 1, 1)),  # higher rank than both: its axes would meet different axes of x and u
])
def test_a_constant_on_axes_the_reshape_changes_is_left(before, after, c_shape):
    assert exact_matches(after_reshape(R.multiply, before, after, c_shape)) == []


@pytest.mark.parametrize("act", ["gelu", "relu"])
def test_mlp_on_channels_last_fuses_the_layer_scale_and_relu_not_gelu(cpu, act):
    """linear -> act -> linear -> layer scale, as PyTorch exports it on channels-last (1, 4, 4, 8): each linear runs
    on a (16, 8) view, so the activation and the scale sit between reshapes, in kernels of their own. After the rule
    and reshape_compose the scale rides in the second matmul's epilogue, and so does a relu in the first's; a gelu
    keeps its kernel. The kernels are as the fusion model predicts and TVM's lowering makes, and the result exact."""
    rng = np.random.default_rng(0)
    f = {"gelu": R.nn.gelu, "relu": R.nn.relu}[act]

    def body(e, x):
        h = e(R.add(e(R.matmul(e(R.reshape(x, (16, 8))), T.rand(rng, 8, 32))), T.rand(rng, 32)))
        h = e(f(e(R.reshape(h, (1, 4, 4, 32)))))
        y = e(R.add(e(R.matmul(e(R.reshape(h, (16, 32))), T.rand(rng, 32, 8))), T.rand(rng, 8)))
        return e(R.add(x, e(R.multiply(e(R.reshape(y, (1, 4, 4, 8))), T.rand(rng, 8)))))

    mod = T.module(body, [(1, 4, 4, 8)])
    moved, applied = get_rule(RULE).apply_all(mod)
    merged, _ = get_rule("reshape_compose").apply_all(moved)
    assert len(applied) == (2 if act == "relu" else 1)
    assert predicted(mod) == lowered(mod, cpu) == Counter(
        {"matmuladd": 2, f"reshape{act}reshape": 1, "reshapemultiplyadd": 1})
    expected = ({"matmuladdrelu": 1, "matmuladdmultiply": 1, "reshapeadd": 1} if act == "relu" else
                {"matmuladd": 1, "reshapegelureshape": 1, "matmuladdmultiply": 1, "reshapeadd": 1})
    assert predicted(merged) == lowered(merged, cpu) == Counter(expected)
    results = compare_variants(mod, {"moved": moved, "merged": merged})
    assert all(c.ok for c in results.values()), results


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_shapes(data):
    rank = data.draw(st.integers(1, 4), "rank")
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank), "shape"))
    assert len(exact_matches(T.reshape_elementwise_graph(shape))) >= 3
