"""Guards of the rules, each killed by a test: a graph on which a rule with one precondition removed (or one
attribute dropped from its rewrite) offers a wrong or ill-formed rewrite, where the real rule offers none or an
exact one. `benchmarks/guard_mutants.py` deletes / negates the guards one at a time and runs these tests."""
import numpy as np
import pytest
from tvm import relax

from tvm_rl.graph import testing as T
from tvm_rl.graph.rules import get_rule
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
