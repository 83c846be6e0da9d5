"""The fusion model predicts the kernels TVM's lowering makes: same count, same operators in each kernel."""
import re
from collections import Counter

import numpy as np
import pytest
from tvm import relax

from tests.support import graph_examples as T
from tvm_rl import measure, models
from tvm_rl.graph import fusion, profiles
from tvm_rl.graph.candidates import enumerate_candidates
from tvm_rl.graph.rules.ir import Graph, op_name

R = relax.op
# Relax operator -> the name its legalised PrimFunc carries.
_TIR_NAMES = {"permute_dims": "transpose", "concat": "concatenate", "clip": "tir_clip", "astype": "cast"}


def predicted(mod) -> Counter:
    """The kernels `fusion.partition` predicts, each as its operators' names joined (views left out)."""
    g = Graph(mod)
    out = Counter()
    for names in fusion.partition(g):
        if not fusion.is_free(g, names):
            ops = [op_name(g.values[n]).split(".")[-1] for n in names if op_name(g.values[n])]
            out[re.sub(r"[\d_]", "", "".join(_TIR_NAMES.get(o, o) for o in ops))] += 1
    return out


def lowered(mod, target) -> Counter:
    """The kernels TVM's lowering makes, named the same way (kernels of reshapes alone become views)."""
    out = Counter()
    for kernel, calls in measure.kernel_calls(measure.kernel_stage(mod, target, None)).items():
        if not re.fullmatch(r"(fused)?(_?reshape\d*)+", kernel):
            out[re.sub(r"[\d_]", "", kernel.replace("fused_", ""))] += calls
    return out


def test_constant_weight_transpose_is_folded_and_costs_nothing(cpu):
    rng = np.random.default_rng(0)

    def body(e, x):
        return e(R.matmul(x, e(R.permute_dims(T.rand(rng, 16, 8)))))  # x @ W^T with W a constant

    mod = T.module(body, [(4, 8)])
    assert predicted(mod) == lowered(mod, cpu) == Counter({"matmul": 1})
    flops, nbytes, kind, *_ = profiles.fused_groups(mod)[0]
    assert (kind, nbytes) == ("matmul", 4 * (4 * 8 + 8 * 16 + 4 * 16))  # W^T read once, never transposed


def test_reshape_between_matmul_and_scale_is_a_kernel_boundary(cpu):
    rng = np.random.default_rng(0)

    def body(e, x):
        y = e(R.matmul(x, T.rand(rng, 8, 16)))
        return e(R.multiply(e(R.reshape(y, (2, 32))), relax.const(0.5, "float32")))

    mod = T.module(body, [(4, 8)])
    assert predicted(mod) == lowered(mod, cpu) == Counter({"matmul": 1, "reshapemultiply": 1})
    assert len(profiles.fused_groups(mod)) == 2


def test_lone_reshape_is_a_view():
    def body(e, x):
        return e(R.nn.relu(e(R.add(e(R.reshape(e(R.nn.relu(x)), (2, 8))), relax.const(1.0, "float32")))))

    g = Graph(T.module(body, [(4, 4)]))
    kernels = fusion.partition(g)
    assert len([k for k in kernels if not fusion.is_free(g, k)]) <= 2


@pytest.mark.parametrize("name", models.names())
def test_predicted_kernels_match_tvm_on_zoo_models(name, cpu):
    mod = models.load(name, "tiny").mod
    assert predicted(mod) == lowered(mod, cpu)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert", "squeezenet1_1", "mobilenet_v2", "resnet18"])
def test_predicted_kernels_match_tvm_after_rewrites(name, cpu):
    """Rewrites move transposes, fold batch norms, merge matmuls: the prediction follows every one."""
    mod = models.load(name, "tiny").mod
    for cand in enumerate_candidates(mod, cap=12).candidates:
        assert predicted(cand.mod) == lowered(cand.mod, cpu), f"{cand.rule.name}: {cand.match}"


def test_einsum_is_a_matmul_kernel_with_its_epilogue(cpu):
    """`transpose_into_matmul` writes Q @ K^T as an einsum: one kernel as TVM fuses it, priced as a GEMM."""
    from tvm_rl.graph.rules import get_rule

    mod, applied = get_rule("transpose_into_matmul").apply_all(models.load("bert", "tiny").mod)
    assert applied
    assert predicted(mod) == lowered(mod, cpu)
    einsums = [p for p in profiles.op_profiles(mod) if p.op == "relax.einsum"]
    assert einsums and all(p.kind == "matmul" and p.flops == 2 * 2 * 8 * 8 * 16 for p in einsums)
    assert sum(k.gemm is not None for k in profiles.fused_groups(mod)) == \
        sum(k.gemm is not None for k in profiles.fused_groups(models.load("bert", "tiny").mod))
