"""The held-out test models (family "heldout", outside the training zoo): they stay out of names(), import,
build on LLVM and match PyTorch, and every rule family is exact wherever it matches them."""
import numpy as np
import pytest
from tvm.ir import Call

import tests.support.heldout_models  # noqa: F401  (registers them)
from tvm_rl import measure, models
from tvm_rl.graph.rules import all_rules
from tvm_rl.graph.verify import compare_variants

ZOO = ["bert", "vit", "dalle", "transducer", "resnext50", "inception_v3", "squeezenet1_1", "resnet50",
       "mobilenet_v2", "vgg16", "resnet18"]
HELD_OUT = ["gpt2_stack", "convnext_stage", "mobilevit_block", "mbconv_se"]

# Families each held-out tiny model must offer: what it was written to contain (a floor, not the whole list).
EXPECTED = {
    "gpt2_stack": {"split_fused_matmul", "fuse_attention", "permute_compose", "fold_layernorm_affine"},
    "convnext_stage": {"conv2d_to_nhwc", "matmul_to_conv1x1", "fold_layernorm_affine", "reshape_past_elementwise"},
    "mobilevit_block": {"fold_batchnorm", "fuse_attention", "dedup", "conv2d_to_nhwc", "reshape_compose"},
    "mbconv_se": {"fold_batchnorm", "conv1x1_to_matmul", "conv2d_to_nhwc"},
}


@pytest.fixture(scope="module")
def heldout():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = models.load(name, "tiny")
        return cache[name]

    return get


def op_count(mod, op):
    return sum(1 for b in mod["main"].body.blocks[0].bindings
               if isinstance(b.value, Call) and getattr(b.value.op, "name", None) == op)


def test_held_out_models_stay_out_of_the_zoo():
    assert models.names() == ZOO  # the default zoo, in its order: training and benchmarks parametrize over it
    assert models.names("heldout") == HELD_OUT
    assert not set(HELD_OUT) & set(models.names("cnn") + models.names("transformer"))
    assert all(models.spec(n).family == "heldout" for n in HELD_OUT)


@pytest.mark.parametrize("name", HELD_OUT)
def test_tiny_held_out_model_builds_and_matches_pytorch(name, cpu, heldout):
    model = heldout(name)
    runner = measure.Runner(measure.build(model.mod, cpu), cpu)
    measure.assert_close(runner(model.inputs), model.reference_outputs(), rtol=1e-4, atol=1e-4, what=name)
    rng = np.random.default_rng(1)
    other = [rng.standard_normal(x.shape).astype(x.dtype) for x in model.inputs]
    measure.assert_close(runner(other), model.reference_outputs(other), rtol=1e-4, atol=1e-4, what=name)


def test_held_out_models_have_what_they_were_written_with(heldout):
    def has(name, op):
        return op_count(heldout(name).mod, f"relax.{op}") > 0

    assert has("gpt2_stack", "split") and has("gpt2_stack", "nn.softmax")
    assert has("convnext_stage", "nn.conv2d") and has("convnext_stage", "nn.layer_norm")
    assert has("mobilevit_block", "nn.conv2d") and has("mobilevit_block", "nn.softmax")
    assert has("mobilevit_block", "concat") and has("mobilevit_block", "nn.batch_norm")
    assert has("mbconv_se", "sigmoid") and has("mbconv_se", "mean")  # SE pool: a mean
    # Every batch norm is an inference BN after a conv: fold_batchnorm offers each one.
    fold = next(r for r in all_rules() if r.name == "fold_batchnorm")
    for name in HELD_OUT:
        assert len(fold.matches(heldout(name).mod)) == op_count(heldout(name).mod, "relax.nn.batch_norm")


@pytest.mark.parametrize("name", HELD_OUT)
def test_every_family_is_exact_on_held_out_models(name, heldout):
    """Each family's matches, all applied one after another (apply_all), give a module computing the same
    outputs as the original; all families' variants checked in one build."""
    mod = heldout(name).mod
    variants = {}
    for rule in all_rules():
        found = rule.matches(mod)
        if not found:
            continue
        combined, applied = rule.apply_all(mod)
        assert applied == found, f"{rule.name}: a match was lost while applying the others"
        assert not combined.same_as(mod)
        variants[rule.name] = combined
    assert EXPECTED[name] <= set(variants), f"missing families: {EXPECTED[name] - set(variants)}"
    results = compare_variants(mod, variants)
    bad = {k: c for k, c in results.items() if not c.ok}
    assert not bad, f"rewrites changed the result of {name}: {bad}"
