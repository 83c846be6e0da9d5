"""Rule families on the tiny zoo models: every match applied, checked numerically against the original.

Each model's original and rewritten variants are compiled together in a few builds (see graph.verify), which
keeps the whole file to two or three minutes; the slow test checks every single match on its own as well.
"""
import pytest
from tvm import relax
from tvm.ir import Call

from tests.support import graph_examples as T
from tvm_rl import models
from tvm_rl.graph.rules import all_rules, get_rule, rule_names
from tvm_rl.graph.verify import compare_variants

ZOO = ["bert", "vit", "resnet18", "resnext50", "mobilenet_v2", "inception_v3", "squeezenet1_1"]


@pytest.fixture(scope="module")
def zoo():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = models.load(name, "tiny").mod
        return cache[name]

    return get


def op_count(mod, op):
    return sum(1 for b in mod["main"].body.blocks[0].bindings
               if isinstance(b.value, Call) and getattr(b.value.op, "name", None) == op)


def saturate(mod, names, limit=200):
    """Apply the first match of the first rule in `names` that has one, until none has."""
    rules = [get_rule(n) for n in names]
    for _ in range(limit):
        for rule in rules:
            found = rule.matches(mod)
            if found:
                mod = rule.apply(mod, found[0], check=False)
                break
        else:
            assert relax.analysis.check_well_formed(mod)
            return mod
    raise AssertionError(f"{names} did not saturate in {limit} steps")


def apply_each(mod, names):
    """Apply all matches of each rule in `names`, rule after rule."""
    for name in names:
        mod, _ = get_rule(name).apply_all(mod)
    return mod


def assert_exact(mod, variants):
    results = compare_variants(mod, variants)
    bad = {k: c for k, c in results.items() if not c.ok}
    assert not bad, f"rewrites changed the result: {bad}"


def chains(name, mod):
    """Multi-step rewrites of a model (what a search would do), each checked for what it should achieve."""
    out = {}
    if name == "bert":
        qkv = apply_each(mod, ["dedup", "merge_parallel_matmul"])
        assert op_count(qkv, "relax.matmul") == op_count(mod, "relax.matmul") - 4  # Q/K/V -> 1, two layers
        scaled = saturate(mod, ["scalar_mul_motion"])
        assert op_count(scaled, "relax.multiply") == 0  # the attention scale now lives in the Q weights
        out.update(qkv=qkv, scale_into_weight=scaled)
        # The attention scale moved into the Q weights first: the fused op then has scale 1.
        fused = apply_each(scaled, ["fuse_attention"])
        assert op_count(fused, "relax.nn.softmax") == 0 and op_count(fused, "relax.nn.attention") == 2
        out["scale_then_attention"] = fused
    if name in ("resnet18", "inception_v3"):
        merged = apply_each(mod, ["fold_batchnorm", "enlarge_conv_kernel", "merge_parallel_conv2d"])
        assert op_count(merged, "relax.nn.batch_norm") == 0
        assert op_count(merged, "relax.nn.conv2d") < op_count(mod, "relax.nn.conv2d")
        out["fold_enlarge_merge"] = merged
    if name == "resnet18":
        # Channels-last convs; the transposes between them move past the bias adds and relus and cancel.
        nhwc = apply_each(mod, ["fold_tuple_get_item", "fold_batchnorm", "conv2d_to_nhwc"])
        moved = saturate(nhwc, ["permute_past_elementwise", "permute_compose"])
        assert op_count(moved, "relax.permute_dims") < op_count(nhwc, "relax.permute_dims")
        out["nhwc_cancel"] = moved
    if name == "resnext50":
        # 1x1 convs made matmuls first (greedy's order on ResNet-50 and ResNeXt-50): their batch norms still fold.
        folded = saturate(saturate(mod, ["conv1x1_to_matmul"]), ["fold_batchnorm"])
        assert op_count(folded, "relax.nn.batch_norm") == 0 and op_count(folded, "relax.matmul") > 0
        out["matmul_then_fold"] = folded
    if name == "inception_v3":
        pools = apply_each(mod, ["fold_tuple_get_item", "activation_after_maxpool", "avg_pool_to_conv"])
        assert op_count(pools, "relax.zeros_like") == 0 and op_count(pools, "relax.nn.avg_pool2d") == 0
        out["pools"] = pools
    if name == "squeezenet1_1":
        split = apply_each(mod, ["enlarge_conv_kernel", "merge_parallel_conv2d", "activation_out_of_concat"])
        # The merged conv's split feeds the concat whole: split_concat_cancel's only place in the zoo.
        assert len(get_rule("split_concat_cancel").matches(split)) == op_count(mod, "relax.concat")
        fire = apply_each(split, ["split_concat_cancel"])
        # Each fire module's expand1x1 + expand3x3 + two relus + concat became one conv + relu.
        assert op_count(fire, "relax.concat") == 0
        assert op_count(fire, "relax.nn.conv2d") == op_count(mod, "relax.nn.conv2d") - op_count(mod, "relax.concat")
        out["fire_merge"] = fire
    return out


# The families in two halves (the first 14, then the rest) plus the multi-step chains: three builds per model
# instead of one big one, so that no single test runs much over 20 s on a busy 2-core machine.
FIRST_NEW = "fold_tuple_get_item"
PARTS = ["families_first", "families_more", "chains"]


def _families(part):
    names = rule_names()
    cut = names.index(FIRST_NEW)
    return [get_rule(n) for n in (names[:cut] if part == "families_first" else names[cut:])]


@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("name", ZOO)
def test_every_family_is_exact_at_every_zoo_match(name, part, zoo):
    """Per family: each match applied alone gives a well-formed, changed module; all matches applied one
    after another give a module that computes the same outputs. Plus the model's multi-step chains."""
    mod = zoo(name)
    variants = {}
    for rule in [] if part == "chains" else _families(part):
        found = rule.matches(mod)
        if not found:
            continue
        for match in found:
            assert not rule.apply(mod, match).same_as(mod)  # apply checks well-formedness itself
        combined, applied = rule.apply_all(mod)
        assert applied == found, f"{rule.name}: a match was lost while applying the others"
        variants[rule.name] = combined
    if part == "chains":
        variants.update(chains(name, mod))
    if variants:
        assert_exact(mod, variants)


def test_families_match_where_the_zoo_says(zoo):
    counts = {n: {r.name: len(r.matches(zoo(n))) for r in all_rules()} for n in ZOO}
    for n in ZOO:
        # Every conv2d -> batch_norm of the zoo is an inference BN with constant statistics.
        assert counts[n]["fold_batchnorm"] == op_count(zoo(n), "relax.nn.batch_norm")
    for n in ("bert", "vit"):
        assert counts[n]["scalar_mul_motion"] == 2  # one attention scale per layer
        assert counts[n]["permute_compose"] == 2  # K's head split then transpose, per layer
        assert counts[n]["dedup"] == 4  # Q/K/V each reshape the same input
        assert counts[n]["merge_parallel_matmul"] == 0  # ... so they share it only after dedup
    assert counts["squeezenet1_1"]["enlarge_conv_kernel"] == op_count(zoo("squeezenet1_1"), "relax.concat")
    assert counts["squeezenet1_1"]["activation_out_of_concat"] == op_count(zoo("squeezenet1_1"), "relax.concat")
    assert counts["resnet18"]["enlarge_conv_kernel"] == 3  # the downsample 1x1 beside each stride-2 3x3
    assert counts["inception_v3"]["merge_parallel_conv2d"] >= 3  # the 1x1 heads of the mixed blocks
    assert counts["mobilenet_v2"]["merge_parallel_conv2d"] == 0  # depthwise (groups > 1) never merges
    for n in ("bert", "vit"):
        assert counts[n]["fuse_attention"] == 2  # one attention per layer
        assert counts[n]["conv1x1_to_matmul"] == 0
    for n in ZOO:
        # Every conv2d of the zoo has a constant OIHW weight; each max_pool2d comes with its (y, zeros) pair.
        assert counts[n]["conv2d_to_nhwc"] == op_count(zoo(n), "relax.nn.conv2d")
        assert counts[n]["fold_tuple_get_item"] == op_count(zoo(n), "relax.zeros_like")
    assert counts["inception_v3"]["avg_pool_to_conv"] == op_count(zoo("inception_v3"), "relax.nn.avg_pool2d")
    assert counts["resnet18"]["activation_after_maxpool"] == 1  # the stem's relu -> max_pool2d
    assert counts["resnet18"]["conv1x1_to_matmul"] == 0  # its 1x1 downsample convs have stride 2
    assert counts["mobilenet_v2"]["conv1x1_to_matmul"] == 16  # the expand / project convs
    # Each new family (from fold_tuple_get_item on) matches in the zoo itself, bar the permute motion,
    # which needs the transposes an NHWC region brings.
    new = rule_names()[rule_names().index("fold_tuple_get_item"):rule_names().index("avg_pool_to_conv") + 1]
    assert len(rule_names()) >= 30
    for rule in new:
        assert sum(c[rule] for c in counts.values()) or rule == "permute_past_elementwise", rule
    # The transformer families on the graphs as exported (no dedup first): Q/K/V merged and Q @ K^T read without
    # its transpose once per layer; the layer norm's affine folded where only linears read it (pre-LN models:
    # BERT's post-LN norms also feed the residual).
    # (DALL-E and Transducer, not in ZOO here, are checked in tests/graph/test_rules_*.py.)
    for t in ("bert", "vit"):
        assert counts[t]["merge_sibling_linear"] == counts[t]["transpose_into_matmul"] == 2, t
        assert counts[t]["merge_parallel_matmul"] == 0, t
    assert [counts[t]["fold_layernorm_affine"] for t in ("bert", "vit")] == [0, 4]
    # Every family matches somewhere: in the zoo, or at least in its small example graph.
    for rule in all_rules():
        in_zoo = sum(c[rule.name] for c in counts.values())
        assert in_zoo or rule.matches(T.EXAMPLES[rule.name]()), rule.name


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO)
def test_every_zoo_match_alone_is_exact(name, zoo):
    mod = zoo(name)
    variants = {str(m): r.apply(mod, m) for r in all_rules() for m in r.matches(mod)}
    assert_exact(mod, variants)

