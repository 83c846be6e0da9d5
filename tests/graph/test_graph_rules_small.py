"""Every rule family on a small hand-built graph: numerically exact at every match, a deliberately broken
variant of it caught by the same check, unsafe places not offered, and random shapes via hypothesis."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm import relax
from tvm.ir import TupleGetItem

from tests.support import graph_examples as T
from tests.support.rewrite_steps import apply_until_none, count_calls
from tvm_rl.graph.fingerprint import same_graph
from tvm_rl.graph.rules import (
    AllMatches,
    RuleError,
    all_rules,
    attention,
    concat,
    conv,
    get_rule,
    layout,
    linear,
    matmul,
    nhwc,
    pool,
    rule_names,
    simplify,
    with_all_matches,
)
from tvm_rl.graph.rules.ir import const, static_shape
from tvm_rl.graph.verify import compare_variants

R = relax.op
HYPOTHESIS = settings(max_examples=6, deadline=None, derandomize=True,
                      suppress_health_check=[HealthCheck.too_slow])


def assert_exact(mod, variants):
    """Every variant computes what `mod` does (rtol 1e-4, atol 1e-4 of the output scale)."""
    results = compare_variants(mod, variants)
    bad = {k: c for k, c in results.items() if not c.ok}
    assert not bad, f"rewrites changed the result: {bad}"


def test_each_output_is_judged_at_its_own_scale():
    """A wrong small output beside a large one is caught (a shared scale would hide it)."""
    def body(scale_small):
        return lambda e, x: [e(R.multiply(x, relax.const(1000.0, "float32"))),
                             e(R.multiply(x, relax.const(scale_small, "float32")))]

    mod, wrong = T.module(body(1e-3), [(4, 5)]), T.module(body(1.1e-3), [(4, 5)])
    assert compare_variants(mod, {"same": T.module(body(1e-3), [(4, 5)])})["same"].ok
    assert not compare_variants(mod, {"wrong": wrong})["wrong"].ok


def check_family(name, mod, min_matches=1):
    """Apply `name` at each of its matches alone and at all of them, and check every result."""
    rule = get_rule(name)
    found = rule.matches(mod)
    assert len(found) >= min_matches, f"{name} matched {len(found)} places"
    variants = {str(m): rule.apply(mod, m) for m in found}
    combined, applied = rule.apply_all(mod)
    variants["all"] = combined
    assert applied
    for key, new in variants.items():
        assert not new.same_as(mod) and relax.analysis.check_well_formed(new), key
    assert_exact(mod, variants)
    return found


def test_every_family_has_an_example_graph():
    assert set(T.EXAMPLES) == set(rule_names())
    assert len(rule_names()) >= 20


# The shipped policy (tvm_rl/graph/policies/) was trained with candidates enumerated in this order.
SHIPPED_ACTION_ORDER = [
    "split_concat_cancel", "activation_into_concat", "activation_out_of_concat", "merge_parallel_matmul",
    "scalar_mul_motion", "fold_batchnorm", "merge_parallel_conv2d", "enlarge_conv_kernel", "permute_compose",
    "reshape_compose", "identity_shape_op", "fold_const_transform", "identity_arith", "dedup",
    "fold_tuple_get_item", "fuse_attention", "conv1x1_to_matmul", "matmul_to_conv1x1", "conv2d_to_nhwc",
    "permute_past_elementwise", "activation_after_maxpool", "avg_pool_to_conv",
]


def test_the_action_order_is_pinned_and_explicit():
    from tvm_rl.graph.rules import ACTION_ORDER

    assert [r.name for r in all_rules()] == rule_names() == list(ACTION_ORDER)
    # New families are appended, so the shipped policy's candidates keep their rows.
    assert list(ACTION_ORDER[:len(SHIPPED_ACTION_ORDER)]) == SHIPPED_ACTION_ORDER


def test_a_rule_without_a_place_in_the_action_order_is_refused(monkeypatch):
    from tvm_rl.graph.rules import Rule, base, register

    class Unplaced(Rule):
        name = "not_in_the_action_order"

    with pytest.raises(ValueError, match=r"'not_in_the_action_order'\) has no place in ACTION_ORDER"):
        register(Unplaced)
    assert "not_in_the_action_order" not in rule_names()
    # A listed family that nothing registers is named too, rather than silently shifting the later ones.
    monkeypatch.delitem(base._REGISTRY, "dedup")
    with pytest.raises(ValueError, match="ACTION_ORDER lists dedup, but no rule family"):
        all_rules()


@pytest.mark.parametrize("name", list(T.EXAMPLES))
def test_family_is_exact_at_every_match_of_its_example(name):
    check_family(name, T.EXAMPLES[name]())


def test_examples_match_what_they_say():
    counts = {r.name: len(r.matches(T.EXAMPLES[r.name]())) for r in all_rules()}
    assert counts == {
        "split_concat_cancel": 1, "activation_into_concat": 1, "activation_out_of_concat": 2,
        "transpose_into_matmul": 1, "pad_gemm": 3, "fold_layernorm_affine": 1,
        "matmul_associate": 2, "matmul_distribute": 2, "fold_binary_into_weight": 3, "combine_const_adds": 3,
        "merge_sibling_linear": 1, "split_fused_matmul": 1, "merge_shared_weight_matmul": 1,
        "fold_batchnorm": 1, "merge_parallel_conv2d": 1, "enlarge_conv_kernel": 1, "permute_compose": 2,
        "reshape_compose": 2, "identity_shape_op": 3, "fold_const_transform": 2, "merge_parallel_matmul": 1,
        "scalar_mul_motion": 1, "identity_arith": 4, "dedup": 2, "fold_tuple_get_item": 1, "fuse_attention": 1,
        "conv1x1_to_matmul": 1, "matmul_to_conv1x1": 1, "conv2d_to_nhwc": 2, "permute_past_elementwise": 2,
        "activation_after_maxpool": 1, "avg_pool_to_conv": 1, "reshape_past_elementwise": 3}


# ------------------------------------------------------------------------------- broken variants fail


def _swap_first_two_parts(edit):
    """Wire split part 0 to the first merged output's readers and part 1 to the second's, swapped."""
    targets = [n for n in edit.alias]
    a, b = targets[0], targets[1]
    edit.alias[a], edit.alias[b] = edit.alias[b], edit.alias[a]


class BrokenFoldBatchNorm(conv.FoldBatchNorm):
    def rewrite(self, g, m, edit):  # forgets the shift beta - mean * scale
        super().rewrite(g, m, edit)
        conv_name, _, item = m.names
        edit.set_value(item, g.vars[conv_name])


class BrokenMergeConv(conv.MergeParallelConv2D):
    def rewrite(self, g, m, edit):  # split parts handed out in the wrong order
        super().rewrite(g, m, edit)
        _swap_first_two_parts(edit)


class BrokenEnlarge(conv.EnlargeConvKernel):
    def rewrite(self, g, m, edit):  # the 1x1 tap put in the kernel's corner instead of its centre
        (name,), (kh, kw) = m.names, m.params
        c = conv.plain_conv(g, name)
        weight = np.zeros((*c["weight"].shape[:2], kh, kw), "float32")
        weight[:, :, 0, 0] = c["weight"][:, :, 0, 0]
        edit.set_value(name, conv.make_conv(c["x"], const(weight, "float32"), c, padding=(1, 1, 1, 1)))


class BrokenMergeMatmul(matmul.MergeParallelMatmul):
    def rewrite(self, g, m, edit):
        super().rewrite(g, m, edit)
        _swap_first_two_parts(edit)


class BrokenScalarMotion(matmul.ScalarMulMotion):
    def rewrite(self, g, m, edit):  # moves the factor but also keeps the multiply: scales twice
        super().rewrite(g, m, edit)
        edit.drop.discard(m.names[0])
        edit.alias.pop(m.names[0], None)


class BrokenPermuteCompose(layout.PermuteCompose):
    def rewrite(self, g, m, edit):  # composes the permutations in the wrong order
        inner_name, name = m.names
        inner, outer = g.values[inner_name], g.values[name]
        p1, p2 = [int(a) for a in inner.attrs.axes], [int(a) for a in outer.attrs.axes]
        edit.set_value(name, R.permute_dims(inner.args[0], [p2[k] for k in p1]))


class BrokenReshapeCompose(layout.ReshapeCompose):
    def find(self, g):  # treats permute_dims like a reshape: reshape(permute(x)) -> reshape(x)
        out = []
        for name, call in g.calls("relax.reshape"):
            if g.call(call.args[0], "relax.permute_dims") is not None:
                out.append(self.match((call.args[0].name, name), "bad"))
        return out


class BrokenIdentityShape(layout.IdentityShapeOps):
    def find(self, g):  # "same shape in, same shape out" taken as a no-op, also for a transpose
        return [self.match((n,), "bad") for n, c in g.calls("relax.permute_dims")
                if static_shape(c.args[0].ty) == static_shape(g.vars[n].ty)]


class BrokenConstTransform(layout.FoldConstTransform):
    def rewrite(self, g, m, edit):  # forgets to apply the transpose to the constant
        (name,) = m.names
        raw = g.values[name].args[0]
        for user in set(g.users[name]):
            edit.set_value(user, layout.substitute(g.values[user], {name: raw}))


class BrokenIdentityArith(simplify.IdentityArith):
    def find(self, g):  # any scalar constant taken as neutral
        return [self.match((n,), "bad", (0,)) for n, c in g.calls("relax.multiply")
                if g.const(c.args[1]) is not None and g.const(c.args[1]).size == 1]


class BrokenDedup(simplify.DedupOps):
    def find(self, g):  # compares the operator only, not the arguments
        seen, out = {}, []
        for n, _c in g.calls("relax.nn.relu"):
            if "relu" in seen:
                out.append(self.match((seen["relu"], n), "bad"))
            seen.setdefault("relu", n)
        return out


class BrokenSplitConcat(concat.SplitConcatCancel):
    def find(self, g):  # accepts the parts in any order
        out = []
        for n, c in g.calls("relax.concat"):
            items = [g.values[f.name] for f in concat.concat_fields(g, c)]
            if all(isinstance(i, TupleGetItem) for i in items):
                out.append(self.match((items[0].tuple_value.name, n), "bad"))
        return out


class BrokenActIntoConcat(concat.ActivationIntoConcat):
    def rewrite(self, g, m, edit):  # applies the activation to the first part only
        cat_name, name = m.names
        act, cat = g.values[name], g.values[cat_name]
        fields = concat.concat_fields(g, cat)
        first = edit.emit(name, concat.with_args(act, [fields[0]]), "p")
        edit.set_value(name, concat.with_args(cat, [relax.Tuple([first, *fields[1:]])]))


class BrokenActOutOfConcat(concat.ActivationOutOfConcat):
    def find(self, g):  # ignores the activation's extra arguments (clip bounds)
        return [self.match((n,), "bad") for n, c in g.calls("relax.concat")
                if all(g.call(f, *concat.ACTIVATIONS) is not None for f in concat.concat_fields(g, c))]


class BrokenTupleGetItem(simplify.FoldTupleGetItem):
    def rewrite(self, g, m, edit):  # reads the other field of the pair (the zeros)
        (name,) = m.names
        item = g.values[name]
        edit.replace(name, g.values[item.tuple_value.name].fields[1 - int(item.index)])


class BrokenAttention(attention.FuseAttention):
    def rewrite(self, g, m, edit):  # leaves the scale to R.nn.attention's default 1 / sqrt(dim)
        super().rewrite(g, m, edit)
        for pending in edit.before.values():
            for i, (var, expr) in enumerate(pending):
                if getattr(getattr(expr, "op", None), "name", "") == "relax.nn.attention":
                    pending[i] = (var, R.nn.attention(*expr.args[:3]))


class BrokenConv1x1(linear.Conv1x1ToMatmul):
    def rewrite(self, g, m, edit):  # multiplies by W instead of W^T (same shape when C_in == C_out)
        (name,) = m.names
        c = conv.plain_conv(g, name)
        pixels = edit.emit(name, R.permute_dims(c["x"], [0, 2, 3, 1]), "p")
        y = edit.emit(name, R.matmul(pixels, const(c["weight"][:, :, 0, 0], "float32")), "y")
        edit.set_value(name, R.permute_dims(y, [0, 3, 1, 2]))


class BrokenDenseToConv(linear.MatmulToConv1x1):
    def rewrite(self, g, m, edit):  # reshapes W [C, O] to [O, C, 1, 1] without transposing it
        (name,) = m.names
        mm = matmul.const_weight_matmul(g, name)
        (n, o), (cin, _) = mm["shape"], mm["weight"].shape
        x = edit.emit(name, R.reshape(mm["x"], (n, cin, 1, 1)), "x")
        y = edit.emit(name, R.nn.conv2d(x, const(mm["weight"].reshape(o, cin, 1, 1), "float32")), "y")
        edit.set_value(name, R.reshape(y, (n, o)))


class BrokenNHWC(nhwc.Conv2DToNHWC):
    def rewrite(self, g, m, edit):  # lays the kernel out as OWHI: a transposed filter
        (name,) = m.names
        c = conv.plain_conv(g, name)
        x = edit.emit(name, R.permute_dims(c["x"], [0, 2, 3, 1]), "x")
        w = const(np.transpose(c["weight"], (0, 3, 2, 1)), "float32")
        y = edit.emit(name, R.nn.conv2d(x, w, strides=c["strides"], padding=c["padding"], groups=c["groups"],
                                        data_layout="NHWC", kernel_layout="OHWI", out_layout="NHWC"), "y")
        edit.set_value(name, R.permute_dims(y, [0, 3, 1, 2]))


class BrokenPermutePast(nhwc.PermutePastElementwise):
    def rewrite(self, g, m, edit):  # moves the transpose but forgets to transpose the constant
        (perm_name, name), (side,) = m.names, m.params
        call, perm = g.values[name], g.values[perm_name]
        args = list(call.args)
        args[side] = perm.args[0]
        inner = edit.emit(name, concat.with_args(call, args), "inner")
        edit.set_value(name, R.permute_dims(inner, [int(a) for a in perm.attrs.axes]))


class BrokenReshapePast(layout.ReshapePastElementwise):
    def rewrite(self, g, m, edit):  # moves the reshape but puts the reshaped operand first: c - x becomes x - c
        (shaped_name, name), (side,) = m.names, m.params
        call = g.values[name]
        args = [g.values[shaped_name].args[0], const(self._constant(g, call, side), "float32")]
        edit.set_value(name, R.reshape(edit.emit(name, concat.with_args(call, args), "inner"),
                                       static_shape(g.vars[name].ty)))


class BrokenMaxPool(pool.ActivationAfterMaxPool):
    def find(self, g):  # takes any element-wise activation as monotone (gelu is not)
        return [self.match((c.args[0].name, n), "bad") for n, c in g.calls("relax.nn.max_pool2d")
                if g.call(c.args[0], *concat.ACTIVATIONS) is not None]


class BrokenAvgPool(pool.AvgPoolToConv):
    def find(self, g):  # ignores count_include_pad: border windows then divide by k*k, not by their count
        return [self.match((n,), "bad") for n, _ in g.calls("relax.nn.avg_pool2d")]


class BrokenSiblingLinear(type(get_rule("merge_sibling_linear"))):
    def find(self, g):  # any permute_dims views of one input taken as identical, whatever their axes
        names = tuple(n for n, c in g.calls("relax.matmul") if g.call(c.args[0], "relax.permute_dims") is not None)
        return [self.match(names, "bad", (False,))] if len(names) > 1 else []


class BrokenSplitFused(type(get_rule("split_fused_matmul"))):
    def rewrite(self, g, m, edit):  # pieces handed to the wrong readers
        super().rewrite(g, m, edit)
        _swap_first_two_parts(edit)


class BrokenSharedWeight(type(get_rule("merge_shared_weight_matmul"))):
    def find(self, g):  # weights of one shape taken as the same weight, whatever their values
        names = tuple(n for n, _ in g.calls("relax.matmul") if matmul.const_weight_matmul(g, n))
        return [self.match(names, "bad")] if len(names) > 1 else []


class BrokenAssociate(type(get_rule("matmul_associate"))):
    def rewrite(self, g, m, edit):  # multiplies the constant pair in the wrong order: C @ B for B @ C
        inner, name = m.names
        b, c = g.const(g.values[inner].args[1]), g.const(g.values[name].args[1])
        edit.set_value(name, R.matmul(g.values[inner].args[0], const(c @ b, "float32")))


class BrokenDistribute(type(get_rule("matmul_distribute"))):
    def find(self, g):  # any sum of two products, without checking that they share an operand
        return [self.match((c.args[0].name, c.args[1].name, n), "bad", (0, False)) for n, c in g.calls("relax.add")
                if all(g.call(a, "relax.matmul") is not None for a in c.args)]


class BrokenFoldBinary(type(get_rule("fold_binary_into_weight"))):
    def rewrite(self, g, m, edit):  # scales the weight but forgets the bias
        super().rewrite(g, m, edit)
        edit.values.pop(m.names[1], None)


class BrokenCombineConst(type(get_rule("combine_const_adds"))):
    def rewrite(self, g, m, edit):  # adds the two constants also in a chain of multiplies
        (u, name), (side, k) = m.names, m.params
        inner, call = g.values[u], g.values[name]
        combined = g.const(inner.args[1 - k]) + g.const(call.args[1 - side])
        edit.set_value(name, R.multiply(inner.args[k], const(combined, "float32")) if "multiply" in str(call.op)
                       else R.add(inner.args[k], const(combined, "float32")))


class BrokenTransposeIntoMatmul(type(get_rule("transpose_into_matmul"))):
    def rewrite(self, g, m, edit):  # drops the transpose instead of reading B transposed (B square)
        super().rewrite(g, m, edit)
        edit.set_value(m.names[0], R.matmul(*edit.values[m.names[0]].args[0].fields))


class BrokenPadGemm(type(get_rule("pad_gemm"))):
    def find(self, g):
        return [m for m in super().find(g) if m.params[0] == "N"]

    def rewrite(self, g, m, edit):  # pads W's columns in front, so the slice keeps the wrong columns
        (name,), (_, padded) = m.names, m.params
        mm = matmul.const_weight_matmul(g, name)
        n = mm["weight"].shape[1]
        y = edit.emit(name, R.matmul(mm["x"], const(np.pad(mm["weight"], ((0, 0), (padded - n, 0))), "float32")),
                      "y")
        edit.set_value(name, R.strided_slice(y, [len(mm["shape"]) - 1], [0], [n]))


class BrokenFoldLayerNorm(type(get_rule("fold_layernorm_affine"))):
    def find(self, g):  # folds although the post-LN residual add reads the norm too
        (name, _), = g.calls("relax.nn.layer_norm")
        return [self.match((name, *[n for n, _ in g.calls("relax.matmul")]), "bad")]


BROKEN = {
    "matmul_associate": (BrokenAssociate, lambda: T.module(lambda e, x: e(R.matmul(e(R.matmul(
        x, T.rand(np.random.default_rng(0), 8, 8))), T.rand(np.random.default_rng(1), 8, 8))), [(3, 8)])),
    "matmul_distribute": (BrokenDistribute, lambda: T.module(lambda e, x, y: e(R.add(
        e(R.matmul(x, T.rand(np.random.default_rng(0), 4, 3))),
        e(R.matmul(y, T.rand(np.random.default_rng(1), 4, 3))))), [(2, 4), (2, 4)])),
    "fold_binary_into_weight": (BrokenFoldBinary, T.fold_binary_graph),
    "combine_const_adds": (BrokenCombineConst, T.combine_const_graph),
    "merge_sibling_linear": (BrokenSiblingLinear, lambda: T.module(lambda e, x: [
        e(R.matmul(e(R.permute_dims(x, p)), T.rand(np.random.default_rng(i), 4, 3)))
        for i, p in enumerate([[1, 0], [0, 1]])], [(4, 4)])),
    "split_fused_matmul": (BrokenSplitFused, T.fused_matmul_graph),
    "merge_shared_weight_matmul": (BrokenSharedWeight, lambda: T.shared_weight_graph(same=False)),
    "fold_batchnorm": (BrokenFoldBatchNorm, T.bn_graph),
    "merge_parallel_conv2d": (BrokenMergeConv, lambda: T.merge_conv_graph(outs=(4, 4))),
    "enlarge_conv_kernel": (BrokenEnlarge, T.enlarge_graph),
    "merge_parallel_matmul": (BrokenMergeMatmul, lambda: T.merge_matmul_graph(outs=(4, 4, 4))),
    "scalar_mul_motion": (BrokenScalarMotion, T.scale_graph),
    "permute_compose": (BrokenPermuteCompose, lambda: T.permute_graph((3, 3, 3), [((1, 2, 0), (1, 0, 2))])),
    "reshape_compose": (BrokenReshapeCompose,
                        lambda: T.module(lambda e, x: e(R.reshape(e(R.permute_dims(x, [1, 0])), (6,))),
                                         [(2, 3)])),
    "identity_shape_op": (BrokenIdentityShape,
                          lambda: T.module(lambda e, x: e(R.nn.relu(e(R.permute_dims(x, [1, 0])))), [(4, 4)])),
    "fold_const_transform": (BrokenConstTransform,
                             lambda: T.module(lambda e, x: e(R.matmul(x, e(R.permute_dims(
                                 T.rand(np.random.default_rng(0), 8, 8), [1, 0])))), [(3, 8)])),
    "identity_arith": (BrokenIdentityArith, T.identity_arith_graph),
    "dedup": (BrokenDedup, T.dedup_graph),
    "split_concat_cancel": (BrokenSplitConcat, lambda: T.split_concat_graph(order=(1, 0, 2))),
    "activation_into_concat": (BrokenActIntoConcat, T.act_into_concat_graph),
    "activation_out_of_concat": (BrokenActOutOfConcat, lambda: T.act_out_of_concat_graph(hi=(6.0, 1.0))),
    "fold_tuple_get_item": (BrokenTupleGetItem, T.tuple_graph),
    "fuse_attention": (BrokenAttention, lambda: T.attention_graph(scale=0.9)),
    "conv1x1_to_matmul": (BrokenConv1x1, lambda: T.pointwise_graph(cin=4, cout=4)),
    "matmul_to_conv1x1": (BrokenDenseToConv, T.dense_graph),
    "conv2d_to_nhwc": (BrokenNHWC, T.conv_chain_graph),
    "permute_past_elementwise": (BrokenPermutePast,
                                 lambda: T.permute_elementwise_graph((2, 3, 3, 3), (0, 2, 3, 1))),
    "activation_after_maxpool": (BrokenMaxPool, lambda: T.maxpool_graph("gelu", hw=9)),
    "avg_pool_to_conv": (BrokenAvgPool, lambda: T.avgpool_graph(count_include_pad=False)),
    "transpose_into_matmul": (BrokenTransposeIntoMatmul,
                              lambda: T.transpose_matmul_graph(m=4, n=4, k=4, chain=False)),
    "pad_gemm": (BrokenPadGemm, lambda: T.pad_gemm_graph(bias=False)),
    "fold_layernorm_affine": (BrokenFoldLayerNorm, lambda: T.layernorm_linear_graph(residual=True)),
    "reshape_past_elementwise": (BrokenReshapePast, lambda: T.module(
        lambda e, x: e(R.subtract(T.rand(np.random.default_rng(0), 4), e(R.reshape(x, (6, 4))))), [(2, 3, 4)])),
}


def test_every_family_has_a_broken_variant():
    assert set(BROKEN) == set(rule_names())


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_variant_fails_the_numerical_check(name):
    broken_cls, graph = BROKEN[name]
    mod = graph()
    broken = broken_cls()
    found = broken.matches(mod)
    assert found, f"the broken {name} must match its trap graph"
    variants = {str(m): broken.apply(mod, m, check=False) for m in found}
    results = compare_variants(mod, variants)
    assert any(not c.ok for c in results.values()), f"broken {name} went unnoticed: {results}"
    # The real rule, on the same graph, stays exact wherever it applies.
    good = get_rule(name)
    if good.matches(mod):
        assert_exact(mod, {"good": good.apply_all(mod)[0]})


# --------------------------------------------------------------------------- unsafe matches not offered


def test_matmul_with_a_second_reader_is_not_merged():
    rng = np.random.default_rng(0)

    def body(e, x):
        a = e(R.matmul(x, T.rand(rng, 8, 4)))
        b = e(R.matmul(x, T.rand(rng, 8, 4)))
        return [e(R.nn.relu(a)), e(R.nn.gelu(a)), b]  # a has two readers

    mod = T.module(body, [(3, 8)])
    assert get_rule("merge_parallel_matmul").matches(mod) == []
    # Without the second reader the same pair is merged.
    mod2 = T.module(lambda e, x: [e(R.matmul(x, T.rand(rng, 8, 4))), e(R.matmul(x, T.rand(rng, 8, 4)))],
                    [(3, 8)])
    assert len(get_rule("merge_parallel_matmul").matches(mod2)) == 1


def test_matmul_merge_needs_constant_weights_and_only_merges_bias_when_all_have_one():
    rng = np.random.default_rng(0)
    mod = T.module(lambda e, x, w: [e(R.matmul(x, w)), e(R.matmul(x, T.rand(rng, 8, 4)))], [(3, 8), (8, 4)])
    assert get_rule("merge_parallel_matmul").matches(mod) == []
    mixed = T.module(lambda e, x: [e(R.add(e(R.matmul(x, T.rand(rng, 8, 4))), T.rand(rng, 4))),
                                   e(R.matmul(x, T.rand(rng, 8, 4)))], [(3, 8)])
    (m,) = get_rule("merge_parallel_matmul").matches(mixed)
    assert m.params == (False,)
    # A bias that varies along the rows (shape (3, 4)) is not a per-column bias: not absorbed.
    rowwise = T.module(lambda e, x: [e(R.add(e(R.matmul(x, T.rand(rng, 8, 4))), T.rand(rng, 3, 4))),
                                     e(R.add(e(R.matmul(x, T.rand(rng, 8, 4))), T.rand(rng, 4)))], [(3, 8)])
    (m,) = get_rule("merge_parallel_matmul").matches(rowwise)
    assert m.params == (False,)
    assert_exact(rowwise, {"merged": get_rule("merge_parallel_matmul").apply(rowwise, m)})


def test_batch_norm_without_constant_params_or_in_training_is_not_folded():
    rng = np.random.default_rng(0)
    w = T.rand(rng, 4, 3, 3, 3)

    def bn(e, x, gamma, training=False, read=0):
        y = e(R.nn.conv2d(x, w, padding=1))
        t = e(R.nn.batch_norm(y, gamma, T.rand(rng, 4), T.rand(rng, 4), T.rand(rng, 4, low=0.5, high=1.5),
                              axis=1, training=training))
        return e(TupleGetItem(t, read))

    fold = get_rule("fold_batchnorm")
    assert fold.matches(T.module(lambda e, x, g: bn(e, x, g), [(1, 3, 6, 6), (4,)])) == []
    assert fold.matches(T.module(lambda e, x: bn(e, x, T.rand(rng, 4), training=True), [(1, 3, 6, 6)])) == []
    # Reading the running mean (output 1) pins the batch_norm.
    assert fold.matches(T.module(lambda e, x: bn(e, x, T.rand(rng, 4), read=1), [(1, 3, 6, 6)])) == []
    assert len(fold.matches(T.module(lambda e, x: bn(e, x, T.rand(rng, 4)), [(1, 3, 6, 6)]))) == 1


def test_conv_with_a_second_reader_of_its_output_is_not_folded():
    mod = T.bn_graph()
    fold = get_rule("fold_batchnorm")
    rng = np.random.default_rng(0)

    def body(e, x):
        y = e(R.nn.conv2d(x, T.rand(rng, 4, 3, 3, 3), padding=1))
        t = e(R.nn.batch_norm(y, T.rand(rng, 4), T.rand(rng, 4), T.rand(rng, 4), T.rand(rng, 4, low=.5, high=1.5),
                              axis=1, training=False))
        return [e(TupleGetItem(t, 0)), y]

    assert len(fold.matches(mod)) == 1 and fold.matches(T.module(body, [(1, 3, 6, 6)])) == []


def test_convs_with_different_attributes_or_groups_are_not_merged():
    rng = np.random.default_rng(0)
    merge = get_rule("merge_parallel_conv2d")
    stride = T.module(lambda e, x: [e(R.nn.conv2d(x, T.rand(rng, 4, 4, 3, 3), padding=1)),
                                    e(R.nn.conv2d(x, T.rand(rng, 4, 4, 3, 3), strides=2, padding=1))],
                      [(1, 4, 6, 6)])
    grouped = T.module(lambda e, x: [e(R.nn.conv2d(x, T.rand(rng, 4, 2, 3, 3), padding=1, groups=2)),
                                     e(R.nn.conv2d(x, T.rand(rng, 4, 2, 3, 3), padding=1, groups=2))],
                       [(1, 4, 6, 6)])
    kernel = T.module(lambda e, x: [e(R.nn.conv2d(x, T.rand(rng, 4, 4, 1, 1))),
                                    e(R.nn.conv2d(x, T.rand(rng, 4, 4, 3, 3), padding=1))], [(1, 4, 6, 6)])
    nhwc = T.module(lambda e, x: [e(R.nn.conv2d(x, T.rand(rng, 4, 3, 3, 4), padding=1, data_layout="NHWC",
                                                kernel_layout="OHWI")) for _ in range(2)], [(1, 6, 6, 4)])
    for mod in (stride, grouped, kernel, nhwc):
        assert merge.matches(mod) == []
    assert get_rule("fold_batchnorm").matches(nhwc) == []


def test_1x1_conv_is_enlarged_only_next_to_a_matching_sibling():
    rng = np.random.default_rng(0)
    enlarge = get_rule("enlarge_conv_kernel")
    alone = T.module(lambda e, x: e(R.nn.conv2d(x, T.rand(rng, 4, 3, 1, 1))), [(1, 3, 6, 6)])
    other_stride = T.module(lambda e, x: [e(R.nn.conv2d(x, T.rand(rng, 4, 3, 1, 1))),
                                          e(R.nn.conv2d(x, T.rand(rng, 4, 3, 3, 3), strides=2, padding=1))],
                            [(1, 3, 6, 6)])
    same_pad = T.module(lambda e, x: [e(R.nn.conv2d(x, T.rand(rng, 4, 3, 1, 1))),
                                      e(R.nn.conv2d(x, T.rand(rng, 4, 3, 3, 3), padding=0))], [(1, 3, 6, 6)])
    for mod in (alone, other_stride, same_pad):
        assert enlarge.matches(mod) == []


def test_layout_chains_with_a_shared_middle_are_not_composed():
    def body(e, x):
        a = e(R.permute_dims(x, [1, 0]))
        r = e(R.reshape(x, (4, 3)))
        return [e(R.permute_dims(a, [1, 0])), a, e(R.reshape(r, (12,))), r]

    mod = T.module(body, [(3, 4)])
    assert get_rule("permute_compose").matches(mod) == []
    assert get_rule("reshape_compose").matches(mod) == []


def test_identity_arith_needs_a_neutral_constant_that_does_not_broadcast():
    arith = get_rule("identity_arith")
    found = arith.matches(T.identity_arith_graph())
    assert len(found) == 4  # not x*2, not the +0 that broadcasts (2,4) to (3,2,4)
    ints = T.module(lambda e, x: e(R.add(x, relax.const(np.zeros(4, "int32")))), [(2, 4)], dtype="int32")
    left = T.module(lambda e, x: e(R.subtract(relax.const(np.zeros(4, "float32")), x)), [(2, 4)])  # 0 - x
    assert arith.matches(ints) == [] and arith.matches(left) == []


def test_scalar_motion_needs_a_scalar_and_a_single_reader():
    rng = np.random.default_rng(0)
    motion = get_rule("scalar_mul_motion")
    per_channel = T.module(lambda e, x: e(R.multiply(e(R.permute_dims(x, [1, 0])), T.rand(rng, 3))),
                           [(3, 3)])

    def shared(e, x):
        p = e(R.permute_dims(x, [1, 0]))
        return [e(R.multiply(p, relax.const(0.5, "float32"))), p]

    assert motion.matches(per_channel) == [] and motion.matches(T.module(shared, [(3, 3)])) == []


def test_split_concat_needs_every_part_in_order_on_the_same_axis():
    cancel = get_rule("split_concat_cancel")
    assert cancel.matches(T.split_concat_graph(order=(1, 0, 2))) == []
    assert cancel.matches(T.split_concat_graph(order=(0, 1))) == []

    def other_axis(e, x):
        s = e(R.split(x, 2, axis=1))
        return e(R.concat([e(TupleGetItem(s, 0)), e(TupleGetItem(s, 1))], axis=0))

    assert cancel.matches(T.module(other_axis, [(2, 4)])) == []


def test_activation_out_of_concat_needs_one_activation_read_once():
    out = get_rule("activation_out_of_concat")
    mixed = T.module(lambda e, x, y: e(R.concat([e(R.nn.relu(x)), e(R.nn.gelu(y))], axis=1)), [(2, 3), (2, 5)])

    def shared(e, x, y):
        a = e(R.nn.relu(x))
        return [e(R.concat([a, e(R.nn.relu(y))], axis=1)), a]

    assert out.matches(mixed) == [] and out.matches(T.module(shared, [(2, 3), (2, 5)])) == []
    assert [m.names for m in out.matches(T.act_out_of_concat_graph(hi=(6.0, 1.0)))] == [("lv2",)]


def test_dedup_does_not_merge_different_arguments_or_attributes():
    found = get_rule("dedup").matches(T.dedup_graph())
    assert [m.names for m in found] == [("lv", "lv1"), ("lv3", "lv4")]


def test_tuple_item_fold_needs_a_literal_tuple():
    fold = get_rule("fold_tuple_get_item")
    assert [m.names for m in fold.matches(T.tuple_graph())] == [("lv5",)]  # not split(x)[1]
    bn = T.bn_graph()  # batch_norm(...)[0]: an operator's tuple result
    assert fold.matches(bn) == []


def _attention_variant(e, q, k, v, axis=-1, shared_scores=False, per_head=False, transpose_scores=False):
    s = e(R.matmul(q, e(R.permute_dims(k, [0, 2, 1]))))
    if transpose_scores:  # moves the key axis: softmax would normalise over queries
        s = e(R.permute_dims(s, [0, 2, 1]))
    factor = relax.const(np.array([[[0.5]], [[0.25]]], "float32")) if per_head else relax.const(0.5, "float32")
    t = e(R.multiply(s, factor))
    p = e(R.nn.softmax(t, axis=axis))
    out = e(R.matmul(p, v))
    return [out, s] if shared_scores else out


def test_attention_needs_last_axis_softmax_single_readers_and_scalar_scales():
    fuse = get_rule("fuse_attention")
    shapes = [(2, 4, 3), (2, 4, 3), (2, 4, 5)]
    assert len(fuse.matches(T.module(_attention_variant, shapes))) == 1
    for kw in ({"axis": 1}, {"shared_scores": True}, {"per_head": True}, {"transpose_scores": True}):
        mod = T.module(lambda e, q, k, v: _attention_variant(e, q, k, v, **kw), shapes)
        assert fuse.matches(mod) == [], kw
    # Float16 with a mismatched scale dtype, or a broadcasting bias, is not offered either.
    bigger = T.module(lambda e, q, k, v: e(R.matmul(e(R.nn.softmax(e(R.add(
        e(R.matmul(q, e(R.permute_dims(k, [0, 2, 1])))), relax.const(np.zeros((3, 2, 4, 4), "float32")))))),
        e(R.broadcast_to(v, (3, 2, 4, 5))))), shapes)
    assert fuse.matches(bigger) == []


def test_conv1x1_to_matmul_only_for_plain_pointwise_convs():
    rng = np.random.default_rng(0)
    rule = get_rule("conv1x1_to_matmul")
    assert [m.names for m in rule.matches(T.pointwise_graph())] == [("lv",)]  # not strided, not 3x3
    padded = T.module(lambda e, x: e(R.nn.conv2d(x, T.rand(rng, 4, 4, 1, 1), padding=1)), [(1, 4, 5, 5)])
    grouped = T.module(lambda e, x: e(R.nn.conv2d(x, T.rand(rng, 4, 2, 1, 1), groups=2)), [(1, 4, 5, 5)])
    weight_in = T.module(lambda e, x, w: e(R.nn.conv2d(x, w)), [(1, 4, 5, 5), (4, 4, 1, 1)])
    nhwc_conv = T.module(lambda e, x: e(R.nn.conv2d(x, T.rand(rng, 4, 1, 1, 4), data_layout="NHWC",
                                                    kernel_layout="OHWI")), [(1, 5, 5, 4)])
    for mod in (padded, grouped, weight_in, nhwc_conv):
        assert rule.matches(mod) == []
    # An NHWC region needs a constant OIHW weight on NCHW data too (padding and groups are fine).
    to_nhwc = get_rule("conv2d_to_nhwc")
    assert to_nhwc.matches(weight_in) == [] and to_nhwc.matches(nhwc_conv) == []
    assert len(to_nhwc.matches(padded)) == len(to_nhwc.matches(grouped)) == 1


def test_matmul_to_conv1x1_needs_a_2d_input_and_a_constant_weight():
    rule = get_rule("matmul_to_conv1x1")
    assert [m.names for m in rule.matches(T.dense_graph())] == [("lv1",)]  # not the 3-D matmul
    assert rule.matches(T.module(lambda e, x, w: e(R.matmul(x, w)), [(2, 6), (6, 5)])) == []
    ints = T.module(lambda e, x: e(R.matmul(x, relax.const(np.ones((6, 5), "int32")))), [(2, 6)], dtype="int32")
    assert rule.matches(ints) == []


def test_permute_past_elementwise_needs_a_single_reader_and_a_non_broadcasting_constant():
    rng = np.random.default_rng(0)
    rule = get_rule("permute_past_elementwise")

    def shared(e, x):
        p = e(R.permute_dims(x, [1, 0]))
        return [e(R.nn.relu(p)), p]

    bigger = T.module(lambda e, x: e(R.add(e(R.permute_dims(x, [1, 0])), T.rand(rng, 2, 4, 3))), [(3, 4)])
    other = T.module(lambda e, x, y: e(R.add(e(R.permute_dims(x, [1, 0])), y)), [(3, 4), (4, 3)])
    for mod in (T.module(shared, [(3, 4)]), bigger, other):
        assert rule.matches(mod) == []


def test_activation_after_maxpool_needs_a_monotone_activation_read_once():
    rule = get_rule("activation_after_maxpool")
    for act in ("relu", "clip", "sigmoid", "tanh", "leakyrelu"):
        assert len(rule.matches(T.maxpool_graph(act))) == 1, act
    for act in ("gelu", "silu", "neg_leakyrelu"):
        assert rule.matches(T.maxpool_graph(act)) == [], act
    assert rule.matches(T.maxpool_graph(ceil_mode=True)) == []

    def shared(e, x):
        a = e(R.nn.relu(x))
        return [e(R.nn.max_pool2d(a, pool_size=2, strides=2)), a]

    assert rule.matches(T.module(shared, [(1, 3, 6, 6)])) == []


def test_avg_pool_to_conv_needs_every_window_to_divide_by_its_size():
    rule = get_rule("avg_pool_to_conv")
    assert rule.matches(T.avgpool_graph(count_include_pad=False)) == []
    assert len(rule.matches(T.avgpool_graph(pad=0, count_include_pad=False))) == 1
    ceil = T.module(lambda e, x: e(R.nn.avg_pool2d(x, pool_size=2, strides=2, ceil_mode=True,
                                                   count_include_pad=True)), [(1, 3, 5, 5)])
    nhwc_pool = T.module(lambda e, x: e(R.nn.avg_pool2d(x, pool_size=2, layout="NHWC")), [(1, 5, 5, 3)])
    assert rule.matches(ceil) == [] and rule.matches(nhwc_pool) == []


def test_nhwc_regions_then_permute_motion_cancel_the_transposes_between_convs():
    """conv -> bias -> relu -> conv in NHWC: after moving the output transpose down, only the region's
    outer two transposes are left (the ones between the convs cancel)."""
    mod = T.conv_chain_graph()
    nhwc_mod, _ = get_rule("conv2d_to_nhwc").apply_all(mod)
    cur = apply_until_none(nhwc_mod, ("permute_past_elementwise", "permute_compose"))
    assert count_calls(nhwc_mod) == 4 and count_calls(cur) == 2
    assert_exact(mod, {"nhwc": nhwc_mod, "cancelled": cur})


def test_apply_refuses_a_match_that_is_not_offered():
    from tvm_rl.graph.rules import RuleError

    mod = T.permute_graph()
    m = get_rule("permute_compose").matches(mod)[0]
    with pytest.raises(RuleError, match="does not match"):
        get_rule("permute_compose").apply(T.reshape_graph(), m)
    with pytest.raises(RuleError, match="given to rule"):
        get_rule("reshape_compose").apply(mod, m)


def test_rewrite_touches_only_its_match():
    """Old dead code and the other matches stay as they were."""
    def body(e, x):
        e(R.nn.relu(x))  # dead already: not ours to remove
        a = e(R.permute_dims(e(R.permute_dims(x, [1, 0])), [1, 0]))
        b = e(R.permute_dims(e(R.permute_dims(x, [1, 0])), [1, 0]))
        return [a, b]

    mod = T.module(body, [(2, 3)])
    rule = get_rule("permute_compose")
    first, second = rule.matches(mod)
    new = rule.apply(mod, first)
    names = [b.var.name for b in new["main"].body.blocks[0].bindings]
    assert "lv" in names and first.names[0] not in names and first.names[1] not in names
    assert rule.matches(new) == [second]


# ------------------------------------------------------------------------------ hypothesis: random shapes


@HYPOTHESIS
@given(st.data())
def test_permute_compose_random(data):
    rank = data.draw(st.integers(1, 4), "rank")
    shape = data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank), "shape")
    p1 = data.draw(st.permutations(range(rank)), "p1")
    p2 = data.draw(st.permutations(range(rank)), "p2")
    mod = T.permute_graph(shape, [(p1, p2), (p1, [p1.index(k) for k in range(rank)])])  # 2nd: identity
    check_family("permute_compose", mod, min_matches=2)


def _factorings(n):
    return [(a, n // a) for a in range(1, n + 1) if n % a == 0]


@HYPOTHESIS
@given(st.data())
def test_reshape_compose_random(data):
    shape = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3), "shape")
    n = int(np.prod(shape))
    s1 = data.draw(st.sampled_from(_factorings(n)), "s1")
    s2 = data.draw(st.sampled_from([(n,), *_factorings(n), tuple(shape)]), "s2")
    check_family("reshape_compose", T.reshape_graph(shape, [(s1, s2)]))


@HYPOTHESIS
@given(cin=st.integers(1, 4), cout=st.integers(1, 5), hw=st.integers(3, 7), k=st.sampled_from([1, 3]),
       stride=st.integers(1, 2), groups=st.sampled_from([1, 2]), eps=st.sampled_from([1e-5, 1e-3]))
def test_fold_batchnorm_random(cin, cout, hw, k, stride, groups, eps):
    cin, cout = cin * groups, cout * groups  # grouped convs too: the scale is per output channel
    check_family("fold_batchnorm", T.bn_graph(cin, cout, hw, k, stride, groups, eps))


def _bn_after_matmul(cin=3, cout=4, hw=5, eps=1e-5):
    """bn_graph with its 1x1 conv made a matmul (permute_dims(x_nhwc @ W) -> batch_norm)."""
    mod = T.bn_graph(cin, cout, hw, k=1, eps=eps)
    converted, applied = get_rule("conv1x1_to_matmul").apply_all(mod)
    assert applied and get_rule("fold_batchnorm").matches(converted)
    return converted


@HYPOTHESIS
@given(cin=st.integers(1, 4), cout=st.integers(1, 5), hw=st.integers(2, 6), eps=st.sampled_from([1e-5, 1e-3]))
def test_fold_batchnorm_after_conv1x1_to_matmul_random(cin, cout, hw, eps):
    """The batch norm of a 1x1 conv made a matmul still folds (into the matmul's columns), exactly."""
    check_family("fold_batchnorm", _bn_after_matmul(cin, cout, hw, eps))


def test_fold_batchnorm_into_matmul_needs_the_columns_normalised_and_a_single_reader():
    rng = np.random.default_rng(0)
    fold = get_rule("fold_batchnorm")
    w = T.rand(rng, 4, 4)

    def bn(e, x, axes, axis=1, second_reader=False):
        y = e(R.matmul(x, w))
        p = e(R.permute_dims(y, axes))
        t = e(R.nn.batch_norm(p, *[T.rand(rng, 4, low=0.5, high=1.5) for _ in range(4)], axis=axis, training=False))
        return [e(TupleGetItem(t, 0)), y] if second_reader else e(TupleGetItem(t, 0))

    assert len(fold.matches(T.module(lambda e, x: bn(e, x, [0, 3, 1, 2]), [(1, 4, 4, 4)]))) == 1
    # Axis 1 after this permutation is the matmul's rows (dim 2), not its columns: not a per-column scale.
    assert fold.matches(T.module(lambda e, x: bn(e, x, [0, 2, 3, 1]), [(1, 4, 4, 4)])) == []
    assert fold.matches(T.module(lambda e, x: bn(e, x, [0, 3, 1, 2], second_reader=True), [(1, 4, 4, 4)])) == []


def test_broken_fold_batchnorm_is_caught_on_the_matmul_form():
    mod = _bn_after_matmul()
    found = BrokenFoldBatchNorm().matches(mod)
    assert found and found[0].params == ("matmul",)
    results = compare_variants(mod, {"broken": BrokenFoldBatchNorm().apply(mod, found[0], check=False)})
    assert not results["broken"].ok


@HYPOTHESIS
@given(cin=st.integers(1, 4), outs=st.lists(st.integers(1, 4), min_size=2, max_size=3),
       hw=st.integers(3, 8), k=st.sampled_from([3, 5]), stride=st.integers(1, 3), bias=st.booleans())
def test_merge_conv_and_enlarge_random(cin, outs, hw, k, stride, bias):
    """Random sibling convolutions merge; a 1x1 next to a kxk enlarges, then all merge."""
    check_family("merge_parallel_conv2d", T.merge_conv_graph(cin, outs, k, stride, hw, bias))
    mod = T.enlarge_graph(cin, hw, stride, outs[:2], k)
    check_family("enlarge_conv_kernel", mod)
    enlarged, _ = get_rule("enlarge_conv_kernel").apply_all(mod)
    check_family("merge_parallel_conv2d", enlarged)


@HYPOTHESIS
@given(batch=st.lists(st.integers(1, 3), min_size=0, max_size=2), m=st.integers(1, 4), k=st.integers(1, 6),
       outs=st.lists(st.integers(1, 5), min_size=2, max_size=4), bias=st.booleans())
def test_merge_matmul_random(batch, m, k, outs, bias):
    check_family("merge_parallel_matmul", T.merge_matmul_graph((*batch, m, k), outs, bias))



@HYPOTHESIS
@given(groups=st.integers(1, 3), queries=st.integers(1, 5), keys=st.integers(1, 5), dim=st.integers(1, 4),
       dim_v=st.integers(1, 4), scale=st.sampled_from([None, 0.125, 0.7]), bias=st.booleans())
def test_fuse_attention_random(groups, queries, keys, dim, dim_v, scale, bias):
    check_family("fuse_attention", T.attention_graph(groups, queries, keys, dim, dim_v, scale, bias))


@HYPOTHESIS
@given(cin=st.integers(1, 4), cout=st.integers(1, 4), hw=st.integers(1, 5), batch=st.integers(1, 2),
       n=st.integers(1, 3))
def test_dense_and_conv1x1_random(cin, cout, hw, batch, n):
    check_family("conv1x1_to_matmul", T.pointwise_graph(cin, cout, hw, batch))
    check_family("matmul_to_conv1x1", T.dense_graph(n, cin, cout))


@HYPOTHESIS
@given(cin=st.integers(1, 3), mid=st.integers(1, 3), cout=st.integers(1, 3), hw=st.integers(3, 7),
       k=st.sampled_from([1, 3]), stride=st.integers(1, 2), groups=st.sampled_from([1, 2]))
def test_conv2d_to_nhwc_random(cin, mid, cout, hw, k, stride, groups):
    check_family("conv2d_to_nhwc", T.conv_chain_graph(cin, mid * groups, cout, hw, k, stride, groups),
                 min_matches=2)


@HYPOTHESIS
@given(st.data())
def test_permute_past_elementwise_random(data):
    rank = data.draw(st.integers(1, 4), "rank")
    shape = data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank), "shape")
    axes = data.draw(st.permutations(range(rank)), "axes")
    check_family("permute_past_elementwise", T.permute_elementwise_graph(shape, axes), min_matches=2)


@HYPOTHESIS
@given(act=st.sampled_from(["relu", "clip", "sigmoid", "tanh", "leakyrelu"]), k=st.integers(1, 3),
       stride=st.integers(1, 3), pad=st.integers(0, 2), hw=st.integers(3, 8))
def test_activation_after_maxpool_random(act, k, stride, pad, hw):
    mod = T.maxpool_graph(act, k, stride, min(pad, k - 1), hw)
    check_family("activation_after_maxpool", mod)


@HYPOTHESIS
@given(k=st.integers(1, 3), stride=st.integers(1, 3), pad=st.integers(0, 1), hw=st.integers(3, 7),
       channels=st.integers(1, 4))
def test_avg_pool_to_conv_random(k, stride, pad, hw, channels):
    check_family("avg_pool_to_conv", T.avgpool_graph(k, stride, min(pad, k // 2), hw, channels))


# ---- "every match of a rule" as one action (rules.AllMatches)


@pytest.mark.parametrize("name", [n for n in T.EXAMPLES if len(get_rule(n).matches(T.EXAMPLES[n]())) >= 2])
def test_all_matches_action_applies_every_match_exactly(name):
    mod, rule = T.EXAMPLES[name](), get_rule(name)
    every = AllMatches(rule)
    found = every.matches(mod)
    assert len(found) == 1 and found[0].rule == f"{name}[all]"
    assert set(found[0].names) == {n for m in rule.matches(mod) for n in m.names}
    out = every.apply(mod, found[0])
    assert relax.analysis.check_well_formed(out)
    assert same_graph(out, rule.apply_all(mod)[0])
    assert not rule.matches(out) or len(rule.matches(out)) < len(rule.matches(mod))
    assert_exact(mod, {"all": out})


def test_all_matches_action_needs_two_matches_and_its_own_match():
    one = T.bn_graph()  # a single batch norm: the family's own action covers it
    assert len(get_rule("fold_batchnorm").matches(one)) == 1
    assert AllMatches(get_rule("fold_batchnorm")).matches(one) == []
    mod = T.permute_graph()
    every = AllMatches(get_rule("permute_compose"))
    with pytest.raises(RuleError, match="given to rule"):
        every.apply(mod, get_rule("permute_compose").matches(mod)[0])
    stale = every.matches(mod)[0]
    with pytest.raises(RuleError, match="does not match"):
        every.apply(every.apply(mod, stale), stale)


def test_with_all_matches_keeps_the_rules_and_adds_one_action_each():
    rules = all_rules()
    extended = with_all_matches(rules)
    assert extended[:len(rules)] == rules
    assert [r.name for r in extended[len(rules):]] == [f"{r.name}[all]" for r in rules]
    assert len(with_all_matches(extended)) == len(extended)  # not doubled
