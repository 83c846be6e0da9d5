"""Normalisation rules: fold a layer norm's per-channel scale and shift into the linears it feeds."""
from __future__ import annotations

import numpy as np
from tvm import relax

from .base import Match, Rule, register
from .ir import Edit, Graph, channel_bias, const, float_tensor, ints, op_name, with_args
from .matmul import const_weight_matmul


def _linears(g: Graph, name: str, channels: int, through_reshape: bool = True) -> list[str] | None:
    """The matmuls `v @ W` (constant 2-D W) that are every reader of binding `name`, directly or through one
    reshape keeping the last axis, else None."""
    if g.external[name]:
        return None
    out = []
    for user in dict.fromkeys(g.users.get(name, ())):
        if op_name(g.values[user]) == "relax.reshape" and through_reshape:
            # Keeping the last dimension keeps every normalised row whole: rows only regroup.
            if float_tensor(g.vars[user])[0][-1] != channels:
                return None
            inner = _linears(g, user, channels, through_reshape=False)
            if inner is None:
                return None
            out += inner
            continue
        # `v` can only be the left operand (a constant right one): W's rows are the normalised channels.
        if const_weight_matmul(g, user) is None:
            return None
        out.append(user)
    return out


@register
class FoldLayerNormAffine(Rule):
    """layer_norm(x, gamma, beta) read only by linears v @ W_i (+ b_i) -> layer_norm(x, 1, 0) and
    W_i' = gamma[:, None] * W_i, b_i' = beta @ W_i + b_i.

    The norm's per-channel scale and shift are absorbed into the following weights and biases at compile
    time (pre-LN transformers: one norm feeding Q/K/V, or the MLP), so the norm kernel only normalises.
    TVM's layer_norm legalisation ignores center/scale=False, hence explicit ones and zeros."""

    name = "fold_layernorm_affine"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, call in g.calls("relax.nn.layer_norm"):
            result = float_tensor(g.vars[name])
            if result is None:
                continue
            shape, dtype = result
            axes = tuple(a % len(shape) for a in ints(call.attrs.axes))
            if axes != (len(shape) - 1,) or not (call.attrs.center and call.attrs.scale):
                continue
            gamma, beta = g.const(call.args[1]), g.const(call.args[2])
            if gamma is None or beta is None:
                continue
            linears = _linears(g, name, shape[-1])
            if not linears:
                continue
            out.append(self.match((name, *linears), f"{name}: scale/shift into {', '.join(linears)}"))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        name, linears = m.names[0], m.names[1:]
        call = g.values[name]
        dtype = float_tensor(g.vars[name])[1]
        gamma = g.const(call.args[1]).astype(np.float64).reshape(-1)
        beta = g.const(call.args[2]).astype(np.float64).reshape(-1)
        edit.set_value(name, with_args(call, [call.args[0], const(np.ones_like(gamma), dtype),
                                              const(np.zeros_like(beta), dtype)]))
        for mm_name in linears:
            mm = const_weight_matmul(g, mm_name)
            weight = mm["weight"].astype(np.float64)
            shift = beta @ weight
            y = relax.op.matmul(mm["x"], const(gamma[:, None] * weight, dtype), out_dtype=mm["out_dtype"])
            bias = channel_bias(g, mm_name, weight.shape[1], 1)
            if bias is not None:
                add, values = bias
                edit.set_value(mm_name, y)
                edit.set_value(add, relax.op.add(g.vars[mm_name], const(values + shift, dtype)))
            else:
                y = edit.emit(mm_name, y, f"{mm_name}_scaled")
                edit.set_value(mm_name, relax.op.add(y, const(shift, dtype)))
