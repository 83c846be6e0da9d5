"""Boolean tensors through arithmetic, comparisons and reductions that TVM 0.27 cannot build on LLVM.

TVM's LLVM code generator takes a `bool` (i1) that is neither int nor uint for a float: `a == b` on bool tensors
emits `fcmp` on i1 (rejected by LLVM's verifier), and `+`, `*`, `max`, `min`, `<` on them fail with
`InternalError: Check failed: (t.MatchesCode(DLDataTypeCode::kDLFloat))` in `CodeGenLLVM::CreateAdd` and its
siblings, naming no op; `R.max` / `R.min` / `R.argmax` on bool fail to legalize ("Cannot decide min_value for
type bool"). Hugging Face decoders build their causal mask this way (`cumsum` of a bool, then `==` of bools), so
GPT-2 and Llama did not build.

`fix_bool_ops(mod)` rewrites those ops on bool tensors to the same op on int8 (cast back to bool where the op
returns bool), which is what PyTorch computes (`True + True` is True, `max` is any, `min` is all). `cumsum` /
`cumprod` of a bool become int64 scans, as in PyTorch (TVM's PyTorch importer types them bool).
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax import Call, Expr, PyExprMutator, expr_functor

# Elementwise ops on bools that return a bool: computed on int8, the result cast back.
_ARITH = frozenset({"relax.add", "relax.multiply", "relax.maximum", "relax.minimum"})
# Comparisons: bool out already, only the operands need casting.
_COMPARE = frozenset({"relax.equal", "relax.not_equal", "relax.less", "relax.less_equal", "relax.greater",
                      "relax.greater_equal"})
# Reductions to a bool (any / all) and to an index.
_REDUCE_BOOL = frozenset({"relax.max", "relax.min"})
_REDUCE_INDEX = frozenset({"relax.argmax", "relax.argmin"})
# Scans of a bool count in int64, as torch.cumsum / torch.cumprod do.
_SCAN = frozenset({"relax.cumsum", "relax.cumprod"})
OPS = _ARITH | _COMPARE | _REDUCE_BOOL | _REDUCE_INDEX | _SCAN


def _is_bool(expr: Expr) -> bool:
    ty = getattr(expr, "ty", None)
    return isinstance(ty, relax.TensorType) and str(ty.dtype) == "bool"


@expr_functor.mutator
class _BoolOps(PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.rewritten: list[str] = []

    def visit_call_(self, call: Call) -> Expr:
        call = super().visit_call_(call)
        name = getattr(call.op, "name", None)
        if name not in OPS:
            return call
        tensors = [a for a in call.args if isinstance(getattr(a, "ty", None), relax.TensorType)]
        if not tensors or not all(_is_bool(a) for a in tensors):
            return call
        op = relax.op

        def emit(expr: Expr) -> Expr:  # a name the importer's "lv<n>" cannot take (the graph pass needs unique ones)
            return self.builder_.emit(expr, name_hint="bool_as_int")
        if name in _SCAN:
            if call.attrs.dtype is not None and str(call.attrs.dtype) not in ("bool", ""):
                return call
            self.rewritten.append(name)
            x = emit(op.astype(call.args[0], "int64"))
            scan = op.cumsum if name == "relax.cumsum" else op.cumprod
            return scan(x, axis=call.attrs.axis, dtype="int64", exclusive=call.attrs.exclusive)
        self.rewritten.append(name)
        args = [emit(op.astype(a, "int8")) if _is_bool(a) else a for a in call.args]
        new = Call(call.op, args, call.attrs, call.ty_args)
        return op.astype(emit(new), "bool") if name in _ARITH | _REDUCE_BOOL else new


def fix_bool_ops(mod: tvm.IRModule) -> tuple[tvm.IRModule, list[str]]:
    """`mod` with the bool ops TVM cannot build on int8 instead; (new module, names of the ops rewritten)."""
    mutator = _BoolOps(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    if not mutator.rewritten:
        return mod, []
    return mutator.builder_.get(), mutator.rewritten
