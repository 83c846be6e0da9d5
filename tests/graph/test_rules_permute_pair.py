"""permute_past_elementwise's two-operand form: g(permute(a, p), permute(b, p)) -> permute(g(a, b), p).

It is what lets channels-last regions meet across a residual add: exact at every match (also on random shapes and
permutations), not offered where a precondition fails (each precondition has a graph here that the rule would
otherwise take), and on a residual pair of convolutions it lets the transposes between the regions cancel."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm import relax

from tests.support import graph_examples as T
from tests.support.rewrite_steps import apply_until_none, count_calls
from tvm_rl.graph.rules import get_rule
from tvm_rl.graph.verify import compare_variants

R = relax.op
RULE = "permute_past_elementwise"


def assert_exact(mod, variants):
    results = compare_variants(mod, variants)
    assert all(c.ok for c in results.values()), results


def pair(op=R.add, axes=(0, 2, 3, 1), axes_b=None, shape=(1, 3, 4, 5), shape_b=None, reread=()):
    """op(permute_dims(x0, axes), permute_dims(x1, axes_b)) then relu; `reread` names the sides ("a", "b") whose
    transpose is also an output, so it has a second reader."""
    def body(e, x, y):
        a = e(R.permute_dims(x, list(axes)))
        b = e(R.permute_dims(y, list(axes if axes_b is None else axes_b)))
        out = e(R.nn.relu(e(op(a, b))))
        return [out, *([a] if "a" in reread else []), *([b] if "b" in reread else [])]

    return T.module(body, [shape, shape if shape_b is None else shape_b])


def both_form(mod):
    return [m for m in get_rule(RULE).matches(mod) if m.params == ("both",)]


@pytest.mark.parametrize("op", [R.add, R.subtract, R.multiply, R.divide], ids=lambda f: f.__name__)
def test_two_transposed_operands_move_past_a_binary_op_exactly(op):
    mod = pair(op)
    (match,) = both_form(mod)
    rule = get_rule(RULE)
    new = rule.apply(mod, match)
    assert count_calls(mod) == 2 and count_calls(new) == 1
    assert_exact(mod, {"moved": new})


def test_one_transpose_read_elsewhere_still_moves_and_adds_none():
    mod = pair(reread=("a",))
    (match,) = both_form(mod)
    assert_exact(mod, {"moved": get_rule(RULE).apply(mod, match)})


def test_not_offered_when_a_precondition_fails():
    assert both_form(pair(axes_b=(0, 3, 2, 1), shape=(1, 3, 3, 3))) == []  # different transposes, same shape
    # Broadcasting (y is [1, 1, 4, 5]): permute(x) + permute(y) is not permute(x + y) of one shape.
    assert both_form(pair(shape_b=(1, 1, 4, 5))) == []
    assert both_form(pair(reread=("a", "b"))) == []  # both transposes would stay: the move would add one
    ints = T.module(lambda e, x, y: e(R.add(e(R.permute_dims(x, [1, 0])), e(R.permute_dims(y, [1, 0])))),
                    [(3, 4), (3, 4)], dtype="int32")
    assert get_rule(RULE).matches(ints) == []


def test_residual_convolutions_in_channels_last_cancel_their_transposes():
    """relu(conv(x) + conv(x)) -> conv, every conv channels-last: without the two-operand move the add keeps
    both regions' output transposes; with it, and permute_compose, the ones between the regions cancel."""
    rng = np.random.default_rng(0)

    def body(e, x):
        s = e(R.add(e(T.conv2d(x, T.rand(rng, 4, 3, 3, 3), 1, 1)), e(T.conv2d(x, T.rand(rng, 4, 3, 1, 1)))))
        return e(T.conv2d(e(R.nn.relu(s)), T.rand(rng, 5, 4, 3, 3), 1, 1))

    mod = T.module(body, [(1, 3, 6, 6)])
    nhwc, _ = get_rule("conv2d_to_nhwc").apply_all(mod)
    cur = apply_until_none(nhwc, (RULE, "permute_compose"))
    assert count_calls(nhwc) == 6 and count_calls(cur) == 3  # x into each first conv, and the last conv's output
    assert_exact(mod, {"cancelled": cur})


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_two_operand_form_random(data):
    rank = data.draw(st.integers(1, 4), "rank")
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank), "shape"))
    axes = data.draw(st.permutations(range(rank)), "axes")
    op = data.draw(st.sampled_from([R.add, R.subtract, R.multiply, R.divide]), "op")
    mod = pair(op, axes=axes, shape=shape)
    (match,) = both_form(mod)
    assert_exact(mod, {"moved": get_rule(RULE).apply(mod, match)})
