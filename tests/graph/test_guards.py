"""Guards of the rules, each killed by a test: a graph on which a rule with one precondition removed (or one
attribute dropped from its rewrite) offers a wrong or ill-formed rewrite, where the real rule offers none or an
exact one. `benchmarks/guard_mutants.py` deletes / negates the guards one at a time and runs these tests."""
import numpy as np
import pytest
import tvm
from tvm import relax

from tests.support import graph_examples as T
from tvm_rl.graph.rules import all_rules, get_rule
from tvm_rl.graph.verify import compare_variants

R = relax.op


def exact_matches(name, mod):
    """The matches `name` offers on `mod`, after checking each rewrite is well formed and numerically exact."""
    rule = get_rule(name)
    found = rule.matches(mod)
    if found:
        variants = {str(m): rule.apply(mod, m) for m in found}
        for key, new in variants.items():
            assert relax.analysis.check_well_formed(new), key
        bad = {k: c for k, c in compare_variants(mod, variants).items() if not c.ok}
        assert not bad, f"{name} changed the result: {bad}"
    return found


# ----------------------------------------------------------------------------- fold_batchnorm: the axis


def _conv_bn(axis, hw=4, cout=4, batch=1, seed=0):
    """conv2d (output (batch, cout, hw, hw)) -> batch_norm over `axis` with (cout,) parameters -> [0]."""
    rng = np.random.default_rng(seed)

    def body(e, x):
        y = e(R.nn.conv2d(x, T.rand(rng, cout, 3, 3, 3), padding=1))
        t = e(R.nn.batch_norm(y, T.rand(rng, cout, low=0.5, high=1.5), T.rand(rng, cout), T.rand(rng, cout),
                              T.rand(rng, cout, low=0.5, high=1.5), axis=axis, epsilon=1e-5, training=False))
        return e(relax.TupleGetItem(t, 0))

    return T.module(body, [(batch, 3, hw, hw)])


@pytest.mark.parametrize("axis", [2, 3, -1, 0])
def test_batch_norm_over_a_spatial_axis_of_the_same_size_is_not_folded_as_channels(axis):
    """N == W == H == C: the (C,) parameters fit axes 0, 2 and 3 too, so only the axis check tells those batch
    norms from the channel one; folding them into the conv's output channels is silently wrong."""
    mod = _conv_bn(axis, hw=4, cout=4, batch=4 if axis == 0 else 1)
    assert exact_matches("fold_batchnorm", mod) == []


@pytest.mark.parametrize("axis", [1, -3])
def test_batch_norm_over_channels_is_folded_exactly(axis):
    assert len(exact_matches("fold_batchnorm", _conv_bn(axis, hw=4, cout=4))) == 1


# ----------------------------------------------------------------------------- fuse_attention: the divide side


def _attention(scale_op, value=0.5):
    """softmax(scale_op(q @ k^T)) @ v with a scalar constant (divide either way round, or multiply)."""
    c = relax.const(np.float32(value))
    ops = {"scores/c": lambda s: R.divide(s, c), "c/scores": lambda s: R.divide(c, s),
           "c*scores": lambda s: R.multiply(c, s)}

    def body(e, q, k, v):
        s = e(R.matmul(q, e(R.permute_dims(k, [0, 2, 1]))))
        return e(R.matmul(e(R.nn.softmax(e(ops[scale_op](s)), axis=-1)), v))

    return T.module(body, [(2, 3, 4), (2, 5, 4), (2, 5, 3)])


def test_a_constant_divided_by_the_scores_is_not_fused_as_a_scale():
    """c / scores is not scores * (1 / c): only the scores as the dividend fold into the attention's scale."""
    assert exact_matches("fuse_attention", _attention("c/scores")) == []
    assert len(exact_matches("fuse_attention", _attention("scores/c"))) == 1
    assert len(exact_matches("fuse_attention", _attention("c*scores"))) == 1


def test_scores_divided_by_zero_are_not_fused():
    """scores / 0 has no finite scale to fold (1 / 0 would raise while enumerating the candidates)."""
    assert get_rule("fuse_attention").matches(_attention("scores/c", 0.0)) == []


# ----------------------------------------------------------------------------- conv2d_to_nhwc: every attribute


@pytest.mark.parametrize("stride, dilation, pad", [(1, 2, 2), (2, 2, (1, 2, 0, 1)), (2, 1, (0, 1, 1, 0)),
                                                   ((1, 2), (2, 1), 1)])
def test_strided_and_dilated_convs_keep_their_attributes_in_nhwc(stride, dilation, pad):
    """The NHWC conv must keep the stride, dilation and (asymmetric) padding: dropping the dilation changes the
    output shape (an ill-formed module), dropping the stride or the padding the values."""
    rng = np.random.default_rng(0)
    mod = T.module(lambda e, x: e(R.nn.relu(e(R.nn.conv2d(x, T.rand(rng, 4, 3, 3, 3), strides=stride,
                                                          padding=pad, dilation=dilation)))), [(1, 3, 9, 8)])
    assert len(exact_matches("conv2d_to_nhwc", mod)) == 1


# ----------------------------------------------------------------------------- plain_conv: the convs rules take


def _dtype_conv(x_dtype, w_dtype, out_dtype):
    rng = np.random.default_rng(0)
    return T.module(lambda e, x: e(R.nn.conv2d(x, T.rand(rng, 4, 3, 3, 3, dtype=w_dtype), padding=1,
                                               out_dtype=out_dtype)), [(1, 3, 5, 5)], dtype=x_dtype)


@pytest.mark.parametrize("x_dtype, w_dtype, out_dtype", [
    ("float32", "float32", "int32"),  # a non-float result
    ("int8", "float32", "float32"),  # a non-float input
    ("float16", "float32", "float16"),  # a weight of another dtype than the result
])
def test_convs_not_all_of_one_float_type_are_not_rewritten(x_dtype, w_dtype, out_dtype):
    """plain_conv needs float input, weight and result of one dtype: the rewrites rebuild the weight in the
    result's dtype (a float32 weight rounded to float16 is another conv) and reason about float arithmetic."""
    mod = _dtype_conv(x_dtype, w_dtype, out_dtype)
    for name in ("conv2d_to_nhwc", "conv1x1_to_matmul", "fold_batchnorm", "merge_parallel_conv2d"):
        assert get_rule(name).matches(mod) == [], name
    assert len(get_rule("conv2d_to_nhwc").matches(_dtype_conv("float32", "float32", "float32"))) == 1


def test_batch_norm_of_a_constant_is_left_alone():
    """batch_norm's input can be a constant (no producer binding to fold into): nothing offered, nothing raised."""
    rng = np.random.default_rng(0)

    def body(e, x):
        p = [T.rand(rng, 3, low=0.5, high=1.5) for _ in range(4)]
        t = e(R.nn.batch_norm(T.rand(rng, 1, 3, 4, 4), *p, axis=1, training=False))
        return e(R.add(x, e(relax.TupleGetItem(t, 0))))

    assert get_rule("fold_batchnorm").matches(T.module(body, [(1, 3, 4, 4)])) == []


# ----------------------------------------------------------------------------- fold_batchnorm: what it folds into


def _bn(e, y, c, rng, axis=1):
    return e(R.nn.batch_norm(y, T.rand(rng, c, low=0.5, high=1.5), T.rand(rng, c), T.rand(rng, c),
                             T.rand(rng, c, low=0.5, high=1.5), axis=axis, training=False))


def test_batch_norm_tuple_read_whole_is_not_folded():
    """The whole (output, mean, var) tuple returned: no [0] reader to replace, nothing offered, nothing raised."""
    rng = np.random.default_rng(0)
    mod = T.module(lambda e, x: _bn(e, e(R.nn.conv2d(x, T.rand(rng, 4, 3, 1, 1))), 4, rng), [(1, 3, 4, 4)])
    assert get_rule("fold_batchnorm").matches(mod) == []


@pytest.mark.parametrize("producer", ["relu", "permute_none", "permute_const", "permute_relu"])
def test_batch_norm_after_something_other_than_a_conv_or_a_permuted_matmul_is_not_folded(producer):
    """fold_batchnorm's second form needs permute_dims(x @ W) with explicit axes: any other producer (an
    activation, a reversing permute_dims, a permute of a constant or of a non-matmul) is left alone."""
    rng = np.random.default_rng(0)

    def body(e, x):
        if producer == "relu":
            y = e(R.nn.relu(x))
        elif producer == "permute_none":
            y = e(R.permute_dims(e(R.matmul(x, T.rand(rng, 4, 4))), None))  # (4, 3, 2): axis 0 the columns
        elif producer == "permute_const":
            y = e(R.permute_dims(T.rand(rng, 2, 3, 4), [0, 2, 1]))
        else:
            y = e(R.permute_dims(e(R.nn.relu(x)), [0, 2, 1]))
        axis = {"permute_none": 0, "relu": 2}.get(producer, 1)  # an axis of length 4
        return e(relax.TupleGetItem(_bn(e, y, 4, rng, axis), 0))

    assert exact_matches("fold_batchnorm", T.module(body, [(2, 3, 4)])) == []


# ----------------------------------------------------------------------------- merge / enlarge: which convs


def test_sibling_convs_on_a_constant_or_read_twice_are_not_merged():
    rng = np.random.default_rng(0)
    img = T.rand(rng, 1, 3, 5, 5)
    on_const = T.module(lambda e, x: [e(R.add(x, e(R.nn.conv2d(img, T.rand(rng, 4, 3, 3, 3), padding=1)))),
                                      e(R.add(x, e(R.nn.conv2d(img, T.rand(rng, 4, 3, 3, 3), padding=1))))],
                        [(1, 4, 5, 5)])
    assert get_rule("merge_parallel_conv2d").matches(on_const) == []

    def twice(e, x):
        a = e(R.nn.conv2d(x, T.rand(rng, 4, 3, 3, 3), padding=1))
        b = e(R.nn.conv2d(x, T.rand(rng, 5, 3, 3, 3), padding=1))
        return [e(R.nn.relu(a)), e(R.sigmoid(a)), e(R.nn.relu(b))]  # a has two readers

    assert exact_matches("merge_parallel_conv2d", T.module(twice, [(1, 3, 5, 5)])) == []


@pytest.mark.parametrize("small", [dict(k=3, pad=0), dict(k=1, pad=1), dict(k=1, pad=0, dilation=2)])
def test_only_a_plain_1x1_conv_is_enlarged(small):
    """enlarge_conv_kernel writes the 1x1 weight into the centre of a kxk one with padding k // 2: a larger
    kernel, a padded 1x1 (a bigger output) or a dilated one (the dilation would spread the new kernel) is not
    a 1x1 it can enlarge."""
    rng = np.random.default_rng(0)
    k, pad, dilation = small["k"], small["pad"], small.get("dilation", 1)

    def body(e, x):
        a = e(R.nn.conv2d(x, T.rand(rng, 4, 3, k, k), padding=pad, dilation=dilation))
        b = e(R.nn.conv2d(x, T.rand(rng, 5, 3, 5, 5), padding=2))
        return [e(R.nn.relu(a)), e(R.nn.relu(b))]

    assert exact_matches("enlarge_conv_kernel", T.module(body, [(1, 3, 7, 7)])) == []


@pytest.mark.parametrize("sibling", ["2x2", "2x3", "3x2"])
def test_a_1x1_conv_is_not_enlarged_to_an_even_kernel(sibling):
    """An even kernel has no centre: padding k // 2 would make the enlarged conv's output one larger."""
    rng = np.random.default_rng(0)
    kh, kw = (int(v) for v in sibling.split("x"))

    def body(e, x):
        a = e(R.nn.conv2d(x, T.rand(rng, 4, 3, 1, 1)))
        b = e(R.nn.conv2d(x, T.rand(rng, 5, 3, kh, kw), padding=(kh // 2, kw // 2, kh // 2, kw // 2)))
        return [e(R.nn.relu(a)), e(R.nn.relu(b))]

    assert exact_matches("enlarge_conv_kernel", T.module(body, [(1, 3, 6, 6)])) == []


@pytest.mark.parametrize("sibling", ["other input", "other stride", "dilated", "1x1"])
def test_a_1x1_conv_is_enlarged_only_to_merge_with_its_sibling(sibling):
    """Enlarging is exact for any odd kernel, but only worth offering when merge_parallel_conv2d can then take
    the pair: the same input, stride and (no) dilation, and a sibling that is not a 1x1 itself (a no-op)."""
    rng = np.random.default_rng(0)

    def body(e, x, y):
        a = e(R.nn.conv2d(x, T.rand(rng, 4, 3, 1, 1), strides=2 if sibling == "other stride" else 1))
        k, dil = (1, 1) if sibling == "1x1" else (3, 2 if sibling == "dilated" else 1)
        b = e(R.nn.conv2d(y if sibling == "other input" else x, T.rand(rng, 5, 3, k, k), padding=k // 2,
                          dilation=dil))  # dilated: the padding of an undilated kxk, which enlarging would give
        return [e(R.nn.relu(a)), e(R.nn.relu(b))]

    assert get_rule("enlarge_conv_kernel").matches(T.module(body, [(1, 3, 6, 6), (1, 3, 6, 6)])) == []


# ----------------------------------------------------------------------------- fuse_attention: the matmuls' dtypes


def _mixed_attention(variant):
    """softmax(q @ k^T) @ v with one matmul's operands or result of another dtype than the float32 rest."""
    def body(e, q, k, v):
        kt = e(R.permute_dims(k, [0, 2, 1]))
        if variant == "f16 scores":  # float16 operands, float32 scores: R.nn.attention takes one dtype
            s = e(R.matmul(e(R.astype(q, "float16")), e(R.astype(kt, "float16")), out_dtype="float32"))
        elif variant == "int8 q":
            s = e(R.matmul(e(R.astype(q, "int8")), kt, out_dtype="float32"))
        elif variant == "int8 k":
            s = e(R.matmul(q, e(R.astype(kt, "int8")), out_dtype="float32"))
        else:
            s = e(R.matmul(q, kt))
        p = e(R.nn.softmax(s, axis=-1))
        if variant == "int32 out":
            return e(R.matmul(p, v, out_dtype="int32"))
        return e(R.matmul(p, v))

    return T.module(body, [(2, 3, 4), (2, 5, 4), (2, 5, 3)])


@pytest.mark.parametrize("variant", ["f16 scores", "int8 q", "int8 k", "int32 out"])
def test_attention_with_matmuls_of_mixed_dtypes_is_not_fused(variant):
    assert get_rule("fuse_attention").matches(_mixed_attention(variant)) == []
    assert len(get_rule("fuse_attention").matches(_mixed_attention("plain"))) == 1


@pytest.mark.parametrize("ranks", ["2-D p", "2-D v"])
def test_attention_needs_3d_matmuls_without_broadcasting(ranks):
    """R.nn.attention takes (batch, seq, heads, dim) operands made from 3-D ones: a 2-D probability matrix
    broadcast against 3-D values, or 2-D values shared by every batch (sizes chosen so that the other shape
    checks would pass), are not the exported pattern."""
    def body(e, q, k, v):
        s = e(R.matmul(q, e(R.permute_dims(k, [0, 2, 1]) if ranks == "2-D v" else R.permute_dims(k, [1, 0]))))
        return e(R.matmul(e(R.nn.softmax(s, axis=-1)), v))

    shapes = [(4, 3, 4), (4, 4, 4), (4, 4)] if ranks == "2-D v" else [(3, 4), (4, 4), (3, 4, 2)]
    assert get_rule("fuse_attention").matches(T.module(body, shapes)) == []


def test_attention_with_keys_broadcast_over_the_batch_is_not_fused():
    """q (2, 3, 4) @ k^T (1, 4, 5): Relax broadcasts k over the batch; the fused op wants k per batch."""
    def body(e, q, k, v):
        s = e(R.matmul(q, e(R.permute_dims(k, [0, 2, 1]))))
        return e(R.matmul(e(R.nn.softmax(s, axis=-1)), v))

    assert get_rule("fuse_attention").matches(T.module(body, [(2, 3, 4), (1, 5, 4), (2, 5, 3)])) == []


@pytest.mark.parametrize("variant", ["constant p", "softmax read twice", "softmax of a constant",
                                     "softmax of a constant product"])
def test_attention_needs_its_own_softmax_as_the_probabilities(variant):
    rng = np.random.default_rng(0)

    def body(e, q, k, v):
        s = e(R.matmul(q, e(R.permute_dims(k, [0, 2, 1]))))
        p = e(R.nn.softmax(s, axis=-1))
        if variant == "constant p":
            return [e(R.matmul(T.rand(rng, 2, 3, 5), v)), p]
        if variant == "softmax of a constant":
            return [e(R.matmul(e(R.nn.softmax(T.rand(rng, 2, 3, 5), axis=-1)), v)), p]
        if variant == "softmax of a constant product":  # a score-chain node with no variable operand
            c = e(R.multiply(T.rand(rng, 2, 3, 5), T.rand(rng, 2, 3, 5)))
            return [e(R.matmul(e(R.nn.softmax(c, axis=-1)), v)), p]
        return [e(R.matmul(p, v)), e(R.nn.relu(p))]

    assert exact_matches("fuse_attention", T.module(body, [(2, 3, 4), (2, 5, 4), (2, 5, 3)])) == []


@pytest.mark.parametrize("scores", ["input", "scaled input"])
def test_attention_whose_scores_are_an_input_is_not_fused(scores):
    """softmax(x) @ v with x (or x * 0.5) an input of the function: walking back from the softmax meets a
    parameter, no binding, before any matmul; nothing to fuse (this raised KeyError before the walk checked
    that each step is a binding of the block)."""
    def body(e, s, v):
        if scores == "scaled input":
            s = e(R.multiply(s, relax.const(np.float32(0.5))))
        return e(R.matmul(e(R.nn.softmax(s, axis=-1)), v))

    assert get_rule("fuse_attention").matches(T.module(body, [(2, 3, 5), (2, 5, 4)])) == []


def test_attention_whose_scores_are_regrouped_is_not_fused():
    """q (1, 6, 4) @ k^T (1, 4, 5) reshaped to (2, 3, 5) scores: every row intact, but the fused op would need
    k per group of queries, which it is not."""
    def body(e, q, k, v):
        s = e(R.reshape(e(R.matmul(q, e(R.permute_dims(k, [0, 2, 1])))), (2, 3, 5)))
        return e(R.matmul(e(R.nn.softmax(s, axis=-1)), v))

    assert exact_matches("fuse_attention", T.module(body, [(1, 6, 4), (1, 5, 4), (2, 5, 3)])) == []


def test_a_transpose_is_not_moved_past_a_constant_of_higher_rank():
    """permute_dims(x) (2-D) + c (3-D): the transpose of x cannot be applied to c's extra axis."""
    rng = np.random.default_rng(0)
    mod = T.module(lambda e, x: e(R.add(e(R.permute_dims(x, [1, 0])), T.rand(rng, 2, 4, 3))), [(3, 4)])
    assert exact_matches("permute_past_elementwise", mod) == []


# ----------------------------------------------------------------------------- concat rules


CONCAT_RULES = ("split_concat_cancel", "activation_into_concat", "activation_out_of_concat")


def test_concat_rules_leave_a_concat_of_a_tuple_variable_alone():
    """concat(split(x)) reads the split's tuple as a variable, not a tuple of fields: no rule can see the
    fields (concat_fields gives None), so none is offered and none raises."""
    mod = T.module(lambda e, x: e(R.nn.relu(e(R.concat(e(R.split(x, 2, axis=1)), axis=1)))), [(2, 4)])
    for name in CONCAT_RULES:
        assert get_rule(name).matches(mod) == [], name


@pytest.mark.parametrize("fields", ["tuple binding", "inputs", "a constant"])
def test_split_concat_cancel_needs_the_fields_to_be_items_of_a_split(fields):
    """The concat's fields must each be tuple_value[i] of a split: items of a tuple built in the block, plain
    inputs, or a constant field (no binding to look up) are not parts of a split to cancel."""
    rng = np.random.default_rng(0)

    def body(e, x, y):
        if fields == "tuple binding":
            t = e(relax.Tuple([x, y]))
            parts = [e(relax.TupleGetItem(t, 0)), e(relax.TupleGetItem(t, 1))]
        elif fields == "inputs":
            parts = [x, y]
        else:
            parts = [e(relax.TupleGetItem(e(R.split(x, 2, axis=1)), 0)), T.rand(rng, 2, 2)]
        return e(R.nn.relu(e(R.concat(parts, axis=1))))

    assert get_rule("split_concat_cancel").matches(T.module(body, [(2, 2), (2, 2)])) == []


def test_split_concat_cancel_needs_every_part_of_one_split():
    """concat(split(x)[0], split(y)[1]): all the indices of a split in order, but of two different splits."""
    def body(e, x, y):
        a, b = e(R.split(x, 2, axis=1)), e(R.split(y, 2, axis=1))
        return e(R.nn.relu(e(R.concat([e(relax.TupleGetItem(a, 0)), e(relax.TupleGetItem(b, 1))], axis=1))))

    assert exact_matches("split_concat_cancel", T.module(body, [(2, 4), (2, 4)])) == []


def test_split_concat_cancel_needs_a_known_rank():
    """Of an input of unknown rank, the axes cannot be normalised (`axis % ndim` with ndim -1 is always 0): a
    split along axis 1 concatenated back along axis 0 is not x."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(None, "float32", ndim=-1))
    with bb.function("main", [x]):
        with bb.dataflow():
            s = bb.emit(R.split(x, 2, axis=1))
            gv = bb.emit_output(R.concat([bb.emit(relax.TupleGetItem(s, i)) for i in range(2)], axis=0))
        bb.emit_func_output(gv)
    assert get_rule("split_concat_cancel").matches(bb.get()) == []


def test_activation_out_of_concat_needs_the_same_attributes():
    """leaky_relu(x, 0.1) and leaky_relu(y, 0.2) are not one activation of the concat."""
    def body(e, x, y):
        return e(R.concat([e(R.nn.leakyrelu(x, 0.1)), e(R.nn.leakyrelu(y, 0.2))], axis=1))

    assert exact_matches("activation_out_of_concat", T.module(body, [(2, 3), (2, 5)])) == []


def test_activation_into_concat_needs_a_concat_input():
    """relu of an input (not of a concat) has no parts to activate one by one: nothing offered, none raised."""
    assert get_rule("activation_into_concat").matches(T.module(lambda e, x: e(R.nn.relu(x)), [(2, 3)])) == []


def test_activation_into_concat_needs_the_concat_read_only_by_the_activation():
    """A concat read elsewhere too stays, so activating its parts would compute the concat twice."""
    def body(e, x, y):
        c = e(R.concat([x, y], axis=1))
        return [e(R.nn.relu(c)), e(R.add(c, c))]

    assert get_rule("activation_into_concat").matches(T.module(body, [(2, 3), (2, 5)])) == []


@pytest.mark.parametrize("dtype", ["int32", "dynamic"])
def test_activation_concat_rules_need_a_static_float_result(dtype):
    """Like every rule, these take static-shaped float tensors only (Rule.matches' contract): an int32 concat
    or one of a symbolic batch is left alone."""
    bb = relax.BlockBuilder()
    shape = [2, 3] if dtype == "int32" else [tvm.tirx.Var("n", "int64"), 3]
    params = [relax.Var(v, relax.TensorType(shape, "int32" if dtype == "int32" else "float32")) for v in "xy"]
    with bb.function("main", params):
        with bb.dataflow():
            x, y = params
            into = bb.emit(R.nn.relu(bb.emit(R.concat([x, y], axis=1))))
            out = bb.emit(R.concat([bb.emit(R.nn.relu(x)), bb.emit(R.nn.relu(y))], axis=1))
            gv = bb.emit_output(relax.Tuple([into, out]))
        bb.emit_func_output(gv)
    mod = bb.get()
    assert get_rule("activation_into_concat").matches(mod) == []
    assert get_rule("activation_out_of_concat").matches(mod) == []


def test_activation_concat_rules_need_a_concat_with_an_axis():
    """concat(axis=None) (Relax's concat of flattened 1-D tensors) is outside the rules' scope: they only
    reason about concats along an axis."""
    def body(e, x, y):
        into = e(R.nn.relu(e(R.concat([x, y], axis=None))))
        out = e(R.concat([e(R.nn.relu(x)), e(R.nn.relu(y))], axis=None))
        return [into, out]

    mod = T.module(body, [(3,), (5,)])
    assert get_rule("activation_into_concat").matches(mod) == []
    assert get_rule("activation_out_of_concat").matches(mod) == []


def test_activation_out_of_concat_needs_two_inputs_at_least():
    """A one-field concat is a copy, not a join of activations: activation_out_of_concat leaves it alone."""
    mod = T.module(lambda e, x: e(R.concat([e(R.nn.relu(x))], axis=1)), [(2, 3)])
    assert get_rule("activation_out_of_concat").matches(mod) == []


# ----------------------------------------------------------------------------- layout rules


def test_permute_compose_needs_a_known_rank():
    """permute_dims(permute_dims(x, None), None) of an x of unknown rank: the axes cannot be composed."""
    x = relax.Var("x", relax.TensorType(None, "float32", ndim=-1))
    mod = T.module_of([x], lambda e, x: e(R.permute_dims(e(R.permute_dims(x, None)), None)))
    assert get_rule("permute_compose").matches(mod) == []


@pytest.mark.parametrize("dynamic", ["input", "output", "both"])
def test_reshape_compose_needs_static_shapes_at_both_ends(dynamic):
    """A symbolic dimension at either end of reshape(reshape(x)) is left alone: the merged target shape is
    read as static (both dynamic, comparing the two unknown shapes as equal would replace (n*4,) by x (n, 4))."""
    n = tvm.tirx.Var("n", "int64")
    if dynamic == "output":  # a static x reshaped to (n, 4), n taken from another input's shape
        params = [relax.Var("x", relax.TensorType([2, 4], "float32")), relax.Var("y", relax.TensorType([n]))]
        mid, target = (8,), (n, 4)
    else:
        params = [relax.Var("x", relax.TensorType([n, 4], "float32"))]
        mid, target = (n, 2, 2), ((8,) if dynamic == "input" else (n * 4,))
    mod = T.module_of(params, lambda e, x, *_: e(R.reshape(e(R.reshape(x, mid)), target)))
    assert get_rule("reshape_compose").matches(mod) == []


@pytest.mark.parametrize("op", ["permute", "reshape", "broadcast_to"])
def test_identity_shape_op_needs_known_shapes(op):
    """No-op detection needs the rank (a permutation of unknown rank) or the static shape (a reshape /
    broadcast_to of a symbolic-shaped x, whose unknown input and output shapes must not compare equal)."""
    if op == "permute":  # (Relax takes explicit axes only of a known rank)
        x = relax.Var("x", relax.TensorType(None, "float32", ndim=-1))
        mod = T.module_of([x], lambda e, x: e(R.permute_dims(x, None)))
    else:
        n = tvm.tirx.Var("n", "int64")
        x = relax.Var("x", relax.TensorType([n, 4], "float32"))
        fn = R.reshape if op == "reshape" else R.broadcast_to
        mod = T.module_of([x], lambda e, x: e(fn(x, (n * 2, 2) if op == "reshape" else (2, n, 4))))
    assert get_rule("identity_shape_op").matches(mod) == []


@pytest.mark.parametrize("case", ["symbolic target", "non-tensor payload"])
def test_fold_const_transform_needs_a_tensor_constant_and_a_static_result(case):
    """Only a reshape / permute_dims of a constant holding a tensor, with a static result, can be computed
    ahead: a constant reshaped to (n, 4) (n from another input) has no shape to fold to, and a GenericConst
    can hold another object (here an Array) that has no array value."""
    n = tvm.tirx.Var("n", "int64")
    y = relax.Var("y", relax.TensorType([n] if case == "symbolic target" else [2], "float32"))
    if case == "symbolic target":
        mod = T.module_of([y], lambda e, y: e(R.reshape(relax.const(np.ones((2, 4), "float32")), (n, 4))))
    else:
        c = tvm.ir.GenericConst([1, 2], relax.TensorType([2, 3], "float32"))
        mod = T.module_of([y], lambda e, y: e(R.permute_dims(c, [1, 0])))
    assert get_rule("fold_const_transform").matches(mod) == []


# ----------------------------------------------------------------------------- matmul rules: const_weight_matmul


def _sibling_matmuls(shape, weights, x=None, out_dtype=None, seed=0):
    """relu(x' @ W) for each weight shape in `weights`, x' = x(emit, input) (the input itself by default)."""
    rng = np.random.default_rng(seed)

    def body(e, inp):
        xx = x(e, inp) if x else inp
        return [e(R.nn.relu(e(R.matmul(xx, T.rand(rng, *w), out_dtype=out_dtype)))) for w in weights]

    return T.module(body, [shape])


MATMUL_RULES = ("merge_parallel_matmul", "matmul_to_conv1x1")


def test_matmul_rules_need_a_variable_input():
    """A constant @ a constant weight: no input binding to merge on or to reshape (and none raises)."""
    rng = np.random.default_rng(0)
    mod = T.module(lambda e, y: [e(R.add(y, e(R.matmul(T.rand(rng, 2, 6), T.rand(rng, 6, 4))))) for _ in range(2)],
                   [(2, 4)])
    for name in MATMUL_RULES:
        assert get_rule(name).matches(mod) == [], name


def test_matmul_rules_need_a_float_input():
    """int8 x @ a float32 weight (out_dtype float32): like the conv rules (plain_conv), the matmul rules take
    float operands only (Rule.matches' contract)."""
    mod = _sibling_matmuls((2, 6), [(6, 4), (6, 5)], x=lambda e, x: e(R.astype(x, "int8")), out_dtype="float32")
    for name in MATMUL_RULES:
        assert get_rule(name).matches(mod) == [], name


def test_matmul_rules_need_a_float_result():
    """A float matmul with out_dtype int32: no float result to reason about (and none raises)."""
    mod = _sibling_matmuls((2, 6), [(6, 4), (6, 5)], out_dtype="int32")
    for name in MATMUL_RULES:
        assert get_rule(name).matches(mod) == [], name


def test_matmul_rules_need_rows_of_at_least_a_matrix():
    """A 1-D x @ W (a vector result) is not the [..., N, C] @ W [C, O] the matmul rules take: not merged, and
    its batch norm not folded as a permuted matmul's."""
    assert get_rule("merge_parallel_matmul").matches(_sibling_matmuls((6,), [(6, 4), (6, 5)])) == []
    rng = np.random.default_rng(0)

    def body(e, x):
        y = e(R.permute_dims(e(R.matmul(x, T.rand(rng, 6, 4))), [0]))
        return e(relax.TupleGetItem(_bn(e, y, 4, rng, 0), 0))

    assert get_rule("fold_batchnorm").matches(T.module(body, [(6,)])) == []


def test_sibling_matmuls_with_batched_weights_are_not_merged():
    """x (2, 3, 6) @ W_i (2, 6, 4): a 3-D weight's columns are not its axis 1, which the merge concatenates."""
    assert exact_matches("merge_parallel_matmul", _sibling_matmuls((2, 3, 6), [(2, 6, 4), (2, 6, 4)])) == []


def test_matmul_rules_need_a_weight_of_the_result_dtype():
    """float16 x @ a float32 weight with out_dtype float16: the rewrites rebuild the weight in the result's
    dtype, so, like plain_conv for convs, const_weight_matmul takes only a weight already of that dtype."""
    mod = _sibling_matmuls((2, 6), [(6, 4), (6, 5)], x=lambda e, x: e(R.astype(x, "float16")), out_dtype="float16")
    for name in MATMUL_RULES:
        assert get_rule(name).matches(mod) == [], name


def test_scalar_mul_motion_skips_a_product_of_two_variables():
    """x * y: neither side is a constant scalar; nothing offered, nothing raised."""
    mod = T.module(lambda e, x, y: e(R.multiply(e(R.nn.relu(x)), e(R.nn.relu(y)))), [(2, 3), (2, 3)])
    assert get_rule("scalar_mul_motion").matches(mod) == []


def test_scalar_mul_motion_skips_a_product_of_constants():
    """C * 2 with C a constant tensor: there is no producer binding to move the factor into (and none raises)."""
    rng = np.random.default_rng(0)
    mod = T.module(lambda e, x: e(R.add(x, e(R.multiply(T.rand(rng, 2, 3), relax.const(np.float32(2.0)))))),
                   [(2, 3)])
    assert get_rule("scalar_mul_motion").matches(mod) == []


def test_scalar_mul_motion_needs_a_factor_that_does_not_broadcast():
    """permute_dims(x) (3, 2) * s with s of shape (1, 1, 1): one element, but the product is (1, 3, 2);
    moving s into the permute (as a rank-0 factor) would lose the leading axis."""
    mod = T.module(lambda e, x: e(R.multiply(e(R.permute_dims(x, [1, 0])), relax.const(np.full((1, 1, 1), 0.5,
                                                                                               "float32")))),
                   [(2, 3)])
    assert exact_matches("scalar_mul_motion", mod) == []


def test_scalar_mul_motion_needs_a_static_float_product():
    """reshape(x) * 2 in int32: u and the result are equally 'not a static float tensor' (None == None), so
    only the result's own check leaves it alone (and nothing raises)."""
    mod = T.module(lambda e, x: e(R.multiply(e(R.reshape(x, (3, 2))), relax.const(np.int32(2)))), [(2, 3)],
                   dtype="int32")
    assert get_rule("scalar_mul_motion").matches(mod) == []


# ----------------------------------------------------------------------------- pool rules


def test_activation_after_maxpool_needs_numeric_clip_bounds():
    """clip(x, 0, float(n)) with n a symbolic dimension: the bounds cannot be compared, so the clip is not
    known to be non-decreasing (and reading them as numbers must not raise)."""
    n = tvm.tirx.Var("n", "int64")
    params = [relax.Var("x", relax.TensorType([1, 3, 6, 6], "float32")), relax.Var("y", relax.TensorType([n]))]
    mod = T.module_of(params, lambda e, x, y: e(R.nn.max_pool2d(e(R.clip(x, 0.0, tvm.tirx.Cast("float32", n))),
                                                              pool_size=2, strides=2)))
    assert get_rule("activation_after_maxpool").matches(mod) == []


@pytest.mark.parametrize("layouts", [("NCW2wH", "NCHW"), ("NCHW", "NCW2wH")])
def test_activation_after_maxpool_needs_unpacked_pool_layouts(layouts):
    """A packed layout (NCW2wH: W split in two axes) has more letters than the tensor has axes, so a letter's
    place is not its axis: the window check cannot read the sizes (and must not raise)."""
    layout, out_layout = layouts
    shape = (1, 8, 3, 2, 6) if layout == "NCW2wH" else (1, 8, 6, 6)
    mod = T.module(lambda e, x: e(R.nn.max_pool2d(e(R.nn.relu(x)), pool_size=2, strides=2, layout=layout,
                                                  out_layout=out_layout)), [shape])
    assert get_rule("activation_after_maxpool").matches(mod) == []


@pytest.mark.parametrize("case", ["NHWC", "NCHW to NHWC", "ceil mode", "dilated"])
def test_avg_pool_to_conv_needs_an_nchw_floor_mode_undilated_pool(case):
    """The depthwise conv is built NCHW -> NCHW, in floor mode and without dilation: an NHWC pool (in or out),
    a ceil-mode pool (one more output where the last window overhangs) or a dilated one is another function."""
    layout, out_layout = {"NHWC": ("NHWC", "NHWC"), "NCHW to NHWC": ("NCHW", "NHWC")}.get(case, ("NCHW", "NCHW"))
    shape = (1, 6, 6, 3) if layout == "NHWC" else (1, 3, 6, 6)
    mod = T.module(lambda e, x: e(R.nn.relu(e(R.nn.avg_pool2d(
        x, pool_size=3, strides=2 if case == "ceil mode" else 1, padding=0, dilation=2 if case == "dilated" else 1,
        ceil_mode=case == "ceil mode", layout=layout, out_layout=out_layout)))), [shape])
    assert exact_matches("avg_pool_to_conv", mod) == []


@pytest.mark.parametrize("case", ["int32", "dynamic"])
def test_avg_pool_to_conv_needs_a_static_float_pool(case):
    """The rewrite builds the depthwise weight from the input's static float type (channels, dtype): an int32
    pool or one of a symbolic size has none, and is left alone."""
    n = tvm.tirx.Var("n", "int64")
    shape, dtype = ([1, 3, 6, 6], "int32") if case == "int32" else ([1, 3, n, n], "float32")
    mod = T.module_of([relax.Var("x", relax.TensorType(shape, dtype))],
                    lambda e, x: e(R.nn.avg_pool2d(x, pool_size=3, strides=1, padding=1, count_include_pad=True)))
    assert get_rule("avg_pool_to_conv").matches(mod) == []


# ----------------------------------------------------------------------------- simplify rules


def test_identity_arith_needs_a_non_empty_neutral_constant():
    """An empty constant is all zeros and all ones vacuously (np.all of nothing): it is not taken as a neutral
    element, even where x, being empty too, would make the removal harmless."""
    mod = T.module(lambda e, x: e(R.add(x, relax.const(np.zeros((0, 4), "float32")))), [(0, 4)])
    assert get_rule("identity_arith").matches(mod) == []


@pytest.mark.parametrize("value", ["constant", "alias"])
def test_dedup_takes_only_computations(value):
    """dedup merges calls, tuples and tuple items: two bindings of one constant, or two aliases of one input
    (lv = x0), compute nothing and are left alone."""
    c = relax.const(np.ones((2, 3), "float32"))

    def body(e, x):
        a, b = (e(c), e(c)) if value == "constant" else (e(x), e(x))
        return [e(R.add(x, a)), e(R.multiply(x, b))]

    assert get_rule("dedup").matches(T.module(body, [(2, 3)])) == []


def test_rules_skip_calls_of_other_functions():
    """A call of another function of the module (its op a GlobalVar, not an operator) is no operator any rule
    looks for: nothing offered, nothing raised."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([2, 3], "float32"))
    with bb.function("helper", [x]):
        with bb.dataflow():
            gv = bb.emit_output(R.nn.relu(x))
        bb.emit_func_output(gv)
    helper = bb.get().get_global_var("helper")
    y = relax.Var("y", relax.TensorType([2, 3], "float32"))
    with bb.function("main", [y]):
        with bb.dataflow():
            gv = bb.emit_output(R.nn.relu(bb.emit(relax.Call(helper, [y]))))
        bb.emit_func_output(gv)
    mod = bb.get()
    for rule in all_rules():
        assert rule.matches(mod) == [], rule.name


# ----------------------------------------------------------------------------- ir helpers: types rules read


@pytest.mark.parametrize("case", ["prim add", "shape variable"])
def test_rules_read_non_tensor_and_shapeless_types_as_unknown(case):
    """static_shape / float_tensor give None for what is not a tensor of known dimensions: add(n, n) of two
    PrimValues (an int64 scalar, no tensor type) and a tensor shaped by a Shape variable (reshape(x, s)). Every
    rule looks at such bindings' types; none may raise, and none takes them as tensors of a known shape."""
    n = tvm.tirx.Var("n", "int64")
    if case == "prim add":
        params = [relax.Var("y", relax.TensorType([n], "float32"))]
        mod = T.module_of(params, lambda e, y: e(R.add(relax.prim_value(n), relax.prim_value(n))))
    else:
        params = [relax.Var("x", relax.TensorType([2, 3], "float32")), relax.Var("s", relax.ShapeType(None, 2))]
        mod = T.module_of(params, lambda e, x, s: e(R.reshape(e(R.reshape(x, s)), (2, 3))))
    found = {rule.name: rule.matches(mod) for rule in all_rules()}
    # (reshape_compose rightly takes reshape(reshape(x, s), (2, 3)) -> x: both its ends are static.)
    assert {k: v for k, v in found.items() if v} == ({} if case == "prim add" else {"reshape_compose": found[
        "reshape_compose"]})
    assert found["identity_shape_op"] == []


def test_float_tensor_is_none_for_a_tuple_or_a_shape():
    """The type helpers' contract, for values no rule happens to ask about today: a tuple- or shape-typed
    variable has no dtype, and float_tensor / dtype_of say None rather than raise."""
    from tvm_rl.graph.rules.ir import dtype_of, float_tensor

    tensor = relax.TensorType([2], "float32")
    for ty in (relax.TupleType([tensor, tensor]), relax.ShapeType(None, 2), None):
        assert dtype_of(ty) is None
        assert float_tensor(relax.Var("v", ty) if ty is not None else object()) is None
    assert float_tensor(relax.Var("v", tensor)) == ((2,), "float32")


def test_rules_skip_a_constant_without_a_tensor_payload():
    """A GenericConst can hold another object (here an Array) under a tensor type: constant_array gives None
    for it, so no rule reads it as a weight, a neutral element or a scale (and none raises)."""
    c = tvm.ir.GenericConst([1, 2], relax.TensorType([2, 3], "float32"))
    mod = T.module(lambda e, x: [e(R.add(x, c)), e(R.multiply(x, c)), e(R.matmul(x, e(R.permute_dims(c, [1, 0]))))],
                   [(2, 3)])
    found = {rule.name: rule.matches(mod) for rule in all_rules()}
    assert {k: v for k, v in found.items() if v} == {}


def test_a_match_cast_binding_is_not_rewritten():
    """lv1 = match_cast(relu(x), ...) recomputes lv = relu(x), but a match_cast is not a plain binding: Graph
    counts what it reads as an outside use and never offers it (the edit re-emits only plain bindings)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([2, 3], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(R.nn.relu(x))
            m = bb.match_cast(R.nn.relu(x), relax.TensorType([2, 3], "float32"))
            gv = bb.emit_output(R.add(a, m))
        bb.emit_func_output(gv)
    assert get_rule("dedup").matches(bb.get()) == []


def test_rules_skip_scalar_prim_value_operands():
    """x + 0.0 and y * 2.0 with the scalars as PrimValues (no tensor constants): Graph.const reads only
    constants and bindings, so no rule takes them as a neutral element or a scale (and none raises)."""
    f32 = lambda v: relax.prim_value(tvm.tirx.FloatImm("float32", v))  # noqa: E731
    mod = T.module(lambda e, x: e(R.multiply(e(R.add(x, f32(0.0))), f32(2.0))), [(2, 3)])
    found = {rule.name: rule.matches(mod) for rule in all_rules()}
    assert {k: v for k, v in found.items() if v} == {}


def test_a_constant_reshaped_to_a_symbolic_shape_is_no_weight():
    """x (2, 6) @ reshape(C, (n, 4)), n from another input: Graph.const cannot lay the constant out in a shape
    it does not know (numpy's reshape(None) would hand back C's own (4, 6) layout), so the sibling matmuls
    have no known weights to merge."""
    rng = np.random.default_rng(0)
    n = tvm.tirx.Var("n", "int64")
    params = [relax.Var("x", relax.TensorType([2, 6], "float32")), relax.Var("y", relax.TensorType([n]))]

    def body(e, x, y):
        return [e(R.nn.relu(e(R.matmul(x, e(R.reshape(T.rand(rng, 4, 6), (n, 4))))))) for _ in range(2)]

    assert get_rule("merge_parallel_matmul").matches(T.module_of(params, body)) == []


@pytest.mark.parametrize("after", ["multiply", "bias broadcast bigger", "variable", "per-row bias"])
def test_merged_matmuls_fold_only_a_constant_per_column_bias_add(after):
    """merge_parallel_matmul merges the siblings' bias adds too only when each is an add of a constant that
    broadcasts along the columns alone (channel_bias): a multiply, a bias making the result bigger
    ((1, 1, O) on (2, O)), an input added, or a per-row (2, O) bias are left as they are (merged without)."""
    rng = np.random.default_rng(0)

    def body(e, x, z):
        out = []
        for o in (4, 5):
            y = e(R.matmul(x, T.rand(rng, 6, o)))
            if after == "multiply":
                y = e(R.multiply(y, T.rand(rng, o)))
            elif after == "bias broadcast bigger":
                y = e(R.add(y, T.rand(rng, 1, 1, o)))
            elif after == "variable":
                y = e(R.add(y, e(R.strided_slice(z, axes=[1], begin=[0], end=[o]))))
            else:
                y = e(R.add(y, T.rand(rng, 2, o)))
            out.append(e(R.nn.relu(y)))
        return out

    found = exact_matches("merge_parallel_matmul", T.module(body, [(2, 6), (2, 5)]))
    assert [m.params for m in found] == [(False,)]
