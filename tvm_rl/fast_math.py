"""Fast transcendental functions: GELU, SiLU, sigmoid, erf, exp, tanh and softmax computed with TVM's polynomial
approximations (`topi.fast_erf`, `fast_exp`, `fast_tanh`, `fast_softmax`) instead of the math library's.

Why: on LLVM targets TVM lowers `T.erf`, `T.tanh` and `T.exp` to scalar math-library calls that do not vectorise.
Alone on one core, erf took ~12 ns an element and tanh ~11 ns, tens of times a multiply-add's price, and a GELU in
a matmul's epilogue cost more than the matmul (docs/results/fast_math.md). The approximations are vectorisable
polynomials, a few ulp from the exact functions (bounds in `ERROR_BOUNDS`, tested on dense grids), far inside the
tolerance any fused build is checked with.

`FastMath()` is a Relax module pass, usable alone in a compile script before `tvm.compile`: it rewrites the float32
activations TVM legalises through erf / tanh / exp (GELU, tanh-GELU, SiLU, sigmoid) into those functions, as their
legalisations compute them, then runs TVM's own `relax.transform.FastMathTransform`, which swaps erf, exp, tanh and
softmax for the fast versions. Other dtypes are left exact.
"""
from __future__ import annotations

import math

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax import Call, Expr, PyExprMutator, expr_functor

# Worst error of each fast function against the exact one over its float32 range, measured on dense grids
# (tests/flow/test_fast_math.py checks them): erf absolute, the others relative.
ERROR_BOUNDS = {"erf": 5e-7, "exp": 5e-7, "tanh": 5e-7, "sigmoid": 5e-7}

# The activations this pass writes out in erf / tanh / exp form; TVM's pass handles those three and softmax.
DECOMPOSED = ("relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.silu", "relax.sigmoid")
# The activations that come out built fast: the decomposed ones and tanh (softplus, for one, stays exact).
FAST_ACTIVATIONS = (*DECOMPOSED, "relax.tanh")
# Every op whose build this pass changes.
_CHANGED = frozenset((*FAST_ACTIVATIONS, "relax.erf", "relax.exp", "relax.nn.softmax"))


def _f32(value: float) -> relax.Constant:
    return relax.const(value, "float32")


@expr_functor.mutator
class _Decompose(PyExprMutator):
    """GELU, tanh-GELU, SiLU and sigmoid on float32 tensors as elementwise Relax ops around erf / tanh / exp, in
    the order TVM's legalisations compute them (so, before the fast swap, the values are those of the
    legalised op up to rounding)."""

    def visit_call_(self, call: Call) -> Expr:
        call = super().visit_call_(call)
        name = getattr(call.op, "name", None)
        ty = getattr(call.args[0], "ty", None)
        if name not in DECOMPOSED or not isinstance(ty, relax.TensorType) or str(ty.dtype) != "float32":
            return call
        x, emit, op = call.args[0], self.builder_.emit, relax.op
        if name == "relax.nn.gelu":  # x * (0.5 + erf(x / sqrt 2) * 0.5)
            erf = emit(op.erf(emit(op.multiply(x, _f32(0.5 ** 0.5)))))
            return op.multiply(x, emit(op.add(_f32(0.5), emit(op.multiply(erf, _f32(0.5))))))
        if name == "relax.nn.gelu_tanh":  # 0.5 x (1 + tanh(sqrt(2 / pi) x (1 + 0.044715 x^2)))
            cubic = emit(op.add(_f32(1.0), emit(op.multiply(emit(op.multiply(_f32(0.044715), x)), x))))
            inner = emit(op.multiply(emit(op.multiply(_f32(math.sqrt(2.0 / math.pi)), x)), cubic))
            return op.multiply(emit(op.multiply(_f32(0.5), x)), emit(op.add(_f32(1.0), emit(op.tanh(inner)))))
        # sigmoid(x) = 1 / (1 + exp(-x)): at x -> -inf exp overflows to inf and the quotient is 0, as it should be
        sigmoid = op.divide(_f32(1.0), emit(op.add(_f32(1.0), emit(op.exp(emit(op.negative(x)))))))
        return sigmoid if name == "relax.sigmoid" else op.multiply(x, emit(sigmoid))


@tvm.transform.module_pass(opt_level=0, name="tvm_rl.DecomposeTranscendentals")
class DecomposeTranscendentals:
    """The float32 activations of `DECOMPOSED` written out in erf / tanh / exp form (exact, up to rounding)."""

    def transform_module(self, mod: IRModule, ctx: tvm.transform.PassContext) -> IRModule:
        mutator = _Decompose(mod)
        for gvar, func in mod.functions_items():
            if isinstance(func, relax.Function):
                mutator.builder_.update_func(gvar, mutator.visit_expr(func))
        return mutator.builder_.get()


def FastMath() -> tvm.transform.Pass:  # noqa: N802 (TVM's pass naming)
    """The pass: `DecomposeTranscendentals`, then TVM's `FastMathTransform` (fast erf / exp / tanh / softmax)."""
    return tvm.transform.Sequential([DecomposeTranscendentals(), relax.transform.FastMathTransform()],
                                    name="tvm_rl.FastMath")


def fast_math(mod: IRModule) -> IRModule:
    """`mod` with `FastMath()` applied; `mod` itself when nothing in it would change."""
    return FastMath()(mod) if uses_transcendentals(mod) else mod


def default_for(target: tvm.target.Target | str) -> bool:
    """Whether `tvm_rl.optimize` builds with fast math by default: on CPU targets, where the math library's
    functions are scalar calls and fast math was measured faster; not on GPUs, whose erf / exp / tanh are
    device intrinsics already and where it was not measured."""
    from .measure import is_gpu, parse_target

    return not is_gpu(parse_target(target))


def uses_transcendentals(mod: IRModule) -> bool:
    """Whether any Relax function of `mod` calls an op `FastMath` would change."""
    found = []

    def visit(expr) -> None:
        if isinstance(expr, Call) and getattr(expr.op, "name", None) in _CHANGED:
            found.append(expr)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return bool(found)


__all__ = ["DECOMPOSED", "ERROR_BOUNDS", "FAST_ACTIVATIONS", "DecomposeTranscendentals", "FastMath", "default_for",
           "fast_math", "uses_transcendentals"]
