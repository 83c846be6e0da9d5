"""Attention rules: fuse the exported softmax(Q K^T * s [+ b]) V chain into one `R.nn.attention`."""
from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.ir import Var

from .base import Match, Rule, register
from .ir import Edit, Graph, const, float_tensor, out_dtype

# Ops between the score matmul and softmax (and between softmax and the value matmul) that move no element
# across a row of the scores: row-major reshapes keeping the last (key) axis, and same-shape broadcasts.
_TRANSPARENT = ("relax.reshape", "relax.broadcast_to")


def _transparent(g: Graph, name: str, keys: int) -> bool:
    """Binding `name` is a reshape / broadcast_to that keeps every score row (last axis `keys`) intact."""
    call = g.values[name]
    src, dst = float_tensor(call.args[0]), float_tensor(g.vars[name])
    if src is None or dst is None or src[1] != dst[1] or not src[0] or not dst[0]:
        return False
    if src[0][-1] != keys or dst[0][-1] != keys:
        return False
    if call.op.name == "relax.broadcast_to":
        return src[0] == dst[0]
    return int(np.prod(src[0])) == int(np.prod(dst[0]))


def _plain_matmul(g: Graph, name: str) -> tuple[tuple[int, ...], tuple[int, ...], str] | None:
    """(lhs shape, rhs shape, dtype) of a 3-D batch matmul without broadcasting or dtype change."""
    call = g.values.get(name)
    if getattr(getattr(call, "op", None), "name", None) != "relax.matmul":
        return None
    a, b, out = float_tensor(call.args[0]), float_tensor(call.args[1]), float_tensor(g.vars[name])
    if a is None or b is None or out is None or not (a[1] == b[1] == out[1]):
        return None
    if out_dtype(call.attrs) not in (None, out[1]):
        return None
    (sa, _), (sb, _) = a, b
    if len(sa) != 3 or len(sb) != 3 or sa[0] != sb[0] or sa[2] != sb[1]:
        return None
    return sa, sb, out[1]


def attention_parts(g: Graph, out_name: str) -> dict | None:
    """The pieces of softmax(Q K^T * s + b) V ending at matmul `out_name`, when fusing them is provably exact.

    Q (G, Sq, D) @ K^T (G, D, Sk) -> [row-preserving reshapes, multiplies or divides by a scalar constant,
    adds of a constant] -> softmax over the last axis -> [row-preserving reshapes] -> @ V (G, Sk, Dv).
    Every intermediate must have that one reader, so the fused op replaces all of them.
    """
    pv = _plain_matmul(g, out_name)
    # Only float32: TVM's legalization of R.nn.attention multiplies by a float32 scale, so float16 inputs
    # come out as float32 against the op's declared type, and the next float16 operator fails to build.
    if pv is None or pv[2] != "float32":
        return None
    (groups, queries, keys), (_, _, dv), dtype = pv[0], pv[1], pv[2]
    p, v = g.values[out_name].args
    if not isinstance(p, Var):
        return None
    name, reader = p.name, out_name
    # Back from the probabilities to the softmax.
    while name in g.values and g.single_use(name) == reader and g.call(g.vars[name], *_TRANSPARENT) is not None:
        if not _transparent(g, name, keys):
            return None
        reader, name = name, g.values[name].args[0].name if isinstance(g.values[name].args[0], Var) else ""
    softmax = g.values.get(name)
    if getattr(getattr(softmax, "op", None), "name", None) != "relax.nn.softmax" or g.single_use(name) != reader:
        return None
    sm_in = float_tensor(g.vars[name])
    if sm_in is None or sm_in[0][-1] != keys or int(softmax.attrs.axis) % len(sm_in[0]) != len(sm_in[0]) - 1:
        return None
    sm_name = name
    ops = []  # the score chain in reverse: ("scale", k) / ("bias", array) / ("reshape", shape)
    reader, x = name, softmax.args[0]
    while True:
        # Each step must be a binding of the block: an input of the function ends the chain with no matmul.
        if not isinstance(x, Var) or x.name not in g.values or g.single_use(x.name) != reader:
            return None
        name, call = x.name, g.values.get(x.name)
        op = getattr(getattr(call, "op", None), "name", None)
        if op == "relax.matmul":
            break
        shape = float_tensor(g.vars[name])
        if shape is None or shape[1] != dtype or not shape[0] or shape[0][-1] != keys:
            return None
        if op in _TRANSPARENT:
            if not _transparent(g, name, keys):
                return None
            ops.append(("reshape", shape[0]))
            x = call.args[0]
        elif op in ("relax.multiply", "relax.divide", "relax.add"):
            sides = [i for i in (0, 1) if isinstance(call.args[i], Var) and g.const(call.args[i]) is None]
            if len(sides) != 1 or (op == "relax.divide" and sides != [0]):
                return None
            u, c = call.args[sides[0]], g.const(call.args[1 - sides[0]])
            # The constant must not broadcast the scores bigger, nor change their dtype.
            if c is None or float_tensor(u) != shape or str(c.dtype) != dtype:
                return None
            if op == "relax.add":
                try:
                    ops.append(("bias", np.broadcast_to(c.astype(np.float64), shape[0])))
                except ValueError:
                    return None
            else:
                if c.size != 1:
                    return None
                k = float(c.reshape(-1)[0])
                if op == "relax.divide" and k == 0.0:
                    return None
                ops.append(("scale", k if op == "relax.multiply" else 1.0 / k))
            x = u
        else:
            return None
        reader = name
    qk = _plain_matmul(g, name)
    if qk is None or qk[2] != dtype or (qk[0][0], qk[0][1], qk[1][2]) != (groups, queries, keys):
        return None
    if tuple(pv[1][:2]) != (groups, keys):
        return None
    # Fold the chain forward into scores * scale + bias, the bias in (G, Sq, Sk) row-major order.
    scale, bias = 1.0, None
    for kind, value in reversed(ops):
        if kind == "scale":
            scale *= value
            bias = None if bias is None else bias * value
        elif kind == "bias":
            bias = value if bias is None else bias + value
        elif bias is not None:
            bias = bias.reshape(value)
    return {"q": g.values[name].args[0], "k": g.values[name].args[1], "v": v, "scale": scale,
            "bias": None if bias is None else bias.reshape(groups, 1, queries, keys),
            "shape": (groups, queries, keys, qk[0][2], dv), "dtype": dtype, "qk": name, "softmax": sm_name}


@register
class FuseAttention(Rule):
    """matmul(softmax(matmul(Q, K^T) * s [+ b]), V) (3-D, as exported) -> one R.nn.attention.

    The (G, S, D) operands become (G, S, 1, D) (batch G, one head), so the layout R.nn.attention wants,
    (batch, seq, heads, dim), is a plain reshape. A constant additive mask rides along as the bias.
    """

    name = "fuse_attention"

    def find(self, g: Graph) -> list[Match]:
        out = []
        for name, _ in g.calls("relax.matmul"):
            parts = attention_parts(g, name)
            if parts is not None:
                extra = " + bias" if parts["bias"] is not None else ""
                out.append(self.match((parts["qk"], parts["softmax"], name),
                                      f"{name} = softmax({parts['qk']} * {parts['scale']:g}{extra}) @ V"))
        return out

    def rewrite(self, g: Graph, m: Match, edit: Edit) -> None:
        name = m.names[2]
        a = attention_parts(g, name)
        groups, queries, keys, d, dv = a["shape"]
        q = edit.emit(name, relax.op.reshape(a["q"], (groups, queries, 1, d)), f"{name}_q")
        kt = edit.emit(name, relax.op.permute_dims(a["k"], [0, 2, 1]), f"{name}_kt")
        k = edit.emit(name, relax.op.reshape(kt, (groups, keys, 1, d)), f"{name}_k")
        v = edit.emit(name, relax.op.reshape(a["v"], (groups, keys, 1, dv)), f"{name}_v")
        bias = a["bias"]
        if bias is not None and np.all(bias == bias[:1]):
            bias = bias[:1]  # the same mask for every head: keep the constant small, let it broadcast
        fused = edit.emit(name, relax.op.nn.attention(
            q, k, v, None if bias is None else const(bias, a["dtype"]), scale=a["scale"]), f"{name}_attention")
        edit.set_value(name, relax.op.reshape(fused, (groups, queries, dv)))
