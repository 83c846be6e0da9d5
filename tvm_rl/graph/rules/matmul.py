"""Matmul rules: merge sibling matmuls on one input (Q/K/V), move a scalar multiply towards a weight."""
from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.ir import Var

from .base import Match, Rule, register
from .ir import Edit, Graph, channel_bias, const, float_tensor, out_dtype, split_outputs, with_args


def const_weight_matmul(g: Graph, name: str) -> dict | None:
    """x @ W with W a 2-D constant(-foldable) weight, x a variable and float static shapes, else None."""
    call = g.values.get(name)
    if getattr(getattr(call, "op", None), "name", None) != "relax.matmul":
        return None
    x, out = call.args[0], float_tensor(g.vars[name])
    weight = g.const(call.args[1])
    if not isinstance(x, Var) or float_tensor(x) is None or out is None or len(out[0]) < 2:
        return None
    if weight is None or weight.ndim != 2 or str(weight.dtype) != out[1]:
        return None
    return {"x": x, "weight": weight, "out_dtype": out_dtype(call.attrs), "shape": out[0], "dtype": out[1]}


@register
class MergeParallelMatmul(Rule):
    """Sibling x @ W_i on one input -> x @ concat(W_i) then split; constant bias adds are merged too."""

    name = "merge_parallel_matmul"

    def find(self, g: Graph) -> list[Match]:
        groups: dict[tuple, list[str]] = {}
        for name, _ in g.calls("relax.matmul"):
            mm = const_weight_matmul(g, name)
            # A second reader of one matmul's output is not merged (brief: single use of intermediates).
            if mm is None or g.single_use(name) is None:
                continue
            groups.setdefault((mm["x"].name, mm["out_dtype"], mm["dtype"]), []).append(name)
        out = []
        for names in groups.values():
            if len(names) >= 2:
                with_bias = all(channel_bias(g, n, const_weight_matmul(g, n)["shape"][-1], 1) for n in names)
                out.append(self.match(tuple(names), f"merge {', '.join(names)}" + (" (+bias)" if with_bias
                                                                                   else ""), (with_bias,)))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        names, (with_bias,) = m.names, m.params
        mms = [const_weight_matmul(g, n) for n in names]
        m0, first = mms[0], names[0]
        sizes = [mm["shape"][-1] for mm in mms]
        weight = const(np.concatenate([mm["weight"] for mm in mms], axis=1), m0["dtype"])
        y = edit.emit(first, relax.op.matmul(m0["x"], weight, out_dtype=m0["out_dtype"]),
                      f"{first}_merged")
        targets = list(names)
        if with_bias:
            biases = [channel_bias(g, n, s, 1) for n, s in zip(names, sizes)]
            bias = np.concatenate([b for _, b in biases])
            y = edit.emit(first, relax.op.add(y, const(bias, m0["dtype"])), f"{first}_merged_bias")
            targets = [add for add, _ in biases]
        split_outputs(edit, first, y, sizes, len(m0["shape"]) - 1, targets, first)


# Producers a scalar factor passes through unchanged: s * op(v) == op(s * v).
_LINEAR_UNARY = ("relax.reshape", "relax.permute_dims", "relax.broadcast_to")


def _scalar(g: Graph, expr) -> float | None:
    value = g.const(expr)
    return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None


@register
class ScalarMulMotion(Rule):
    """op(..) * s -> op(.. * s) for a scalar constant s, one step towards a weight it folds into.

    op is reshape / permute_dims / broadcast_to, matmul (s moves to either operand), an add of a constant
    (s scales both terms) or a multiply by a constant (the factors combine). Where s lands on a constant
    it is folded into it, so the multiply disappears (e.g. the attention scale into the Q projection).
    """

    name = "scalar_mul_motion"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, call in g.calls("relax.multiply"):
            result = float_tensor(g.vars[name])
            for side in (0, 1):
                u, s = call.args[side], call.args[1 - side]
                if not isinstance(u, Var) or _scalar(g, s) is None or float_tensor(u) != result:
                    continue
                # u is rewritten to include the factor, so nothing else may read it.
                producer = g.values.get(u.name)
                if result is None or g.single_use(u.name) != name or producer is None:
                    continue
                for option in self._options(g, producer, result[1]):
                    out.append(self.match((name, u.name), f"{name}: scale into {u.name} "
                                          f"({producer.op.name.split('.')[-1]}{option})", (side, option)))
                break
        return out

    def _options(self, g: Graph, producer, dtype: str) -> list[str]:
        op = getattr(getattr(producer, "op", None), "name", None)
        if op in _LINEAR_UNARY:
            return [""]
        # A matmul with an out_dtype (float16 operands, float32 result) would need the factor in the
        # operands' dtype: a different multiply, and a type error if built with the result's.
        if op == "relax.matmul" and all(float_tensor(a) and float_tensor(a)[1] == dtype for a in producer.args):
            consts = [g.const(a) is not None for a in producer.args]
            # Onto a constant operand the factor folds away; moving it elsewhere instead is never better.
            if consts == [False, True]:
                return [":rhs"]
            if consts == [True, False]:
                return [":lhs"]
            return [":lhs", ":rhs"]
        if op in ("relax.add", "relax.multiply"):
            consts = [g.const(a) is not None for a in producer.args]
            if consts.count(True) == 1 and all(float_tensor(a) for a in producer.args):
                return [""]
        return []

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        (name, u), (side, option) = m.names, m.params
        s = _scalar(g, g.values[name].args[1 - side])
        producer = g.values[u]
        dtype = float_tensor(g.vars[name])[1]

        def scaled(expr):
            """expr * s, folded when expr is a constant."""
            value = g.const(expr)
            if value is not None:
                return const(value.astype(np.float64) * s, str(value.dtype))
            return edit.emit(u, relax.op.multiply(expr, const(np.array(s), dtype)), f"{u}_scaled")

        args = list(producer.args)
        op = producer.op.name
        if op in _LINEAR_UNARY:
            args[0] = scaled(args[0])
        elif op == "relax.matmul":
            k = 0 if option == ":lhs" else 1
            args[k] = scaled(args[k])
        elif op == "relax.add":
            args = [scaled(a) for a in args]
        else:  # multiply by a constant: fold s into that constant only
            k = 0 if g.const(args[0]) is not None else 1
            args[k] = scaled(args[k])
        edit.set_value(u, with_args(producer, args))
        edit.replace(name, g.vars[u])
