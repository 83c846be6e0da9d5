"""Pooling rules: apply a monotone activation after max-pooling, express avg-pooling as a depthwise conv2d."""
from __future__ import annotations

import numpy as np
from tvm import relax

from .base import Match, Rule, register
from .ir import Edit, Graph, const, float_tensor, ints, with_args

# Element-wise and non-decreasing: act(max(S)) == max(act(S)) for any non-empty S.
MONOTONE = ("relax.nn.relu", "relax.clip", "relax.sigmoid", "relax.tanh", "relax.nn.leakyrelu")


def _monotone(call) -> bool:
    """`call` is one of MONOTONE with arguments that keep it non-decreasing."""
    name = call.op.name
    if name == "relax.nn.leakyrelu":
        return float(call.attrs.alpha) >= 0.0
    if name == "relax.clip":
        bounds = []
        for arg in call.args[1:3]:
            value = getattr(arg, "value", None)  # a FloatImm, or a PrimValue holding one
            value = getattr(value, "value", value)
            if not isinstance(value, (int, float)):
                return False
            bounds.append(float(value))
        return bounds[0] <= bounds[1]
    return name in MONOTONE


def _windows_hit_input(attrs, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> bool:
    """Every pooling window has a tap on an input element (never only on padding).

    Checked window by window on the static shapes: with dilation a window can straddle the input with
    every tap in the padding (pool 2, dilation 3, padding 2 on a 1-pixel input), which bounds on the
    padding alone do not see.
    """
    if bool(attrs.ceil_mode):
        return False
    layout, out_layout = str(attrs.layout), str(attrs.out_layout or attrs.layout)
    if len(layout) != len(in_shape) or len(out_layout) != len(out_shape):
        return False
    sizes, strides = ints(attrs.pool_size), ints(attrs.strides)
    dilation, pad = ints(attrs.dilation), ints(attrs.padding)
    for axis, dim in enumerate("HW"):
        if dim not in layout or dim not in out_layout:
            return False
        size, n_out = in_shape[layout.index(dim)], out_shape[out_layout.index(dim)]
        k, s, d, begin = sizes[axis], strides[axis], dilation[axis], pad[axis]
        for i in range(n_out):
            start = i * s - begin
            if not any(0 <= start + j * d < size for j in range(k)):
                return False
    return True


@register
class ActivationAfterMaxPool(Rule):
    """max_pool2d(act(x)) -> act(max_pool2d(x)) for a non-decreasing element-wise activation (relu, clip,
    sigmoid, tanh, leaky relu with alpha >= 0): the activation then runs on the smaller, pooled tensor."""

    name = "activation_after_maxpool"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, pool in g.calls("relax.nn.max_pool2d"):
            x = pool.args[0]
            act = g.call(x, *MONOTONE)
            # The activation must die with the rewrite, and its input must be a float tensor like its output.
            if act is None or g.single_use(x.name) != name or not _monotone(act):
                continue
            if float_tensor(x) is None or float_tensor(act.args[0]) != float_tensor(x):
                continue
            out_t = float_tensor(g.vars[name])
            if out_t is None or not _windows_hit_input(pool.attrs, float_tensor(x)[0], out_t[0]):
                continue
            out.append(self.match((x.name, name), f"{name} = max_pool2d({act.op.name.split('.')[-1]}(...))"))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        act_name, name = m.names
        act, pool = g.values[act_name], g.values[name]
        pooled = edit.emit(name, with_args(pool, [act.args[0]]), f"{name}_pooled")
        edit.set_value(name, with_args(act, [pooled, *act.args[1:]]))


@register
class AvgPoolToConv(Rule):
    """avg_pool2d(x) (NCHW) -> depthwise conv2d(x, 1 / (kh * kw)) with the same window, stride and padding,
    when every window divides by kh * kw (count_include_pad, or no padding) and ends inside the padding."""

    name = "avg_pool_to_conv"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, pool in g.calls("relax.nn.avg_pool2d"):
            a = pool.attrs
            x, y = float_tensor(pool.args[0]), float_tensor(g.vars[name])
            if x is None or y is None or len(x[0]) != 4 or x[1] != y[1]:
                continue
            if (str(a.layout), str(a.out_layout)) != ("NCHW", "NCHW") or bool(a.ceil_mode):
                continue
            if ints(a.dilation) != (1, 1):
                continue
            # With count_include_pad=False a border window divides by fewer than kh * kw.
            if not bool(a.count_include_pad) and any(ints(a.padding)):
                continue
            out.append(self.match((name,), f"{name} = avg_pool2d{ints(a.pool_size)} -> depthwise conv2d"))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        (name,) = m.names
        pool = g.values[name]
        a = pool.attrs
        (_, channels, _, _), dtype = float_tensor(pool.args[0])
        kh, kw = ints(a.pool_size)
        weight = np.full((channels, 1, kh, kw), 1.0 / (kh * kw))
        edit.set_value(name, relax.op.nn.conv2d(pool.args[0], const(weight, dtype), strides=ints(a.strides),
                                                padding=ints(a.padding), dilation=(1, 1), groups=channels,
                                                data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW"))
