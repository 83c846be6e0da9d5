"""transpose_into_matmul, pad_gemm (rules/gemm.py) and fold_layernorm_affine (rules/norm.py): exact at every
match, on random shapes and on the exported transformers, and never offered where a precondition fails."""
import numpy as np
import tvm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm import relax

from tests.support import graph_examples as T
from tvm_rl.graph.rules import get_rule
from tvm_rl.graph.rules.ir import Graph
from tvm_rl.graph.verify import compare_variants

R = relax.op
HYPOTHESIS = settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


# check_family as in test_graph_rules_small.py, not imported from there: that module asks every rule for its
# matches when it is collected, so a rule that raises would stop this file's collection too.
def check_family(name, mod, min_matches=1):
    """Apply `name` at each of its matches alone and at all of them, and check every result is exact."""
    rule = get_rule(name)
    found = rule.matches(mod)
    assert len(found) >= min_matches, f"{name} matched {len(found)} places"
    variants = {str(m): rule.apply(mod, m) for m in found}
    variants["all"], applied = rule.apply_all(mod)
    assert applied
    for key, new in variants.items():
        assert not new.same_as(mod) and relax.analysis.check_well_formed(new), key
    bad = {k: c for k, c in compare_variants(mod, variants).items() if not c.ok}
    assert not bad, f"rewrites changed the result: {bad}"
    return found


def offered(name, mod):
    return get_rule(name).matches(mod)


def assert_wrong_if_forced(name, mod, names):
    """The family's rewrite, forced onto `names` of `mod` (where a precondition fails), changes the result."""
    class Forced(type(get_rule(name))):
        def find(self, g):
            return [self.match(names, "forced")]

    results = compare_variants(mod, {"forced": Forced().apply(mod, Forced().match(names, "forced"), check=False)})
    assert not results["forced"].ok, results


def _dyn_module(body, shape, dtype="float32"):
    """Like T.module, one input whose first dimension is symbolic."""
    n = tvm.tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x0", relax.TensorType([n, *shape[1:]], dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            gv = bb.emit_output(body(bb.emit, x))
        bb.emit_func_output(gv)
    return bb.get()


# ================================================================================= transpose_into_matmul

def test_transpose_into_matmul_exported_chain_and_both_sides():
    for kwargs in ({}, {"chain": False}, {"lhs": True}, {"lhs": True, "chain": False}, {"batch": ()}):
        found = check_family("transpose_into_matmul", T.transpose_matmul_graph(**kwargs))
        assert len(found) == 1 and found[0].params == ((0,) if kwargs.get("lhs") else (1,))
    # K's permute, broadcast and reshape all go (Q's views stay): one einsum reads K through one reshape.
    g = Graph(get_rule("transpose_into_matmul").apply_all(T.transpose_matmul_graph())[0])
    (_, einsum), = g.calls("relax.einsum")
    assert not list(g.calls("relax.permute_dims")) and len(list(g.calls("relax.broadcast_to"))) == 1
    assert g.values[einsum.args[0].fields[1].name].args[0].name == "x1"


def test_transpose_into_matmul_legalises_to_one_kernel():
    from tvm_rl.measure import kernel_stage, parse_target

    mod = get_rule("transpose_into_matmul").apply_all(T.transpose_matmul_graph(chain=False))[0]
    kernels = kernel_stage(mod, parse_target("llvm"))
    names = [gv.name_hint for gv, f in kernels.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert not any("transpose" in n for n in names) and any("einsum" in n for n in names), names


@HYPOTHESIS
@given(batch=st.lists(st.integers(1, 3), max_size=2), m=st.integers(1, 6), n=st.integers(1, 6),
       k=st.integers(1, 6), lhs=st.booleans(), chain=st.booleans())
def test_transpose_into_matmul_random(batch, m, n, k, lhs, chain):
    check_family("transpose_into_matmul", T.transpose_matmul_graph(tuple(batch), m, n, k, lhs, chain))


def test_transpose_into_matmul_on_exported_attention():
    from tvm_rl.models import load

    for name in ("bert", "vit"):
        mod = load(name, "tiny").mod
        found = check_family("transpose_into_matmul", mod, min_matches=2)
        assert all(m.params == (1,) for m in found)  # Q @ K^T in each layer


def test_transpose_into_matmul_needs_a_swap_of_the_last_two_axes():
    # [0, 2, 1, 3] swaps heads and tokens: not a matrix transpose.
    mod = T.module(lambda e, a, b: e(R.matmul(a, e(R.permute_dims(b, [0, 2, 1, 3])))), [(2, 3, 4, 4), (2, 4, 3, 4)])
    assert not offered("transpose_into_matmul", mod)
    # A plain matmul of two inputs has nothing to fold.
    assert not offered("transpose_into_matmul", T.module(lambda e, a, b: e(R.matmul(a, b)), [(3, 4), (4, 5)]))


def test_transpose_into_matmul_needs_views_between_transpose_and_matmul():
    def relu_between(e, a, b):
        return e(R.matmul(a, e(R.nn.relu(e(R.permute_dims(b, [1, 0]))))))

    assert not offered("transpose_into_matmul", T.module(relu_between, [(3, 4), (5, 4)]))

    def broadcast(e, a, b):  # a real broadcast of the batch: one K^T for two queries
        return e(R.matmul(a, e(R.broadcast_to(e(R.permute_dims(b, [0, 2, 1])), (2, 4, 5)))))

    assert not offered("transpose_into_matmul", T.module(broadcast, [(2, 3, 4), (1, 5, 4)]))

    def reshape_rows(e, a, b):  # regroups the elements of each matrix, not whole matrices
        return e(R.matmul(a, e(R.reshape(e(R.permute_dims(b, [0, 2, 1])), (2, 3, 4)))))

    mod = T.module(reshape_rows, [(2, 5, 3), (2, 3, 4)])
    assert not offered("transpose_into_matmul", mod)
    # Reading the source "transposed" through that reshape is a different matrix.
    forced = T.module(lambda e, a, b: e(R.einsum([a, e(R.reshape(b, (2, 4, 3)))], "amk,ank->amn")),
                      [(2, 5, 3), (2, 3, 4)])
    assert not compare_variants(mod, {"forced": forced})["forced"].ok


def test_transpose_into_matmul_needs_equal_batch_dims_and_ranks():
    # Batch broadcasting: [2, 3, 4] @ [1, 4, 5].
    mod = T.module(lambda e, a, b: e(R.matmul(a, e(R.permute_dims(b, [0, 2, 1])))), [(2, 3, 4), (1, 5, 4)])
    assert not offered("transpose_into_matmul", mod)
    # Rank broadcasting: [2, 3, 4] @ [4, 5].
    mod = T.module(lambda e, a, b: e(R.matmul(a, e(R.permute_dims(b, [1, 0])))), [(2, 3, 4), (5, 4)])
    assert not offered("transpose_into_matmul", mod)
    # A vector times a matrix: [4] @ [4, 5] (no batch dims on either side, but different ranks).
    mod = T.module(lambda e, a, b: e(R.matmul(a, e(R.permute_dims(b, [1, 0])))), [(4,), (5, 4)])
    assert not offered("transpose_into_matmul", mod)


def test_transpose_into_matmul_keeps_the_result_dtype_and_float_operands():
    def widening(e, a, b):  # float16 operands, float32 result: einsum would return float16
        return e(R.matmul(a, e(R.permute_dims(b, [1, 0])), out_dtype="float32"))

    assert not offered("transpose_into_matmul", T.module(widening, [(3, 4), (5, 4)], dtype="float16"))
    mod = T.module(lambda e, a, b: e(R.matmul(a, e(R.permute_dims(b, [1, 0])))), [(3, 4), (5, 4)], dtype="int32")
    assert not offered("transpose_into_matmul", mod)
    for dtype, result in (("int8", "float32"), ("float32", "int32")):  # a float side only
        mod = T.module(lambda e, a, b: e(R.matmul(a, e(R.permute_dims(b, [1, 0])), out_dtype=result)),
                       [(3, 4), (5, 4)], dtype=dtype)
        assert not offered("transpose_into_matmul", mod)


def test_transpose_into_matmul_needs_an_activation_read_once():
    def shared(e, a, b):  # the transpose has a second reader: its copy stays
        t = e(R.permute_dims(b, [1, 0]))
        return [e(R.matmul(a, t)), e(R.nn.relu(t))]

    assert not offered("transpose_into_matmul", T.module(shared, [(3, 4), (5, 4)]))

    def shared_view(e, a, b):  # a link of the chain has a second reader
        t = e(R.broadcast_to(e(R.permute_dims(b, [0, 2, 1])), (2, 4, 5)))
        return [e(R.matmul(a, t)), e(R.nn.relu(t))]

    assert not offered("transpose_into_matmul", T.module(shared_view, [(2, 3, 4), (2, 5, 4)]))
    # A transposed constant is folded at compile time already (fold_const_transform): no copy kernel.
    weight = T.rand(np.random.default_rng(0), 5, 4)
    mod = T.module(lambda e, a: e(R.matmul(a, e(R.permute_dims(weight, [1, 0])))), [(3, 4)])
    assert not offered("transpose_into_matmul", mod)
    # ... also reached through a broadcast, which hides it from the operand's own constant check (find raised
    # on it while the fuzzer's motifs were written) ...
    batched = T.rand(np.random.default_rng(1), 2, 3, 4)
    mod = T.module(lambda e, x: e(R.matmul(x, e(R.broadcast_to(e(R.permute_dims(batched, [0, 2, 1])), (2, 4, 3))))),
                   [(2, 3, 4)])
    assert not offered("transpose_into_matmul", mod)
    # ... and one transposed twice: its source is a binding, but the chain folds to a constant all the same.
    mod = T.module(lambda e, x: e(R.matmul(x, e(R.permute_dims(e(R.permute_dims(batched, [0, 2, 1])), [0, 2, 1])))),
                   [(2, 3, 3)])
    g = Graph(mod)
    assert all(g.const(call.args[1]) is not None for _, call in g.calls("relax.matmul"))
    assert not offered("transpose_into_matmul", mod)


# ================================================================================================ pad_gemm


def test_pad_gemm_pads_each_dimension_exactly():
    found = check_family("pad_gemm", T.pad_gemm_graph(), min_matches=3)
    assert {m.params for m in found} == {("N", 16), ("M", 16), ("K", 16)}
    found = check_family("pad_gemm", T.pad_gemm_graph(bias=False), min_matches=3)
    # 2-D x (an exported linear's [B*S, K]) and the ViT-like 65 tokens / 1000 classes.
    found = check_family("pad_gemm", T.pad_gemm_graph((65, 48), n=1000), min_matches=2)
    assert {m.params for m in found} == {("M", 80), ("N", 1008)}


@HYPOTHESIS
@given(batch=st.lists(st.integers(1, 2), max_size=1), m=st.integers(13, 40), k=st.integers(13, 40),
       n=st.integers(13, 40), bias=st.booleans())
def test_pad_gemm_random(batch, m, k, n, bias):
    mod = T.pad_gemm_graph((*batch, m, k), n, bias)
    if get_rule("pad_gemm").matches(mod):
        check_family("pad_gemm", mod)


def test_pad_gemm_skips_multiples_and_large_relative_padding():
    assert not offered("pad_gemm", T.pad_gemm_graph((2, 16, 32), n=48))
    # 10 -> 16 would be 60% more work: never offered.
    assert not offered("pad_gemm", T.pad_gemm_graph((2, 10, 10), n=10))


def test_pad_gemm_needs_a_constant_float_weight_and_static_shapes():
    assert not offered("pad_gemm", T.module(lambda e, a, b: e(R.matmul(a, b)), [(15, 15), (15, 15)]))
    weight = relax.const(np.ones((15, 15), "int32"), "int32")
    assert not offered("pad_gemm", T.module(lambda e, a: e(R.matmul(a, weight)), [(15, 15)], dtype="int32"))
    weight = T.rand(np.random.default_rng(0), 15, 15)
    assert not offered("pad_gemm", _dyn_module(lambda e, a: e(R.matmul(a, weight)), (15, 15)))
    # float16 operands with a float32 result: the padded weight would change the dtype rules.
    weight16 = T.rand(np.random.default_rng(0), 15, 15, dtype="float16")
    mod = T.module(lambda e, a: e(R.matmul(a, weight16, out_dtype="float32")), [(15, 15)], dtype="float16")
    assert not offered("pad_gemm", mod)


# =================================================================================== fold_layernorm_affine


def test_fold_layernorm_affine_into_qkv_and_mlp():
    found = check_family("fold_layernorm_affine", T.layernorm_linear_graph())
    assert len(found) == 1 and len(found[0].names) == 4  # the norm and its three linears
    check_family("fold_layernorm_affine", T.layernorm_linear_graph(reshape=False, bias=(False, True, True)))
    new = Graph(get_rule("fold_layernorm_affine").apply(T.layernorm_linear_graph(), found[0]))
    (_, ln), = new.calls("relax.nn.layer_norm")
    assert (new.const(ln.args[1]) == 1).all() and (new.const(ln.args[2]) == 0).all()


@HYPOTHESIS
@given(rows=st.lists(st.integers(1, 3), min_size=1, max_size=2), k=st.integers(2, 9),
       outs=st.lists(st.integers(1, 9), min_size=1, max_size=3), reshape=st.booleans(), data=st.data())
def test_fold_layernorm_affine_random(rows, k, outs, reshape, data):
    bias = data.draw(st.lists(st.booleans(), min_size=len(outs), max_size=len(outs)), "bias")
    check_family("fold_layernorm_affine", T.layernorm_linear_graph((*rows, k), outs, bias, reshape))


def test_fold_layernorm_affine_on_pre_ln_transformers_not_on_post_ln_bert():
    from tvm_rl.models import load

    assert not offered("fold_layernorm_affine", load("bert", "tiny").mod)  # every LN feeds a residual add
    for name, count in (("vit", 4), ("dalle", 5), ("transducer", 4)):
        found = check_family("fold_layernorm_affine", load(name, "tiny").mod, min_matches=count)
        assert len(found) == count and max(len(m.names) for m in found) == 4  # one LN into Q, K, V


def test_fold_layernorm_affine_needs_every_reader_a_constant_linear():
    mod = T.layernorm_linear_graph(residual=True)
    assert not offered("fold_layernorm_affine", mod)
    # Folded anyway, the residual add would read the norm without its scale and shift.
    assert_wrong_if_forced("fold_layernorm_affine", mod, ("lv", "lv3", "lv8", "lv13"))
    rng = np.random.default_rng(0)
    gamma, beta, w = T.rand(rng, 8, low=0.5, high=1.5), T.rand(rng, 8), T.rand(rng, 8, 4)

    def shared_reshape(e, x):  # the reshape also feeds a non-linear reader
        v = e(R.reshape(e(R.nn.layer_norm(x, gamma, beta, axes=[-1])), (4, 8)))
        return [e(R.matmul(v, w)), e(R.nn.relu(v))]

    assert not offered("fold_layernorm_affine", T.module(shared_reshape, [(2, 2, 8)]))

    def activation_weight(e, x, w2):
        return e(R.matmul(e(R.nn.layer_norm(x, gamma, beta, axes=[-1])), w2))

    assert not offered("fold_layernorm_affine", T.module(activation_weight, [(2, 8), (8, 4)]))

    # The normalised value (or its reshape) is bound as an output of the dataflow block and returned.
    mod = _outputs_module(lambda emit, x: emit(R.nn.layer_norm(x, gamma, beta, axes=[-1])), w, (2, 8))
    assert not offered("fold_layernorm_affine", mod)
    assert_wrong_if_forced("fold_layernorm_affine", mod, ("gv", "gv1"))
    mod = _outputs_module(lambda emit, x: emit(R.reshape(
        emit(R.nn.layer_norm(x, gamma, beta, axes=[-1])), (4, 8))), w, (2, 2, 8))
    assert not offered("fold_layernorm_affine", mod)


def _outputs_module(norm, w, shape):
    """main(x) returning (v, v @ w) where `norm(emit, x)` builds v, every binding an output of the block."""
    bb = relax.BlockBuilder()
    x = relax.Var("x0", relax.TensorType(list(shape), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            v = norm(bb.emit_output, x)
            y = bb.emit_output(R.matmul(v, w))
        bb.emit_func_output(relax.Tuple([v, y]))
    return bb.get()


def test_fold_layernorm_affine_needs_reshapes_that_keep_rows_whole():
    rng = np.random.default_rng(0)
    gamma, beta, w = T.rand(rng, 8, low=0.5, high=1.5), T.rand(rng, 8), T.rand(rng, 16, 4)

    def regroup(e, x):  # [2, 8] -> [1, 16]: a row now mixes two normalised rows with gamma tiled
        return e(R.matmul(e(R.reshape(e(R.nn.layer_norm(x, gamma, beta, axes=[-1])), (1, 16))), w))

    mod = T.module(regroup, [(2, 8)])
    assert not offered("fold_layernorm_affine", mod)


def test_fold_layernorm_affine_needs_a_last_axis_norm_with_constant_affine():
    rng = np.random.default_rng(0)
    w = T.rand(rng, 4, 3)

    def over_two_axes(e, x):
        ln = e(R.nn.layer_norm(x, T.rand(rng, 2, 4, low=0.5, high=1.5), T.rand(rng, 2, 4), axes=[-2, -1]))
        return e(R.matmul(ln, w))

    mod = T.module(over_two_axes, [(3, 2, 4)])
    assert not offered("fold_layernorm_affine", mod)

    def param_gamma(e, x, g):
        return e(R.matmul(e(R.nn.layer_norm(x, g, T.rand(rng, 4), axes=[-1])), w))

    assert not offered("fold_layernorm_affine", T.module(param_gamma, [(3, 4), (4,)]))

    def param_beta(e, x, b):
        return e(R.matmul(e(R.nn.layer_norm(x, T.rand(rng, 4), b, axes=[-1])), w))

    assert not offered("fold_layernorm_affine", T.module(param_beta, [(3, 4), (4,)]))

    for center, scale in ((False, True), (True, False)):
        def flags(e, x):
            return e(R.matmul(e(R.nn.layer_norm(x, T.rand(rng, 4), T.rand(rng, 4), axes=[-1], center=center,
                                                scale=scale)), w))

        assert not offered("fold_layernorm_affine", T.module(flags, [(3, 4)]))
    gamma, beta = T.rand(rng, 4), T.rand(rng, 4)
    dyn = _dyn_module(lambda e, x: e(R.matmul(e(R.nn.layer_norm(x, gamma, beta, axes=[-1])), w)), (3, 4))
    assert not offered("fold_layernorm_affine", dyn)


def test_fold_layernorm_affine_needs_a_normalisation_over_the_last_axis_only():
    """Normalising over the first axis of [4, 4] (gamma per row) and folding gamma into W's rows is wrong."""
    rng = np.random.default_rng(1)
    gamma, beta, w = T.rand(rng, 4, low=0.5, high=1.5), T.rand(rng, 4), T.rand(rng, 4, 3)
    mod = T.module(lambda e, x: e(R.matmul(e(R.nn.layer_norm(x, gamma, beta, axes=[0])), w)), [(4, 4)])
    assert not offered("fold_layernorm_affine", mod)
    assert_wrong_if_forced("fold_layernorm_affine", mod, ("lv", "lv1"))


def test_fold_layernorm_affine_in_half_precision_is_within_its_rounding():
    """float16 weights: the folded W' and b' are rounded once more, an error of float16's epsilon (1e-3)."""
    rng = np.random.default_rng(0)
    gamma, beta, w = (T.rand(rng, 8, dtype="float16"), T.rand(rng, 8, dtype="float16"),
                      T.rand(rng, 8, 4, dtype="float16"))
    mod = T.module(lambda e, x: e(R.matmul(e(R.nn.layer_norm(x, gamma, beta, axes=[-1])), w)), [(3, 8)],
                   dtype="float16")
    new, applied = get_rule("fold_layernorm_affine").apply_all(mod)
    assert applied
    assert compare_variants(mod, {"half": new})["half"].max_rel_err < 1e-2
