"""Channels-last rules: run a conv2d in NHWC between two transposes, and move transposes past element-wise
ops so that the transposes between consecutive NHWC convolutions meet and cancel (permute_compose)."""
from __future__ import annotations

import numpy as np
from tvm import relax

from .base import Match, Rule, register
from .concat import ACTIVATIONS, ARITHMETIC
from .conv import plain_conv
from .ir import Edit, Graph, const, float_tensor, ndim_of, permute_axes, with_args


@register
class Conv2DToNHWC(Rule):
    """conv2d(x, W) in NCHW/OIHW -> permute_dims(conv2d(permute_dims(x, NHWC), W as OHWI, NHWC), NCHW)."""

    name = "conv2d_to_nhwc"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, _ in g.calls("relax.nn.conv2d"):
            c = plain_conv(g, name)
            if c is not None and len(c["shape"]) == 4:
                out.append(self.match((name,), f"{name} = conv2d NCHW -> NHWC"))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        (name,) = m.names
        c = plain_conv(g, name)
        x = edit.emit(name, relax.op.permute_dims(c["x"], [0, 2, 3, 1]), f"{name}_nhwc_in")
        weight = const(np.transpose(c["weight"], (0, 2, 3, 1)), c["dtype"])
        y = edit.emit(name, relax.op.nn.conv2d(x, weight, strides=c["strides"], padding=c["padding"],
                                               dilation=c["dilation"], groups=c["groups"], data_layout="NHWC",
                                               kernel_layout="OHWI", out_layout="NHWC",
                                               out_dtype=c["out_dtype"]), f"{name}_nhwc")
        edit.set_value(name, relax.op.permute_dims(y, [0, 3, 1, 2]))


@register
class PermutePastElementwise(Rule):
    """f(permute_dims(x, p)) -> permute_dims(f(x), p) for an element-wise activation f, or a binary op with a
    constant (the constant transposed by p's inverse), so the transpose moves on towards one it cancels; and
    g(permute_dims(a, p), permute_dims(b, p)) -> permute_dims(g(a, b), p) for a binary op on two equally shaped
    tensors under the same transpose (a residual add between two channels-last regions).

    The single-operand form needs the transpose read only by f (it must die with the rewrite). The two-operand
    form needs at least one of the two read only by g, so the rewrite never adds a transpose; equal shapes and
    dtypes rule out broadcasting, under which the two sides would not commute.
    """

    name = "permute_past_elementwise"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, call in g.calls(*ACTIVATIONS, *ARITHMETIC):
            result = float_tensor(g.vars[name])
            if result is None:
                continue
            if call.op.name in ARITHMETIC and (both := self._both_permuted(g, name, call)) is not None:
                out.append(both)
                continue
            sides = (0,) if call.op.name in ACTIVATIONS else (0, 1)
            for side in sides:
                u = call.args[side]
                perm = g.call(u, "relax.permute_dims")
                # The transpose must die with the rewrite; its input must be a float tensor of the same rank.
                if perm is None or g.single_use(u.name) != name or float_tensor(u) != result:
                    continue
                if float_tensor(perm.args[0]) is None or ndim_of(perm.args[0]) != len(result[0]):
                    continue
                if call.op.name in ARITHMETIC:
                    c = g.const(call.args[1 - side])
                    # A constant operand that does not broadcast the result bigger and has its dtype.
                    if c is None or c.ndim > len(result[0]) or str(c.dtype) != result[1]:
                        continue
                    if np.broadcast_shapes(c.shape, result[0]) != result[0]:
                        continue
                out.append(self.match((u.name, name), f"{name} = {call.op.name.split('.')[-1]}(permute "
                                      f"{u.name})", (side,)))
                break
        return out

    def _both_permuted(self, g: Graph, name: str, call) -> Match | None:
        """The two-operand form's match at binding `name`, if its preconditions hold."""
        perms = [g.call(a, "relax.permute_dims") for a in call.args]
        if any(p is None for p in perms):
            return None
        inputs = [float_tensor(p.args[0]) for p in perms]
        if inputs[0] is None or inputs[0] != inputs[1]:
            return None
        ndim = len(inputs[0][0])
        if permute_axes(perms[0], ndim) != permute_axes(perms[1], ndim):
            return None
        if not any(g.single_use(a.name) == name for a in call.args):
            return None
        a, b = (u.name for u in call.args)
        return self.match((a, b, name), f"{name} = {call.op.name.split('.')[-1]}(permute {a}, permute {b})",
                          ("both",))

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        if m.params == ("both",):
            a, b, name = m.names
            call, perm = g.values[name], g.values[a]
            inner = edit.emit(name, with_args(call, [g.values[a].args[0], g.values[b].args[0]]), f"{name}_pre")
            edit.set_value(name, relax.op.permute_dims(inner, list(permute_axes(perm, ndim_of(perm.args[0])))))
            return
        (perm_name, name), (side,) = m.names, m.params
        call, perm = g.values[name], g.values[perm_name]
        ndim = ndim_of(perm.args[0])
        axes = permute_axes(perm, ndim)
        args = list(call.args)
        args[side] = perm.args[0]
        if call.op.name in ARITHMETIC:
            c = g.const(args[1 - side])
            full = c.reshape((1,) * (ndim - c.ndim) + c.shape)
            # permute_dims(c', axes) == c for c' = transpose(c, argsort(axes)); broadcasting commutes.
            args[1 - side] = const(np.transpose(full, np.argsort(axes)), str(c.dtype))
        inner = edit.emit(name, with_args(call, args), f"{name}_pre")
        edit.set_value(name, relax.op.permute_dims(inner, list(axes)))
