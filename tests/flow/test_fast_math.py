"""Fast math: each fast function within its stated error of the exact one on dense grids, the decomposition exact,
non-float32 left alone, GELU still fused into a matmul's epilogue, the CUDA path building, and optimize using it."""
from __future__ import annotations

import math

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax
from tvm.script import relax as R

from tests.support import graph_examples as testing
from tvm_rl import fast_math, measure, models

GRID = np.linspace(-12.0, 12.0, 200_001, dtype=np.float32)


def run(mod: tvm.IRModule, *inputs: np.ndarray) -> np.ndarray:
    target = measure.parse_target("llvm")
    return measure.Runner(measure.build(mod, target), target)(list(inputs))[0]


def unary(op, shape=(GRID.size,), dtype="float32") -> tvm.IRModule:
    return testing.module(lambda emit, x: emit(op(x)), [shape], dtype)


def _erf(x):
    return np.vectorize(math.erf)(x.astype(np.float64))


def _gelu(x):
    return x.astype(np.float64) * 0.5 * (1.0 + _erf(x / np.sqrt(2.0)))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


CASES = {  # op, exact reference in float64, which error the bound is on
    "erf": (relax.op.erf, _erf, "abs"),
    "exp": (relax.op.exp, lambda x: np.exp(x.astype(np.float64)), "rel"),
    "tanh": (relax.op.tanh, lambda x: np.tanh(x.astype(np.float64)), "rel"),
    "sigmoid": (relax.op.sigmoid, _sigmoid, "rel"),
    "gelu": (relax.op.nn.gelu, _gelu, "abs"),
    "silu": (relax.op.nn.silu, lambda x: x * _sigmoid(x), "abs"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_fast_function_is_within_its_stated_error_on_a_dense_grid(name):
    op, exact, kind = CASES[name]
    mod = unary(op)
    fast = fast_math.fast_math(mod)
    assert not fast_math.uses_transcendentals(fast) and fast_math.uses_transcendentals(mod)
    ref = exact(GRID)
    got = run(fast, GRID).astype(np.float64)
    err = np.abs(got - ref) / (np.maximum(np.abs(ref), 1e-30) if kind == "rel" else np.maximum(np.abs(GRID), 1.0))
    # GELU and SiLU scale erf's / sigmoid's error by |x|: the bound is on the error divided by max(|x|, 1).
    bound = fast_math.ERROR_BOUNDS.get(name, max(fast_math.ERROR_BOUNDS.values()))
    assert err.max() < bound, (name, err.max(), float(GRID[err.argmax()]))


def test_the_decomposition_alone_is_the_legalised_op_up_to_rounding():
    def body(emit, x):
        a = emit(R.nn.gelu(x))
        b = emit(R.nn.gelu_tanh(a))
        return emit(R.sigmoid(emit(R.nn.silu(b))))

    mod = testing.module(body, [(4, 1000)])
    x = np.random.default_rng(0).standard_normal((4, 1000)).astype(np.float32) * 4
    split = fast_math.DecomposeTranscendentals()(mod)
    names = {getattr(c.op, "name", "") for c in _calls(split)}
    assert not names & set(fast_math.DECOMPOSED) and {"relax.erf", "relax.tanh", "relax.exp"} <= names
    np.testing.assert_allclose(run(split, x), run(mod, x), rtol=2e-6, atol=2e-7)


def _calls(mod):
    found = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(e) if isinstance(e, relax.Call) else None)
    return found


def test_only_float32_is_approximated_and_a_module_without_them_is_returned_as_is():
    half = unary(relax.op.nn.gelu, (8, 16), "float16")
    assert tvm_ffi.structural_equal(fast_math.DecomposeTranscendentals()(half), half)
    plain = testing.module(lambda emit, x: emit(R.nn.relu(x)), [(8, 16)])
    assert fast_math.fast_math(plain) is plain and not fast_math.uses_transcendentals(plain)


def test_gelu_stays_fused_into_the_matmul_epilogue():
    w = np.random.default_rng(1).standard_normal((32, 64)).astype(np.float32)

    def body(emit, x):
        return emit(R.nn.gelu(emit(R.add(emit(R.matmul(x, relax.const(w))), relax.const(w[0])))))

    mod = testing.module(body, [(16, 32)])
    target = measure.parse_target("llvm")
    kernels = [measure.kernel_stage(m, target) for m in (mod, fast_math.fast_math(mod))]
    names = [[g.name_hint for g, f in k.functions.items() if isinstance(f, tvm.tirx.PrimFunc)] for k in kernels]
    assert len(names[0]) == len(names[1]) == 1, names
    assert "fast_erf" in names[1][0] and "matmul" in names[1][0]
    x = np.random.default_rng(2).standard_normal((16, 32)).astype(np.float32)
    np.testing.assert_allclose(run(fast_math.fast_math(mod), x), run(mod, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["convnext_stage", "mbconv_se"])
def test_fast_math_models_match_the_source_model(name):
    model = models.load(name, "tiny")
    reference = model.reference_outputs()
    fast = fast_math.fast_math(model.mod)
    target = measure.parse_target("llvm")
    check = measure.compare(measure.Runner(measure.build(fast, target), target)(model.inputs), reference,
                            rtol=1e-4, atol=1e-4 * measure.output_scale(reference))
    assert check.ok, check


def test_fast_math_builds_for_cuda():
    from test_cuda_codegen import cuda_source

    model = models.load("bert", "tiny")
    source = cuda_source(measure.build(fast_math.fast_math(model.mod), measure.cuda_target("sm_90")))
    assert "__global__" in source and "erff" not in source.replace("fast_erf", "")


def test_on_by_default_for_cpus_only():
    assert fast_math.default_for("llvm") and not fast_math.default_for(measure.cuda_target("sm_90"))
